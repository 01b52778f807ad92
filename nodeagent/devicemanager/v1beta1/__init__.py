"""deviceplugin v1beta1: stubs generated from api.proto by scripts/gen-deviceplugin.sh. Do not edit."""
