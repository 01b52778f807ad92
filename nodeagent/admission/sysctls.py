"""Sysctl admission: a pod may set only namespaced sysctls the node allows (upstream pkg/kubelet/sysctl).

As the kubelet does, the allowlist is the safe sysctls (those the kernel namespaces per pod and that affect no other
pod: upstream's list for v1.34, each gated on the kernel release that namespaced it) plus the config's
`allowedUnsafeSysctls`, names or patterns ending in `*`. Every entry must be known to live in the IPC or the network
namespace; a config entry that is not refuses to start the agent, with upstream's words. A pod that sets anything
else is refused at admission with reason SysctlForbidden and upstream's message (`forbidden sysctl: "kernel.msgmax"
not allowlisted`), instead of reaching runc, which fails writing /proc/sys. A network sysctl in a host-network pod,
or an IPC one in a host-IPC pod, is refused too: it would change the node's own.

Names may use `/` as separator (`net/ipv4/ip_local_port_range`); they are compared in dotted form, as sysctl.d(5)
converts them.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

SYSCTL_FORBIDDEN: Final = "SysctlForbidden"

# Upstream's limits on a sysctl name and on a pattern in allowedUnsafeSysctls (apis/core and apis/policy validation).
SYSCTL_MAX_LENGTH: Final = 253
_SEGMENT = r"[a-z0-9](?:[-_a-z0-9]*[a-z0-9])?"
_PATTERN_SEGMENT = r"(?:[a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
PATTERN_FORMAT: Final = f"({_SEGMENT}[\\./])*{_PATTERN_SEGMENT}"
_PATTERN = re.compile(PATTERN_FORMAT)
# As upstream's message spells the regular expression (Go's syntax, capturing groups).
_PATTERN_FORMAT_TEXT: Final = r"([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"


class Namespace(enum.StrEnum):
    """The kernel namespace a sysctl lives in, spelled as upstream's messages spell it."""

    IPC = "IPC"
    NET = "Net"


# k8s.io/component-helpers/node/util/sysctl: whole names, then prefixes (followed by a dot).
_NAME_NAMESPACES: Mapping[str, Namespace] = {
    "kernel.sem": Namespace.IPC,
    "kernel.shmall": Namespace.IPC,
    "kernel.shmmax": Namespace.IPC,
    "kernel.shmmni": Namespace.IPC,
    "kernel.shm_rmid_forced": Namespace.IPC,
    "kernel.shm": Namespace.IPC,  # so that the pattern kernel.shm* is known
    "kernel.msgmax": Namespace.IPC,
    "kernel.msgmnb": Namespace.IPC,
    "kernel.msgmni": Namespace.IPC,
    "kernel.msg": Namespace.IPC,  # so that the pattern kernel.msg* is known
}
_PREFIX_NAMESPACES: Mapping[str, Namespace] = {"net": Namespace.NET, "fs.mqueue": Namespace.IPC}

# Upstream's safe sysctls for v1.34, each with the kernel release (major, minor) that namespaced it, if it matters.
SAFE_SYSCTLS: tuple[tuple[str, tuple[int, int] | None], ...] = (
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
)


def normalize_name(name: str) -> str:
    """The dotted form of a sysctl name: when `/` comes before any `.`, the two swap (sysctl.d(5))."""
    for char in name:
        if char == ".":
            return name
        if char == "/":
            return name.translate(str.maketrans("./", "/."))
    return name


def namespace_of(name: str) -> Namespace | None:
    """The namespace of a dotted sysctl name (or of a pattern's prefix); None when it is not known to be namespaced."""
    if name in _NAME_NAMESPACES:
        return _NAME_NAMESPACES[name]
    for prefix, namespace in _PREFIX_NAMESPACES.items():
        if name.startswith(prefix + "."):
            return namespace
    return None


def kernel_release(text: str) -> tuple[int, int] | None:
    """(major, minor) of a kernel release such as "6.1.0-18-amd64"; None when it cannot be read."""
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def safe_sysctls(kernel: tuple[int, int] | None) -> tuple[str, ...]:
    """The safe sysctls on a kernel; an unknown kernel keeps only those that need no particular release, as
    upstream does."""
    return tuple(name for name, since in SAFE_SYSCTLS if since is None or (kernel is not None and kernel >= since))


def pattern_problem(pattern: str) -> str | None:
    """Why an allowlist entry is refused (upstream NewAllowlist's errors), or None."""
    if len(pattern) > SYSCTL_MAX_LENGTH or not _PATTERN.fullmatch(pattern):
        return (
            f"sysctl {json.dumps(pattern)} must have at most {SYSCTL_MAX_LENGTH} characters "
            f"and match regex {_PATTERN_FORMAT_TEXT}"
        )
    name, _ = _split_pattern(pattern)
    if namespace_of(name) is None:
        return f"the sysctls {json.dumps(name)} are not known to be namespaced"
    return None


def _split_pattern(pattern: str) -> tuple[str, bool]:
    name = normalize_name(pattern)
    star = name.find("*")
    return (name[:star], True) if star >= 0 else (name, False)


@dataclass(frozen=True)
class SysctlAllowlist:
    """Names and prefixes a pod may set, each with its namespace. Build with `new_allowlist`."""

    names: Mapping[str, Namespace] = field(default_factory=dict)
    prefixes: Mapping[str, Namespace] = field(default_factory=dict)

    def check(self, name: str, *, host_network: bool, host_ipc: bool) -> str | None:
        """Why a pod may not set `name` (upstream validateSysctl's error), or None when it may."""
        name = normalize_name(name)
        namespace = self.names.get(name)
        if namespace is None:
            namespace = next((ns for prefix, ns in self.prefixes.items() if name.startswith(prefix)), None)
        if namespace is None:
            return f"{json.dumps(name)} not allowlisted"
        if (namespace is Namespace.IPC and host_ipc) or (namespace is Namespace.NET and host_network):
            return f"{json.dumps(name)} not allowed with host {namespace} enabled"
        return None

    def forbidden(self, pod: Mapping[str, Any]) -> str | None:
        """Upstream's sysctl admit handler: the message refusing the pod for the first sysctl of its security
        context that it may not set (reason SYSCTL_FORBIDDEN), or None when it may set them all."""
        spec: Mapping[str, Any] = pod.get("spec") or {}
        sysctls: Sequence[Mapping[str, Any]] = (spec.get("securityContext") or {}).get("sysctls") or ()
        for sysctl in sysctls:
            problem = self.check(
                str(sysctl.get("name", "")),
                host_network=bool(spec.get("hostNetwork")),
                host_ipc=bool(spec.get("hostIPC")),
            )
            if problem is not None:
                return f"forbidden sysctl: {problem}"
        return None


def new_allowlist(allowed_unsafe: Iterable[str], *, kernel: tuple[int, int] | None) -> SysctlAllowlist:
    """The safe sysctls of this kernel plus the allowed unsafe ones; ValueError for an entry upstream refuses."""
    names: dict[str, Namespace] = {}
    prefixes: dict[str, Namespace] = {}
    for pattern in (*safe_sysctls(kernel), *allowed_unsafe):
        problem = pattern_problem(pattern)
        if problem is not None:
            raise ValueError(problem)
        name, prefixed = _split_pattern(pattern)
        namespace = namespace_of(name)
        assert namespace is not None  # pattern_problem checked it
        (prefixes if prefixed else names)[name] = namespace
    return SysctlAllowlist(names, prefixes)
