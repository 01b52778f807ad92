"""The network configuration of `nodeagent-bridge` on stdin, parsed and checked before anything is touched.

The shape follows the reference bridge + host-local plugins, so an operator who knows those reads ours at once:

    {"cniVersion": "1.0.0", "name": "pods", "type": "nodeagent-bridge",
     "bridge": "cni0", "isGateway": true, "isDefaultGateway": false, "mtu": 1500, "hairpinMode": true,
     "ipam": {"type": "nodeagent-ipam",
              "ranges": [[{"subnet": "198.18.7.0/24", "rangeStart": "...", "rangeEnd": "...", "gateway": "..."}]],
              "reserved": ["198.18.7.10", "198.18.7.240/28"],
              "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "/var/lib/cni/networks"},
     "dns": {...}}

Each range set yields one address. IPv4 only. Fields of the reference plugins that this plugin does not do
(ipMasq, vlan, promiscMode, another IPAM type) are refused with code 2 rather than silently ignored; other unknown
fields are ignored, as the spec asks (runtimes add their own, e.g. runtimeConfig).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cni.errors import CNIError, Code
from cni.spec import (
    DNS,
    SUPPORTED_VERSIONS,
    Command,
    Result,
    Route,
    ifname_problem,
    parse_dns,
    parse_result,
    valid_identifier,
)

PLUGIN_TYPE = "nodeagent-bridge"
IPAM_TYPE = "nodeagent-ipam"
DEFAULT_BRIDGE = "cni0"
DEFAULT_MTU = 1500
DEFAULT_DATA_DIR = Path("/var/lib/cni/networks")

IPv4 = ipaddress.IPv4Address


@dataclass(frozen=True)
class Range:
    """One range of a range set: allocation goes from `start` to `end` inclusive, skipping the gateway."""

    subnet: ipaddress.IPv4Network
    start: IPv4
    end: IPv4
    gateway: IPv4

    def __contains__(self, ip: object) -> bool:
        return isinstance(ip, IPv4) and self.start <= ip <= self.end

    def addresses(self) -> Iterator[IPv4]:
        for value in range(int(self.start), int(self.end) + 1):
            yield IPv4(value)

    def __str__(self) -> str:
        return f"{self.subnet} ({self.start}-{self.end})"


RangeSet = tuple[Range, ...]


@dataclass(frozen=True)
class IPAMConfig:
    ranges: tuple[RangeSet, ...]
    routes: tuple[Route, ...]
    reserved: tuple[ipaddress.IPv4Network, ...]
    data_dir: Path

    def is_reserved(self, ip: IPv4) -> bool:
        return any(ip in net for net in self.reserved)


@dataclass(frozen=True)
class GCAttachment:
    container_id: str
    ifname: str


@dataclass(frozen=True)
class NetConf:
    cni_version: str
    name: str
    bridge: str
    is_gateway: bool
    is_default_gateway: bool
    mtu: int
    hairpin: bool
    ipam: IPAMConfig
    dns: DNS
    prev_result: Result | None
    valid_attachments: tuple[GCAttachment, ...] | None  # GC only, and always there for GC


def _invalid(msg: str) -> CNIError:
    return CNIError(Code.INVALID_CONFIG, msg)


def decode(stdin: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(stdin)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CNIError(Code.DECODE_FAILURE, f"the network configuration on stdin is not JSON: {exc}") from exc
    except (
        RecursionError
    ) as exc:  # Python's decoder recurses per nesting level (Go's stops at 10000: "exceeded max depth")
        raise CNIError(
            Code.DECODE_FAILURE, "the network configuration on stdin is not JSON: it nests too deeply"
        ) from exc
    if not isinstance(doc, dict):
        raise CNIError(Code.DECODE_FAILURE, "the network configuration on stdin must be a JSON object")
    return doc


def requested_version(stdin: bytes) -> str | None:
    """The input's cniVersion if it can be read at all: used to word error replies and VERSION."""
    try:
        doc = json.loads(stdin)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    version = doc.get("cniVersion") if isinstance(doc, dict) else None
    return version if isinstance(version, str) else None


def _bool(doc: dict[str, Any], key: str, default: bool, where: str = "") -> bool:
    value = doc.get(key, default)
    if not isinstance(value, bool):
        raise _invalid(f"{where}{key} must be true or false, not {value!r}")
    return value


def _ipv4(value: Any, what: str) -> IPv4:
    try:
        ip = ipaddress.ip_address(value)
    except (ValueError, TypeError):
        raise _invalid(f"{what} {value!r} is not an IP address") from None
    if not isinstance(ip, IPv4):
        raise CNIError(Code.UNSUPPORTED_FIELD, f"{what}={value} is IPv6: nodeagent-ipam allocates IPv4 only")
    return ip


