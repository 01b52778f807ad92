"""The Vagrant VM for static-pod testing: its box recipe, the libvirt host it runs on, and the checks around both."""
