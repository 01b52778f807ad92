"""Local storage limits (upstream's localStorageEviction, with localStorageCapacityIsolation on, its default): a pod
goes at once, whatever the node's pressure, when an emptyDir exceeds its sizeLimit, when the pod exceeds its total
ephemeral-storage limit, or when a container exceeds its own. Checked in that order, one reason per pod; every pod
over a limit goes in the same cycle; critical pods never do.
"""

from __future__ import annotations

from collections.abc import Sequence

from eviction.messages import (
    container_ephemeral_storage_limit_message,
    empty_dir_limit_message,
    pod_ephemeral_storage_limit_message,
)
from eviction.pods import PodInfo, PodUsage, UsageByPod
from eviction.result import (
    IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS,
    SIGNAL_EMPTY_DIR_FS_LIMIT,
    SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT,
    SIGNAL_EPHEMERAL_POD_FS_LIMIT,
    Eviction,
)


def _empty_dir(pod: PodInfo, usage: PodUsage) -> Eviction | None:
    for volume, limit in pod.empty_dir_size_limits.items():
        used = usage.volumes.get(volume)
        if used is None or used.used_bytes is None or limit.value <= 0:
            continue
        if used.used_bytes > limit.value:
            return Eviction(
                pod,
                SIGNAL_EMPTY_DIR_FS_LIMIT,
                empty_dir_limit_message(volume, limit),
                IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS,
            )
    return None


def _pod_limit(pod: PodInfo, usage: PodUsage) -> Eviction | None:
    limit = pod.ephemeral_storage_limit
    if limit is None:
        return None
    if (usage.ephemeral_storage_used or 0) > limit.value:
        return Eviction(
            pod,
            SIGNAL_EPHEMERAL_POD_FS_LIMIT,
            pod_ephemeral_storage_limit_message(limit),
            IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS,
        )
    return None


def _container_limit(pod: PodInfo, usage: PodUsage, dedicated_image_fs: bool) -> Eviction | None:
    limits = {
        c.name: c.ephemeral_storage_limit
        for c in pod.containers
        if not c.init and c.ephemeral_storage_limit is not None and c.ephemeral_storage_limit.value != 0
    }
    for stats in usage.containers:
        limit = limits.get(stats.name)
        if limit is None:
            continue
        used = (stats.logs.used_bytes or 0) if stats.logs else 0
        if not dedicated_image_fs and stats.rootfs is not None:
            # As upstream: with an imagefs the writable layer is not on the node's disk, so only logs count.
            used += stats.rootfs.used_bytes or 0
        if used > limit.value:
            return Eviction(
                pod,
                SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT,
                container_ephemeral_storage_limit_message(stats.name, limit),
                IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS,
            )
    return None


def local_storage_evictions(pods: Sequence[PodInfo], usage: UsageByPod, *, dedicated_image_fs: bool) -> list[Eviction]:
    """Every pod over one of its local storage limits, with the first limit it broke."""
    result = []
    for pod in pods:
        stats = usage.get(pod.uid)
        if stats is None or pod.critical:
            continue
        eviction = _empty_dir(pod, stats) or _pod_limit(pod, stats) or _container_limit(pod, stats, dedicated_image_fs)
        if eviction is not None:
            result.append(eviction)
    return result
