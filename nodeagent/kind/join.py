"""`nodeagent kind join --dir DIR`: nodeagent joins the kind cluster `kind up` left running, as one more node.

The node is nodeagent/cluster/node.py's: a mount and network namespace of its own on this host, its own containerd
(the testbed's configuration, its socket and state under DIR/join; never the host's /run/containerd), our CNI plugin
and the `kubelet` console script started as kubeadm's drop-in would. Its `eth0` is a veth on kind's bridge (nakind0)
with JOIN_ADDRESS, an aux-address Docker's IPAM never hands out; its default route is the bridge's gateway.

- A bootstrap token from `kubeadm token create --print-join-command` in the control-plane container; kubeadm join
  (discovery pinned by the CA hash, then TLS bootstrap) against the control plane's address on nakind0. kubeadm
  writes the API server's name (`nodeagent-control-plane`) into the bootstrap kubeconfig: the node's mount
  namespace gets an /etc/hosts naming it.
- The pod range: kind's controller-manager allocates the lowest free /24 of the pod subnet; the node's pod bridge
  and CNI range are made for it before the join, and the join fails unless the Node's spec.podCIDR is that range.
- Routes: in the node's namespace, each kind node's pod range via that node's address; in each kind node, ours via
  JOIN_ADDRESS. All on nakind0; nothing is NATed, nothing is routed off it.
- Images: nothing is pulled. The pause and kube-proxy images (the ones in the kind node image) are imported into the
  node's containerd with `ctr import`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from nodeagent.cluster import config, nodenet
from nodeagent.cluster.config import NodePlan, kubelet_patch
from nodeagent.cluster.node import Node
from nodeagent.kind import cluster, nodefiles
from nodeagent.kind.errors import KindError
from nodeagent.kind.lifecycle import KindDir, attached_docker
from nodeagent.kind.nodeimage import control_plane_images
from nodeagent.testbed import configs, images
from nodeagent.testbed.kubeadm import kubeadm_path

log = logging.getLogger(__name__)

NODE_NAME = "nodeagent-host"
PLAN_FILE = "plan.json"
# The node's "registry": no registry runs, it only names the sandbox image, imported before the join.
REGISTRY = f"{cluster.NETWORK_GATEWAY}:5000"
KUBELET_PORT = 10250
HEALTHZ_PORT = 10248
JOIN_TIMEOUT = 240.0


class JoinNode(Node):
    def _patch_text(self) -> str:
        # kind's KubeletConfiguration says systemd; this host has cgroup v1 and no systemd as PID 1.
        return kubelet_patch(self.plan) + "cgroupDriver: cgroupfs\n"


def next_pod_cidr(pod_subnet: str, taken: set[str]) -> str:
    """The range allocator's choice for a new node: the lowest /24 of `pod_subnet` no node has."""
    for candidate in ipaddress.IPv4Network(pod_subnet).subnets(new_prefix=24):
        if str(candidate) not in taken:
            return str(candidate)
    raise KindError(f"no free /24 left in {pod_subnet}")


def hosts_file(base: str, control_plane_address: str) -> str:
    return base.rstrip("\n") + f"\n{control_plane_address} {cluster.CONTROL_PLANE}\n"


def plan_for(pod_cidr: str) -> NodePlan:
    return NodePlan(
        name=NODE_NAME,
        pod_cidr=pod_cidr,
        kubelet_port=KUBELET_PORT,
        healthz_port=HEALTHZ_PORT,
        cgroup_root="/nodeagent-kind-join",
        address=cluster.JOIN_ADDRESS,
    )


def _node(kdir: KindDir, plan: NodePlan) -> JoinNode:
    fabric = nodenet.Fabric(bridge=cluster.BRIDGE, cidr=cluster.NETWORK_SUBNET)
    return JoinNode(kdir.join, plan, REGISTRY, cluster.SERVICE_SUBNET, fabric)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(argv: list[str], what: str, timeout: float = 300) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if proc.returncode != 0:
        raise KindError(f"{what}: exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-2000:]}")
    return proc.stdout


@dataclass
class JoinResult:
    name: str
    pod_cidr: str
    timings: dict[str, float]
    output: str


