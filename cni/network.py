"""The plugin's narrow view of the kernel: the `Network` Protocol, the link state it reports, and its errors.

`cni.netlink.Netlink` implements it with pyroute2; unit tests use a fake behind the same Protocol, and the contract
scenarios in the tests run against both. One `Network` serves one plugin call (one thread) and is closed after it.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class NetworkError(Exception):
    """A netlink operation failed; the message says which and why."""


class NetnsNotFound(NetworkError):
    """The network namespace path does not exist (or is not a network namespace)."""


class LinkExists(NetworkError):
    """An interface of that name already exists where the plugin wanted to create one."""


class AddressConflict(NetworkError):
    """The bridge carries another address in the gateway's subnet."""


@dataclass(frozen=True)
class Link:
    name: str
    index: int
    kind: str
    mac: str
    mtu: int
    up: bool
    master: int | None = None
    peer_index: int | None = None  # a veth's IFLA_LINK: its peer's index (in the peer's namespace)
    hairpin: bool | None = None  # for a bridge port
    addresses: tuple[ipaddress.IPv4Interface, ...] = ()


@dataclass(frozen=True)
class RouteEntry:
    dst: ipaddress.IPv4Network
    gw: ipaddress.IPv4Address | None = None


class Network(Protocol):
    def ensure_bridge(self, name: str, *, mtu: int, mac: str, addresses: Sequence[ipaddress.IPv4Interface]) -> Link: ...

    def create_veth(self, *, host: str, bridge: Link, netns: str, ifname: str, mtu: int, mac: str) -> Link:
        """A veth pair: `host` enslaved to `bridge` and up, its peer `ifname` (MTU, MAC) inside `netns`.

        A host end of that name left by an earlier, interrupted ADD is replaced. Returns the host end's state; its
        `peer_index` is the container end's index inside `netns`.
        """
        ...

    def set_hairpin(self, host: Link, hairpin: bool) -> None: ...

    def configure_container(
        self,
        netns: str,
        index: int,
        *,
        addresses: Sequence[ipaddress.IPv4Interface],
        routes: Sequence[RouteEntry],
    ) -> None:
        """Addresses, link up and routes on the container's interface (by its index inside `netns`)."""

    def host_link(self, name: str) -> Link | None: ...

    def container_link(self, netns: str, ifname: str) -> Link | None:
        """The interface inside `netns` with its addresses; NetnsNotFound when the namespace is gone."""
        ...

    def container_routes(self, netns: str) -> list[RouteEntry]: ...

    def delete_host_link(self, name: str) -> bool:
        """Delete a host link (a veth takes its peer with it); False if there was none."""
        ...

    def delete_container_link(self, netns: str, ifname: str) -> bool:
        """Delete an interface inside `netns`; False if it or the namespace is gone."""
        ...

    def bridge_ports(self, bridge: str) -> list[str]: ...

    def close(self) -> None: ...


VETH_PREFIX = "veth"


def host_veth_name(network: str, container_id: str, ifname: str) -> str:
    """The host end's name, derived from the attachment key so that DEL finds it even without the netns."""
    digest = hashlib.sha256(f"{network}\0{container_id}\0{ifname}".encode()).hexdigest()
    return VETH_PREFIX + digest[:11]


def is_host_veth_name(name: str) -> bool:
    rest = name.removeprefix(VETH_PREFIX)
    return name.startswith(VETH_PREFIX) and len(rest) == 11 and all(c in "0123456789abcdef" for c in rest)


def mac_for(ip: ipaddress.IPv4Address) -> str:
    """A stable, locally administered unicast MAC from an IPv4 address (0a:58 + the four octets).

    The container's MAC follows its address, so a pod that gets an address back keeps the MAC neighbours cached;
    the bridge takes the gateway's, so it no longer changes as ports come and go.
    """
    return "0a:58:" + ":".join(f"{b:02x}" for b in ip.packed)
