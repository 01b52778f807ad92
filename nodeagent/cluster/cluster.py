"""`nodeagent cluster up --nodes N` / `nodeagent cluster down`: a kubeadm cluster on this machine whose every node's
kubelet is nodeagent.

`up`: build (cached) the control-plane images and push them to a registry of the cluster's own; node 1 gets its
namespace, pod network and containerd (node.py) and runs `kubeadm init` (the kubelet starts when kubeadm has written
its files; kubeadm then waits for its healthz and for the static control-plane pods it runs); nodes 2..N each run
`kubeadm join --token ... --discovery-token-ca-cert-hash ...` (TLS bootstrap) the same way. `down`: `kubeadm reset
-f` on every node (last joined first), then everything started is stopped by PID and the bridges, mounts and
cgroups are removed. The cluster's state (cluster.json) lets `down` run from another process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import string
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from nodeagent.cluster import config, podnet
from nodeagent.cluster.config import NodePlan
from nodeagent.cluster.node import MOUNTNS, Node, NodeError
from nodeagent.testbed import controlplaneimages, coredns, hostnet, kubeproxy, processes, registry
from nodeagent.testbed.install import Progress as InstallProgress
from nodeagent.testbed.kubeadm import build_kubeadm, kubeadm_path
from nodeagent.testbed.layout import Layout
from nodeagent.testbed.versions import kubernetes_bin_dir

log = logging.getLogger(__name__)

REGISTRY = "registry"
STATE_FILE = "cluster.json"
# Beyond kubeadm's own waits (config.INIT_TIMEOUTS, JOIN_TIMEOUTS): only a kubeadm that hangs outright hits these.
INIT_TIMEOUT = 240.0
JOIN_TIMEOUT = 240.0
# The kubelet ports kubeadm's control-plane node keeps (upstream defaults); joined nodes take free ones.
FIRST_KUBELET_PORT = 10250
FIRST_HEALTHZ_PORT = 10248
# What kubeadm's control plane listens on (the first node's address, or loopback): checked free before init, so a
# taken port is a clear error rather than a control plane that never comes up.
CONTROL_PLANE_PORTS = (config.API_SERVER_PORT, 2379, 2380, 2381, 10257, 10259, FIRST_KUBELET_PORT, FIRST_HEALTHZ_PORT)
KUBE_PROXY_PORTS = (config.KUBE_PROXY_HEALTHZ_PORT, config.KUBE_PROXY_METRICS_PORT)


class ClusterError(RuntimeError):
    """The cluster cannot be brought up or down; the message names the step."""


@dataclass(frozen=True)
class ClusterState:
    registry: str
    service_cidr: str
    nodes: tuple[NodePlan, ...]

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        data = json.loads(path.read_text())
        return cls(data["registry"], data["service_cidr"], tuple(NodePlan(**n) for n in data["nodes"]))


def node_name(index: int) -> str:
    return "nodeagent-control-plane" if index == 0 else f"nodeagent-worker{index}"


def new_token(choose: Callable[[str], str] = secrets.choice) -> str:
    """A bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}` as kubeadm's."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(choose(alphabet) for _ in range(6)) + "." + "".join(choose(alphabet) for _ in range(16))


def taken_ports(ports: tuple[int, ...], addresses: tuple[str, ...] = ("0.0.0.0",)) -> list[int]:
    """The ports of `ports` something already listens on (bind fails)."""
    taken = []
    for port in ports:
        for address in addresses:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                # As Go's listeners: a port whose last connections linger in TIME_WAIT is free.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((address, port))
                except OSError:
                    taken.append(port)
                    break
    return taken


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, root: Path, progress: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.progress = progress or (lambda line: log.info("cluster progress %s", line))
        self.registry_layout = Layout(root / REGISTRY)
        # Seconds each kubeadm run took, and when it started (time.monotonic), by "init" / "join:<node>".
        self.timings: dict[str, float] = {}
        self.started: dict[str, float] = {}

    def node_root(self, index: int) -> Path:
        return self.root / f"node{index}"

    def nodes(self, state: ClusterState) -> list[Node]:
        return [Node(self.node_root(i), plan, state.registry, state.service_cidr) for i, plan in enumerate(state.nodes)]

    # --- up -------------------------------------------------------------------------------------------------------

    async def up(self, count: int, *, kube_proxy: bool = True) -> ClusterState:
        if count < 1:
            raise ClusterError("--nodes must be at least 1")
        if (self.root / STATE_FILE).exists():
            raise ClusterError(f"a cluster is already up in {self.root}: `nodeagent cluster down --dir {self.root}`")
        taken = taken_ports(CONTROL_PLANE_PORTS + (KUBE_PROXY_PORTS if kube_proxy else ()))
        if taken:
            raise ClusterError(f"ports kubeadm's control plane needs are taken: {', '.join(map(str, taken))}")
        held = kubeproxy.live_owner()
        if kube_proxy and held is not None:
            # As a testbed does (testbed/kubeproxy.py): one kube-proxy per host, or two rewrite each other's iptables.
            self.progress(f"kube-proxy and CoreDNS: skipped, this host's kube-proxy is held by {held.root}")
            kube_proxy = False
        self.root.mkdir(parents=True, exist_ok=True)
        kubeadm = await asyncio.to_thread(build_kubeadm, InstallProgress(write=self.progress))
        state = self._plan()
        state.save(self.root / STATE_FILE)
        try:
            await self._registry(state, coredns_image=kube_proxy)
            addons = await self._init(self.nodes(state)[0], state, kubeadm, kube_proxy=kube_proxy)
            self.progress(f"addons (kube-proxy, CoreDNS): {'on' if addons else 'skipped'}")
            for _ in range(count - 1):
                await self.add_node()
        except BaseException:
            self.progress("cluster up failed: tearing down")
            await self.down()
            raise
        self.progress(f"cluster up: {count} node(s); KUBECONFIG={self.admin_kubeconfig}")
        return ClusterState.load(self.root / STATE_FILE)

    @property
    def admin_kubeconfig(self) -> Path:
        return self.node_root(0) / "etc-kubernetes" / "admin.conf"

    def state(self) -> ClusterState:
        return ClusterState.load(self.root / STATE_FILE)

    async def add_node(self, *, ca_cert_hash: str | None = None) -> Node:
        """One more node joins with `kubeadm join --token ... --discovery-token-ca-cert-hash ...`: the CA hash
        kubeadm init printed, or `ca_cert_hash` (a wrong one must make the join fail). The node is in the cluster's
        state before it starts, so `down` removes it whatever happens."""
        state = self.state()
        index = len(state.nodes)
        plan = self._node_plan(index, {n.pod_cidr for n in state.nodes} | {state.service_cidr})
        state = replace(state, nodes=(*state.nodes, plan))
        state.save(self.root / STATE_FILE)
        node = self.nodes(state)[index]
        join = self._join_command(self.nodes(state)[0])
        await self._join(node, join, kubeadm_path(), ca_cert_hash=ca_cert_hash or join.ca_cert_hash)
        return node

    def _node_plan(self, index: int, taken: set[str]) -> NodePlan:
        first = index == 0
        return NodePlan(
            name=node_name(index),
            pod_cidr=hostnet.choose_pod_cidr(self.node_root(index), taken),
            kubelet_port=FIRST_KUBELET_PORT if first else _free_port(),
            healthz_port=FIRST_HEALTHZ_PORT if first else _free_port(),
            cgroup_root=f"/nodeagent-{hostnet.bridge_name(self.node_root(index))}",
        )

    def _plan(self) -> ClusterState:
        first = self._node_plan(0, set())
        # A /24 of its own for the Services, beside the nodes' pod ranges (never the testbeds' 198.19.0.0/16).
        service_cidr = hostnet.choose_pod_cidr(self.root / "services", {first.pod_cidr})
        return ClusterState(registry=f"127.0.0.1:{_free_port()}", service_cidr=service_cidr, nodes=(first,))

    async def _registry(self, state: ClusterState, *, coredns_image: bool) -> None:
        lay = self.registry_layout
        lay.registry_data.mkdir(parents=True, exist_ok=True)
        (lay.registry_data / "config.yml").write_text(
            registry.registry_config(lay.registry_data / "storage", state.registry)
        )
        processes.start(
            REGISTRY,
            ["/usr/bin/docker-registry", "serve", str(lay.registry_data / "config.yml")],
            pid_dir=lay.pids,
            log_dir=lay.logs,
        )
        self.progress("images: building the control-plane images (cached after the first run)")
        built = await asyncio.to_thread(controlplaneimages.build_control_plane_images)
        if coredns_image:
            # Only for the addon (it needs kube-proxy): its Go build is minutes on a cold cache.
            binary = await asyncio.to_thread(coredns.build_coredns, InstallProgress(write=self.progress))
            layout = controlplaneimages.default_cache() / coredns.COREDNS_IMAGE
            dns = await asyncio.to_thread(coredns.build_coredns_image, layout, binary)
            built.append(controlplaneimages.ControlPlaneImage(coredns.COREDNS_IMAGE, coredns.COREDNS_VERSION, dns))
        await registry.wait_ready(state.registry, timeout=30)
        for image in built:
            await registry.push_image(state.registry, image.repository, image.tag, image.image)
        # The testbed's containerd config names the testbed's pause tag as its sandbox image: the same image.
        pause = next(i for i in built if i.repository == controlplaneimages.PAUSE_IMAGE)
        from nodeagent.testbed.configs import PAUSE_IMAGE_TAG  # noqa: PLC0415

        await registry.push_image(state.registry, pause.repository, PAUSE_IMAGE_TAG, pause.image)
        self.progress(f"images: pushed {len(built)} images to {state.registry}")

    async def _init(self, node: Node, state: ClusterState, kubeadm: Path, *, kube_proxy: bool) -> bool:
        """kubeadm init on the first node; whether it ran the addons (kube-proxy and CoreDNS)."""
        self.progress(f"{node.plan.name}: starting containerd and the pod network ({node.plan.pod_cidr})")
        await node.start(_free_port())
        if kube_proxy:
            kube_proxy = self._claim_kube_proxy(node)
        etcd_tag = controlplaneimages.installed_etcd_tag()
        text = config.init_config(
            node.plan,
            registry=state.registry,
            etcd_tag=etcd_tag,
            service_cidr=state.service_cidr,
            etcd_data_dir=str(node.etcd_data),
            cri_socket=node.cri_socket,
            token=new_token(),
            patches_dir=str(node.patches),
            coredns_tag=coredns.COREDNS_VERSION,
        )
        path = node.root / "kubeadm-init.yaml"
        path.write_text(text)
        args = ["init", f"--config={path}"]
        skip = config.skipped_phases(kube_proxy=kube_proxy)
        if skip:
            args.append(f"--skip-phases={','.join(skip)}")
        self.progress(f"{node.plan.name}: kubeadm init")
        self.started["init"] = time.monotonic()
        result = await node.kubeadm(args, kubeadm=kubeadm, timeout=INIT_TIMEOUT, progress=self.progress)
        self.timings["init"] = result.seconds
        if result.returncode != 0:
            raise ClusterError(f"kubeadm init failed (exit {result.returncode}):\n{_tail(result.output)}")
        self.progress(f"{node.plan.name}: kubeadm init done in {result.seconds:.0f}s")
        if kube_proxy:
            # Before any join: the DaemonSet controller then never makes a kube-proxy pod for another node.
            patch = json.dumps(config.pin_daemonset_patch(node.plan.name))
            await self.kubectl("-n", "kube-system", "patch", "daemonset", "kube-proxy", "--type=merge", "-p", patch)
            self.progress(f"kube-proxy: pinned to {node.plan.name} (one kube-proxy for the host's shared iptables)")
        return kube_proxy

    def _claim_kube_proxy(self, first: Node) -> bool:
        """Record this cluster as the host's kube-proxy owner (testbed/kubeproxy.py, under its lock), by the first
        node's namespace holder, which lives as long as the cluster's kube-proxy may; False (skip kube-proxy and
        CoreDNS) when another testbed or cluster took the host meanwhile."""
        holder = processes.load(first.layout.pids, MOUNTNS)
        if holder is None:
            raise ClusterError(f"{first.plan.name}: its mount namespace is not running")
        with kubeproxy.host_lock():
            held = kubeproxy.live_owner()
            if held is not None:
                self.progress(f"kube-proxy and CoreDNS: skipped, this host's kube-proxy is held by {held.root}")
                return False
            kubeproxy.record_owner(Layout(self.root), holder)
        self.progress(f"kube-proxy: this host's kube-proxy is the cluster's ({self.root})")
        return True

    async def kubectl(self, *args: str) -> str:
        """kubectl as the cluster's admin; its output, or ClusterError naming the command."""
        proc = await asyncio.create_subprocess_exec(
            str(kubernetes_bin_dir() / "kubectl"),
            f"--kubeconfig={self.admin_kubeconfig}",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {err.decode(errors='replace').strip()}")
        return out.decode()

    def _join_command(self, first: Node) -> config.JoinCommand:
        """The endpoint, token and CA hash of the join line `kubeadm init` printed (its log)."""
        try:
            return config.parse_join_command((first.layout.logs / "kubeadm-init.log").read_text())
        except (OSError, ValueError) as exc:
            raise ClusterError(f"no join command from kubeadm init: {exc}") from exc

    async def _join(self, node: Node, join: config.JoinCommand, kubeadm: Path, *, ca_cert_hash: str) -> None:
        self.progress(f"{node.plan.name}: starting containerd and the pod network ({node.plan.pod_cidr})")
        await node.start(_free_port())
        await asyncio.to_thread(podnet.connect, [n.settings.bridge for n in self.nodes(self.state())])
        path = node.root / "kubeadm-join.yaml"
        path.write_text(
            config.join_config(
                node.plan,
                api_endpoint=join.endpoint,
                token=join.token,
                ca_cert_hash=ca_cert_hash,
                cri_socket=node.cri_socket,
                patches_dir=str(node.patches),
            )
        )
        self.progress(f"{node.plan.name}: kubeadm join {join.endpoint}")
        self.started[f"join:{node.plan.name}"] = time.monotonic()
        result = await node.kubeadm(
            ["join", f"--config={path}"],
            kubeadm=kubeadm,
            timeout=JOIN_TIMEOUT,
            progress=self.progress,
        )
        self.timings[f"join:{node.plan.name}"] = result.seconds
        if result.returncode != 0:
            raise ClusterError(
                f"kubeadm join of {node.plan.name} failed (exit {result.returncode}):\n{_tail(result.output)}"
            )
        self.progress(f"{node.plan.name}: kubeadm join done in {result.seconds:.0f}s")

    # --- down -----------------------------------------------------------------------------------------------------

    async def down(self) -> list[str]:
        """kubeadm reset on every node (joined ones first), then stop everything by PID; what was removed."""
        state_path = self.root / STATE_FILE
        if not state_path.exists():
            return []
        state = ClusterState.load(state_path)
        kubeadm = kubeadm_path()
        removed: list[str] = []
        for node in reversed(self.nodes(state)):
            if not node.root.exists():
                continue
            try:
                result = await node.reset(kubeadm=kubeadm, progress=self.progress)
                if result is not None and result.returncode != 0:
                    self.progress(f"{node.plan.name}: kubeadm reset exit {result.returncode}")
            except (NodeError, OSError) as exc:
                self.progress(f"{node.plan.name}: kubeadm reset failed: {exc}")
            removed += await node.stop()
        removed += await asyncio.to_thread(podnet.disconnect, [n.settings.bridge for n in self.nodes(state)])
        # The cluster's kube-proxy pod is gone with its node: its iptables rules are not (kubeadm reset says so).
        # As a testbed's release: `kube-proxy --cleanup`, only when this cluster owns the host's kube-proxy.
        if kubeproxy.owned_by(Layout(self.root)):
            await asyncio.to_thread(kubeproxy.release, Layout(self.root), str(kubernetes_bin_dir() / "kube-proxy"))
            removed.append("kube-proxy iptables rules")
        proc = processes.load(self.registry_layout.pids, REGISTRY)
        if proc is not None:
            await asyncio.to_thread(processes.stop, proc, pid_dir=self.registry_layout.pids)
        state_path.unlink()
        self.progress("cluster down")
        return removed


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


async def wait_nodes_ready(kubectl: Path, kubeconfig: Path, names: list[str], timeout: float) -> float:
    """Seconds until every node of `names` is Ready (kubectl's view, as a user checks it)."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        proc = await asyncio.create_subprocess_exec(
            str(kubectl),
            f"--kubeconfig={kubeconfig}",
            "get",
            "nodes",
            "-o",
            "json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        if proc.returncode == 0:
            ready = {
                item["metadata"]["name"]
                for item in json.loads(out)["items"]
                if any(c["type"] == "Ready" and c["status"] == "True" for c in item["status"].get("conditions", []))
            }
            if set(names) <= ready:
                return time.monotonic() - started
        if time.monotonic() > deadline:
            raise ClusterError(f"nodes {names} not Ready after {timeout:.0f}s")
        await asyncio.sleep(1)