def import_images(node: Node, progress: Callable[[str], None]) -> None:
    """pause (under the kind node's name and the node's sandbox name) and kube-proxy into the node's containerd."""
    oci = control_plane_images()
    wanted = {n.upstream: oci[n.local] for n in nodefiles.upstream_image_names() if n.local in ("pause", "kube-proxy")}
    wanted[configs.pause_image(node.settings).replace(node.settings.registry, REGISTRY)] = oci["pause"]
    with tempfile.TemporaryDirectory(prefix="nodeagent-kind-join-") as tmp:
        for index, (name, image) in enumerate(wanted.items()):
            archive = images.write_oci_archive(image, Path(tmp) / f"{index}.tar", name=name)
            _run(
                ["ctr", "-a", str(node.layout.containerd_socket), "-n", "k8s.io", "images", "import", str(archive)],
                f"ctr import {name}",
            )
    progress(f"{NODE_NAME}: imported {', '.join(sorted(wanted))}")


def import_image(root: Path, name: str, image: images.OCIImage) -> None:
    """`image` under `name` into every kind node's containerd and the joined node's: nothing is pulled here."""
    kdir = KindDir(root)
    docker = attached_docker(kdir)
    node = _node(kdir, NodePlan(**json.loads((kdir.join / PLAN_FILE).read_text())))
    with tempfile.TemporaryDirectory(prefix="nodeagent-kind-image-") as tmp:
        archive = images.write_oci_archive(image, Path(tmp) / "image.tar", name=name)
        _run(
            ["ctr", "-a", str(node.layout.containerd_socket), "-n", "k8s.io", "images", "import", str(archive)],
            f"ctr import {name} into {NODE_NAME}",
        )
        listed = docker.docker("ps", "--format", "{{.Names}}").stdout.split()
        for container in (c for c in listed if c.startswith(f"{cluster.CLUSTER_NAME}-")):
            docker.docker("cp", str(archive), f"{container}:/kind/nodeagent-image.tar", timeout=300)
            docker.docker("exec", container, "ctr", "-n", "k8s.io", "images", "import", "/kind/nodeagent-image.tar")
            docker.docker("exec", container, "rm", "-f", "/kind/nodeagent-image.tar")


def node_namespace_argv(root: Path, argv: list[str]) -> list[str]:
    """`argv` in the joined node's network and mount namespaces."""
    node = _node(KindDir(root), NodePlan(**json.loads((KindDir(root).join / PLAN_FILE).read_text())))
    return node.ns_argv(argv)


def _bind_hosts(node: Node, hosts: Path, control_plane: str) -> None:
    """An /etc/hosts of the node's own (its mount namespace) that names the control plane as kubeadm wrote it."""
    hosts.write_text(hosts_file(Path("/etc/hosts").read_text(), control_plane))
    _run(node.ns_argv(["mount", "--bind", str(hosts), "/etc/hosts"]), "bind /etc/hosts")


def join_yaml(text: str, *, tls_bootstrap_token: str | None) -> str:
    """join_config's JoinConfiguration, with a TLS bootstrap token of its own when given (the credential kubeadm
    reads the cluster's configuration with and hands to the kubelet; discovery keeps the good one)."""
    doc = yaml.safe_load(text)
    if tls_bootstrap_token is not None:
        doc["discovery"]["tlsBootstrapToken"] = tls_bootstrap_token
    return str(yaml.safe_dump(doc, sort_keys=False))


async def join(
    root: Path,
    progress: Callable[[str], None],
    *,
    ca_cert_hash: str | None = None,
    token: str | None = None,
    tls_bootstrap_token: str | None = None,
) -> JoinResult:
    """nodeagent joins the running kind cluster under `root`; its state in root/join (`leave` removes it). A
    failed join leaves again (nothing of the node stays) and raises KindError with kubeadm's and the kubelet's last
    words. `ca_cert_hash`, `token` and `tls_bootstrap_token` replace the good ones (to see them refused)."""
    kdir = KindDir(root)
    if (kdir.join / PLAN_FILE).exists():
        raise KindError(f"{NODE_NAME} already joined under {root}")
    (kdir.join / "logs" / "kubelet.log").unlink(missing_ok=True)
    try:
        return await _join(
            kdir,
            progress,
            ca_cert_hash=ca_cert_hash,
            token=token,
            tls_bootstrap_token=tls_bootstrap_token,
        )
    except BaseException:
        kubelet_log = kdir.join / "logs" / "kubelet.log"
        if kubelet_log.exists():
            progress(f"{NODE_NAME}: kubelet log (tail):\n" + "\n".join(kubelet_log.read_text().splitlines()[-20:]))
        problems = await asyncio.to_thread(leave, kdir, progress)
        for problem in problems:
            log.warning("cleanup problem=%s", problem)
        raise


