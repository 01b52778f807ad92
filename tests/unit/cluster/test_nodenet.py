"""The commands that give each node of a `cluster up` its network namespace on the fabric (cluster/nodenet.py)."""

from __future__ import annotations

import ipaddress

import pytest

from nodeagent.cluster import nodenet
from nodeagent.cluster.nodenet import Fabric, NodeLink

FABRIC = Fabric(bridge="nafab0000000", cidr="198.18.5.0/24")
A = NodeLink(pid=101, address="198.18.5.2", pod_cidr="198.18.7.0/24")
B = NodeLink(pid=202, address="198.18.5.3", pod_cidr="198.18.9.0/24")


@pytest.mark.parametrize(("index", "address"), [(0, "198.18.5.2"), (1, "198.18.5.3"), (252, "198.18.5.254")])
def test_node_addresses_follow_the_gateway(index: int, address: str) -> None:
    assert FABRIC.gateway == "198.18.5.1"
    assert FABRIC.node_address(index) == address


def test_a_full_fabric_is_an_error() -> None:
    with pytest.raises(nodenet.NodeNetError, match="no address left"):
        FABRIC.node_address(253)


def test_the_veth_is_named_after_the_pod_bridge_within_linux_limits() -> None:
    assert nodenet.veth_name("na0123456789") == "nv0123456789"
    assert len(nodenet.veth_name("na0123456789")) <= 15


def test_attach_puts_the_nodes_address_routes_and_pod_bridge_inside_its_namespace() -> None:
    commands = nodenet.attach_commands(A, FABRIC, veth="nv1", pod_bridge="na1")
    host = [c for c in commands if c[0] != "nsenter"]
    inside = [c[5:] for c in commands if c[0] == "nsenter"]
    assert all(c[:5] == ["nsenter", "-t", "101", "-n", "--"] for c in commands if c[0] == "nsenter")
    # Only the veth's host end is in the host, on the fabric.
    assert host[0] == ["ip", "link", "add", "nv1", "type", "veth", "peer", "name", "eth0", "netns", "101"]
    assert "master" in host[1] and FABRIC.bridge in host[1]
    assert ["ip", "addr", "add", "198.18.5.2/24", "dev", "eth0"] in inside
    assert ["ip", "route", "add", "default", "via", "198.18.5.1"] in inside
    assert ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"] in inside
    # The pod bridge as the CNI plugin's ADD makes it: the range's gateway, with the MAC that follows it.
    assert ["ip", "addr", "add", "198.18.7.1/24", "dev", "na1"] in inside
    assert any(c[:4] == ["ip", "link", "set", "na1"] and "0a:58:c6:12:07:01" in c for c in inside)


def test_every_pod_range_is_routed_through_its_node_in_the_other_nodes_and_the_host() -> None:
    commands = nodenet.route_commands([A, B])
    assert ["ip", "route", "replace", "198.18.7.0/24", "via", "198.18.5.2"] in commands
    assert ["ip", "route", "replace", "198.18.9.0/24", "via", "198.18.5.3"] in commands
    assert nodenet.in_namespace(202, ["ip", "route", "replace", "198.18.7.0/24", "via", "198.18.5.2"]) in commands
    assert nodenet.in_namespace(101, ["ip", "route", "replace", "198.18.9.0/24", "via", "198.18.5.3"]) in commands
    # Never a node's own range through itself.
    assert nodenet.in_namespace(101, ["ip", "route", "replace", "198.18.7.0/24", "via", "198.18.5.2"]) not in commands
    assert len(commands) == 4


def test_the_host_forwards_only_fabric_to_fabric() -> None:
    rule = nodenet.forward_rule(FABRIC)
    assert rule[:4] == ["-i", FABRIC.bridge, "-o", FABRIC.bridge] and rule[-2:] == ["-j", "ACCEPT"]


def test_every_address_is_from_the_network_testing_range() -> None:
    testing = ipaddress.IPv4Network("198.18.0.0/15")
    for address in (FABRIC.gateway, FABRIC.node_address(0), A.address, B.address):
        assert ipaddress.IPv4Address(address) in testing
