"""`nodeagent kind try-create`: the real kind v0.33.0 CLI against the isolated Docker and our node image.

kind is built from the Go module proxy into the cache (`go install sigs.k8s.io/kind@v0.33.0`). Its docker network
is made beforehand in 198.19.252.0/24 with masquerade off and a bridge name of ours (`nakind0`), and named to kind by
KIND_EXPERIMENTAL_DOCKER_NETWORK, so kind creates none. The cluster config keeps pods and services in 198.18.0.0/15
and disables kindnet (its module is not served). `DOCKER_HOST` points at the isolated daemon, `KUBECONFIG` at a
file under the temp dir, and PATH starts with a directory whose `docker` is Debian's client (the daemon's version).
The run records kind's output, then every node's journal, `kind export logs`, and deletes the cluster and network.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.kind.dockerd import DOCKER, IsolatedDocker
from nodeagent.kind.errors import KindError
from nodeagent.testbed.versions import cache_root

log = logging.getLogger(__name__)

KIND_MODULE = "sigs.k8s.io/kind"
KIND_VERSION = "v0.33.0"
CLUSTER_NAME = "nodeagent"
NETWORK = "nodeagent-kind"
NETWORK_SUBNET = "198.19.252.0/24"
NETWORK_GATEWAY = "198.19.252.1"
BRIDGE = "nakind0"
# nodeagent's node on kind's network (kind/join.py): kept out of Docker's IPAM by an aux-address.
JOIN_ADDRESS = "198.19.252.200"
POD_SUBNET = "198.18.96.0/19"
SERVICE_SUBNET = "198.19.96.0/20"


def kind_binary(cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "kind" / f"kind-{KIND_VERSION}" / "bin" / "kind"


def build_kind(progress: Callable[[str], None], cache: Path | None = None) -> Path:
    """kind from the Go module proxy, installed into the cache once."""
    binary = kind_binary(cache)
    if binary.is_file():
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    binary.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    proc = subprocess.run(
        [go, "install", f"{KIND_MODULE}@{KIND_VERSION}"],
        env={**os.environ, "GOBIN": str(binary.parent), "CGO_ENABLED": "0"},
        capture_output=True,
        text=True,
        check=False,
        cwd=binary.parent,
    )
    if proc.returncode != 0:
        raise KindError(f"go install {KIND_MODULE}@{KIND_VERSION} failed: {proc.stderr.strip()[-2000:]}")
    progress(f"kind {KIND_VERSION}: built in {time.monotonic() - started:.0f} s")
    return binary


def cluster_config(workers: int = 0, pod_subnet: str = POD_SUBNET, service_subnet: str = SERVICE_SUBNET) -> str:
    """kind's v1alpha4 Cluster: one control plane and `workers` workers, no default CNI, IPv4 only, addresses in
    198.18.0.0/15, the API server published on loopback only."""
    return (
        "kind: Cluster\n"
        "apiVersion: kind.x-k8s.io/v1alpha4\n"
        "networking:\n"
        "  ipFamily: ipv4\n"
        "  disableDefaultCNI: true\n"
        f'  podSubnet: "{pod_subnet}"\n'
        f'  serviceSubnet: "{service_subnet}"\n'
        '  apiServerAddress: "127.0.0.1"\n'
        "nodes:\n"
        "- role: control-plane\n" + "- role: worker\n" * workers
    )


def network_create_args(
    name: str = NETWORK, subnet: str = NETWORK_SUBNET, gateway: str = NETWORK_GATEWAY, bridge: str = BRIDGE
) -> list[str]:
    """`docker network create` arguments for kind's network: IPv4 only, our range, no masquerade."""
    return [
        "network",
        "create",
        "--driver",
        "bridge",
        "--subnet",
        subnet,
        "--gateway",
        gateway,
        "--opt",
        "com.docker.network.bridge.enable_ip_masquerade=false",
        "--opt",
        f"com.docker.network.bridge.name={bridge}",
        "--aux-address",
        f"nodeagent={JOIN_ADDRESS}",
        name,
    ]


def kind_env(docker_socket: Path, kubeconfig: Path, path_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The environment kind runs in: our daemon, our kubeconfig, our network, Debian's docker client first."""
    env = {k: v for k, v in base.items() if not k.startswith(("DOCKER_", "KIND_"))}
    env.update(
        {
            "DOCKER_HOST": f"unix://{docker_socket}",
            "KUBECONFIG": str(kubeconfig),
            "KIND_EXPERIMENTAL_DOCKER_NETWORK": NETWORK,
            "PATH": f"{path_dir}:{base.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
        }
    )
    return env


def create_argv(kind: Path, image: str, config: Path, name: str = CLUSTER_NAME) -> list[str]:
    return [
        str(kind),
        "create",
        "cluster",
        "--name",
        name,
        "--image",
        image,
        "--config",
        str(config),
        "--retain",
        "--wait",
        "0s",
        "-v",
        "3",
    ]


@dataclass(frozen=True)
class PodNetworkNode:
    name: str
    pod_cidr: str
    address: str


NODES_JSONPATH = (
    '{range .items[*]}{.metadata.name}{" "}{.spec.podCIDR}{" "}'
    '{.status.addresses[?(@.type=="InternalIP")].address}{"\\n"}{end}'
)


def parse_nodes(text: str) -> list[PodNetworkNode]:
    """`kubectl get nodes -o jsonpath=NODES_JSONPATH` -> one entry per node with its pod CIDR and InternalIP."""
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 3:
            raise KindError(f"node without a pod CIDR or an InternalIP yet: {line!r}")
        nodes.append(PodNetworkNode(*fields))
    return nodes


def bridge_conflist(pod_cidr: str) -> str:
    """The pod network of one kind node: Debian's bridge plugin (the node's gateway, no masquerade) with host-local
    addresses from the node's pod CIDR, and portmap. Pods of other nodes are reached by node_routes."""
    return (
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "nodeagent-kind",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": "cni0",
                        "isGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": pod_cidr}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                        },
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            },
            indent=2,
        )
        + "\n"
    )


