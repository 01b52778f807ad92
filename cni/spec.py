"""The CNI protocol as data: versions, the CNI_* environment, and the Result type (spec 1.0.0 and 1.1.0).

Pure functions only, so that table-driven tests cover every rule: which variables each command needs, what a valid
container ID and interface name are, and the exact result JSON per version (1.1.0 adds `mtu` on interfaces).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from cni.errors import CNIError, Code

SUPPORTED_VERSIONS = ("1.0.0", "1.1.0")
LATEST_VERSION = SUPPORTED_VERSIONS[-1]

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Command(StrEnum):
    ADD = "ADD"
    DEL = "DEL"
    CHECK = "CHECK"
    VERSION = "VERSION"
    GC = "GC"
    STATUS = "STATUS"


# Spec 1.1, "Parameters": the variables each command requires (CNI_COMMAND aside). CNI_PATH is required by the
# spec for ADD, DEL, CHECK and GC, but this plugin delegates to no other plugin, so it does not insist on it.
REQUIRED_VARIABLES: Mapping[Command, tuple[str, ...]] = {
    Command.ADD: ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    Command.DEL: ("CNI_CONTAINERID", "CNI_IFNAME"),
    Command.CHECK: ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    Command.VERSION: (),
    Command.GC: (),
    Command.STATUS: (),
}

# Container IDs and network names: an alphanumeric first character, then alphanumerics, '_', '.', '-'.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_IFNAME_FORBIDDEN = re.compile(r"[/:\s]")
MAX_IFNAME = 15


def valid_identifier(value: str) -> bool:
    return _IDENTIFIER.fullmatch(value) is not None


def ifname_problem(name: str) -> str | None:
    """Why `name` is not a valid Linux interface name (spec: non-empty, not . or .., < 16 chars, no / : space)."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"is {name!r}"
    if len(name) > MAX_IFNAME:
        return f"is {len(name)} characters long (at most {MAX_IFNAME})"
    if _IFNAME_FORBIDDEN.search(name):
        return "contains '/', ':' or whitespace"
    return None


@dataclass(frozen=True)
class Invocation:
    """One call of the plugin, from the CNI_* environment."""

    command: Command
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: Mapping[str, str] = field(default_factory=dict)
    path: tuple[str, ...] = ()


def parse_cni_args(raw: str) -> dict[str, str]:
    """CNI_ARGS: `K=V;K2=V2`. A pair without '=' is an error (code 4); unknown keys are kept and ignored later."""
    parsed: dict[str, str] = {}
    for pair in raw.split(";"):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CNIError(
                Code.INVALID_ENVIRONMENT,
                f"CNI_ARGS is malformed: {pair!r} is not KEY=VALUE "
                "(expected pairs like K8S_POD_NAME=web;IgnoreUnknown=1)",
            )
        parsed[key] = value
    return parsed


def parse_environment(env: Mapping[str, str]) -> Invocation:
    """The invocation, or CNIError(4) naming every missing or invalid variable."""
    raw_command = env.get("CNI_COMMAND", "")
    try:
        command = Command(raw_command)
    except ValueError:
        what = "is missing" if not raw_command else f"is {raw_command!r}"
        raise CNIError(
            Code.INVALID_ENVIRONMENT,
            f"CNI_COMMAND {what}: set it to one of {', '.join(c.value for c in Command)}",
        ) from None
    missing = [name for name in REQUIRED_VARIABLES[command] if not env.get(name)]
    if missing:
        raise CNIError(
            Code.INVALID_ENVIRONMENT,
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required for {command} but not set",
        )
    container_id = env.get("CNI_CONTAINERID", "")
    if container_id and not valid_identifier(container_id):
        raise CNIError(
            Code.INVALID_ENVIRONMENT,
            f"CNI_CONTAINERID {container_id!r} is invalid: it must start with a letter or digit and contain only "
            "letters, digits, '_', '.' and '-'",
        )
    ifname = env.get("CNI_IFNAME", "")
    if ifname and (problem := ifname_problem(ifname)):
        raise CNIError(Code.INVALID_ENVIRONMENT, f"CNI_IFNAME {ifname!r} {problem}: it must be a Linux interface name")
    netns = env.get("CNI_NETNS", "")
    if netns and not netns.startswith("/"):
        raise CNIError(
            Code.INVALID_ENVIRONMENT, f"CNI_NETNS {netns!r} is not an absolute path to a network namespace file"
        )
    return Invocation(
        command=command,
        container_id=container_id,
        netns=netns,
        ifname=ifname,
        args=parse_cni_args(env.get("CNI_ARGS", "")),
        path=tuple(p for p in env.get("CNI_PATH", "").split(":") if p),
    )


# --- the Result type ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interface:
    name: str
    mac: str = ""
    sandbox: str = ""
    mtu: int | None = None


@dataclass(frozen=True)
class IPConfig:
    address: IPInterface
    gateway: IPAddress | None = None
    interface: int | None = None


@dataclass(frozen=True)
class Route:
    dst: IPNetwork
    gw: IPAddress | None = None


@dataclass(frozen=True)
class DNS:
    nameservers: tuple[str, ...] = ()
    domain: str = ""
    search: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.nameservers:
            doc["nameservers"] = list(self.nameservers)
        if self.domain:
            doc["domain"] = self.domain
        if self.search:
            doc["search"] = list(self.search)
        if self.options:
            doc["options"] = list(self.options)
        return doc


