"""Each node of a `cluster up` in a network namespace of its own, the nodes joined by one cluster fabric.

A real cluster's nodes each have their own address, their own iptables and their own ports: kube-proxy on node B
writes node B's NodePort and Service rules, a hostPort on node B answers on node B's address only, and every kubelet
listens on 10250. On one machine that is a network namespace per node (made with the node's mount namespace, by the
same `unshare`), holding:
- `eth0`, one end of a veth whose other end is on the cluster's fabric bridge in the host, with the node's address
  (the fabric's .2, .3, ...); the default route goes to the fabric's gateway (.1, on the host's end of the bridge);
- the node's pod bridge with the gateway of its pod range, made as the CNI plugin's ADD would make it (name, MAC,
  MTU), and a route to every other node's pod range through that node's address;
- `ip_forward` on (the namespace's own sysctl, as on a real node), so pods reach the other nodes.
containerd, the CNI helper, the kubelet and kubeadm run in it (node.py), hence also the hostNetwork pods (the control
plane, kube-proxy) and every iptables rule that kube-proxy and portmap write: the host's iptables are never touched
by the cluster's kube-proxies, and a testbed's kube-proxy on the host never touches the nodes'.

The host keeps only the fabric bridge (the cluster's registry listens on its gateway; kubectl reaches the apiserver
and the kubelets over it) and a route to each pod range through its node's address. The bridge's `forwarding` is
off: the host routes nothing from the fabric elsewhere, so no pod or node traffic ever leaves the machine or reaches
another testbed's pods, and nothing is NATed to the outside. Everything in a node's namespace goes with it when its
last process ends; `remove_fabric` deletes the bridge (and with it the veths' host ends and the host routes).
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cni.network import mac_for
from nodeagent.testbed.configs import BRIDGE_MTU

log = logging.getLogger(__name__)

NODE_INTERFACE = "eth0"
FORWARD_COMMENT = "nodeagent cluster: frames between the nodes on its fabric"


class NodeNetError(RuntimeError):
    """A step of a node's network (the fabric, a veth, an address, a route) failed; the message names it."""


@dataclass(frozen=True)
class Fabric:
    """The cluster's fabric: a bridge in the host and a /24 of 198.18.0.0/15, its gateway on the host's end."""

    bridge: str
    cidr: str

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.cidr)

    @property
    def gateway(self) -> str:
        return str(self.network.network_address + 1)

    def node_address(self, index: int) -> str:
        """Node `index`'s address: .2 for the first node, .3 for the second, ..."""
        address = self.network.network_address + 2 + index
        if address >= self.network.broadcast_address:
            raise NodeNetError(f"fabric {self.cidr} has no address left for node {index}")
        return str(address)


@dataclass(frozen=True)
class NodeLink:
    """One node's place on the fabric: its namespace (by the PID of a process in it), address and pod range."""

    pid: int
    address: str
    pod_cidr: str


def veth_name(pod_bridge: str) -> str:
    """The host end of a node's veth, named after its pod bridge (`na...` -> `nv...`, <= 15 characters)."""
    return "nv" + pod_bridge[2:]


def in_namespace(pid: int, argv: Sequence[str]) -> list[str]:
    return ["nsenter", "-t", str(pid), "-n", "--", *argv]


def fabric_commands(fabric: Fabric) -> list[list[str]]:
    gateway = f"{fabric.gateway}/{fabric.network.prefixlen}"
    return [
        ["ip", "link", "add", "name", fabric.bridge, "type", "bridge"],
        ["ip", "addr", "add", gateway, "dev", fabric.bridge],
        ["ip", "link", "set", fabric.bridge, "up"],
    ]


def forward_rule(fabric: Fabric) -> list[str]:
    """Frames bridged between the nodes' veths pass the host's FORWARD chain (br_netfilter): let them through,
    ahead of whatever a testbed's kube-proxy put there. Only fabric to fabric: nothing is routed off it."""
    return ["-i", fabric.bridge, "-o", fabric.bridge, "-m", "comment", "--comment", FORWARD_COMMENT, "-j", "ACCEPT"]


