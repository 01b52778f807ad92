"""What `nodeagent cluster up` hands kubeadm: its config documents, the per-node kubelet patches, the preflight
checks it may ignore here, and what it reads back from kubeadm's output. Pure functions, tested with tables."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import yaml

from nodeagent.testbed.versions import KUBERNETES_VERSION

KUBEADM_API = "kubeadm.k8s.io/v1beta4"
KUBELET_API = "kubelet.config.k8s.io/v1beta1"
KUBE_PROXY_API = "kubeproxy.config.k8s.io/v1alpha1"
API_SERVER_PORT = 6443
# kube-proxy shares the host's iptables with any other kube-proxy on the machine (a testbed's, the conformance
# run's): skipped when another holds the host, or when asked (`--skip-kube-proxy`), e.g. by the init/join test.
KUBE_PROXY_PHASE = "addon/kube-proxy"
# CoreDNS reaches the apiserver through the `kubernetes` Service's ClusterIP: without kube-proxy it never becomes
# Ready, so it is skipped with it.
COREDNS_PHASE = "addon/coredns"
# kube-proxy's own listeners (the cluster's single kube-proxy, on the first node): healthz on the node's address
# (upstream's port), metrics on loopback (upstream's default).
KUBE_PROXY_HEALTHZ_PORT = 10256
KUBE_PROXY_METRICS_PORT = 10249

# Preflight checks that cannot hold on this machine, each with why (docs/kubeadm.md lists them too):
PREFLIGHT_IGNORED: dict[str, str] = {
    # The testbed never turns on host-wide forwarding (hostnet.py enables it per bridge only); pod traffic between
    # the nodes' bridges is routed by the bridges' own `forwarding` sysctls.
    "FileContent--proc-sys-net-ipv4-ip_forward": "host-wide ip_forward stays off; forwarding is per bridge",
}
# A joining node on the same machine: its kubelet listens on other ports (the patches), but kubeadm checks the
# defaults, which the first node holds.
JOIN_PREFLIGHT_IGNORED: dict[str, str] = {
    "Port-10250": "the first node's kubelet API; this node's is on its own port",
}


# kubeadm's waits, shorter than its 4-minute defaults: on this machine the kubelet is healthy in seconds and the
# control plane within half a minute, so a node that does not come up fails the run in a minute or two, naming the
# wait, rather than after four.
INIT_TIMEOUTS = {"kubeletHealthCheck": "1m0s", "controlPlaneComponentHealthCheck": "2m0s"}
JOIN_TIMEOUTS = {"kubeletHealthCheck": "1m0s", "tlsBootstrap": "2m0s", "discovery": "1m0s"}


@dataclass(frozen=True)
class NodePlan:
    """One node of a `cluster up`: its name, address (its bridge's gateway) and pod range, and its kubelet ports."""

    name: str
    pod_cidr: str
    kubelet_port: int
    healthz_port: int
    cgroup_root: str

    @property
    def ip(self) -> str:
        return str(ipaddress.IPv4Network(self.pod_cidr).network_address + 1)


def _dump(*docs: dict[str, object]) -> str:
    return "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in docs)


def init_config(
    node: NodePlan,
    *,
    registry: str,
    etcd_tag: str,
    service_cidr: str,
    etcd_data_dir: str,
    cri_socket: str,
    token: str,
    patches_dir: str,
    coredns_tag: str,
) -> str:
    """InitConfiguration + ClusterConfiguration + the cluster's KubeletConfiguration (+ kube-proxy's)."""
    init: dict[str, object] = {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        "bootstrapTokens": [
            {"token": token, "ttl": "1h0m0s", "groups": ["system:bootstrappers:kubeadm:default-node-token"]}
        ],
        "localAPIEndpoint": {"advertiseAddress": node.ip, "bindPort": API_SERVER_PORT},
        "nodeRegistration": node_registration(node, cri_socket),
        # The node's own kubelet fields (kubelet_patch), kubeadm's target "kubeletconfiguration".
        "patches": {"directory": patches_dir},
        "timeouts": dict(INIT_TIMEOUTS),
    }
    cluster: dict[str, object] = {
        "apiVersion": KUBEADM_API,
        "kind": "ClusterConfiguration",
        "clusterName": "nodeagent",
        "kubernetesVersion": KUBERNETES_VERSION,
        "imageRepository": registry,
        "controlPlaneEndpoint": f"{node.ip}:{API_SERVER_PORT}",
        "networking": {"serviceSubnet": service_cidr, "dnsDomain": "cluster.local"},
        "etcd": {"local": {"imageTag": etcd_tag, "dataDir": etcd_data_dir}},
        # kubeadm names `<imageRepository>/coredns` for a repository of its own; the tag is the version built here
        # (testbed/coredns.py: kubeadm's v1.12.1 is not served).
        "dns": {"imageTag": coredns_tag},
        "apiServer": {
            # Only on the node's address: the host's other addresses (and other testbeds) never see it.
            "extraArgs": [{"name": "bind-address", "value": node.ip}],
        },
    }
    kubelet: dict[str, object] = {
        "apiVersion": KUBELET_API,
        "kind": "KubeletConfiguration",
        # No systemd on these machines: the cgroupfs driver, as the testbed runs nodeagent.
        "cgroupDriver": "cgroupfs",
    }
    proxy = kube_proxy_config(node)
    return _dump(init, cluster, kubelet, proxy)


def kube_proxy_config(node: NodePlan) -> dict[str, object]:
    """The cluster's one kube-proxy (pinned to the first node, cluster.py), as the testbed runs its own
    (testbed/kubeproxy.py): iptables mode; NodePorts and healthz only on the node's address (no route_localnet
    sysctl, nothing on the host's other addresses); no conntrack sysctls (a shared machine). No clusterCIDR (there
    is no podSubnet): kube-proxy then masquerades only what it marks itself (a pod reaching itself through a
    Service, NodePorts), never traffic merely leaving the cluster's ranges."""
    return {
        "apiVersion": KUBE_PROXY_API,
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "healthzBindAddress": f"{node.ip}:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{KUBE_PROXY_METRICS_PORT}",
        "nodePortAddresses": [f"{node.ip}/32"],
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def node_registration(node: NodePlan, cri_socket: str) -> dict[str, object]:
    return {
        "name": node.name,
        "criSocket": cri_socket,
        "kubeletExtraArgs": [{"name": "node-ip", "value": node.ip}],
        "ignorePreflightErrors": sorted(PREFLIGHT_IGNORED),
    }


def join_config(
    node: NodePlan, *, api_endpoint: str, token: str, ca_cert_hash: str, cri_socket: str, patches_dir: str
) -> str:
    registration = node_registration(node, cri_socket)
    registration["ignorePreflightErrors"] = sorted({*PREFLIGHT_IGNORED, *JOIN_PREFLIGHT_IGNORED})
    join: dict[str, object] = {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": api_endpoint,
                "token": token,
                "caCertHashes": [ca_cert_hash],
            }
        },
        "nodeRegistration": registration,
        "patches": {"directory": patches_dir},
        "timeouts": dict(JOIN_TIMEOUTS),
    }
    return _dump(join)


