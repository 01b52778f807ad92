"""Scenarios that hold for any `Network`: run on the FakeNetwork (unit) and on pyroute2 `Netlink` (integration).

A `Bench` supplies the network, fresh namespaces, and one way to break an attachment behind the plugin's back; the
scenarios drive `cni.plugin.execute` exactly as the helper does and assert the spec's observable behaviour.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any, Protocol

from cni.network import Link, Network, host_veth_name, mac_for, veth_owner
from cni.plugin import execute


class Bench(Protocol):
    bridge: str
    subnet: str
    data_dir: Path

    def network(self) -> Network: ...

    def new_netns(self) -> str: ...

    def remove_netns(self, path: str) -> None: ...

    def drop_address(self, netns: str, ifname: str) -> None:
        """Remove the container interface's IPv4 address, as an admin's `ip addr flush` would."""

    def add_foreign_veth(self, netns: str, ifname: str) -> None:
        """A veth named `ifname` inside `netns` that another plugin made (its peer stays in the host)."""

    def rename_host_link(self, old: str, new: str) -> None:
        """Rename a host interface, as a host end named by another version of the plugin would be."""


NETWORK = "contract-net"


def netconf(bench: Bench, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "type": "nodeagent-bridge",
        "bridge": bench.bridge,
        "isGateway": True,
        "hairpinMode": True,
        "mtu": 1400,
        "ipam": {
            "type": "nodeagent-ipam",
            "ranges": [[{"subnet": bench.subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(bench.data_dir),
        },
    }
    doc.update(over)
    return doc


def call(
    bench: Bench, command: str, conf: dict[str, Any], *, container: str = "", netns: str = "", ifname: str = "eth0"
) -> tuple[int, dict[str, Any] | None]:
    env = {"CNI_COMMAND": command, "CNI_IFNAME": ifname, "CNI_PATH": "/opt/cni/bin"}
    if container:
        env["CNI_CONTAINERID"] = container
    if netns:
        env["CNI_NETNS"] = netns
    reply = execute(env, json.dumps(conf).encode(), bench.network)
    return reply.status, json.loads(reply.stdout) if reply.stdout.strip() else None


def allocations(bench: Bench) -> list[str]:
    d = bench.data_dir / NETWORK
    if not d.exists():
        return []
    return sorted(p.name for p in d.iterdir() if p.name[0].isdigit())


def add_result_matches_what_was_made(bench: Bench) -> None:
    netns = bench.new_netns()
    conf = netconf(bench)
    status, result = call(bench, "ADD", conf, container="c-add", netns=netns)
    assert status == 0, result
    assert result is not None
    assert result["cniVersion"] == "1.0.0"
    bridge, host, container = result["interfaces"]
    assert bridge == {"name": bench.bridge, "mac": mac_for(ipaddress.IPv4Address(result["ips"][0]["gateway"]))}
    assert host["name"] == host_veth_name(NETWORK, "c-add", "eth0") and "sandbox" not in host
    assert container["name"] == "eth0" and container["sandbox"] == netns
    (ip,) = result["ips"]
    address = ipaddress.IPv4Interface(ip["address"])
    assert address.network == ipaddress.IPv4Network(bench.subnet)
    assert ip["interface"] == 2
    assert container["mac"] == mac_for(address.ip)
    assert result["routes"] == [{"dst": "0.0.0.0/0"}]
    assert allocations(bench) == [str(address.ip)]

    net = bench.network()
    try:
        inside = net.container_link(netns, "eth0")
        host_link = net.host_link(host["name"])
        br = net.host_link(bench.bridge)
        routes = net.container_routes(netns)
    finally:
        net.close()
    assert inside is not None and host_link is not None and br is not None
    assert inside.kind == "veth" and inside.up and inside.mtu == 1400 and inside.mac == container["mac"]
    assert address in inside.addresses
    assert host_link.master == br.index and host_link.up and host_link.hairpin is True
    assert host_link.alias == veth_owner(NETWORK)  # what GC goes by
    assert inside.peer_index == host_link.index and host_link.peer_index == inside.index
    assert ipaddress.IPv4Interface(f"{ip['gateway']}/{address.network.prefixlen}") in br.addresses
    assert any(r.dst == ipaddress.IPv4Network("0.0.0.0/0") and str(r.gw) == ip["gateway"] for r in routes)

    # CHECK agrees with ADD.
    status, out = call(bench, "CHECK", {**conf, "prevResult": result}, container="c-add", netns=netns)
    assert (status, out) == (0, None)
    assert call(bench, "DEL", {**conf, "prevResult": result}, container="c-add", netns=netns) == (0, None)


def check_finds_a_lost_address(bench: Bench) -> None:
    netns = bench.new_netns()
    conf = netconf(bench)
    status, result = call(bench, "ADD", conf, container="c-check", netns=netns)
    assert status == 0 and result is not None
    bench.drop_address(netns, "eth0")
    status, err = call(bench, "CHECK", {**conf, "prevResult": result}, container="c-check", netns=netns)
    assert status == 1 and err is not None
    assert err["code"] == 101
    assert "lost its address" in err["msg"]
    assert call(bench, "DEL", conf, container="c-check", netns=netns) == (0, None)


def del_is_idempotent(bench: Bench) -> None:
    netns = bench.new_netns()
    conf = netconf(bench)
    status, result = call(bench, "ADD", conf, container="c-del", netns=netns)
    assert status == 0 and result is not None
    veth = result["interfaces"][1]["name"]
    assert call(bench, "DEL", conf, container="c-del", netns=netns) == (0, None)
    net = bench.network()
    try:
        assert net.host_link(veth) is None
        assert net.container_link(netns, "eth0") is None
    finally:
        net.close()
    assert allocations(bench) == []
    # Again; without the netns; for a container never added.
    assert call(bench, "DEL", conf, container="c-del", netns=netns) == (0, None)
    assert call(bench, "DEL", conf, container="c-del") == (0, None)
    assert call(bench, "DEL", conf, container="never-added", netns=netns) == (0, None)


def del_after_the_netns_is_gone_frees_everything(bench: Bench) -> None:
    netns = bench.new_netns()
    conf = netconf(bench)
    status, result = call(bench, "ADD", conf, container="c-gone", netns=netns)
    assert status == 0 and result is not None
    bench.remove_netns(netns)
    assert call(bench, "DEL", conf, container="c-gone", netns=netns) == (0, None)
    net = bench.network()
    try:
        assert net.host_link(result["interfaces"][1]["name"]) is None
    finally:
        net.close()
    assert allocations(bench) == []


def add_into_a_missing_netns_leaves_nothing(bench: Bench) -> None:
    conf = netconf(bench)
    status, err = call(bench, "ADD", conf, container="c-missing", netns="/run/netns/nodeagent-no-such-netns")
    assert status == 1 and err is not None
    assert err["code"] == 4 and "CNI_NETNS" in err["msg"]
    assert allocations(bench) == []
    net = bench.network()
    try:
        assert net.host_link(host_veth_name(NETWORK, "c-missing", "eth0")) is None
    finally:
        net.close()


def two_pods_share_the_bridge_with_distinct_addresses(bench: Bench) -> None:
    conf = netconf(bench)
    ips = []
    for name in ("c-one", "c-two"):
        status, result = call(bench, "ADD", conf, container=name, netns=bench.new_netns())
        assert status == 0 and result is not None
        ips.append(result["ips"][0]["address"])
    assert len(set(ips)) == 2
    net = bench.network()
    try:
        ports = net.bridge_ports(bench.bridge)
    finally:
        net.close()
    assert {host_veth_name(NETWORK, "c-one", "eth0"), host_veth_name(NETWORK, "c-two", "eth0")} <= set(ports)
    # GC keeps the valid attachment and removes the other.
    valid = [{"containerID": "c-one", "ifname": "eth0"}]
    gc = {**netconf(bench, cniVersion="1.1.0"), "cni.dev/valid-attachments": valid}
    assert call(bench, "GC", gc) == (0, None)
    assert allocations(bench) == [ips[0].split("/")[0]]
    net = bench.network()
    try:
        assert net.host_link(host_veth_name(NETWORK, "c-two", "eth0")) is None
        assert net.host_link(host_veth_name(NETWORK, "c-one", "eth0")) is not None
    finally:
        net.close()
    assert call(bench, "DEL", conf, container="c-one") == (0, None)


def _links(bench: Bench, netns: str, ifname: str, host: str | None = None) -> tuple[Link | None, Link | None]:
    """The container's `ifname` in `netns` and, if named, the host link `host`."""
    net = bench.network()
    try:
        return net.container_link(netns, ifname), net.host_link(host) if host is not None else None
    finally:
        net.close()


