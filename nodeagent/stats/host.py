"""What the node itself says about its filesystems, processes and network (upstream: cAdvisor's fs and machine
info, pidlimit.Stats, the host stats provider's log and etc-hosts usage).

Pure parts: `fs_info` (statvfs numbers), `rlimit_from` (pid_max, threads-max, /proc/loadavg), `node_interfaces`
(cAdvisor's ignored devices), `device_for`. The rest read the system: statvfs, /proc, psutil, and `disk_usage`, the
`du` of upstream's MetricsDu (allocated blocks and inodes, not crossing into other filesystems).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# cAdvisor: loopback, veth, docker and nerdctl devices are not the node's network
IGNORED_DEVICE_PREFIXES = ("lo", "veth", "docker", "nerdctl")


@dataclass(frozen=True, slots=True)
class FsInfo:
    """A filesystem's totals, as cAdvisor's FsInfo: usage is capacity - free (root's reserve counts as used)."""

    capacity: int
    available: int
    usage: int
    inodes: int | None
    inodes_free: int | None

    @property
    def inodes_used(self) -> int | None:
        if self.inodes is None or self.inodes_free is None:
            return None
        return self.inodes - self.inodes_free


def fs_info(*, frsize: int, blocks: int, bfree: int, bavail: int, files: int, ffree: int) -> FsInfo:
    # Filesystems without inode accounting (files == 0) report none, as cAdvisor leaves them unset.
    return FsInfo(
        capacity=frsize * blocks,
        available=frsize * bavail,
        usage=frsize * (blocks - bfree),
        inodes=files if files else None,
        inodes_free=ffree if files else None,
    )


def statvfs(path: str) -> FsInfo:
    s = os.statvfs(path)
    return fs_info(
        frsize=s.f_frsize, blocks=s.f_blocks, bfree=s.f_bfree, bavail=s.f_bavail, files=s.f_files, ffree=s.f_ffree
    )


@dataclass(frozen=True, slots=True)
class Rlimit:
    max_pid: int | None
    running_processes: int | None


def rlimit_from(pid_max: str | None, threads_max: str | None, loadavg: str | None) -> Rlimit:
    """upstream pidlimit.Stats: the smaller of pid_max and threads-max; the task count is /proc/loadavg's 4th
    field after the slash."""
    limits = [int(v.strip()) for v in (pid_max, threads_max) if v is not None and v.strip().isdigit()]
    running: int | None = None
    fields = (loadavg or "").split()
    if len(fields) >= 5 and "/" in fields[3]:
        total = fields[3].split("/", 1)[1]
        running = int(total) if total.isdigit() else None
    return Rlimit(max_pid=min(limits) if limits else None, running_processes=running)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_rlimit(proc: Path = Path("/proc")) -> Rlimit:
    found = rlimit_from(
        _read(proc / "sys/kernel/pid_max"), _read(proc / "sys/kernel/threads-max"), _read(proc / "loadavg")
    )
    if found.running_processes is None:
        # as upstream's fallback to sysinfo(2): the number of processes the kernel reports
        found = Rlimit(max_pid=found.max_pid, running_processes=len(psutil.pids()))
    return found


@dataclass(frozen=True, slots=True)
class InterfaceCounters:
    name: str
    rx_bytes: int
    rx_errors: int
    tx_bytes: int
    tx_errors: int


def node_interfaces(counters: Mapping[str, InterfaceCounters]) -> list[InterfaceCounters]:
    """The node's interfaces as cAdvisor reports the root container's: all but the ignored prefixes, by name."""
    return [c for name, c in sorted(counters.items()) if not name.lower().startswith(IGNORED_DEVICE_PREFIXES)]


def parse_net_dev(text: str) -> dict[str, InterfaceCounters]:
    """/proc/<pid>/net/dev: the interfaces of that process's network namespace, as cAdvisor reads a container's."""
    out: dict[str, InterfaceCounters] = {}
    for line in text.splitlines()[2:]:
        name, _, numbers = line.partition(":")
        fields = numbers.split()
        if len(fields) < 11 or not all(f.isdigit() for f in fields):
            continue
        name = name.strip()
        out[name] = InterfaceCounters(name, int(fields[0]), int(fields[2]), int(fields[8]), int(fields[10]))
    return out


def read_interfaces() -> dict[str, InterfaceCounters]:
    return {
        name: InterfaceCounters(name, c.bytes_recv, c.errin, c.bytes_sent, c.errout)
        for name, c in psutil.net_io_counters(pernic=True, nowrap=True).items()
    }


def device_for(path: str, mounts: Iterable[tuple[str, str]]) -> str:
    """The device of the mount holding `path` (the longest mountpoint that contains it), from (device, mountpoint)
    pairs; "" when none does."""
    best, best_len = "", -1
    for device, mountpoint in mounts:
        prefix = mountpoint.rstrip("/") + "/"
        if (path == mountpoint or path.startswith(prefix) or mountpoint == "/") and len(mountpoint) > best_len:
            best, best_len = device, len(mountpoint)
    return best


def read_mounts() -> list[tuple[str, str]]:
    return [(p.device, p.mountpoint) for p in psutil.disk_partitions(all=True)]


@dataclass(frozen=True, slots=True)
class DiskUsage:
    used_bytes: int
    inodes_used: int


def disk_usage(path: str) -> DiskUsage:
    """`du`: allocated bytes (512-byte blocks) and inodes under `path`, hard links counted once, staying on the
    filesystem `path` is on. A path that vanishes meanwhile counts for what was seen."""
    try:
        top = os.lstat(path)
    except OSError:
        return DiskUsage(0, 0)
    seen: set[tuple[int, int]] = {(top.st_dev, top.st_ino)}
    used, inodes = top.st_blocks * 512, 1
    if not os.path.isdir(path) or os.path.islink(path):
        return DiskUsage(used, inodes)
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != top.st_dev or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            used += st.st_blocks * 512
            inodes += 1
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return DiskUsage(used, inodes)


def files_usage(directory: str) -> DiskUsage | None:
    """The usage of the regular files directly in `directory` (upstream fileMetricsByDir: a container's or a
    pod's log directory); None when the directory cannot be read."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    used = inodes = 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                continue
            used += entry.stat(follow_symlinks=False).st_blocks * 512
            inodes += 1
        except OSError:
            continue
    return DiskUsage(used, inodes)


def sum_usage(parts: Sequence[DiskUsage]) -> DiskUsage:
    return DiskUsage(sum(p.used_bytes for p in parts), sum(p.inodes_used for p in parts))
