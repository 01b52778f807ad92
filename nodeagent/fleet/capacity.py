"""Whether a fleet fits the machine, checked before any node starts: memory and file descriptors refuse, CPU warns.

A fleet that does not fit would not fail cleanly later. Out of memory, the kernel's OOM killer ends the process, or
the machine swaps and every lease comes late. Out of file descriptors, connections fail one by one (EMFILE) and
nodes go NotReady while the process keeps running. So `nodeagent fleet` compares an estimate of what N nodes need
with what the machine gives, and refuses with the figures when the estimate does not fit (`FleetError`), unless
`--no-capacity-check`:
- memory: a base for the interpreter and its imports, plus a per-node and a per-pod figure measured on the testbed
  (docs/fleet.md, "How large a fleet fits"). Every node is counted as full (`--max-pods`), because the scheduler may
  fill it. The figure given is MemAvailable, or the headroom of the process's memory cgroup and its ancestors when
  that is less (a fleet in a container with a memory limit);
- file descriptors: a base plus each node's connections to the apiserver (its pods' client, its watches, its direct
  connection, the lease thread's), and its kubelet API listener with `--kubelet-port`. The soft RLIMIT_NOFILE is
  first raised to the hard one, as Go's runtime does at start (since Go 1.19), so the fleet gets what a kubelet gets.

CPU only warns: more nodes per core than the measured goal (500) still run, but lease renewals come late while pods
start (docs/fleet.md), which the control plane may see as NotReady flaps.
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodeagent.fleet.plan import FleetError, FleetOptions

log = logging.getLogger(__name__)

MiB: Final = 1 << 20
KiB: Final = 1 << 10
# Memory: the process before any node (interpreter, imports, the lease thread), then per node and per pod. Figures
# measured (docs/fleet.md, "How large a fleet fits"): PSS 2.2 MiB per node with 3 pods each (benchmarks/fleet.py);
# 50 nodes with 10 pods each, 245 MB steady and 290 to 326 MB at the pod burst's peaks; rounded up.
BASE_MEMORY: Final = 128 * MiB
NODE_MEMORY: Final = int(2.5 * MiB)
POD_MEMORY: Final = 256 * KiB
# File descriptors: the process's own (stdio, the loops' selectors and self-pipes, the thread pool's), then per node:
# its HTTP/1.1 connections to the apiserver, one per request in flight (up to 15.6 a node seen in a 500-pod burst on
# 50 nodes, listeners included).
BASE_FDS: Final = 64
NODE_FDS: Final = 16
KUBELET_API_FDS: Final = 2  # with --kubelet-port: the node's listener and the apiserver's connection to it
NODES_PER_CPU: Final = 500  # the goal; beyond it, leases late while pods start
_UNLIMITED: Final = 1 << 60  # cgroup v1 writes "no limit" as the largest page-aligned int64


@dataclass(frozen=True)
class HostLimits:
    """What the machine gives the fleet, read once at start (`read_host_limits`)."""

    memory_available: int  # bytes the fleet may still take
    memory_source: str  # where that figure came from, for the message
    resident: int  # bytes this process already holds (part of BASE_MEMORY is in place)
    nofile: int  # the soft RLIMIT_NOFILE, after raising it to the hard one
    nofile_hard: int
    cpus: int


@dataclass(frozen=True)
class Estimate:
    memory: int
    fds: int


def estimate(nodes: int, max_pods: int, *, kubelet_api: bool) -> Estimate:
    per_node_fds = NODE_FDS + (KUBELET_API_FDS if kubelet_api else 0)
    return Estimate(
        memory=BASE_MEMORY + nodes * (NODE_MEMORY + max_pods * POD_MEMORY),
        fds=BASE_FDS + nodes * per_node_fds,
    )


def _mib(n: int) -> str:
    return f"{n / MiB:,.0f} MiB"


def check_capacity(options: FleetOptions, limits: HostLimits) -> list[str]:
    """Refuse (`FleetError`, naming the limit and the figures) a fleet that does not fit `limits`; return warnings
    for what fits but degrades."""
    need = estimate(options.nodes, options.max_pods, kubelet_api=bool(options.kubelet_port))
    more = need.memory - min(limits.resident, BASE_MEMORY)
    if more > limits.memory_available:
        raise FleetError(
            f"--nodes {options.nodes} does not fit in memory: about {_mib(need.memory)} are needed "
            f"({_mib(BASE_MEMORY)} for the process, {NODE_MEMORY / MiB:.1f} MiB per node and "
            f"{POD_MEMORY // KiB} KiB per pod at --max-pods {options.max_pods}), {_mib(more)} of it still to take, "
            f"and {_mib(limits.memory_available)} is available ({limits.memory_source}). Lower --nodes or "
            "--max-pods, or give the fleet more memory (--no-capacity-check starts it anyway)"
        )
    if need.fds > limits.nofile:
        per_node = NODE_FDS + (KUBELET_API_FDS if options.kubelet_port else 0)
        raise FleetError(
            f"--nodes {options.nodes} does not fit in the file descriptor limit: about {need.fds:,} are needed "
            f"({BASE_FDS} for the process and {per_node} per node: its connections to the apiserver"
            f"{' and its kubelet API' if options.kubelet_port else ''}), and RLIMIT_NOFILE is {limits.nofile:,} "
            f"(hard limit {limits.nofile_hard:,}). Raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower --nodes "
            "(--no-capacity-check starts it anyway)"
        )
    warnings = []
    if options.nodes > NODES_PER_CPU * limits.cpus:
        warnings.append(
            f"nodes={options.nodes} cpus={limits.cpus} nodes_per_cpu={options.nodes / limits.cpus:.0f} "
            f"above={NODES_PER_CPU}: lease renewals may come late while pods start (NotReady flaps)"
        )
    return warnings


def raise_nofile() -> tuple[int, int]:
    """The soft RLIMIT_NOFILE raised to the hard one (as Go's runtime does for every Go program, the kubelet
    included); returns (soft, hard) as they now are."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("fleet could not raise RLIMIT_NOFILE soft=%d hard=%d error=%s", soft, hard, exc)
    return _finite(soft), _finite(hard)