def kubelet_patch(node: NodePlan) -> str:
    """The node's own KubeletConfiguration fields (kubeadm's `--patches`, target kubeletconfiguration): its ports,
    its address, its pod range (no podSubnet is allocated by the controller-manager: each node's CNI config holds
    its range), its cgroup root (two nodes on one machine never share a kubepods hierarchy)."""
    doc: dict[str, object] = {
        "address": node.ip,
        "port": node.kubelet_port,
        "healthzPort": node.healthz_port,
        "podCIDR": node.pod_cidr,
        "cgroupRoot": node.cgroup_root,
    }
    return yaml.safe_dump(doc, sort_keys=False)


_JOIN_RE = re.compile(r"kubeadm join (\S+) --token (\S+)\s*\\?\s*--discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class JoinCommand:
    endpoint: str
    token: str
    ca_cert_hash: str


def parse_join_command(output: str) -> JoinCommand:
    """The endpoint, token and CA hash of the `kubeadm join ...` line kubeadm init (or `token create
    --print-join-command`) prints."""
    match = _JOIN_RE.search(output)
    if match is None:
        raise ValueError("no `kubeadm join ... --token ... --discovery-token-ca-cert-hash ...` in kubeadm's output")
    return JoinCommand(match.group(1), match.group(2), match.group(3))


def skipped_phases(*, kube_proxy: bool) -> list[str]:
    """kubeadm init's --skip-phases: none with kube-proxy; without it, CoreDNS too (it could not reach the
    apiserver's ClusterIP)."""
    return [] if kube_proxy else [KUBE_PROXY_PHASE, COREDNS_PHASE]


def pin_daemonset_patch(node_name: str) -> dict[str, object]:
    """A merge patch pinning a DaemonSet's pods to one node: kubeadm's kube-proxy DaemonSet would run one
    kube-proxy per node, but every node of a `cluster up` shares the host's network namespace and iptables, so
    the first node's kube-proxy serves them all (a second would rewrite the same chains). The template's other
    selector (kubernetes.io/os) stays."""
    return {"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": node_name}}}}}


def cluster_dns_ip(service_cidr: str) -> str:
    """The DNS Service's ClusterIP: the 10th address of the Service range, as kubeadm's (and the clusterDNS it writes
    into every kubelet's config.yaml)."""
    return str(ipaddress.ip_network(service_cidr).network_address + 10)