def cluster_dns_ip(service_subnet: str = SERVICE_SUBNET) -> str:
    """kubeadm's cluster DNS Service address: the tenth of the service range."""
    return str(ipaddress.ip_network(service_subnet)[10])


def service_probe_argv(address: str, port: int = 53) -> list[str]:
    """A TCP connect from a node's own network namespace (bash's /dev/tcp; the node has no nc)."""
    return ["timeout", "5", "bash", "-c", f"echo > /dev/tcp/{address}/{port}"]


def node_routes(nodes: list[PodNetworkNode]) -> dict[str, list[list[str]]]:
    """Node name -> the `ip route replace` commands to every other node's pod CIDR through that node's address."""
    return {
        node.name: [
            ["ip", "route", "replace", other.pod_cidr, "via", other.address]
            for other in nodes
            if other.name != node.name
        ]
        for node in nodes
    }


CNI_CONFIG = "/etc/cni/net.d/10-nodeagent-kind.conflist"
ADMIN = ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"]
CONTROL_PLANE = f"{CLUSTER_NAME}-control-plane"


def install_pod_network(docker: IsolatedDocker, control_plane: str, work: Path) -> list[PodNetworkNode]:
    """A bridge conflist in each node and routes between them (inside the nodes' own network namespaces)."""
    out = docker.docker("exec", control_plane, *ADMIN, "get", "nodes", "-o", f"jsonpath={NODES_JSONPATH}")
    nodes = parse_nodes(out.stdout)
    routes = node_routes(nodes)
    for node in nodes:
        conf = work / f"{node.name}.conflist"
        conf.write_text(bridge_conflist(node.pod_cidr))
        docker.docker("exec", node.name, "mkdir", "-p", str(Path(CNI_CONFIG).parent))
        docker.docker("cp", str(conf), f"{node.name}:{CNI_CONFIG}")
        for argv in routes[node.name]:
            docker.docker("exec", node.name, *argv)
    return nodes


def wait_ready(docker: IsolatedDocker, control_plane: str, timeout: float = 120.0) -> tuple[bool, float]:
    started = time.monotonic()
    while True:
        out = docker.docker(
            "exec",
            control_plane,
            *ADMIN,
            "wait",
            "--for=condition=Ready",
            "node",
            "--all",
            "--timeout=10s",
            check=False,
            timeout=60,
        )
        if out.returncode == 0:
            return True, time.monotonic() - started
        if time.monotonic() - started > timeout:
            return False, time.monotonic() - started


def probe_service(docker: IsolatedDocker, node: str, address: str, timeout: float = 60.0) -> str:
    """Connect from `node` until it works or `timeout` passes (kube-proxy syncs, CoreDNS becomes Ready): "connected
    after N s" or the last error."""
    started = time.monotonic()
    while True:
        probe = docker.docker("exec", node, *service_probe_argv(address), check=False, timeout=30)
        elapsed = time.monotonic() - started
        if probe.returncode == 0:
            return f"connected after {elapsed:.0f} s"
        if elapsed > timeout:
            return f"exit {probe.returncode} after {elapsed:.0f} s: {probe.stderr.strip()}"
        time.sleep(1)


@dataclass
class CreateResult:
    returncode: int
    output: str
    seconds: float
    diagnostics: dict[str, str] = field(default_factory=dict)
    ready: bool = False


NODE_DIAGNOSTICS: dict[str, list[str]] = {
    "systemctl is-system-running": ["systemctl", "is-system-running"],
    "failed units": ["systemctl", "--failed", "--no-legend", "--plain"],
    "containerd journal (tail)": ["sh", "-c", "journalctl -u containerd --no-pager | tail -n 30"],
    "kubelet journal (tail)": ["sh", "-c", "journalctl -u kubelet --no-pager | tail -n 60"],
    "crictl ps -a": ["crictl", "ps", "-a"],
    "crictl images": ["crictl", "images"],
    "nodes": ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "get", "nodes", "-o", "wide"],
    "kube-dns endpoints": [
        "kubectl",
        "--kubeconfig",
        "/etc/kubernetes/admin.conf",
        "-n",
        "kube-system",
        "get",
        "endpointslices",
        "-o",
        "wide",
    ],
    "ip_forward": ["sysctl", "net.ipv4.ip_forward"],
    "pods": ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "get", "pods", "-A", "-o", "wide"],
}