def a_repeated_add_fails_and_keeps_the_interface(bench: Bench) -> None:
    netns = bench.new_netns()
    conf = netconf(bench)
    status, result = call(bench, "ADD", conf, container="c-again", netns=netns)
    assert status == 0 and result is not None
    address = ipaddress.IPv4Interface(result["ips"][0]["address"])
    inside, host = _links(bench, netns, "eth0", result["interfaces"][1]["name"])
    assert inside is not None and host is not None
    # Spec 1.0, ADD: an interface of the requested name already in the container is an error.
    status, err = call(bench, "ADD", conf, container="c-again", netns=netns)
    assert status == 1 and err is not None
    assert err["code"] == 102 and "eth0 already exists" in err["msg"]
    again_inside, again_host = _links(bench, netns, "eth0", result["interfaces"][1]["name"])
    assert again_inside is not None and again_host is not None
    assert (again_inside.index, again_host.index) == (inside.index, host.index)  # the same pair, not a new one
    assert address in again_inside.addresses
    assert allocations(bench) == [str(address.ip)]  # the failed ADD did not free the address in use
    assert call(bench, "DEL", conf, container="c-again", netns=netns) == (0, None)
    assert allocations(bench) == []


def add_over_a_foreign_interface_fails_and_takes_nothing(bench: Bench) -> None:
    netns = bench.new_netns()
    bench.add_foreign_veth(netns, "eth0")
    conf = netconf(bench)
    status, err = call(bench, "ADD", conf, container="c-foreign-add", netns=netns)
    assert status == 1 and err is not None and err["code"] == 102
    assert allocations(bench) == []
    inside, host = _links(bench, netns, "eth0", host_veth_name(NETWORK, "c-foreign-add", "eth0"))
    assert inside is not None and host is None


