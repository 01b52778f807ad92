"""`Network` on pyroute2: the bridge, the veth pair and the container's addresses and routes, over rtnetlink.

Network namespaces: pyroute2's own `netns=` support forks a child process to open a socket inside the namespace,
which costs more than the rest of an ADD. Network namespaces are per thread in Linux, so this module does what
the Go plugins do with a locked OS thread: setns(2) the calling thread into the namespace, open the netlink socket
there, setns back. The socket stays bound to the namespace it was opened in. The helper runs each request on its
own thread, so a thread is never shared between two namespaces at once.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cni.network import AddressConflict, Link, LinkExists, NetnsNotFound, NetworkError, RouteEntry

CLONE_NEWNET = 0x40000000
IFF_UP = 0x1
NETLINK_ROUTE = 0
MAIN_TABLE = 254

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def netns_socket(path: str) -> socket.socket:
    """A NETLINK_ROUTE socket inside the network namespace at `path`, opened from this thread."""
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NetnsNotFound(f"network namespace {path} does not exist") from None
    except OSError as exc:
        raise NetworkError(
            f"cannot open network namespace {path}: {exc.strerror}", operation=f"opening {path}", errno=exc.errno
        ) from exc
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            _setns(target)
        except OSError as exc:
            raise NetnsNotFound(
                f"{path} is not a network namespace: {exc.strerror}", operation=f"entering {path}", errno=exc.errno
            ) from exc
        try:
            return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE)
        finally:
            # Back home before anything else runs on this thread; failing that, the thread must not go on.
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def _code(exc: NetlinkError) -> int:
    return int(exc.code)


def _link(msg: Any, addresses: Sequence[ipaddress.IPv4Interface] = ()) -> Link:
    info = msg.get_attr("IFLA_LINKINFO")
    kind = ""
    hairpin: bool | None = None
    if info is not None:
        kind = info.get_attr("IFLA_INFO_KIND") or ""
        if info.get_attr("IFLA_INFO_SLAVE_KIND") == "bridge":
            data = info.get_attr("IFLA_INFO_SLAVE_DATA")
            mode = data.get_attr("IFLA_BRPORT_MODE") if data is not None else None
            hairpin = bool(mode) if mode is not None else None
    master = msg.get_attr("IFLA_MASTER")
    peer = msg.get_attr("IFLA_LINK")
    alias = msg.get_attr("IFLA_IFALIAS")
    return Link(
        name=str(msg.get_attr("IFLA_IFNAME")),
        index=int(msg["index"]),
        kind=str(kind),
        mac=str(msg.get_attr("IFLA_ADDRESS") or ""),
        mtu=int(msg.get_attr("IFLA_MTU") or 0),
        up=bool(int(msg["flags"]) & IFF_UP),
        master=int(master) if master else None,
        peer_index=int(peer) if peer is not None else None,
        hairpin=hairpin,
        addresses=tuple(addresses),
        alias=str(alias) if alias else "",
    )


def _get(ipr: IPRoute, name: str) -> Any | None:
    try:
        return ipr.link("get", ifname=name)[0]
    except NetlinkError as exc:
        if _code(exc) == errno.ENODEV:
            return None
        raise


def _addresses(ipr: IPRoute, index: int) -> list[ipaddress.IPv4Interface]:
    return [
        ipaddress.IPv4Interface(f"{msg.get_attr('IFA_ADDRESS')}/{msg['prefixlen']}")
        for msg in ipr.addr("dump", family=socket.AF_INET, index=index)
    ]


@contextmanager
def _netlink_errors(what: str) -> Iterator[None]:
    try:
        yield
    except NetlinkError as exc:
        code = _code(exc)
        raise NetworkError(f"{what}: {os.strerror(code)} (errno {code})", operation=what, errno=code) from exc


class Netlink:
    """The real `Network`. Not thread safe: one instance per plugin call, on the thread that made it."""

    def __init__(self) -> None:
        self._host: IPRoute | None = None

    @property
    def _ipr(self) -> IPRoute:
        if self._host is None:
            self._host = IPRoute(groups=0)
        return self._host

    @contextmanager
    def _in(self, netns: str) -> Iterator[IPRoute]:
        sock = netns_socket(netns)
        ipr = IPRoute(groups=0, use_socket=sock)
        try:
            yield ipr
        finally:
            ipr.close()
            sock.close()

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None

    def ensure_bridge(self, name: str, *, mtu: int, mac: str, addresses: Sequence[ipaddress.IPv4Interface]) -> Link:
        ipr = self._ipr
        with _netlink_errors(f"creating bridge {name}"):
            msg = _get(ipr, name)
            if msg is None:
                try:
                    ipr.link("add", ifname=name, kind="bridge", mtu=mtu, address=mac)
                except NetlinkError as exc:
                    if _code(exc) != errno.EEXIST:  # another ADD created it just now
                        raise
                msg = _get(ipr, name)
                if msg is None:
                    raise NetworkError(f"bridge {name} vanished right after it was created")
            link = _link(msg)
            if link.kind != "bridge":
                raise NetworkError(f"{name} exists but is a {link.kind or 'non-bridge'} link, not a bridge")
            changes: dict[str, Any] = {}
            if link.mac != mac:  # an explicit MAC, or the bridge takes its lowest port's and changes with them
                changes["address"] = mac
            if not link.up:
                changes["state"] = "up"
            if changes:
                ipr.link("set", index=link.index, **changes)
            present = _addresses(ipr, link.index)
            for wanted in addresses:
                if wanted in present:
                    continue
                clash = [a for a in present if a.network.overlaps(wanted.network)]
                if clash:
                    raise AddressConflict(
                        f"bridge {name} already has {clash[0]}, not the gateway {wanted}: another network uses "
                        "this bridge; choose another bridge name or subnet"
                    )
                try:
                    ipr.addr("add", index=link.index, address=str(wanted.ip), prefixlen=wanted.network.prefixlen)
                except NetlinkError as exc:
                    if _code(exc) != errno.EEXIST:
                        raise
                present.append(wanted)
            return replace(link, mac=mac, up=True, addresses=tuple(present))

    def create_veth(self, *, host: str, bridge: Link, netns: str, ifname: str, mtu: int, mac: str, owner: str) -> Link:
        try:
            nsfd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NetnsNotFound(f"network namespace {netns} does not exist") from None
        ipr = self._ipr
        # One request makes the pair, enslaves the host end and brings it up; the peer is born inside the netns
        # with its final name, MTU and MAC, so there is no temporary name to collide with.
        spec = {
            "ifname": host,
            "kind": "veth",
            "mtu": mtu,
            "master": bridge.index,
            "state": "up",
            "peer": {"ifname": ifname, "net_ns_fd": nsfd, "mtu": mtu, "address": mac},
        }
        what = f"creating veth {host} <-> {ifname} in {netns}"
        try:
            with _netlink_errors(what):
                try:
                    ipr.link("add", **spec)
                except NetlinkError as exc:
                    if _code(exc) != errno.EEXIST:
                        raise
                    # Either name may be the one taken. The container's interface is never taken over (the spec
                    # wants an error); only a host end of our name whose peer is elsewhere is replaced.
                    if self._has(netns, ifname):
                        raise LinkExists(
                            f"interface {ifname} already exists in {netns}", operation=what, errno=errno.EEXIST
                        ) from None
                    if _get(ipr, host) is None:
                        raise
                    ipr.link("del", ifname=host)
                    ipr.link("add", **spec)
                msg = _get(ipr, host)
                if msg is None:
                    raise NetworkError(f"{host} vanished right after it was created")
                # The kernel ignores IFLA_IFALIAS in a create request, hence the second one.
                ipr.link("set", index=int(msg["index"]), ifalias=owner)
                return replace(_link(msg), alias=owner)
        finally:
            os.close(nsfd)

    def _has(self, netns: str, ifname: str) -> bool:
        with self._in(netns) as ipr:
            return _get(ipr, ifname) is not None

    def set_hairpin(self, host: Link, hairpin: bool) -> None:
        with _netlink_errors(f"setting hairpin mode on {host.name}"):
            self._ipr.link("set", index=host.index, kind="bridge_slave", mode=1 if hairpin else 0)

    def configure_container(
        self,
        netns: str,
        index: int,
        *,
        addresses: Sequence[ipaddress.IPv4Interface],
        routes: Sequence[RouteEntry],
    ) -> None:
        with self._in(netns) as ipr, _netlink_errors(f"configuring interface {index} in {netns}"):
            for address in addresses:
                try:
                    ipr.addr("add", index=index, address=str(address.ip), prefixlen=address.network.prefixlen)
                except NetlinkError as exc:
                    if _code(exc) != errno.EEXIST:
                        raise
            ipr.link("set", index=index, state="up")
            for route in routes:
                route_spec: dict[str, Any] = {"dst": str(route.dst), "oif": index}
                if route.gw is not None:
                    route_spec["gateway"] = str(route.gw)
                try:
                    ipr.route("add", **route_spec)
                except NetlinkError as exc:
                    if _code(exc) != errno.EEXIST:
                        raise

    def host_link(self, name: str) -> Link | None:
        with _netlink_errors(f"reading {name}"):
            msg = _get(self._ipr, name)
            return None if msg is None else _link(msg, _addresses(self._ipr, int(msg["index"])))

    def container_link(self, netns: str, ifname: str) -> Link | None:
        with self._in(netns) as ipr, _netlink_errors(f"reading {ifname} in {netns}"):
            msg = _get(ipr, ifname)
            return None if msg is None else _link(msg, _addresses(ipr, int(msg["index"])))

    def container_routes(self, netns: str) -> list[RouteEntry]:
        with self._in(netns) as ipr, _netlink_errors(f"reading routes in {netns}"):
            found = []
            for msg in ipr.route("dump", family=socket.AF_INET, table=MAIN_TABLE):
                dst = msg.get_attr("RTA_DST") or "0.0.0.0"
                gw = msg.get_attr("RTA_GATEWAY")
                found.append(
                    RouteEntry(
                        dst=ipaddress.IPv4Network(f"{dst}/{msg['dst_len']}", strict=False),
                        gw=ipaddress.IPv4Address(gw) if gw else None,
                    )
                )
            return found

    def delete_host_link(self, name: str) -> bool:
        with _netlink_errors(f"deleting {name}"):
            try:
                self._ipr.link("del", ifname=name)
            except NetlinkError as exc:
                if _code(exc) == errno.ENODEV:
                    return False
                raise
            return True

    def delete_container_link(self, netns: str, ifname: str) -> bool:
        try:
            with self._in(netns) as ipr, _netlink_errors(f"deleting {ifname} in {netns}"):
                try:
                    ipr.link("del", ifname=ifname)
                except NetlinkError as exc:
                    if _code(exc) == errno.ENODEV:
                        return False
                    raise
                return True
        except NetnsNotFound:
            return False

    def bridge_ports(self, bridge: str) -> list[str]:
        with _netlink_errors(f"listing the ports of {bridge}"):
            br = _get(self._ipr, bridge)
            if br is None:
                return []
            return [
                str(msg.get_attr("IFLA_IFNAME"))
                for msg in self._ipr.link("dump")
                if msg.get_attr("IFLA_MASTER") == br["index"]
            ]

    def owned_veths(self, owner: str) -> list[str]:
        with _netlink_errors(f"listing the veths of {owner}"):
            return [
                str(msg.get_attr("IFLA_IFNAME"))
                for msg in self._ipr.link("dump")
                if msg.get_attr("IFLA_IFALIAS") == owner and _link(msg).kind == "veth"
            ]
