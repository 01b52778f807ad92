"""What Docker could change on the host, before and after: iptables, forwarding, links, network namespaces.

Other testbeds on the machine run kube-proxy, which rewrites its own `KUBE-*` chains at any time, and make veths and
netns for their pods; so the comparison leaves `KUBE-*` rules out, and what it refuses is Docker's mark: a `DOCKER`
chain or rule, a changed built-in chain policy, `net.ipv4.ip_forward` changed, a `docker0`/`br-*` link. Every other
difference is reported, not refused.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_COUNTERS = re.compile(r"\[\d+:\d+\]")
_DOCKER_LINK = re.compile(r"^(docker\d*|br-[0-9a-f]{12})$")


def _out(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def normalise_rules(save: str) -> tuple[str, ...]:
    """iptables-save text without comments, counters and kube-proxy's `KUBE-*` chains and rules."""
    kept = []
    for line in save.splitlines():
        if not line or line.startswith("#") or "KUBE-" in line:
            continue
        kept.append(_COUNTERS.sub("", line).rstrip())
    return tuple(kept)


def link_names(ip_link: str) -> frozenset[str]:
    """Interface names of `ip -o link` output (`N: name@peer: ...`)."""
    names = set()
    for line in ip_link.splitlines():
        parts = line.split(": ", 2)
        if len(parts) >= 2 and parts[0].strip().isdigit():
            names.add(parts[1].split("@")[0])
    return frozenset(names)


@dataclass(frozen=True)
class HostState:
    ipv4: tuple[str, ...]
    ipv6: tuple[str, ...]
    ip_forward: str
    links: frozenset[str]
    netns: frozenset[str]


def snapshot() -> HostState:
    return HostState(
        ipv4=normalise_rules(_out(["iptables-save"])),
        ipv6=normalise_rules(_out(["ip6tables-save"])),
        ip_forward=Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        links=link_names(_out(["ip", "-o", "link"])),
        netns=frozenset(line.split()[0] for line in _out(["ip", "netns", "list"]).splitlines() if line.strip()),
    )


@dataclass(frozen=True)
class Comparison:
    refused: list[str]
    noted: list[str]


def _docker_mark(line: str) -> bool:
    """A Docker chain or rule, or a built-in chain's policy line (`:FORWARD DROP`: changed when added or removed)."""
    return "DOCKER" in line or (line.startswith(":") and not line.endswith(" -"))


def compare(before: HostState, after: HostState) -> Comparison:
    refused: list[str] = []
    noted: list[str] = []
    for family, old, new in (("iptables", before.ipv4, after.ipv4), ("ip6tables", before.ipv6, after.ipv6)):
        for verb, lines in (("added", set(new) - set(old)), ("removed", set(old) - set(new))):
            for line in sorted(lines):
                (refused if _docker_mark(line) else noted).append(f"{family} {verb}: {line}")
    if before.ip_forward != after.ip_forward:
        refused.append(f"net.ipv4.ip_forward {before.ip_forward} -> {after.ip_forward}")
    for name in sorted(after.links - before.links):
        (refused if _DOCKER_LINK.match(name) else noted).append(f"link added: {name}")
    noted.extend(f"link gone: {name}" for name in sorted(before.links - after.links))
    noted.extend(f"netns added: {name}" for name in sorted(after.netns - before.netns))
    noted.extend(f"netns gone: {name}" for name in sorted(before.netns - after.netns))
    return Comparison(refused=refused, noted=noted)