def _parse_range(raw: Any, where: str) -> Range:
    if not isinstance(raw, dict) or "subnet" not in raw:
        raise _invalid(f'{where} must be an object with a "subnet", e.g. {{"subnet": "198.18.7.0/24"}}')
    try:
        subnet = ipaddress.ip_network(raw["subnet"], strict=False)
    except (ValueError, TypeError):
        raise _invalid(f"{where}.subnet {raw['subnet']!r} is not a CIDR like 198.18.7.0/24") from None
    if not isinstance(subnet, ipaddress.IPv4Network):
        raise CNIError(Code.UNSUPPORTED_FIELD, f"{where}.subnet={subnet} is IPv6: nodeagent-ipam allocates IPv4 only")
    if subnet.prefixlen > 30:
        raise _invalid(f"{where}.subnet {subnet} is too small: it needs room for a gateway and a pod (/30 or wider)")
    first, last = subnet.network_address + 1, subnet.broadcast_address - 1
    start = _ipv4(raw["rangeStart"], f"{where}.rangeStart") if "rangeStart" in raw else first
    end = _ipv4(raw["rangeEnd"], f"{where}.rangeEnd") if "rangeEnd" in raw else last
    gateway = _ipv4(raw["gateway"], f"{where}.gateway") if "gateway" in raw else first
    for what, ip in (("rangeStart", start), ("rangeEnd", end), ("gateway", gateway)):
        if not first <= ip <= last:
            raise _invalid(f"{where}.{what} {ip} is not a host address of {subnet} ({first}-{last})")
    if start > end:
        raise _invalid(f"{where}.rangeStart {start} is after rangeEnd {end}")
    return Range(subnet=subnet, start=start, end=end, gateway=gateway)


def _parse_ranges(ipam: dict[str, Any]) -> tuple[RangeSet, ...]:
    raw = ipam.get("ranges")
    if raw is None and "subnet" in ipam:  # host-local's single-subnet shorthand
        raw = [[{k: ipam[k] for k in ("subnet", "rangeStart", "rangeEnd", "gateway") if k in ipam}]]
    if not isinstance(raw, list) or not raw:
        raise _invalid('ipam.ranges is required: a list of range sets, e.g. [[{"subnet": "198.18.7.0/24"}]]')
    sets: list[RangeSet] = []
    for i, range_set in enumerate(raw):
        if not isinstance(range_set, list) or not range_set:
            raise _invalid(f"ipam.ranges[{i}] must be a non-empty list of ranges")
        parsed = tuple(_parse_range(r, f"ipam.ranges[{i}][{j}]") for j, r in enumerate(range_set))
        for a in range(len(parsed)):
            for b in range(a + 1, len(parsed)):
                if parsed[a].start <= parsed[b].end and parsed[b].start <= parsed[a].end:
                    raise _invalid(f"ipam.ranges[{i}] has overlapping ranges {parsed[a]} and {parsed[b]}")
        sets.append(parsed)
    for a in range(len(sets)):
        for b in range(a + 1, len(sets)):
            if any(x.subnet.overlaps(y.subnet) for x in sets[a] for y in sets[b]):
                raise _invalid(f"ipam.ranges[{a}] and ipam.ranges[{b}] overlap: each range set must be its own subnet")
    return tuple(sets)


