"""Eviction signals and their observations (upstream pkg/kubelet/eviction/api and makeSignalObservations).

A signal names what the eviction manager watches; an `Observation` is one reading of it: how much is available, of
what capacity, and when it was read. The builders below turn the raw numbers the stats provider reads (the root and
kubepods cgroups, statfs of the filesystems, CRI ImageFsInfo, the pid limit) into observations the way upstream's
summary does, so the wiring only has to supply numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Signal(StrEnum):
    MEMORY_AVAILABLE = "memory.available"
    ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
    NODEFS_AVAILABLE = "nodefs.available"
    NODEFS_INODES_FREE = "nodefs.inodesFree"
    IMAGEFS_AVAILABLE = "imagefs.available"
    IMAGEFS_INODES_FREE = "imagefs.inodesFree"
    CONTAINERFS_AVAILABLE = "containerfs.available"
    CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
    PID_AVAILABLE = "pid.available"


class Resource(StrEnum):
    """What a signal measures, as upstream names it in messages ("The node was low on resource: memory.")."""

    MEMORY = "memory"
    EPHEMERAL_STORAGE = "ephemeral-storage"
    INODES = "inodes"  # upstream's internal resource name for local disk inodes
    PIDS = "pids"  # upstream's internal resource name for processes


class NodeCondition(StrEnum):
    MEMORY_PRESSURE = "MemoryPressure"
    DISK_PRESSURE = "DiskPressure"
    PID_PRESSURE = "PIDPressure"


SIGNAL_TO_RESOURCE: dict[Signal, Resource] = {
    Signal.MEMORY_AVAILABLE: Resource.MEMORY,
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: Resource.MEMORY,
    Signal.IMAGEFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.IMAGEFS_INODES_FREE: Resource.INODES,
    Signal.CONTAINERFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.CONTAINERFS_INODES_FREE: Resource.INODES,
    Signal.NODEFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.NODEFS_INODES_FREE: Resource.INODES,
    Signal.PID_AVAILABLE: Resource.PIDS,
}

SIGNAL_TO_CONDITION: dict[Signal, NodeCondition] = {
    Signal.MEMORY_AVAILABLE: NodeCondition.MEMORY_PRESSURE,
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: NodeCondition.MEMORY_PRESSURE,
    Signal.IMAGEFS_AVAILABLE: NodeCondition.DISK_PRESSURE,
    Signal.CONTAINERFS_AVAILABLE: NodeCondition.DISK_PRESSURE,
    Signal.NODEFS_AVAILABLE: NodeCondition.DISK_PRESSURE,
    Signal.IMAGEFS_INODES_FREE: NodeCondition.DISK_PRESSURE,
    Signal.NODEFS_INODES_FREE: NodeCondition.DISK_PRESSURE,
    Signal.CONTAINERFS_INODES_FREE: NodeCondition.DISK_PRESSURE,
    Signal.PID_AVAILABLE: NodeCondition.PID_PRESSURE,
}

# Signals measured in bytes print as BinarySI quantities ("42Mi"); the others (inodes, pids) as DecimalSI ("12k").
BYTE_SIGNALS = frozenset(
    {
        Signal.MEMORY_AVAILABLE,
        Signal.ALLOCATABLE_MEMORY_AVAILABLE,
        Signal.NODEFS_AVAILABLE,
        Signal.IMAGEFS_AVAILABLE,
        Signal.CONTAINERFS_AVAILABLE,
    }
)


def parse_signal(text: str) -> Signal | None:
    """The signal of that name, or None for a name upstream does not know."""
    try:
        return Signal(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Observation:
    """One reading of a signal. `time` is when the stats were read; None means unknown (upstream's zero time)."""

    available: int
    capacity: int
    time: datetime | None = None


Observations = Mapping[Signal, Observation]


def memory_observation(limit: int, working_set: int, time: datetime | None = None) -> Observation:
    """memory.available (root cgroup, limit = machine memory) or allocatableMemory.available (kubepods cgroup).

    As upstream's summary: available is the limit minus the working set, and the capacity is available + working set.
    Upstream's unsigned arithmetic would wrap for a working set above the limit; that is clamped to 0 here.
    """
    available = max(0, limit - working_set)
    return Observation(available=available, capacity=available + working_set, time=time)


def fs_observations(
    bytes_signal: Signal,
    inodes_signal: Signal,
    *,
    available_bytes: int | None,
    capacity_bytes: int | None,
    inodes_free: int | None,
    inodes: int | None,
    time: datetime | None = None,
) -> dict[Signal, Observation]:
    """nodefs/imagefs/containerfs: one observation for the bytes and one for the inodes, each only when both numbers
    are known (CRI ImageFsInfo, for one, reports no inode capacity), as upstream's summary does."""
    result: dict[Signal, Observation] = {}
    if available_bytes is not None and capacity_bytes is not None:
        result[bytes_signal] = Observation(available_bytes, capacity_bytes, time)
    if inodes_free is not None and inodes is not None:
        result[inodes_signal] = Observation(inodes_free, inodes, time)
    return result


def pid_observation(max_pid: int, running_processes: int, time: datetime | None = None) -> Observation:
    """pid.available: the pid limit (kernel.pid_max, or pids.max when lower) minus the processes running."""
    return Observation(available=max_pid - running_processes, capacity=max_pid, time=time)
