"""Where everything of one testbed lives under its directory, and the settings chosen when it came up."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.containerd / "config.toml"

    @property
    def registry_hosts(self) -> Path:
        return self.containerd / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def cni_bin_dir(self) -> Path:
        return self.root / "cni" / "bin"

    @property
    def cni_helper_socket(self) -> Path:
        return self.root / "cni" / "helper.sock"

    @property
    def cdi_spec_dir(self) -> Path:
        """containerd's `cdi_spec_dirs`: the testbed's DRA drivers write their CDI specs here (not /etc/cdi)."""
        return self.root / "cdi"

    @property
    def registry_data(self) -> Path:
        return self.root / "registry"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"

    @property
    def kubelet_root(self) -> Path:
        """The agent's --root-dir (upstream /var/lib/kubelet): pods/<uid>/... lives here."""
        return self.root / "kubelet"

    @property
    def front_proxy_pki(self) -> Path:
        """The aggregation layer's own CA (requestheader) and the apiserver's proxy client certificate."""
        return self.pki / "front-proxy"

    @property
    def metrics_server_kubeconfig(self) -> Path:
        return self.root / "metrics-server.kubeconfig"

    @property
    def kube_proxy_kubeconfig(self) -> Path:
        return self.root / "kube-proxy.kubeconfig"

    @property
    def env_file(self) -> Path:
        return self.root / "env"

    @property
    def agent_config(self) -> Path:
        return self.root / "nodeagent.yaml"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def node_kubeconfig(self) -> Path:
        return self.root / "node.kubeconfig"

    @property
    def settings_file(self) -> Path:
        return self.root / "testbed.json"


@dataclass(frozen=True)
class Settings:
    """What `up` chose for this testbed: ports, names and ranges. `down` and the fixtures read it back."""

    node_name: str
    etcd_client_port: int
    etcd_peer_port: int
    apiserver_port: int
    controller_manager_port: int
    scheduler_port: int
    registry_port: int
    stream_port: int
    bridge: str
    pod_cidr: str
    service_cidr: str
    healthz_port: int = 0  # the agent's local endpoint (/healthz, /pods); 0 in a testbed.json written before it
    kubelet_port: int = 0  # the agent's kubelet API (upstream 10250); 0 in a testbed.json written before it
    metrics_server_port: int = 0  # metrics-server's secure port; 0 in a testbed.json written before it
    kube_proxy_healthz_port: int = 0
    kube_proxy_metrics_port: int = 0
    # Another testbed's directory when that one runs the host's only kube-proxy (see testbed/kubeproxy.py): then
    # this testbed's ClusterIPs are not served.
    kube_proxy_held_by: str = ""
    # The `kube-dns` Service's ClusterIP when the testbed runs CoreDNS (testbed/clusterdns.py), the agent's
    # clusterDNS; empty without it (pods then fall back to the host's resolv.conf, with MissingClusterDNS).
    cluster_dns: str = ""

    @property
    def node_ip(self) -> str:
        """The node's address (--node-ip, its InternalIP): the gateway of the pod range, on the testbed's bridge.
        Reachable from the host and from every pod, and not loopback, which the apiserver refuses to proxy to."""
        return str(ipaddress.IPv4Network(self.pod_cidr).network_address + 1)

    @property
    def apiserver_url(self) -> str:
        """On the node address, not loopback: pods reach the apiserver there, through the `kubernetes` Service."""
        return f"https://{self.node_ip}:{self.apiserver_port}"

    @property
    def registry(self) -> str:
        return f"127.0.0.1:{self.registry_port}"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> Settings:
        return cls(**json.loads(path.read_text()))
