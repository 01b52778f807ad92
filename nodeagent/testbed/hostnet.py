"""Host network bits of one testbed: its bridge name and pod range, the bridge itself, and removing what is left.

Pod ranges come from 198.18.0.0/15 (reserved for network testing): a /24 per testbed, chosen so it overlaps no
route on the machine, so that two testbeds side by side never collide.

The bridge's gateway address (the .1 of the pod range) is also the node's address (its InternalIP): a real
cluster's apiserver proxies `nodes/N/proxy/...` and aggregated APIs only to addresses that are not loopback, and
EndpointSlices may not hold loopback addresses either. `up` creates the bridge with that address before anything
listens on it, with the same code, MAC and MTU the CNI plugin's ADD uses, so the first ADD finds it as it would
have made it; `down` deletes it, and the address with it.

Packets that come in on the bridge may be forwarded (that bridge's `forwarding` sysctl, never the host-wide
`ip_forward`): a pod that calls a ClusterIP whose endpoint is another pod is DNATed by kube-proxy and routed back
out of the same bridge. A FORWARD rule drops whatever would leave the bridge for any other interface, so no pod
traffic is ever forwarded off the machine or into another testbed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import subprocess
from pathlib import Path

from cni.netlink import Netlink
from cni.network import NetworkError, mac_for
from nodeagent.testbed.configs import BRIDGE_MTU

log = logging.getLogger(__name__)

POD_SUPERNET = ipaddress.IPv4Network("198.18.0.0/16")
SERVICE_CIDR = "198.19.0.0/16"


def kubernetes_service_ip(service_cidr: str = SERVICE_CIDR) -> str:
    """The `kubernetes` Service's ClusterIP: the first address of the range, as the apiserver allocates it."""
    return str(ipaddress.IPv4Network(service_cidr).network_address + 1)


def cluster_dns_service_ip(service_cidr: str = SERVICE_CIDR) -> str:
    """The `kube-dns` Service's ClusterIP (the agent's clusterDNS): the 10th address of the range, as kubeadm's."""
    return str(ipaddress.IPv4Network(service_cidr).network_address + 10)


FORWARD_GUARD_COMMENT = "nodeagent testbed: pod traffic stays on its bridge"


class HostNetError(RuntimeError):
    """The testbed's bridge cannot be made as it must be (a link of that name of another kind, another address)."""


def gateway(pod_cidr: str) -> ipaddress.IPv4Interface:
    """The bridge's address: the first host of the pod range, with the range's prefix (the CNI plugin's default
    gateway, which the conflist also names explicitly)."""
    network = ipaddress.IPv4Network(pod_cidr)
    return ipaddress.IPv4Interface(f"{network.network_address + 1}/{network.prefixlen}")


def ensure_bridge(name: str, pod_cidr: str) -> None:
    """The bridge `name` exists, is up and carries the gateway address of `pod_cidr`; idempotent."""
    address = gateway(pod_cidr)
    network = Netlink()
    try:
        network.ensure_bridge(name, mtu=BRIDGE_MTU, mac=mac_for(address.ip), addresses=[address])
    except NetworkError as exc:
        raise HostNetError(f"bridge {name} with {address}: {exc}") from exc
    finally:
        network.close()
    _enable_forwarding(name)
    log.info("testbed bridge ready bridge=%s address=%s", name, address)


def forward_guard_rule(bridge: str) -> list[str]:
    """The FORWARD rule (iptables arguments after the chain) that keeps pod traffic on its bridge."""
    return ["-i", bridge, "!", "-o", bridge, "-m", "comment", "--comment", FORWARD_GUARD_COMMENT, "-j", "DROP"]


def _iptables(*args: str) -> bool:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, check=False).returncode == 0


