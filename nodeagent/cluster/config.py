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
# kubeadm's addons, skipped together when asked (`--skip-kube-proxy`, e.g. by the init/join test): CoreDNS reaches
# the apiserver through the `kubernetes` Service's ClusterIP, so without kube-proxy it never becomes Ready.
KUBE_PROXY_PHASE = "addon/kube-proxy"
COREDNS_PHASE = "addon/coredns"
# kube-proxy's own listeners, upstream's defaults, in each node's network namespace (nodenet.py).
KUBE_PROXY_HEALTHZ_PORT = 10256
KUBE_PROXY_METRICS_PORT = 10249

# Preflight checks that cannot hold on this machine, each with why (docs/kubeadm.md lists them too). None: each node
# has a network namespace of its own (nodenet.py) with its own ports and its own ip_forward.
PREFLIGHT_IGNORED: dict[str, str] = {}


# kubeadm's waits, shorter than its 4-minute defaults: on this machine the kubelet is healthy in seconds and the
# control plane within half a minute, so a node that does not come up fails the run in a minute or two, naming the
# wait, rather than after four.
INIT_TIMEOUTS = {"kubeletHealthCheck": "1m0s", "controlPlaneComponentHealthCheck": "2m0s"}
JOIN_TIMEOUTS = {"kubeletHealthCheck": "1m0s", "tlsBootstrap": "2m0s", "discovery": "1m0s"}


@dataclass(frozen=True)
class NodePlan:
    """One node of a `cluster up`: its name, address (on the cluster's fabric, in the node's own network namespace:
    nodenet.py) and pod range, and its kubelet ports."""

    name: str
    pod_cidr: str
    kubelet_port: int
    healthz_port: int
    cgroup_root: str
    address: str

    @property
    def ip(self) -> str:
        return self.address


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
    runtime_config: str = "",
) -> str:
    """InitConfiguration + ClusterConfiguration + the cluster's KubeletConfiguration (+ kube-proxy's).
    `runtime_config`: the apiserver's --runtime-config (API versions served beyond the defaults; empty: none)."""
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
        "apiServer": {"extraArgs": api_server_args(node, runtime_config)},
    }
    kubelet: dict[str, object] = {
        "apiVersion": KUBELET_API,
        "kind": "KubeletConfiguration",
        # No systemd on these machines: the cgroupfs driver, as the testbed runs nodeagent.
        "cgroupDriver": "cgroupfs",
    }
    proxy = kube_proxy_config()
    return _dump(init, cluster, kubelet, proxy)


def api_server_args(node: NodePlan, runtime_config: str) -> list[dict[str, str]]:
    """kubeadm's extraArgs for the apiserver: bound only to the node's address (the host's other addresses, and
    other testbeds, never see it), and the API versions asked for beyond the defaults (e.g. upstream's DRA cluster,
    test/e2e/dra/kind.yaml: resource.k8s.io v1beta1 and v1beta2)."""
    args = [{"name": "bind-address", "value": node.ip}]
    if runtime_config:
        args.append({"name": "runtime-config", "value": runtime_config})
    return args


def kube_proxy_config() -> dict[str, object]:
    """kubeadm's kube-proxy DaemonSet runs one kube-proxy per node, each in its node's network namespace with the
    node's own iptables (nodenet.py): iptables mode; NodePorts on the node's primary address only (`primary`: the
    Node's InternalIP, so no route_localnet sysctl and nothing on the pod bridge's gateway); no conntrack sysctls
    (the conntrack table's size is the host's). No clusterCIDR (there is no podSubnet): kube-proxy then masquerades
    only what it marks itself (a pod reaching itself through a Service, NodePorts), never traffic merely leaving the
    cluster's ranges. The same configuration serves every node."""
    return {
        "apiVersion": KUBE_PROXY_API,
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "healthzBindAddress": f"0.0.0.0:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{KUBE_PROXY_METRICS_PORT}",
        "nodePortAddresses": ["primary"],
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


def cluster_info_signature_key(token: str) -> str:
    """The key under which the bootstrap signer puts its signature for `token` in kube-public/cluster-info (upstream
    bootstrapapi.JWSSignatureKeyPrefix + the token's id, the part before the dot)."""
    return "jws-kubeconfig-" + token.split(".", 1)[0]


def skipped_phases(*, kube_proxy: bool) -> list[str]:
    """kubeadm init's --skip-phases: none with kube-proxy; without it, CoreDNS too (it could not reach the
    apiserver's ClusterIP)."""
    return [] if kube_proxy else [KUBE_PROXY_PHASE, COREDNS_PHASE]


def cluster_dns_ip(service_cidr: str) -> str:
    """The DNS Service's ClusterIP: the 10th address of the Service range, as kubeadm's (and the clusterDNS it writes
    into every kubelet's config.yaml)."""
    return str(ipaddress.ip_network(service_cidr).network_address + 10)