async def _join(
    kdir: KindDir,
    progress: Callable[[str], None],
    *,
    ca_cert_hash: str | None,
    token: str | None,
    tls_bootstrap_token: str | None,
) -> JoinResult:
    docker = attached_docker(kdir)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    admin = ["exec", cluster.CONTROL_PLANE, *cluster.ADMIN]
    nodes = cluster.parse_nodes(
        docker.docker(*admin, "get", "nodes", "-o", f"jsonpath={cluster.NODES_JSONPATH}").stdout
    )
    pod_cidr = next_pod_cidr(cluster.POD_SUBNET, {n.pod_cidr for n in nodes})
    control_plane = next(n.address for n in nodes if n.name == cluster.CONTROL_PLANE)
    printed = docker.docker("exec", cluster.CONTROL_PLANE, "kubeadm", "token", "create", "--print-join-command")
    command = config.parse_join_command(printed.stdout)
    plan = plan_for(pod_cidr)
    kdir.join.mkdir(parents=True, exist_ok=True)
    (kdir.join / PLAN_FILE).write_text(json.dumps(asdict(plan)) + "\n")
    node = _node(kdir, plan)
    progress(f"{NODE_NAME}: containerd and the pod network ({pod_cidr}) on {cluster.BRIDGE} at {plan.address}")
    await node.start(_free_port())
    timings["node start"] = time.monotonic() - t0
    await asyncio.to_thread(_bind_hosts, node, kdir.join / "hosts", control_plane)
    t = time.monotonic()
    await asyncio.to_thread(import_images, node, progress)
    timings["images"] = time.monotonic() - t
    holder = node.link().pid
    for other in nodes:
        _run(nodenet.in_namespace(holder, ["ip", "route", "replace", other.pod_cidr, "via", other.address]), "route")
        docker.docker("exec", other.name, "ip", "route", "replace", pod_cidr, "via", plan.address)
    path = kdir.join / "kubeadm-join.yaml"
    text = config.join_config(
        plan,
        api_endpoint=f"{control_plane}:6443",
        token=token or command.token,
        ca_cert_hash=ca_cert_hash or command.ca_cert_hash,
        cri_socket=node.cri_socket,
        patches_dir=str(node.patches),
    )
    path.write_text(join_yaml(text, tls_bootstrap_token=tls_bootstrap_token))
    progress(f"{NODE_NAME}: kubeadm join {control_plane}:6443")
    result = await node.kubeadm(
        ["join", f"--config={path}"], kubeadm=kubeadm_path(), timeout=JOIN_TIMEOUT, progress=progress
    )
    timings["kubeadm join"] = result.seconds
    if result.returncode != 0:
        raise KindError(
            f"kubeadm join failed (exit {result.returncode}):\n" + "\n".join(result.output.splitlines()[-30:])
        )
    t = time.monotonic()
    ready = docker.docker(
        *admin, "wait", "--for=condition=Ready", f"node/{NODE_NAME}", "--timeout=180s", check=False, timeout=200
    )
    timings["Ready"] = time.monotonic() - t
    if ready.returncode != 0:
        raise KindError(f"{NODE_NAME} not Ready: {ready.stderr.strip()}")
    given = docker.docker(*admin, "get", "node", NODE_NAME, "-o", "jsonpath={.spec.podCIDR}").stdout.strip()
    if given != pod_cidr:
        raise KindError(f"{NODE_NAME}: spec.podCIDR {given!r}, the node's pod network was made for {pod_cidr}")
    timings["total"] = time.monotonic() - t0
    progress(f"{NODE_NAME}: Ready pod_cidr={given} " + " ".join(f"{k}={v:.1f}s" for k, v in timings.items()))
    return JoinResult(NODE_NAME, given, timings, result.output)


def leave(kdir: KindDir, progress: Callable[[str], None]) -> list[str]:
    """kubeadm reset in the node's namespace, then everything the node started, by PID; nothing when not joined."""
    plan_path = kdir.join / PLAN_FILE
    if not plan_path.exists():
        return []
    node = _node(kdir, NodePlan(**json.loads(plan_path.read_text())))
    problems: list[str] = []

    async def run() -> list[str]:
        try:
            await node.reset(kubeadm=kubeadm_path(), progress=progress)
        except Exception as exc:  # whatever reset does, the node is stopped
            problems.append(f"kubeadm reset: {exc}")
        return await node.stop()

    removed = asyncio.run(run())
    progress(f"{NODE_NAME}: left; removed {len(removed)} (cgroups, mounts)")
    plan_path.unlink()
    return problems
