"""Ranking pods for eviction, as upstream's rankMemoryPressure / rankDiskPressureFunc / rankPIDPressure.

- memory: pods whose working set exceeds their request first, then lower priority, then more usage above request;
- disk (nodefs, imagefs, containerfs; bytes or inodes): the same with the pod's disk usage, which adds up what the
  disk layout says the signal covers (writable layers, logs, local volumes);
- pids: lower priority first, then more processes.

A pod without stats goes first at every step, as upstream. Ties keep the order given (upstream's sort is not stable,
so its tie order is arbitrary). The first of the ranking is the first to go; critical pods are skipped by the caller.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from eviction.disks import DiskLayout, FsStats, fs_stats_for
from eviction.pods import FsUsage, PodInfo, PodUsage, UsageByPod
from eviction.signals import SIGNAL_TO_RESOURCE, Resource, Signal

Cmp = Callable[[PodInfo, PodInfo], int]


def _cmp_bool(a: bool, b: bool) -> int:
    """True before false."""
    if a == b:
        return 0
    return -1 if a else 1


def _sign(value: int) -> int:
    return (value > 0) - (value < 0)


def by_priority(p1: PodInfo, p2: PodInfo) -> int:
    """Lower priority first."""
    return _sign(p1.priority - p2.priority)


def _with_stats(usage: UsageByPod, compare: Callable[[PodInfo, PodUsage, PodInfo, PodUsage], int]) -> Cmp:
    def cmp(p1: PodInfo, p2: PodInfo) -> int:
        u1, u2 = usage.get(p1.uid), usage.get(p2.uid)
        if u1 is None or u2 is None:
            return _cmp_bool(u1 is None, u2 is None)
        return compare(p1, u1, p2, u2)

    return cmp


def _memory(usage: PodUsage) -> int:
    return usage.memory_working_set or 0


def exceeds_memory_requests(usage: UsageByPod) -> Cmp:
    return _with_stats(
        usage, lambda p1, u1, p2, u2: _cmp_bool(_memory(u1) > p1.memory_request, _memory(u2) > p2.memory_request)
    )


def memory_above_request(usage: UsageByPod) -> Cmp:
    """More memory above the request first."""
    return _with_stats(
        usage, lambda p1, u1, p2, u2: _sign((_memory(u2) - p2.memory_request) - (_memory(u1) - p1.memory_request))
    )


def process_count(usage: UsageByPod) -> Cmp:
    """More processes first."""
    return _with_stats(usage, lambda _p1, u1, _p2, u2: _sign((u2.process_count or 0) - (u1.process_count or 0)))


def _fs(usage: FsUsage | None, resource: Resource) -> int:
    if usage is None:
        return 0
    amount = usage.used_bytes if resource == Resource.EPHEMERAL_STORAGE else usage.inodes_used
    return amount or 0


def pod_disk_usage(pod: PodInfo, usage: PodUsage, measure: frozenset[FsStats], resource: Resource) -> int:
    """Bytes (ephemeral-storage) or inodes the pod uses on the measured parts (upstream's podDiskUsage)."""
    total = 0
    for container in usage.containers:
        if FsStats.ROOT in measure:
            total += _fs(container.rootfs, resource)
        if FsStats.LOGS in measure:
            total += _fs(container.logs, resource)
    if FsStats.LOCAL_VOLUMES in measure:
        total += sum(_fs(usage.volumes.get(name), resource) for name in pod.local_volumes)
    return total


def _disk_request(pod: PodInfo, resource: Resource) -> int:
    return pod.ephemeral_storage_request if resource == Resource.EPHEMERAL_STORAGE else 0


def exceeds_disk_requests(usage: UsageByPod, measure: frozenset[FsStats], resource: Resource) -> Cmp:
    def compare(p1: PodInfo, u1: PodUsage, p2: PodInfo, u2: PodUsage) -> int:
        d1 = pod_disk_usage(p1, u1, measure, resource)
        d2 = pod_disk_usage(p2, u2, measure, resource)
        return _cmp_bool(d1 > _disk_request(p1, resource), d2 > _disk_request(p2, resource))

    return _with_stats(usage, compare)


def disk_above_request(usage: UsageByPod, measure: frozenset[FsStats], resource: Resource) -> Cmp:
    """More disk above the request first. As upstream, the ephemeral-storage request is subtracted even when the
    resource is inodes."""

    def compare(p1: PodInfo, u1: PodUsage, p2: PodInfo, u2: PodUsage) -> int:
        d1 = pod_disk_usage(p1, u1, measure, resource) - p1.ephemeral_storage_request
        d2 = pod_disk_usage(p2, u2, measure, resource) - p2.ephemeral_storage_request
        return _sign(d2 - d1)

    return _with_stats(usage, compare)


def _ordered_by(pods: Sequence[PodInfo], *cmps: Cmp) -> list[PodInfo]:
    def combined(p1: PodInfo, p2: PodInfo) -> int:
        for cmp in cmps:
            result = cmp(p1, p2)
            if result:
                return result
        return 0

    return sorted(pods, key=functools.cmp_to_key(combined))


def rank_memory_pressure(pods: Sequence[PodInfo], usage: UsageByPod) -> list[PodInfo]:
    return _ordered_by(pods, exceeds_memory_requests(usage), by_priority, memory_above_request(usage))


def rank_pid_pressure(pods: Sequence[PodInfo], usage: UsageByPod) -> list[PodInfo]:
    return _ordered_by(pods, by_priority, process_count(usage))


def rank_disk_pressure(
    pods: Sequence[PodInfo], usage: UsageByPod, measure: frozenset[FsStats], resource: Resource
) -> list[PodInfo]:
    return _ordered_by(
        pods,
        exceeds_disk_requests(usage, measure, resource),
        by_priority,
        disk_above_request(usage, measure, resource),
    )


def rank_for_signal(signal: Signal, pods: Sequence[PodInfo], usage: UsageByPod, layout: DiskLayout) -> list[PodInfo]:
    """The pods in eviction order for pressure on this signal."""
    if signal in (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE):
        return rank_memory_pressure(pods, usage)
    if signal == Signal.PID_AVAILABLE:
        return rank_pid_pressure(pods, usage)
    measure = fs_stats_for(signal, layout)
    if measure is None:  # every signal is memory, pid or disk; kept for a signal added later
        return list(pods)
    return rank_disk_pressure(pods, usage, measure, SIGNAL_TO_RESOURCE[signal])
