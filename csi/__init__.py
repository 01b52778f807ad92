"""The Container Storage Interface, as the kubelet speaks it; knows nothing of nodeagent.

- `csi.v1`: stubs generated from the project's own csi.proto (scripts/gen-csi.sh);
- `csi.service`: what a CSI plugin offers, as typed protocols (Identity, Node, Controller);
- `csi.client`: the gRPC client of one plugin's unix socket;
- `csi.errors`: the CSIError hierarchy and `is_final`, mapped from gRPC status codes;
- `csi.redact`: requests as text with the spec's secret fields stripped, for logs;
- `csi.registration`: the kubelet's plugin registration API (pluginregistration.v1).
"""

# The CSI spec release csi/v1/csi.proto follows: the one k8s.io/kubernetes v1.34.4 requires in its go.mod
# (github.com/container-storage-interface/spec), and the oracle of tests/integration/test_csi_wire_compat.py.
SPEC_VERSION = "v1.9.0"