def _finite(limit: int) -> int:
    return _UNLIMITED if limit == resource.RLIM_INFINITY else limit


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= _UNLIMITED else value


def _mem_available(proc: Path) -> int:
    for line in (proc / "meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key == "MemAvailable":
            return int(rest.split()[0]) * KiB
    raise FleetError(f"no MemAvailable in {proc / 'meminfo'}")


def _cgroup_headroom(proc: Path, cgroup_root: Path) -> tuple[int, str] | None:
    """The least (limit - usage) of the process's memory cgroup and its ancestors, with the cgroup's path; None when
    none of them has a limit. cgroup v1 (a `memory` controller line) or v2 (the `0::` line)."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    mount: Path | None = None
    files = ("", "")
    relative = ""
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            mount, files, relative = cgroup_root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes"), path
            break
        if controllers == "" and (cgroup_root / "cgroup.controllers").exists():
            mount, files, relative = cgroup_root, ("memory.max", "memory.current"), path
    if mount is None:
        return None
    parts = [p for p in relative.split("/") if p]
    best: tuple[int, str] | None = None
    # From the process's own cgroup up to the mount's root: every ancestor's limit applies too. In a container with
    # its own cgroup namespace the path is "/", and the mount's root is the container's cgroup.
    for depth in range(len(parts), -1, -1):
        directory = mount.joinpath(*parts[:depth])
        limit = _read_int(directory / files[0])
        usage = _read_int(directory / files[1])
        if limit is None or usage is None:
            continue
        headroom = max(0, limit - usage)
        if best is None or headroom < best[0]:
            best = (
                headroom,
                f"the memory cgroup {'/' + '/'.join(parts[:depth])}: limit {_mib(limit)}, used {_mib(usage)}",
            )
    return best


def read_host_limits(
    *, proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup"), nofile: tuple[int, int] | None = None
) -> HostLimits:
    """The machine's limits for the fleet. `nofile`: (soft, hard), by default the process's (after `raise_nofile`)."""
    available = _mem_available(proc)
    source = "MemAvailable in /proc/meminfo"
    cgroup = _cgroup_headroom(proc, cgroup_root)
    if cgroup is not None and cgroup[0] < available:
        available, source = cgroup
    try:
        resident = int((proc / "self" / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        resident = 0
    if nofile is None:
        current = resource.getrlimit(resource.RLIMIT_NOFILE)
        nofile = (_finite(current[0]), _finite(current[1]))
    soft, hard = nofile
    return HostLimits(
        memory_available=available,
        memory_source=source,
        resident=resident,
        nofile=soft,
        nofile_hard=hard,
        cpus=len(os.sched_getaffinity(0)),
    )


__all__ = ["Estimate", "HostLimits", "check_capacity", "estimate", "raise_nofile", "read_host_limits"]