@dataclass(frozen=True)
class Result:
    cni_version: str
    interfaces: tuple[Interface, ...] = ()
    ips: tuple[IPConfig, ...] = ()
    routes: tuple[Route, ...] = ()
    dns: DNS = DNS()

    def to_json(self) -> dict[str, Any]:
        """The spec's JSON for `cni_version`: optional keys are left out when empty, `mtu` only from 1.1.0."""
        with_mtu = self.cni_version != "1.0.0"
        interfaces = []
        for iface in self.interfaces:
            item: dict[str, Any] = {"name": iface.name}
            if iface.mac:
                item["mac"] = iface.mac
            if with_mtu and iface.mtu is not None:
                item["mtu"] = iface.mtu
            if iface.sandbox:
                item["sandbox"] = iface.sandbox
            interfaces.append(item)
        ips = []
        for ip in self.ips:
            entry: dict[str, Any] = {"address": str(ip.address)}
            if ip.gateway is not None:
                entry["gateway"] = str(ip.gateway)
            if ip.interface is not None:
                entry["interface"] = ip.interface
            ips.append(entry)
        routes = []
        for route in self.routes:
            r: dict[str, Any] = {"dst": str(route.dst)}
            if route.gw is not None:
                r["gw"] = str(route.gw)
            routes.append(r)
        doc: dict[str, Any] = {"cniVersion": self.cni_version}
        if interfaces:
            doc["interfaces"] = interfaces
        if ips:
            doc["ips"] = ips
        if routes:
            doc["routes"] = routes
        doc["dns"] = self.dns.to_json()
        return doc


def _bad_prev(what: str) -> CNIError:
    return CNIError(Code.DECODE_FAILURE, f"prevResult is not a CNI result: {what}")


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad_prev(f"{what} must be a list of strings")
    return tuple(value)


def parse_dns(value: Any, where: str) -> DNS:
    if value is None:
        return DNS()
    if not isinstance(value, dict):
        raise CNIError(Code.DECODE_FAILURE, f"{where} must be an object")
    domain = value.get("domain", "")
    if not isinstance(domain, str):
        raise CNIError(Code.DECODE_FAILURE, f"{where}.domain must be a string")
    return DNS(
        nameservers=_strings(value.get("nameservers"), f"{where}.nameservers"),
        domain=domain,
        search=_strings(value.get("search"), f"{where}.search"),
        options=_strings(value.get("options"), f"{where}.options"),
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def parse_result(doc: Any, cni_version: str) -> Result:
    """A result (a chained plugin's prevResult) back into the Result type; CNIError(6) when it is not one."""
    if not isinstance(doc, dict):
        raise _bad_prev("not an object")
    try:
        interfaces = tuple(
            Interface(
                name=_text(i["name"]),
                mac=str(i.get("mac", "")),
                sandbox=str(i.get("sandbox", "")),
                mtu=int(i["mtu"]) if i.get("mtu") is not None else None,
            )
            for i in doc.get("interfaces") or []
        )
        ips = tuple(
            IPConfig(
                address=ipaddress.ip_interface(_text(ip["address"])),
                gateway=ipaddress.ip_address(_text(ip["gateway"])) if ip.get("gateway") else None,
                interface=int(ip["interface"]) if ip.get("interface") is not None else None,
            )
            for ip in doc.get("ips") or []
        )
        routes = tuple(
            Route(
                dst=ipaddress.ip_network(_text(r["dst"]), strict=False),
                gw=ipaddress.ip_address(_text(r["gw"])) if r.get("gw") else None,
            )
            for r in doc.get("routes") or []
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _bad_prev(f"{type(exc).__name__}: {exc}") from exc
    for ip in ips:
        if ip.interface is not None and not 0 <= ip.interface < len(interfaces):
            raise _bad_prev(f"ips entry {ip.address} names interface {ip.interface}, which is not in interfaces")
    return Result(
        cni_version=cni_version,
        interfaces=interfaces,
        ips=ips,
        routes=routes,
        dns=parse_dns(doc.get("dns"), "prevResult.dns"),
    )


def version_reply(requested: str | None) -> dict[str, Any]:
    """VERSION: `cniVersion` echoes the input's when this plugin speaks it, else the latest it does."""
    version = requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION
    return {"cniVersion": version, "supportedVersions": list(SUPPORTED_VERSIONS)}


def merge_into_previous(previous: Result | None, own: Result) -> Result:
    """A chained ADD: the previous plugins' interfaces, IPs and routes first, ours after, indexes shifted."""
    if previous is None:
        return own
    offset = len(previous.interfaces)
    shifted = tuple(
        IPConfig(ip.address, ip.gateway, None if ip.interface is None else ip.interface + offset) for ip in own.ips
    )
    dns = own.dns if own.dns != DNS() else previous.dns
    return Result(
        cni_version=own.cni_version,
        interfaces=previous.interfaces + own.interfaces,
        ips=previous.ips + shifted,
        routes=previous.routes + own.routes,
        dns=dns,
    )


def sandbox_ips(result: Result, ifname: str) -> Sequence[IPConfig]:
    """The IPs the result puts on the container interface `ifname` (as portmap reads them)."""
    found = []
    for ip in result.ips:
        if ip.interface is None:
            continue
        iface = result.interfaces[ip.interface]
        if iface.name == ifname and iface.sandbox:
            found.append(ip)
    return found