def prepare(
    work: Path, docker: IsolatedDocker, progress: Callable[[str], None], *, workers: int = 0, cache: Path | None = None
) -> tuple[Path, dict[str, str]]:
    """kind (built once), the config file and the environment kind runs in, under `work`."""
    kind = build_kind(progress, cache)
    path_dir = work / "bin"
    path_dir.mkdir(parents=True, exist_ok=True)
    link = path_dir / "docker"
    if not link.exists():
        link.symlink_to(DOCKER)
    (work / "kind-config.yaml").write_text(cluster_config(workers))
    return kind, kind_env(docker.paths.docker_socket, work / "kubeconfig", path_dir, os.environ)


def create(
    docker: IsolatedDocker,
    image: str,
    work: Path,
    progress: Callable[[str], None],
    *,
    cache: Path | None = None,
    workers: int = 0,
) -> CreateResult:
    """The network, `kind create cluster`, the pod network, every node Ready, a Service reached across nodes; the
    cluster is left running (`delete` removes it)."""
    kind, env = prepare(work, docker, progress, workers=workers, cache=cache)
    docker.docker(*network_create_args())
    started = time.monotonic()
    proc = subprocess.run(
        create_argv(kind, image, work / "kind-config.yaml"),
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    result = CreateResult(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started)
    progress(f"kind create cluster exit={proc.returncode} seconds={result.seconds:.0f}")
    if proc.returncode != 0:
        return result
    try:
        nodes = install_pod_network(docker, CONTROL_PLANE, work)
        result.diagnostics["pod network"] = "\n".join(f"{n.name} {n.pod_cidr} via {n.address}" for n in nodes)
        ready, seconds = wait_ready(docker, CONTROL_PLANE)
        result.ready = ready
        result.diagnostics["all nodes Ready"] = f"{ready} after {seconds:.0f} s"
        progress(f"pod network installed nodes={len(nodes)} ready={ready} seconds={seconds:.0f}")
        for other in nodes:
            if other.name == CONTROL_PLANE:
                continue
            # Through kube-proxy's rules in the worker to a CoreDNS pod (on the control plane): the Service and the
            # route between the nodes' pod ranges.
            dns = cluster_dns_ip()
            result.diagnostics[f"{other.name} -> kube-dns {dns}:53/tcp"] = probe_service(docker, other.name, dns)
    except KindError as exc:
        result.diagnostics["pod network"] = f"failed: {exc}"
    return result


def collect(docker: IsolatedDocker, work: Path, result: CreateResult) -> None:
    """What the control-plane node says (NODE_DIAGNOSTICS) and `kind export logs` into `work/kind-logs`."""
    for label, argv in NODE_DIAGNOSTICS.items():
        out = docker.docker("exec", CONTROL_PLANE, *argv, check=False, timeout=60)
        result.diagnostics[label] = (out.stdout + out.stderr).strip()
    logs = work / "kind-logs"
    exported = subprocess.run(
        [str(kind_binary()), "export", "logs", str(logs), "--name", CLUSTER_NAME],
        env=kind_env(docker.paths.docker_socket, work / "kubeconfig", work / "bin", os.environ),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    result.diagnostics["kind export logs"] = f"exit {exported.returncode} -> {logs}: " + " | ".join(
        (exported.stdout + exported.stderr).strip().splitlines()[-5:]
    )


def delete(docker: IsolatedDocker, work: Path) -> list[str]:
    """`kind delete cluster` and our network; what failed, as messages."""
    problems = []
    deleted = subprocess.run(
        [str(kind_binary()), "delete", "cluster", "--name", CLUSTER_NAME],
        env=kind_env(docker.paths.docker_socket, work / "kubeconfig", work / "bin", os.environ),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if deleted.returncode != 0:
        log.warning("kind delete failed output=%s", deleted.stderr.strip())
        problems.append(f"kind delete cluster: {deleted.stderr.strip()}")
    removed = docker.docker("network", "rm", NETWORK, check=False)
    if removed.returncode != 0 and "not found" not in removed.stderr:
        problems.append(f"docker network rm {NETWORK}: {removed.stderr.strip()}")
    return problems


def try_create(
    docker: IsolatedDocker,
    image: str,
    work: Path,
    progress: Callable[[str], None],
    *,
    cache: Path | None = None,
    workers: int = 0,
) -> CreateResult:
    """create, collect what each node says, delete the cluster and the network."""
    try:
        result = create(docker, image, work, progress, cache=cache, workers=workers)
        collect(docker, work, result)
        return result
    finally:
        delete(docker, work)


def report(result: CreateResult) -> str:
    lines = [f"== kind create cluster: exit {result.returncode} after {result.seconds:.0f} s", result.output.strip()]
    for label, text in result.diagnostics.items():
        lines.append(f"-- {label}:")
        lines.extend("   " + line for line in (text or "(empty)").splitlines())
    return "\n".join(lines)