def del_removes_only_its_own_container_interface(bench: Bench) -> None:
    # Another plugin's eth0: DEL (with no host end of ours to remove) leaves it.
    foreign = bench.new_netns()
    bench.add_foreign_veth(foreign, "eth0")
    conf = netconf(bench)
    assert call(bench, "DEL", conf, container="c-not-ours", netns=foreign) == (0, None)
    assert _links(bench, foreign, "eth0")[0] is not None
    # Ours, whose host end has another name (as another version would have named it): DEL finds it by its MAC.
    netns = bench.new_netns()
    status, result = call(bench, "ADD", conf, container="c-renamed", netns=netns)
    assert status == 0 and result is not None
    renamed = bench.bridge + "r"
    bench.rename_host_link(result["interfaces"][1]["name"], renamed)
    assert call(bench, "DEL", conf, container="c-renamed", netns=netns) == (0, None)
    inside, host = _links(bench, netns, "eth0", renamed)
    assert inside is None and host is None
    assert allocations(bench) == []


def gc_needs_the_valid_attachments_and_keeps_to_its_network(bench: Bench) -> None:
    mine, theirs = netconf(bench, cniVersion="1.1.0"), netconf(bench, cniVersion="1.1.0", name="contract-other")
    network = ipaddress.IPv4Network(bench.subnet)
    # The other network shares the bridge, from another part of the subnet.
    theirs["ipam"] = {
        **theirs["ipam"],
        "ranges": [[{"subnet": bench.subnet, "rangeStart": str(network[200]), "rangeEnd": str(network[250])}]],
    }
    status, ours = call(bench, "ADD", mine, container="c-gc", netns=bench.new_netns())
    assert status == 0 and ours is not None
    status, other = call(bench, "ADD", theirs, container="c-gc-other", netns=bench.new_netns())
    assert status == 0 and other is not None
    veths = [ours["interfaces"][1]["name"], other["interfaces"][1]["name"]]
    # Without the list, nothing is deleted.
    status, err = call(bench, "GC", mine)
    assert status == 1 and err is not None
    assert err["code"] == 7 and "cni.dev/valid-attachments" in err["msg"]
    assert allocations(bench) == [ours["ips"][0]["address"].split("/")[0]]
    net = bench.network()
    try:
        assert [net.host_link(v) is not None for v in veths] == [True, True]
    finally:
        net.close()
    # An empty list: everything of this network goes, the other network's veth and address stay.
    assert call(bench, "GC", {**mine, "cni.dev/valid-attachments": []}) == (0, None)
    assert allocations(bench) == []
    net = bench.network()
    try:
        assert [net.host_link(v) is not None for v in veths] == [False, True]
    finally:
        net.close()
    assert (bench.data_dir / "contract-other" / other["ips"][0]["address"].split("/")[0]).exists()
    assert call(bench, "DEL", theirs, container="c-gc-other") == (0, None)


SCENARIOS = (
    add_result_matches_what_was_made,
    check_finds_a_lost_address,
    del_is_idempotent,
    del_after_the_netns_is_gone_frees_everything,
    add_into_a_missing_netns_leaves_nothing,
    two_pods_share_the_bridge_with_distinct_addresses,
    a_repeated_add_fails_and_keeps_the_interface,
    add_over_a_foreign_interface_fails_and_takes_nothing,
    del_removes_only_its_own_container_interface,
    gc_needs_the_valid_attachments_and_keeps_to_its_network,
)
