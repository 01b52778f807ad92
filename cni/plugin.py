"""The commands of `nodeagent-bridge`: ADD, DEL, CHECK, VERSION (spec 1.0.0), GC and STATUS (spec 1.1.0).

`execute(env, stdin, network_factory)` is the whole plugin as a function of its inputs: it returns the exit status
and the bytes for stdout. The resident helper and the in-process fallback both call it, so a reply is the same
whichever path served it.

ADD: configuration checked → addresses allocated (a full range fails here, before anything is touched) → bridge
ensured (gateway address, stable MAC, up) → veth pair created with its container end already named, sized and
addressed (MAC) inside the namespace → host end enslaved, hairpin set, up → container addresses, link, routes.
Anything failing after the allocation undoes what was done: the veth is deleted and the addresses are freed. An
interface already named CNI_IFNAME in the namespace is an error (spec 1.0: ADD "MUST return with an error"), as
with the reference bridge; it is left alone, and so are the addresses an earlier ADD of the attachment holds.

DEL is idempotent, as the spec asks: a missing namespace, interface or allocation is success. The host end's name
derives from (network, container ID, ifname), so DEL removes the pair even when the namespace is already gone.

GC deletes only what this network made: allocations in its own data directory, and host veths whose alias names
the network (`veth_owner`), never another network's ports on a shared bridge. A GC without the list of valid
attachments is refused before anything is touched.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cni import config as cfg
from cni import ipam
from cni.errors import CNIError, Code
from cni.network import (
    AddressConflict,
    Link,
    LinkExists,
    NetnsNotFound,
    Network,
    NetworkError,
    RouteEntry,
    host_veth_name,
    mac_for,
    veth_owner,
)
from cni.spec import (
    LATEST_VERSION,
    Command,
    Interface,
    Invocation,
    IPConfig,
    Result,
    Route,
    merge_into_previous,
    parse_environment,
    sandbox_ips,
    version_reply,
)

log = logging.getLogger("cni")

NetworkFactory = Callable[[], Network]
DEFAULT_ROUTE = ipaddress.IPv4Network("0.0.0.0/0")


@dataclass(frozen=True)
class Reply:
    status: int
    stdout: bytes


def _encode(doc: object) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def execute(env: Mapping[str, str], stdin: bytes, network_factory: NetworkFactory) -> Reply:
    """One plugin call. Never raises: every failure becomes CNI error JSON and a non-zero status."""
    version = cfg.requested_version(stdin)
    reply_version = version if version is not None else LATEST_VERSION
    try:
        invocation = parse_environment(env)
        if invocation.command is Command.VERSION:
            return Reply(0, _encode(version_reply(version)))
        conf = cfg.parse_netconf(stdin, invocation.command)
        network = network_factory()
        try:
            output = _dispatch(invocation, conf, network)
        finally:
            network.close()
        return Reply(0, _encode(output) if output is not None else b"")
    except CNIError as exc:
        log.warning("cni error code=%d msg=%r", exc.code, exc.msg)
        return Reply(1, _encode(exc.to_json(reply_version)))
    except Exception as exc:  # a bug or an unexpected kernel answer: still a CNI error, with the cause
        log.exception("cni internal error")
        error = CNIError(Code.INTERNAL, f"internal error in nodeagent-bridge: {type(exc).__name__}: {exc}")
        return Reply(1, _encode(error.to_json(reply_version)))


def _dispatch(invocation: Invocation, conf: cfg.NetConf, network: Network) -> dict[str, object] | None:
    match invocation.command:
        case Command.ADD:
            return add(invocation, conf, network).to_json()
        case Command.DEL:
            delete(invocation, conf, network)
        case Command.CHECK:
            check(invocation, conf, network)
        case Command.GC:
            garbage_collect(conf, network)
        case Command.STATUS:
            status(conf)
        case _:  # VERSION is answered before the configuration is read
            raise AssertionError(invocation.command)
    return None


def _store(conf: cfg.NetConf) -> ipam.Store:
    return ipam.Store(conf.ipam.data_dir, conf.name)


def _routes(conf: cfg.NetConf, allocations: list[ipam.Allocation]) -> tuple[Route, ...]:
    routes = list(conf.ipam.routes)
    if conf.is_default_gateway and not any(r.dst == DEFAULT_ROUTE for r in routes) and allocations:
        routes.append(Route(dst=DEFAULT_ROUTE, gw=allocations[0].range.gateway))
    return tuple(routes)


def _route_entries(routes: tuple[Route, ...], allocations: list[ipam.Allocation]) -> list[RouteEntry]:
    """Routes as installed. One without `gw` goes via the first address's gateway (as the reference plugins do),
    unless its destination lies inside an allocated subnet, which is on-link."""
    entries = []
    for route in routes:
        dst, gw = route.dst, route.gw
        assert isinstance(dst, ipaddress.IPv4Network) and (gw is None or isinstance(gw, ipaddress.IPv4Address))
        if gw is None and allocations and not any(dst.subnet_of(a.range.subnet) for a in allocations):
            gw = allocations[0].range.gateway
        entries.append(RouteEntry(dst=dst, gw=gw))
    return entries


def _details(exc: NetworkError) -> str:
    parts = []
    if exc.operation:
        parts.append(f"operation: {exc.operation}")
    if exc.errno is not None:
        parts.append(f"errno: {errno.errorcode.get(exc.errno, '?')} ({exc.errno})")
    return "; ".join(parts)


def _network_error(exc: NetworkError) -> CNIError:
    details = _details(exc)
    if isinstance(exc, NetnsNotFound):
        return CNIError(Code.INVALID_ENVIRONMENT, f"CNI_NETNS: {exc}", details)
    if isinstance(exc, AddressConflict):
        return CNIError(Code.INVALID_CONFIG, str(exc), details)
    if isinstance(exc, LinkExists):
        return CNIError(
            Code.NETLINK_FAILURE,
            f"{exc}: ADD does not take over an existing interface; DEL the attachment (or remove the interface) first",
            details,
        )
    return CNIError(Code.NETLINK_FAILURE, str(exc), details)


def add(invocation: Invocation, conf: cfg.NetConf, network: Network) -> Result:
    owner = ipam.Owner(invocation.container_id, invocation.ifname)
    store = _store(conf)
    allocations = ipam.allocate(store, conf.ipam, owner)
    host = host_veth_name(conf.name, invocation.container_id, invocation.ifname)
    created = False
    try:
        gateways = [ipaddress.IPv4Interface(f"{a.range.gateway}/{a.range.subnet.prefixlen}") for a in allocations]
        bridge = network.ensure_bridge(
            conf.bridge,
            mtu=conf.mtu,
            mac=mac_for(allocations[0].range.gateway),
            addresses=gateways if conf.is_gateway else [],
        )
        mac = mac_for(allocations[0].ip)
        host_link = network.create_veth(
            host=host,
            bridge=bridge,
            netns=invocation.netns,
            ifname=invocation.ifname,
            mtu=conf.mtu,
            mac=mac,
            owner=veth_owner(conf.name),
        )
        created = True
        if conf.hairpin:
            network.set_hairpin(host_link, True)
        if host_link.peer_index is None:
            raise NetworkError(f"{host} does not report its peer's index")
        routes = _routes(conf, allocations)
        network.configure_container(
            invocation.netns,
            host_link.peer_index,
            addresses=[ipaddress.IPv4Interface(f"{a.ip}/{a.range.subnet.prefixlen}") for a in allocations],
            routes=_route_entries(routes, allocations),
        )
    except BaseException as exc:
        if created:
            try:
                network.delete_host_link(host)
            except NetworkError:
                log.warning("cni add rollback: could not delete veth=%s", host)
        # A reused address may still be on the interface an earlier ADD made (the LinkExists case): it is freed
        # only when this call made, and has just removed, the attachment's interface; DEL frees it otherwise.
        ipam.release(store, owner, only=[a.ip for a in allocations if created or not a.reused])
        if isinstance(exc, NetworkError):
            raise _network_error(exc) from exc
        raise
    own = Result(
        cni_version=conf.cni_version,
        interfaces=(
            Interface(name=bridge.name, mac=bridge.mac, mtu=bridge.mtu),
            Interface(name=host_link.name, mac=host_link.mac, mtu=host_link.mtu),
            Interface(name=invocation.ifname, mac=mac, sandbox=invocation.netns, mtu=conf.mtu),
        ),
        ips=tuple(
            IPConfig(
                address=ipaddress.IPv4Interface(f"{a.ip}/{a.range.subnet.prefixlen}"),
                gateway=a.range.gateway,
                interface=2,
            )
            for a in allocations
        ),
        routes=routes,
        dns=conf.dns,
    )
    log.info(
        "cni add container=%s ifname=%s ips=%s veth=%s",
        invocation.container_id,
        invocation.ifname,
        ",".join(str(a.ip) for a in allocations),
        host,
    )
    return merge_into_previous(conf.prev_result, own)


def delete(invocation: Invocation, conf: cfg.NetConf, network: Network) -> None:
    host = host_veth_name(conf.name, invocation.container_id, invocation.ifname)
    owner = ipam.Owner(invocation.container_id, invocation.ifname)
    store = _store(conf)
    try:
        removed = network.delete_host_link(host)
        if not removed and invocation.netns:
            # No host end by our name (e.g. made by another version): remove the container's end only if it is
            # ours, i.e. carries the MAC we derive from an address IPAM holds for this attachment. Anything else
            # named CNI_IFNAME belongs to someone else (another plugin, or an ADD this DEL does not undo).
            link = _container_link_or_none(network, invocation.netns, invocation.ifname)
            if link is not None:
                ours = {mac_for(ip) for ip in ipam.held_by(store, owner)}
                if link.kind == "veth" and link.mac in ours:
                    removed = network.delete_container_link(invocation.netns, invocation.ifname)
                else:
                    log.info(
                        "cni del: leaving ifname=%s in netns=%s: not ours (kind=%s mac=%s)",
                        invocation.ifname,
                        invocation.netns,
                        link.kind or "-",
                        link.mac or "-",
                    )
    except NetworkError as exc:
        raise _network_error(exc) from exc
    freed = ipam.release(store, owner)
    log.info(
        "cni del container=%s ifname=%s veth_removed=%s freed=%s",
        invocation.container_id,
        invocation.ifname,
        removed,
        ",".join(map(str, freed)) or "-",
    )


def _container_link_or_none(network: Network, netns: str, ifname: str) -> Link | None:
    try:
        return network.container_link(netns, ifname)
    except NetnsNotFound:
        return None


def _failed(msg: str) -> CNIError:
    return CNIError(Code.CHECK_FAILED, msg)


def check(invocation: Invocation, conf: cfg.NetConf, network: Network) -> None:
    """CHECK: what ADD made is still there (spec: prevResult is what to expect)."""
    prev = conf.prev_result
    if prev is None:
        raise CNIError(Code.INVALID_CONFIG, "CHECK needs prevResult: the result of the ADD to verify")
    expected = [ip for ip in sandbox_ips(prev, invocation.ifname) if isinstance(ip.address, ipaddress.IPv4Interface)]
    held = ipam.held_by(_store(conf), ipam.Owner(invocation.container_id, invocation.ifname))
    if sorted(ip.address.ip for ip in expected) != held:
        raise _failed(
            f"IPAM holds {', '.join(map(str, held)) or 'nothing'} for {invocation.container_id}/{invocation.ifname}, "
            f"prevResult says {', '.join(str(ip.address.ip) for ip in expected) or 'nothing'}"
        )
    by_name = {i.name: i for i in prev.interfaces}
    try:
        bridge = network.host_link(conf.bridge)
        if bridge is None or bridge.kind != "bridge":
            raise _failed(f"bridge {conf.bridge} is missing")
        if conf.bridge in by_name and by_name[conf.bridge].mac and by_name[conf.bridge].mac != bridge.mac:
            raise _failed(f"bridge {conf.bridge} has MAC {bridge.mac}, prevResult says {by_name[conf.bridge].mac}")
        if conf.is_gateway:
            for ip in expected:
                gw = ip.gateway
                if gw is not None and all(a.ip != gw for a in bridge.addresses):
                    raise _failed(f"bridge {conf.bridge} lost its gateway address {gw}")
        host_name = host_veth_name(conf.name, invocation.container_id, invocation.ifname)
        host = network.host_link(host_name)
        if host is None or host.kind != "veth":
            raise _failed(f"host veth {host_name} is missing")
        if host.master != bridge.index:
            raise _failed(f"host veth {host_name} is not attached to bridge {conf.bridge}")
        if conf.hairpin and host.hairpin is False:
            raise _failed(f"host veth {host_name} lost hairpin mode")
        try:
            container = network.container_link(invocation.netns, invocation.ifname)
        except NetnsNotFound as exc:
            raise _failed(str(exc)) from exc
        if container is None or container.kind != "veth":
            raise _failed(f"{invocation.ifname} is missing in {invocation.netns}")
        if container.peer_index != host.index or host.peer_index != container.index:
            raise _failed(f"{invocation.ifname} in {invocation.netns} is not the peer of {host_name}")
        want = by_name.get(invocation.ifname)
        if want is not None and want.mac and want.mac != container.mac:
            raise _failed(f"{invocation.ifname} has MAC {container.mac}, prevResult says {want.mac}")
        if container.mtu != conf.mtu:
            raise _failed(f"{invocation.ifname} has MTU {container.mtu}, the configuration says {conf.mtu}")
        for ip in expected:
            if ip.address not in container.addresses:
                raise _failed(f"{invocation.ifname} lost its address {ip.address}")
        present = network.container_routes(invocation.netns)
        for route in prev.routes:
            if isinstance(route.dst, ipaddress.IPv4Network) and all(r.dst != route.dst for r in present):
                raise _failed(f"route to {route.dst} is missing in {invocation.netns}")
    except NetworkError as exc:
        raise _network_error(exc) from exc


def garbage_collect(conf: cfg.NetConf, network: Network) -> None:
    """GC (spec 1.1): release every allocation and host veth of this network that no valid attachment owns.

    Everything that can be removed is, in one pass; the failures are reported together afterwards (the spec:
    remove as much as possible, then report). The address of an attachment whose veth could not be deleted is kept,
    so that it is not handed out while the old interface may still carry it.
    """
    if conf.valid_attachments is None:  # parse_netconf refuses this already; never read it as "nothing is valid"
        raise CNIError(Code.INVALID_CONFIG, cfg.MISSING_ATTACHMENTS)
    valid = [ipam.Owner(a.container_id, a.ifname) for a in conf.valid_attachments]
    keep = {host_veth_name(conf.name, o.container_id, o.ifname) for o in valid}
    store = _store(conf)
    stale = ipam.stale_owners(store, valid)
    veth_of = {host_veth_name(conf.name, o.container_id, o.ifname): o for o in stale}
    failures: list[NetworkError] = []
    try:
        orphans = [name for name in network.owned_veths(veth_owner(conf.name)) if name not in keep]
    except NetworkError as exc:
        failures.append(exc)
        orphans = []
    kept: set[ipam.Owner] = set()
    removed = 0
    for name in sorted(set(veth_of) | set(orphans)):
        try:
            if network.delete_host_link(name):
                removed += 1
        except NetworkError as exc:
            failures.append(exc)
            if name in veth_of:
                kept.add(veth_of[name])
    released = [ip for o in stale if o not in kept for ip in ipam.release(store, o)]
    log.info("cni gc released=%d veths_removed=%d failed=%d", len(released), removed, len(failures))
    if failures:
        first = _network_error(failures[0])
        raise CNIError(
            first.code,
            f"GC removed {removed} veth(s) and released {len(released)} address(es), but {len(failures)} "
            f"operation(s) failed; the first: {first.msg}",
            " | ".join(f"{exc} ({_details(exc) or 'no errno'})" for exc in failures),
        )


def status(conf: cfg.NetConf) -> None:
    """STATUS (spec 1.1): ready to serve ADD, i.e. the data directory works and every range set has room."""
    store = _store(conf)
    try:
        ipam.ensure_writable(store)
        free = ipam.free_count(store, conf.ipam)
    except CNIError as exc:
        raise CNIError(Code.NOT_AVAILABLE, f"nodeagent-bridge cannot serve ADD: {exc.msg}") from exc
    for index, count in enumerate(free):
        if count == 0:
            raise CNIError(
                Code.NOT_AVAILABLE,
                f"nodeagent-bridge cannot serve ADD: range set {ipam.describe(conf.ipam.ranges[index])} is full",
            )


def default_network() -> Network:
    from cni.netlink import Netlink  # pyroute2 only where netlink is really needed

    return Netlink()


def run_in_process(env: Mapping[str, str], stdin: bytes) -> int:
    """The plugin without a helper: do the work here, print the reply, return the exit status."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(message)s")
    reply = execute(env, stdin, default_network)
    sys.stdout.buffer.write(reply.stdout)
    sys.stdout.buffer.flush()
    return reply.status
