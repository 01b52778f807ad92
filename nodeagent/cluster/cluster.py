"""`nodeagent cluster up --nodes N` / `nodeagent cluster down`: a kubeadm cluster on this machine whose every node's
kubelet is nodeagent.

`up`: make the cluster's fabric (nodenet.py: a bridge in the host, each node in a network namespace of its own on
it), build (cached) the control-plane images and push them to a registry of the cluster's own on the fabric's
gateway; node 1 gets its namespaces, pod network and containerd (node.py) and runs `kubeadm init` (the kubelet
starts when kubeadm has written its files; kubeadm then waits for its healthz and for the static control-plane pods
it runs); nodes 2..N each run `kubeadm join --token ... --discovery-token-ca-cert-hash ...` (TLS bootstrap) the same
way. kubeadm's addons run as on any cluster: one kube-proxy per node (its DaemonSet), each writing its own node's
iptables, and CoreDNS. `down`: `kubeadm reset -f` on every node (last joined first), then everything started is
stopped by PID (each node's network namespace, with its iptables, goes with its last process) and the fabric,
mounts and cgroups are removed. The cluster's state (cluster.json) lets `down` run from another process.
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

from nodeagent.cluster import config, nodenet
from nodeagent.cluster.config import NodePlan
from nodeagent.cluster.node import Node, NodeError
from nodeagent.testbed import controlplaneimages, coredns, hostnet, processes, registry
from nodeagent.testbed.install import Progress as InstallProgress
from nodeagent.testbed.kubeadm import build_kubeadm, kubeadm_path
from nodeagent.testbed.kubectl import KubectlError, kubectl
from nodeagent.testbed.layout import Layout

log = logging.getLogger(__name__)

REGISTRY = "registry"
STATE_FILE = "cluster.json"
# Beyond kubeadm's own waits (config.INIT_TIMEOUTS, JOIN_TIMEOUTS): only a kubeadm that hangs outright hits these.
INIT_TIMEOUT = 240.0
JOIN_TIMEOUT = 240.0
# Every node's kubelet on upstream's ports: each node has a network namespace of its own (nodenet.py).
KUBELET_PORT = 10250
HEALTHZ_PORT = 10248
FABRIC = "fabric"
CLUSTER_INFO_TIMEOUT = 180.0


class ClusterError(RuntimeError):
    """The cluster cannot be brought up or down; the message names the step."""


@dataclass(frozen=True)
class ClusterState:
    registry: str
    service_cidr: str
    nodes: tuple[NodePlan, ...]
    fabric: nodenet.Fabric
    # The apiserver's --runtime-config (`cluster up --runtime-config` or a preset's); empty: the defaults.
    runtime_config: str = ""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        data = json.loads(path.read_text())
        return cls(
            data["registry"],
            data["service_cidr"],
            tuple(NodePlan(**n) for n in data["nodes"]),
            nodenet.Fabric(**data["fabric"]),
            data.get("runtime_config", ""),  # absent from the state of a cluster brought up before it existed
        )


def node_name(index: int) -> str:
    return "nodeagent-control-plane" if index == 0 else f"nodeagent-worker{index}"


def new_token(choose: Callable[[str], str] = secrets.choice) -> str:
    """A bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}` as kubeadm's."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(choose(alphabet) for _ in range(6)) + "." + "".join(choose(alphabet) for _ in range(16))


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
        return [
            Node(self.node_root(i), plan, state.registry, state.service_cidr, state.fabric)
            for i, plan in enumerate(state.nodes)
        ]

    # --- up -------------------------------------------------------------------------------------------------------

    async def up(self, count: int, *, kube_proxy: bool = True, runtime_config: str = "") -> ClusterState:
        if count < 1:
            raise ClusterError("--nodes must be at least 1")
        if (self.root / STATE_FILE).exists():
            raise ClusterError(f"a cluster is already up in {self.root}: `nodeagent cluster down --dir {self.root}`")
        self.root.mkdir(parents=True, exist_ok=True)
        kubeadm = await asyncio.to_thread(build_kubeadm, InstallProgress(write=self.progress))
        state = replace(self._plan(), runtime_config=runtime_config)
        state.save(self.root / STATE_FILE)
        try:
            await asyncio.to_thread(nodenet.ensure_fabric, state.fabric)
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
        plan = self._node_plan(index, state.fabric, {n.pod_cidr for n in state.nodes} | {state.service_cidr})
        state = replace(state, nodes=(*state.nodes, plan))
        state.save(self.root / STATE_FILE)
        node = self.nodes(state)[index]
        join = self._join_command(self.nodes(state)[0])
        await self._wait_cluster_info_signed(join.token)
        await self._join(node, join, kubeadm_path(), ca_cert_hash=ca_cert_hash or join.ca_cert_hash)
        return node

    async def _wait_cluster_info_signed(self, token: str) -> None:
        """kubeadm init returns before the controller-manager's bootstrap signer has signed the cluster-info
        ConfigMap with the token (`jws-kubeconfig-<token id>`); join's discovery fails without it ("could not find a
        JWS signature"). Seconds on an idle machine; over a minute, join's discovery timeout, was seen here under a
        load average of 20."""
        key = config.cluster_info_signature_key(token)
        deadline = time.monotonic() + CLUSTER_INFO_TIMEOUT
        while True:
            try:
                data = json.loads(
                    await self.kubectl("-n", "kube-public", "get", "configmap", "cluster-info", "-o", "json")
                )
                if key in data.get("data", {}):
                    return
            except (ClusterError, ValueError):
                pass  # not there yet, or the apiserver busy
            if time.monotonic() > deadline:
                raise ClusterError(f"cluster-info not signed for the join token ({key}) in {CLUSTER_INFO_TIMEOUT:.0f}s")
            await asyncio.sleep(1)

    def _node_plan(self, index: int, fabric: nodenet.Fabric, taken: set[str]) -> NodePlan:
        return NodePlan(
            name=node_name(index),
            pod_cidr=hostnet.choose_pod_cidr(self.node_root(index), taken | {fabric.cidr}),
            kubelet_port=KUBELET_PORT,
            healthz_port=HEALTHZ_PORT,
            cgroup_root=f"/nodeagent-{hostnet.bridge_name(self.node_root(index))}",
            address=fabric.node_address(index),
        )

    def _plan(self) -> ClusterState:
        # The fabric, the Services and every node's pods: a /24 each of 198.18.0.0/16 (never the testbeds'
        # 198.19.0.0/16), none overlapping a route of the machine.
        fabric_cidr = hostnet.choose_pod_cidr(self.root / FABRIC, set())
        fabric = nodenet.Fabric(bridge=hostnet.bridge_name(self.root / FABRIC), cidr=fabric_cidr)
        first = self._node_plan(0, fabric, {fabric_cidr})
        service_cidr = hostnet.choose_pod_cidr(self.root / "services", {fabric_cidr, first.pod_cidr})
        # The registry on the fabric's gateway: the nodes' containerds, each in its own network namespace, reach it
        # there (not on the host's loopback).
        registry_address = f"{fabric.gateway}:{_free_port()}"
        return ClusterState(registry=registry_address, service_cidr=service_cidr, nodes=(first,), fabric=fabric)

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
        await asyncio.to_thread(nodenet.connect, [node.link()])
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
            runtime_config=state.runtime_config,
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
        return kube_proxy

    async def kubectl(self, *args: str) -> str:
        """kubectl as the cluster's admin; its output, or ClusterError naming the command."""
        try:
            return await kubectl(self.admin_kubeconfig, *args)
        except KubectlError as exc:
            raise ClusterError(str(exc)) from exc

    def _join_command(self, first: Node) -> config.JoinCommand:
        """The endpoint, token and CA hash of the join line `kubeadm init` printed (its log)."""
        try:
            return config.parse_join_command((first.layout.logs / "kubeadm-init.log").read_text())
        except (OSError, ValueError) as exc:
            raise ClusterError(f"no join command from kubeadm init: {exc}") from exc

    async def _join(self, node: Node, join: config.JoinCommand, kubeadm: Path, *, ca_cert_hash: str) -> None:
        self.progress(f"{node.plan.name}: starting containerd and the pod network ({node.plan.pod_cidr})")
        await node.start(_free_port())
        # Every node's pod range routed through its node's address, in every node and in the host.
        links = [n.link() for n in self.nodes(self.state()) if n.root.exists()]
        await asyncio.to_thread(nodenet.connect, links)
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
        # kube-proxy's and portmap's rules went with each node's network namespace; the host keeps only the fabric.
        veths = [n.veth for n in self.nodes(state)]
        removed += await asyncio.to_thread(nodenet.remove_fabric, state.fabric, veths)
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
