"""CPU and memory of a cgroup, read from cgroupfs (v1: one tree per controller; v2: one unified tree), the way
cAdvisor reads them for the kubelet (the node's root cgroup, the `pods` and `kubelet` system containers, the pause
containers for /metrics/cadvisor).

The parsing and the arithmetic are pure functions over the files' text; `CgroupFS` only reads files:

- CPU: v1 `cpuacct.usage` (ns); v2 `cpu.stat` usage_usec.
- memory, as cAdvisor's setMemoryStats: usage (v1 `memory.usage_in_bytes`, v2 `memory.current`; the v2 root has
  none, so anon + file of its memory.stat, as runc's rootStatsFromMeminfo); working set = usage - inactive file
  (v1 total_inactive_file, v2 inactive_file), never below 0; RSS = v1 total_rss, v2 anon; page faults = `pgfault`
  and `pgmajfault` (v1 counts the cgroup's own, as cAdvisor reads them); the limit (v1 `memory.limit_in_bytes`, v2
  `memory.max`), None when above 2^62 or "max" (upstream isMemoryUnlimited).

- PSI (v2 only): cpu.pressure, memory.pressure and io.pressure, "some"/"full" lines of avg10/avg60/avg300 and total
  (microseconds), as cAdvisor reads them for KubeletPSI; None where the file is absent (v1, or a kernel without
  PSI). cpu.pressure has a "full" line since Linux 5.13; before that, full is zeros, as cAdvisor leaves it.

The working set, the v2 root's usage and the unlimited rule are eviction's (eviction.cgroup), so that the Summary API
and the eviction manager compute the node's working set one way.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eviction.cgroup import limit_or_unlimited, usage_v2, working_set
from nodeagent.stats.types import PSIData, PSIStats

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class MemorySample:
    usage_bytes: int
    working_set_bytes: int
    rss_bytes: int
    page_faults: int | None
    major_page_faults: int | None
    limit_bytes: int | None  # None: unlimited

    @property
    def available_bytes(self) -> int | None:
        """limit - working set, only for a limited cgroup (upstream cadvisorInfoToCPUandMemoryStats)."""
        if self.limit_bytes is None:
            return None
        return max(self.limit_bytes - self.working_set_bytes, 0)


@dataclass(frozen=True, slots=True)
class CgroupSample:
    path: str
    time: datetime.datetime
    cpu_usage_ns: int | None
    memory: MemorySample | None
    start_time: datetime.datetime | None
    cpu_psi: PSIStats | None = None
    memory_psi: PSIStats | None = None
    io_psi: PSIStats | None = None


def parse_flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines (memory.stat, cpu.stat); lines that do not parse are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_pressure(text: str) -> PSIStats | None:
    """A *.pressure file ("some avg10=0.12 avg60=0.05 avg300=0.01 total=12345" and a "full" line); None when no
    line parses. A missing line stays zeros."""
    lines: dict[str, PSIData] = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind not in ("some", "full"):
            continue
        values = dict(f.split("=", 1) for f in fields if "=" in f)
        try:
            lines[kind] = PSIData(
                total=int(values["total"]),
                avg10=float(values["avg10"]),
                avg60=float(values["avg60"]),
                avg300=float(values["avg300"]),
            )
        except (KeyError, ValueError):
            continue
    if not lines:
        return None
    return PSIStats(full=lines.get("full", PSIData()), some=lines.get("some", PSIData()))


def parse_limit(text: str) -> int | None:
    """A memory limit file: None for "max" (v2) or anything above 2^62 (v1's unlimited 9223372036854771712)."""
    value = text.strip()
    if value in ("", "max"):
        return None
    return limit_or_unlimited(int(value))


def memory_v1(usage: int, limit: int | None, stat: Mapping[str, int]) -> MemorySample:
    return MemorySample(
        usage_bytes=usage,
        working_set_bytes=working_set(usage, stat.get("total_inactive_file")),
        rss_bytes=stat.get("total_rss", stat.get("rss", 0)),
        page_faults=stat.get("pgfault"),
        major_page_faults=stat.get("pgmajfault"),
        limit_bytes=limit,
    )


def memory_v2(current: int | None, limit: int | None, stat: Mapping[str, int]) -> MemorySample:
    """`current` None is the root cgroup, which has no memory.current: anon + file stands for it."""
    usage = usage_v2(current, stat)
    return MemorySample(
        usage_bytes=usage,
        working_set_bytes=working_set(usage, stat.get("inactive_file")),
        rss_bytes=stat.get("anon", 0),
        page_faults=stat.get("pgfault"),
        major_page_faults=stat.get("pgmajfault"),
        limit_bytes=limit,
    )


def cpu_v2(stat: Mapping[str, int]) -> int | None:
    usec = stat.get("usage_usec")
    return None if usec is None else usec * 1000


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/<pid>/cgroup as controller → path (v2's single line under the key "")."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def process_cgroup(cgroups: Mapping[str, str], *, unified: bool) -> str | None:
    """The cgroup that accounts for a process, as upstream's getContainer: v2's one path; on v1 the cpu and memory
    paths, which must be the same (None when they differ: no single cgroup to account with)."""
    if unified:
        return cgroups.get("")
    cpu, memory = cgroups.get("cpu"), cgroups.get("memory")
    if cpu is None or memory is None or cpu != memory:
        return None
    return cpu


def _read(path: str) -> str | None:
    """The file's text, or None when its cgroup (or process) is gone. A cgroup being removed can still be listed while
    reading its files fails with ENODEV (a pod deleted during a /stats/summary): gone too, as cAdvisor skips it."""
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
        return None
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            return None
        raise


class CgroupFS:
    """Reads cgroups under `root` (the cgroupfs mount). Paths are cgroup paths ("/", "/kubepods/pod<uid>")."""

    def __init__(self, root: Path = CGROUP_ROOT) -> None:
        # plain strings, not Paths: a summary reads thousands of these files and pathlib's joins showed in profiles
        self.root = str(root)
        self.unified = os.path.exists(os.path.join(self.root, "cgroup.controllers"))

    def _dir(self, controller: str, path: str) -> str:
        base = self.root if self.unified else os.path.join(self.root, controller)
        relative = path.strip("/")
        return os.path.join(base, relative) if relative else base

    def exists(self, path: str) -> bool:
        return os.path.isdir(self._dir("memory", path))

    def read(self, path: str, *, now: datetime.datetime, memory_limit: int | None = None) -> CgroupSample | None:
        """The cgroup's CPU and memory now; None when it does not exist. `memory_limit` replaces the cgroup's own
        limit (the root cgroup's is the machine's memory, as cAdvisor's raw handler makes it)."""
        if not self.exists(path):
            return None
        if not self.unified:
            usage = _read(os.path.join(self._dir("cpuacct", path), "cpuacct.usage"))
            cpu = int(usage) if usage is not None and usage.strip().isdigit() else None
            memory = self._memory_v1(path, memory_limit)
            return CgroupSample(path, now, cpu, memory, self.start_time(path))
        directory = self._dir("cpu", path)
        cpu_stat = _read(os.path.join(directory, "cpu.stat"))
        cpu = cpu_v2(parse_flat_keyed(cpu_stat)) if cpu_stat is not None else None
        memory = self._memory_v2(path, memory_limit)
        cpu_psi, memory_psi, io_psi = (self.pressure(path, r) for r in ("cpu", "memory", "io"))
        return CgroupSample(path, now, cpu, memory, self.start_time(path), cpu_psi, memory_psi, io_psi)

    def pressure(self, path: str, resource: str) -> PSIStats | None:
        """The cgroup's <resource>.pressure (v2), None when it has none."""
        if not self.unified:
            return None
        try:
            text = _read(os.path.join(self._dir(resource, path), f"{resource}.pressure"))
        except OSError:  # EOPNOTSUPP: a kernel booted with psi=0 keeps the files and refuses reads
            return None
        return parse_pressure(text) if text is not None else None

    def _memory_v1(self, path: str, memory_limit: int | None) -> MemorySample | None:
        directory = self._dir("memory", path)
        usage = _read(os.path.join(directory, "memory.usage_in_bytes"))
        stat = _read(os.path.join(directory, "memory.stat"))
        if usage is None or stat is None:
            return None
        limit = memory_limit
        if limit is None:
            text = _read(os.path.join(directory, "memory.limit_in_bytes"))
            limit = parse_limit(text) if text is not None else None
        return memory_v1(int(usage), limit, parse_flat_keyed(stat))

    def _memory_v2(self, path: str, memory_limit: int | None) -> MemorySample | None:
        directory = self._dir("memory", path)
        stat = _read(os.path.join(directory, "memory.stat"))
        if stat is None:
            return None
        current = _read(os.path.join(directory, "memory.current"))
        limit = memory_limit
        if limit is None:
            text = _read(os.path.join(directory, "memory.max"))
            limit = parse_limit(text) if text is not None else None
        return memory_v2(int(current) if current is not None else None, limit, parse_flat_keyed(stat))

    def procs(self, path: str) -> list[int]:
        """The processes in the cgroup itself (cgroup.procs), none when it is gone."""
        text = _read(os.path.join(self._dir("memory", path), "cgroup.procs"))
        return [int(line) for line in (text or "").split() if line.isdigit()]

    def start_time(self, path: str) -> datetime.datetime | None:
        """When the cgroup was made: the oldest modification time of its directories, as cAdvisor's GetSpec
        takes it."""
        times = []
        for controller in ("cpu", "memory") if not self.unified else ("",):
            with contextlib.suppress(OSError):
                times.append(os.stat(self._dir(controller, path)).st_mtime)
        if not times:
            return None
        return datetime.datetime.fromtimestamp(min(times), datetime.UTC)
