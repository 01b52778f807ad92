"""FakeNetwork: the kernel as the plugin sees it, in memory, behind `cni.network.Network`.

One `FakeKernel` is the machine (host links, network namespaces with their links and routes); each plugin call gets
a `FakeNetwork` over it, as each call gets its own netlink sockets. It is thread safe, so concurrent ADDs can run
through it. `tests/unit/cni/contract.py` runs the same scenarios on it and on the real pyroute2 `Netlink`.
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from errno import EEXIST

from cni.network import AddressConflict, Link, LinkExists, NetnsNotFound, NetworkError, RouteEntry


@dataclass
class Namespace:
    links: dict[str, Link] = field(default_factory=dict)
    routes: list[RouteEntry] = field(default_factory=list)


class FakeKernel:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.host: dict[str, Link] = {}
        self.netns: dict[str, Namespace] = {}
        self._index = itertools.count(10)
        self._mac = itertools.count(1)
        self.fail_configure: Exception | None = None  # injected into the next configure_container
        self.fail_delete: dict[str, Exception] = {}  # host link name -> raised by delete_host_link of it
        self.calls: list[str] = []

    def add_netns(self, path: str) -> None:
        with self.lock:
            self.netns[path] = Namespace(links={"lo": Link("lo", 1, "", "00:00:00:00:00:00", 65536, False)})

    def remove_netns(self, path: str) -> None:
        """As the kernel: the namespace goes, and with it the veth ends inside and their peers on the host."""
        with self.lock:
            ns = self.netns.pop(path)
            for link in ns.links.values():
                if link.kind == "veth":
                    self.host = {n: h for n, h in self.host.items() if h.index != link.peer_index}

    def next_index(self) -> int:
        return next(self._index)

    def next_mac(self) -> str:
        return f"02:00:00:00:00:{next(self._mac) % 256:02x}"


class FakeNetwork:
    def __init__(self, kernel: FakeKernel) -> None:
        self.k = kernel
        self.closed = False

    def _ns(self, path: str) -> Namespace:
        ns = self.k.netns.get(path)
        if ns is None:
            raise NetnsNotFound(f"network namespace {path} does not exist")
        return ns

    def ensure_bridge(self, name: str, *, mtu: int, mac: str, addresses: Sequence[ipaddress.IPv4Interface]) -> Link:
        with self.k.lock:
            self.k.calls.append("ensure_bridge")
            link = self.k.host.get(name)
            if link is None:
                link = Link(name, self.k.next_index(), "bridge", mac, mtu, True)
            elif link.kind != "bridge":
                raise NetworkError(f"{name} exists but is a {link.kind} link, not a bridge")
            present = list(link.addresses)
            for wanted in addresses:
                if wanted in present:
                    continue
                if any(a.network.overlaps(wanted.network) for a in present):
                    raise AddressConflict(f"bridge {name} already has another address in {wanted.network}")
                present.append(wanted)
            link = replace(link, mac=mac, up=True, addresses=tuple(present))
            self.k.host[name] = link
            return link

    def create_veth(self, *, host: str, bridge: Link, netns: str, ifname: str, mtu: int, mac: str, owner: str) -> Link:
        with self.k.lock:
            self.k.calls.append("create_veth")
            ns = self._ns(netns)
            if ifname in ns.links:
                what = f"creating veth {host} <-> {ifname} in {netns}"
                raise LinkExists(f"interface {ifname} already exists in {netns}", operation=what, errno=EEXIST)
            if host in self.k.host:
                self.delete_host_link(host)
            host_index, peer_index = self.k.next_index(), 2 + len(ns.links)
            ns.links[ifname] = Link(ifname, peer_index, "veth", mac, mtu, False, peer_index=host_index)
            link = Link(
                host,
                host_index,
                "veth",
                self.k.next_mac(),
                mtu,
                True,
                master=bridge.index,
                peer_index=peer_index,
                alias=owner,
            )
            self.k.host[host] = link
            return link

    def set_hairpin(self, host: Link, hairpin: bool) -> None:
        with self.k.lock:
            self.k.host[host.name] = replace(self.k.host[host.name], hairpin=hairpin)

    def configure_container(
        self,
        netns: str,
        index: int,
        *,
        addresses: Sequence[ipaddress.IPv4Interface],
        routes: Sequence[RouteEntry],
    ) -> None:
        with self.k.lock:
            self.k.calls.append("configure_container")
            if self.k.fail_configure is not None:
                exc, self.k.fail_configure = self.k.fail_configure, None
                raise exc
            ns = self._ns(netns)
            name = next(n for n, link in ns.links.items() if link.index == index)
            ns.links[name] = replace(ns.links[name], up=True, addresses=tuple(addresses))
            for address in addresses:
                ns.routes.append(RouteEntry(address.network))
            ns.routes.extend(routes)

    def host_link(self, name: str) -> Link | None:
        with self.k.lock:
            return self.k.host.get(name)

    def container_link(self, netns: str, ifname: str) -> Link | None:
        with self.k.lock:
            return self._ns(netns).links.get(ifname)

    def container_routes(self, netns: str) -> list[RouteEntry]:
        with self.k.lock:
            return list(self._ns(netns).routes)

    def delete_host_link(self, name: str) -> bool:
        with self.k.lock:
            self.k.calls.append("delete_host_link")
            if name in self.k.fail_delete:
                raise self.k.fail_delete[name]
            link = self.k.host.pop(name, None)
            if link is None:
                return False
            for ns in self.k.netns.values():  # a veth takes its peer with it
                for ifname, peer in list(ns.links.items()):
                    if peer.kind == "veth" and peer.peer_index == link.index:
                        del ns.links[ifname]
                        ns.routes = [r for r in ns.routes if not any(r.dst == a.network for a in peer.addresses)]
            return True

    def delete_container_link(self, netns: str, ifname: str) -> bool:
        with self.k.lock:
            ns = self.k.netns.get(netns)
            if ns is None or ifname not in ns.links:
                return False
            link = ns.links.pop(ifname)
            self.k.host = {n: h for n, h in self.k.host.items() if h.index != link.peer_index}
            return True

    def bridge_ports(self, bridge: str) -> list[str]:
        with self.k.lock:
            br = self.k.host.get(bridge)
            if br is None:
                return []
            return [n for n, link in self.k.host.items() if link.master == br.index]

    def owned_veths(self, owner: str) -> list[str]:
        with self.k.lock:
            return [n for n, link in self.k.host.items() if link.kind == "veth" and link.alias == owner]

    def close(self) -> None:
        self.closed = True
