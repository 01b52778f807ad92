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
    """A netlink operation failed; the message says which and why.

    `operation` and `errno` (when the kernel gave one) go into the CNI error's `details`, so that a runtime's log
    keeps them even where only the message is shown.
    """

    def __init__(self, msg: str, *, operation: str = "", errno: int | None = None) -> None:
        super().__init__(msg)
        self.operation = operation
        self.errno = errno


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
    alias: str = ""  # IFLA_IFALIAS; on a host veth end, the network that made it (see `veth_owner`)


@dataclass(frozen=True)
class RouteEntry:
    dst: ipaddress.IPv4Network
    gw: ipaddress.IPv4Address | None = None


class Network(Protocol):
    def ensure_bridge(self, name: str, *, mtu: int, mac: str, addresses: Sequence[ipaddress.IPv4Interface]) -> Link: ...

    def create_veth(self, *, host: str, bridge: Link, netns: str, ifname: str, mtu: int, mac: str, owner: str) -> Link:
        """A veth pair: `host` enslaved to `bridge`, up, its alias `owner`; its peer `ifname` (MTU, MAC) in `netns`.

        An interface already named `ifname` inside `netns` is LinkExists, and is left as it is (spec 1.0, ADD: "If
        an interface of the requested name already exists in the container, the CNI plugin MUST return with an
        error"). A host end of that name whose peer is not there (left by an interrupted ADD) is replaced. Returns
        the host end's state; its `peer_index` is the container end's index inside `netns`.
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

    def owned_veths(self, owner: str) -> list[str]:
        """The host veth ends whose alias is `owner`: the ones `create_veth(owner=...)` made."""
        ...

    def close(self) -> None: ...


VETH_PREFIX = "veth"


def host_veth_name(network: str, container_id: str, ifname: str) -> str:
    """The host end's name, derived from the attachment key so that DEL finds it even without the netns."""
    digest = hashlib.sha256(f"{network}\0{container_id}\0{ifname}".encode()).hexdigest()
    return VETH_PREFIX + digest[:11]


OWNER_PREFIX = "nodeagent-bridge:"
MAX_ALIAS = 255  # IFALIASZ - 1


def veth_owner(network: str) -> str:
    """The alias a host veth end carries: which network made it (shown by `ip link`).

    The host end's name is a hash that cannot be read back, so GC tells this network's veths from those of another
    network on the same bridge (or of another plugin) by this alias. A name too long for an alias is hashed.
    """
    owner = OWNER_PREFIX + network
    if len(owner.encode()) <= MAX_ALIAS:
        return owner
    return OWNER_PREFIX + "sha256:" + hashlib.sha256(network.encode()).hexdigest()


def mac_for(ip: ipaddress.IPv4Address) -> str:
    """A stable, locally administered unicast MAC from an IPv4 address (0a:58 + the four octets).

    The container's MAC follows its address, so a pod that gets an address back keeps the MAC neighbours cached;
    the bridge takes the gateway's, so it no longer changes as ports come and go.
    """
    return "0a:58:" + ":".join(f"{b:02x}" for b in ip.packed)