def _enable_forwarding(bridge: str) -> None:
    # The guard first, then the door.
    if not _iptables("-C", "FORWARD", *forward_guard_rule(bridge)) and not _iptables(
        "-I", "FORWARD", "1", *forward_guard_rule(bridge)
    ):
        raise HostNetError(f"bridge {bridge}: cannot add the FORWARD rule that keeps pod traffic on the bridge")
    try:
        Path(f"/proc/sys/net/ipv4/conf/{bridge}/forwarding").write_text("1\n")
    except OSError as exc:
        raise HostNetError(f"bridge {bridge}: cannot enable forwarding on it: {exc}") from exc


def _remove_forward_guard(bridge: str) -> bool:
    removed = False
    while _iptables("-D", "FORWARD", *forward_guard_rule(bridge)):
        removed = True
    return removed


def addresses_of(name: str) -> list[str]:
    """The IPv4 addresses (with prefix) on link `name`; empty when it does not exist."""
    found = []
    for link in _ip_json("-4", "addr", "show", "dev", name):
        infos = link.get("addr_info")
        for info in infos if isinstance(infos, list) else []:
            if isinstance(info, dict) and "local" in info:
                found.append(f"{info['local']}/{info['prefixlen']}")
    return found


def _ip_json(*args: str) -> list[dict[str, object]]:
    proc = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    data = json.loads(proc.stdout)
    return data if isinstance(data, list) else []


def bridge_name(root: Path) -> str:
    """A stable, short (<= 15 chars) bridge name derived from the testbed directory."""
    return "na" + hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:10]


def _used_networks() -> list[ipaddress.IPv4Network]:
    used: list[ipaddress.IPv4Network] = []
    for route in _ip_json("-4", "route", "show", "table", "all"):
        dst = str(route.get("dst", ""))
        if dst in ("", "default") or ":" in dst:
            continue
        try:
            used.append(ipaddress.IPv4Network(dst if "/" in dst else dst + "/32", strict=False))
        except ValueError:
            continue
    return used


def choose_pod_cidr(root: Path, taken: set[str]) -> str:
    """A /24 of 198.18.0.0/16 that no route on the machine and no other testbed uses; stable per directory."""
    subnets = list(POD_SUPERNET.subnets(new_prefix=24))
    start = int(hashlib.sha256(str(root.resolve()).encode()).hexdigest(), 16) % len(subnets)
    used = _used_networks()
    for i in range(len(subnets)):
        candidate = subnets[(start + i) % len(subnets)]
        if str(candidate) in taken or any(candidate.overlaps(n) for n in used):
            continue
        return str(candidate)
    raise RuntimeError("no free /24 left in 198.18.0.0/16 for a testbed pod range")


def link_exists(name: str) -> bool:
    return bool(_ip_json("link", "show", "dev", name))


def remove_bridge_leftovers(bridge: str) -> list[str]:
    """Delete veths still attached to the bridge, the netns at their other end, then the bridge itself.

    containerd removes these itself when a sandbox is removed; this is for a testbed whose containerd died first.
    Returns what was removed, for the log.
    """
    removed: list[str] = []
    if _remove_forward_guard(bridge):
        removed.append(f"FORWARD rule of {bridge}")
    if not link_exists(bridge):
        return removed
    netns_by_id = {
        int(str(ns["id"])): str(ns["name"]) for ns in _ip_json("netns", "list-id") if "name" in ns and "id" in ns
    }
    if not netns_by_id:
        netns_by_id = {int(str(ns["id"])): str(ns["name"]) for ns in _ip_json("netns", "list") if "id" in ns}
    for link in _ip_json("link", "show", "master", bridge):
        name = str(link["ifname"])
        ns_id = link.get("link_netnsid")
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        removed.append(f"veth {name}")
        if isinstance(ns_id, int) and ns_id in netns_by_id:
            netns = netns_by_id[ns_id]
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
            removed.append(f"netns {netns}")
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    removed.append(f"bridge {bridge}")
    return removed


def unmount_under(root: Path) -> list[str]:
    """Unmount every mount point below `root` (deepest first), e.g. overlay rootfs and sandbox shm of containerd."""
    prefix = str(root.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        point = fields[1].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        proc = subprocess.run(["umount", point], capture_output=True, check=False)
        if proc.returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    return points