def _parse_routes(raw: Any) -> tuple[Route, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _invalid('ipam.routes must be a list like [{"dst": "0.0.0.0/0"}]')
    routes = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or "dst" not in item:
            raise _invalid(f'ipam.routes[{i}] must be an object with "dst"')
        try:
            dst = ipaddress.ip_network(item["dst"], strict=False)
        except (ValueError, TypeError):
            raise _invalid(f"ipam.routes[{i}].dst {item['dst']!r} is not a CIDR") from None
        if not isinstance(dst, ipaddress.IPv4Network):
            raise CNIError(Code.UNSUPPORTED_FIELD, f"ipam.routes[{i}].dst={dst} is IPv6: only IPv4 is supported")
        gw = _ipv4(item["gw"], f"ipam.routes[{i}].gw") if item.get("gw") else None
        routes.append(Route(dst=dst, gw=gw))
    return tuple(routes)


def _parse_reserved(raw: Any) -> tuple[ipaddress.IPv4Network, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _invalid('ipam.reserved must be a list of addresses or CIDRs, e.g. ["198.18.7.10", "198.18.7.240/28"]')
    nets = []
    for i, item in enumerate(raw):
        try:
            net = ipaddress.ip_network(item, strict=False)
        except (ValueError, TypeError):
            raise _invalid(f"ipam.reserved[{i}] {item!r} is not an address or CIDR") from None
        if not isinstance(net, ipaddress.IPv4Network):
            raise CNIError(Code.UNSUPPORTED_FIELD, f"ipam.reserved[{i}]={net} is IPv6: only IPv4 is supported")
        nets.append(net)
    return tuple(nets)


def parse_ipam(raw: Any) -> IPAMConfig:
    if not isinstance(raw, dict):
        raise _invalid(f'ipam is required: an object with "type": "{IPAM_TYPE}" and "ranges"')
    ipam_type = raw.get("type", IPAM_TYPE)
    if ipam_type != IPAM_TYPE:
        raise CNIError(
            Code.UNSUPPORTED_FIELD,
            f"ipam.type={ipam_type} is not supported: {PLUGIN_TYPE} allocates addresses itself; "
            f'set "type": "{IPAM_TYPE}" (same ranges/routes/dataDir fields as host-local)',
        )
    data_dir = raw.get("dataDir", str(DEFAULT_DATA_DIR))
    if not isinstance(data_dir, str) or not data_dir.startswith("/"):
        raise _invalid(f"ipam.dataDir {data_dir!r} must be an absolute path")
    return IPAMConfig(
        ranges=_parse_ranges(raw),
        routes=_parse_routes(raw.get("routes")),
        reserved=_parse_reserved(raw.get("reserved")),
        data_dir=Path(data_dir),
    )


def check_version(doc: dict[str, Any]) -> str:
    version = doc.get("cniVersion")
    if not isinstance(version, str) or not version:
        raise _invalid(f'cniVersion is required, e.g. "cniVersion": "{SUPPORTED_VERSIONS[0]}"')
    if version not in SUPPORTED_VERSIONS:
        raise CNIError(
            Code.INCOMPATIBLE_VERSION,
            f"cniVersion {version} is not supported by {PLUGIN_TYPE} (supported: {', '.join(SUPPORTED_VERSIONS)})",
        )
    return version


VALID_ATTACHMENTS = "cni.dev/valid-attachments"
MISSING_ATTACHMENTS = (
    f"GC needs {VALID_ATTACHMENTS}, the list of attachments to keep (spec 1.1: the runtime must provide it); "
    "without it nothing is deleted. An empty list means that no attachment of this network is valid."
)


def _parse_attachments(doc: dict[str, Any]) -> tuple[GCAttachment, ...]:
    # Spec 1.1 names the key cni.dev/valid-attachments; libcni also sends cni.dev/attachments (same value), the
    # name in an earlier draft of the spec. Neither present is refused: read as "nothing is valid", it would free
    # every address and veth of the network.
    raw = doc.get(VALID_ATTACHMENTS, doc.get("cni.dev/attachments"))
    if raw is None:
        raise _invalid(MISSING_ATTACHMENTS)
    if not isinstance(raw, list):
        raise _invalid("cni.dev/valid-attachments must be a list of {containerID, ifname}")
    found = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("containerID"), str):
            raise _invalid(f"cni.dev/valid-attachments[{i}] must be an object with containerID and ifname")
        found.append(GCAttachment(container_id=item["containerID"], ifname=str(item.get("ifname", ""))))
    return tuple(found)


def parse_netconf(stdin: bytes, command: Command) -> NetConf:
    """The whole configuration, or the CNIError (1, 2, 6 or 7) that says what to fix."""
    doc = decode(stdin)
    version = check_version(doc)
    name = doc.get("name")
    if not isinstance(name, str) or not valid_identifier(name):
        raise _invalid(
            f"name {name!r} is invalid: the network name must start with a letter or digit and contain only "
            "letters, digits, '_', '.' and '-'"
        )
    plugin_type = doc.get("type")
    if plugin_type != PLUGIN_TYPE:
        raise _invalid(f"type {plugin_type!r} is not {PLUGIN_TYPE!r}: this configuration is for another plugin")
    bridge = doc.get("bridge", DEFAULT_BRIDGE)
    if not isinstance(bridge, str):
        raise _invalid(f"bridge {bridge!r} must be a string")
    if problem := ifname_problem(bridge):
        raise _invalid(f"bridge {bridge!r} {problem}: it must be a Linux interface name")
    mtu = doc.get("mtu", DEFAULT_MTU)
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 65535:
        raise _invalid(f"mtu {mtu!r} must be an integer from 68 to 65535")
    if doc.get("ipMasq"):
        raise CNIError(
            Code.UNSUPPORTED_FIELD,
            f"ipMasq={json.dumps(doc['ipMasq'])} is not supported: {PLUGIN_TYPE} never NATs pod traffic; remove it",
        )
    if doc.get("promiscMode"):
        raise CNIError(Code.UNSUPPORTED_FIELD, "promiscMode=true is not supported: remove it")
    for key in ("vlan", "vlanTrunk"):
        if doc.get(key):
            raise CNIError(Code.UNSUPPORTED_FIELD, f"{key}={json.dumps(doc[key])} is not supported: remove it")
    is_default_gateway = _bool(doc, "isDefaultGateway", False)
    prev_raw = doc.get("prevResult")
    return NetConf(
        cni_version=version,
        name=name,
        bridge=bridge,
        # As the reference bridge: a default gateway is a gateway.
        is_gateway=_bool(doc, "isGateway", False) or is_default_gateway,
        is_default_gateway=is_default_gateway,
        mtu=mtu,
        hairpin=_bool(doc, "hairpinMode", False),
        ipam=parse_ipam(doc.get("ipam")),
        dns=parse_dns(doc.get("dns"), "dns"),
        prev_result=parse_result(prev_raw, version) if prev_raw is not None else None,
        valid_attachments=_parse_attachments(doc) if command is Command.GC else None,
    )
