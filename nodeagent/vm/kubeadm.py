"""`kubeadm init` inside the Vagrant VM (issue 31): a one-node cluster on a systemd + cgroup v2 host whose kubelet is
nodeagent, started by systemd exactly as kubeadm's packages start the kubelet.

The VM is offline, so everything comes from the host: kubeadm of KUBERNETES_VERSION and the control-plane images
the host's `cluster up` builds (testbed/controlplaneimages.py), as `ctr import` tars under kubeadm's default names
(registry.k8s.io/<name>:<tag>), copied in over ssh. Pure text here (units, config, image names), used by
tests/integration/test_vm_kubeadm.py and documented in docs/vagrant.md:

- `KUBELET_UNIT` and `KUBEADM_DROP_IN`: upstream's kubelet.service and its 10-kubeadm.conf drop-in (the argv from
  $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS), the command being the
  box venv's `kubelet` console script (nodeagent.kubeletflags) instead of upstream's binary;
- `init_config`: InitConfiguration + ClusterConfiguration + a KubeletConfiguration that leaves cgroupDriver to
  kubeadm's default (systemd); kubeadm's waits stretched for software emulation (`EMULATION_TIMEOUTS`);
- `PREFLIGHT_IGNORED`: the checks that cannot hold in this VM, each with why (kubeadm prints them as warnings);
- `SKIPPED_PHASES`: the addons (no kube-proxy or CoreDNS image is carried, and nothing here needs them).
"""

from __future__ import annotations

import yaml

from nodeagent.testbed.versions import KUBERNETES_VERSION

KUBEADM_API = "kubeadm.k8s.io/v1beta4"
KUBELET_API = "kubelet.config.k8s.io/v1beta1"
REGISTRY = "registry.k8s.io"
API_SERVER_PORT = 6443
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
# The box venv's console scripts (provision.sh installs the wheel there).
KUBELET_COMMAND = "/opt/nodeagent/bin/kubelet"
# The control-plane images kubeadm runs as static pods (kube-proxy and CoreDNS are addons, skipped).
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
SKIPPED_PHASES = ("addon/kube-proxy", "addon/coredns")

# kubeadm's waits, far longer than its defaults (4 minutes for the control plane, 1 for an API call): under QEMU's
# software emulation everything runs about 24x slower than on the host, where the control plane is healthy in
# about 30 s.
EMULATION_TIMEOUTS = {
    "controlPlaneComponentHealthCheck": "30m0s",
    "kubeletHealthCheck": "15m0s",
    "kubernetesAPICall": "10m0s",
    "etcdAPICall": "10m0s",
}

PREFLIGHT_IGNORED = {
    # kubeadm wants 1700 MB for a control-plane node; the VM has 1536 MiB (vagrant/Vagrantfile).
    "Mem": "the VM has 1536 MiB; kubeadm asks 1700 MB of a control-plane node",
}

KUBELET_UNIT = f"""[Unit]
Description=kubelet: The Kubernetes Node Agent (nodeagent)
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target containerd.service

[Service]
ExecStart={KUBELET_COMMAND}
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

# kubeadm's 10-kubeadm.conf: kubeadm writes kubeadm-flags.env and config.yaml, then `systemctl restart kubelet`.
KUBEADM_DROP_IN = f"""[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart={KUBELET_COMMAND} $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""


def image_refs(etcd_tag: str, pause_tag: str) -> dict[str, str]:
    """Image name (as controlplaneimages builds it) -> the reference kubeadm looks for in the CRI."""
    refs = {name: f"{REGISTRY}/{name}:{KUBERNETES_VERSION}" for name in CONTROL_PLANE}
    refs["etcd"] = f"{REGISTRY}/etcd:{etcd_tag}"
    refs["pause"] = f"{REGISTRY}/pause:{pause_tag}"
    return refs


def init_config(*, node_name: str, address: str, etcd_tag: str) -> str:
    """kubeadm init's documents for the VM: its address (the management network's DHCP lease; the isolated network
    has no default route for kubeadm to pick one from), upstream's image names, and a KubeletConfiguration with no
    cgroupDriver, so kubeadm's default (systemd) is what the agent gets."""
    init = {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        "localAPIEndpoint": {"advertiseAddress": address, "bindPort": API_SERVER_PORT},
        "nodeRegistration": {
            "name": node_name,
            "criSocket": CRI_SOCKET,
            "kubeletExtraArgs": [{"name": "node-ip", "value": address}],
            "ignorePreflightErrors": sorted(PREFLIGHT_IGNORED),
        },
        "timeouts": dict(EMULATION_TIMEOUTS),
    }
    cluster = {
        "apiVersion": KUBEADM_API,
        "kind": "ClusterConfiguration",
        "clusterName": "nodeagent-vm",
        "kubernetesVersion": KUBERNETES_VERSION,
        "imageRepository": REGISTRY,
        "etcd": {"local": {"imageTag": etcd_tag}},
        "networking": {"serviceSubnet": "198.19.254.0/24", "dnsDomain": "cluster.local"},
        "apiServer": {"certSANs": [address]},
    }
    kubelet = {"apiVersion": KUBELET_API, "kind": "KubeletConfiguration"}
    return "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in (init, cluster, kubelet))


def init_argv(config: str) -> list[str]:
    return ["kubeadm", "init", f"--config={config}", f"--skip-phases={','.join(SKIPPED_PHASES)}", "--v=1"]
