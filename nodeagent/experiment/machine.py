"""What this machine has available now, per signal, for relative thresholds ("current-400Mi") resolved before the
agent starts: the same sources the agent's stats read (the root memory cgroup's working set against the machine's
memory, statvfs of the agent's root dir and of the runtime's image store, the pid limit against the tasks)."""

from __future__ import annotations

import datetime
from pathlib import Path

import psutil

from eviction.signals import Signal
from nodeagent.stats.cgroups import CgroupFS
from nodeagent.stats.host import read_rlimit, statvfs


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def current_available(*, root_dir: Path, image_dir: Path | None = None) -> dict[Signal, int]:
    result: dict[Signal, int] = {}
    capacity = psutil.virtual_memory().total
    sample = CgroupFS().read("/", now=datetime.datetime.now(datetime.UTC), memory_limit=capacity)
    if sample is not None and sample.memory is not None and sample.memory.working_set_bytes is not None:
        result[Signal.MEMORY_AVAILABLE] = max(0, capacity - sample.memory.working_set_bytes)
    for path, bytes_signal, inodes_signal in (
        (root_dir, Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE),
        (image_dir, Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE),
    ):
        if path is None:
            continue
        fs = statvfs(str(_existing(path)))
        result[bytes_signal] = fs.available
        if fs.inodes_free is not None:
            result[inodes_signal] = fs.inodes_free
    rlimit = read_rlimit()
    if rlimit.max_pid is not None and rlimit.running_processes is not None:
        result[Signal.PID_AVAILABLE] = rlimit.max_pid - rlimit.running_processes
    return result


__all__ = ["current_available"]