def attach_commands(node: NodeLink, fabric: Fabric, *, veth: str, pod_bridge: str) -> list[list[str]]:
    """The node's veth onto the fabric, then inside its namespace: loopback, eth0 with its address, the default
    route to the fabric's gateway, ip_forward, and its pod bridge with the pod range's gateway."""
    pod_net = ipaddress.IPv4Network(node.pod_cidr)
    pod_gateway = pod_net.network_address + 1
    ns = node.pid
    return [
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", NODE_INTERFACE, "netns", str(ns)],
        ["ip", "link", "set", veth, "mtu", str(BRIDGE_MTU), "master", fabric.bridge, "up"],
        in_namespace(ns, ["ip", "link", "set", "lo", "up"]),
        in_namespace(ns, ["ip", "link", "set", NODE_INTERFACE, "mtu", str(BRIDGE_MTU), "up"]),
        in_namespace(ns, ["ip", "addr", "add", f"{node.address}/{fabric.network.prefixlen}", "dev", NODE_INTERFACE]),
        in_namespace(ns, ["ip", "route", "add", "default", "via", fabric.gateway]),
        in_namespace(ns, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]),
        in_namespace(ns, ["ip", "link", "add", "name", pod_bridge, "type", "bridge"]),
        in_namespace(ns, ["ip", "link", "set", pod_bridge, "mtu", str(BRIDGE_MTU), "address", mac_for(pod_gateway)]),
        in_namespace(ns, ["ip", "addr", "add", f"{pod_gateway}/{pod_net.prefixlen}", "dev", pod_bridge]),
        in_namespace(ns, ["ip", "link", "set", pod_bridge, "up"]),
    ]


def route_commands(nodes: Sequence[NodeLink]) -> list[list[str]]:
    """Every node's pod range, routed through its node's address: in every other node, and in the host. `replace`,
    so running it again after a join is harmless."""
    commands = []
    for target in nodes:
        via = ["via", target.address]
        commands.append(["ip", "route", "replace", target.pod_cidr, *via])
        commands += [
            in_namespace(n.pid, ["ip", "route", "replace", target.pod_cidr, *via]) for n in nodes if n != target
        ]
    return commands


def _run(argv: Sequence[str], *, what: str) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NodeNetError(f"{what}: `{' '.join(argv)}` exit {proc.returncode}: {proc.stderr.strip()}")


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True, check=False).returncode == 0


def _iptables(*args: str) -> bool:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, check=False).returncode == 0


def ensure_fabric(fabric: Fabric) -> None:
    """The fabric bridge with its gateway address, forwarding off (never a router off the fabric); idempotent."""
    if not _link_exists(fabric.bridge):
        for argv in fabric_commands(fabric):
            _run(argv, what=f"fabric {fabric.bridge}")
    Path(f"/proc/sys/net/ipv4/conf/{fabric.bridge}/forwarding").write_text("0\n")
    rule = forward_rule(fabric)
    if not _iptables("-C", "FORWARD", *rule) and not _iptables("-I", "FORWARD", "1", *rule):
        raise NodeNetError(f"fabric {fabric.bridge}: cannot add FORWARD rule {' '.join(rule)}")
    log.info("cluster fabric ready bridge=%s gateway=%s", fabric.bridge, fabric.gateway)


def attach(node: NodeLink, fabric: Fabric, *, veth: str, pod_bridge: str) -> None:
    for argv in attach_commands(node, fabric, veth=veth, pod_bridge=pod_bridge):
        _run(argv, what=f"node address {node.address}")
    log.info("cluster node network ready address=%s pod_cidr=%s veth=%s", node.address, node.pod_cidr, veth)


def connect(nodes: Sequence[NodeLink]) -> None:
    for argv in route_commands(nodes):
        _run(argv, what="pod range routes")


def remove_fabric(fabric: Fabric, veths: Sequence[str]) -> list[str]:
    """The FORWARD rule, veths left (a namespace that outlived its node), and the bridge; what was removed."""
    removed = []
    while _iptables("-D", "FORWARD", *forward_rule(fabric)):
        removed.append(f"FORWARD rule of {fabric.bridge}")
    for veth in veths:
        if _link_exists(veth):
            subprocess.run(["ip", "link", "del", veth], capture_output=True, check=False)
            removed.append(f"veth {veth}")
    if _link_exists(fabric.bridge):
        subprocess.run(["ip", "link", "del", fabric.bridge], capture_output=True, check=False)
        removed.append(f"bridge {fabric.bridge}")
    return removed
