"""What the disk layout changes: which usage counts against each disk signal, and what the node can free first.

Upstream decides both once it knows whether the runtime has a dedicated image filesystem and whether it splits
containers from images (buildSignalToRankFunc, buildSignalToNodeReclaimFuncs). Memory and PID signals have no
node-level reclaim.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eviction.signals import Signal


@dataclass(frozen=True)
class DiskLayout:
    dedicated_image_fs: bool = False
    split_container_image_fs: bool = False


class FsStats(StrEnum):
    """The parts of a pod's disk usage a ranking adds up (upstream's fsStatsType)."""

    ROOT = "root"  # the containers' writable layers
    LOGS = "logs"
    LOCAL_VOLUMES = "localVolumeSource"  # emptyDir on disk, hostPath, ...
    IMAGES = "images"  # named by upstream, but counts nothing in a pod's usage


class NodeReclaim(StrEnum):
    """Node-level reclaim, in upstream's order: dead containers and sandboxes, then unused images."""

    CONTAINERS = "DeleteAllUnusedContainers"
    IMAGES = "DeleteUnusedImages"


_NODEFS = (Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE)
_IMAGEFS = (Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE)
_CONTAINERFS = (Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE)


def fs_stats_for(signal: Signal, layout: DiskLayout) -> frozenset[FsStats] | None:
    """What a pod's disk usage includes for this signal; None for a signal that is not about disk."""
    if signal not in (*_NODEFS, *_IMAGEFS, *_CONTAINERFS):
        return None
    everything = frozenset(FsStats)
    if not layout.dedicated_image_fs:
        # One filesystem: every signal counts everything.
        return everything
    if not layout.split_container_image_fs:
        # An imagefs holding images and writable layers: nodefs counts logs and volumes, the others the rootfs.
        if signal in _NODEFS:
            return frozenset({FsStats.LOGS, FsStats.LOCAL_VOLUMES})
        return frozenset({FsStats.ROOT, FsStats.IMAGES})
    # Writable layers on nodefs (containerfs = nodefs), images alone on imagefs.
    if signal in _IMAGEFS:
        return frozenset({FsStats.IMAGES})
    return frozenset({FsStats.LOGS, FsStats.LOCAL_VOLUMES, FsStats.ROOT})


def node_reclaim_for(signal: Signal, layout: DiskLayout) -> tuple[NodeReclaim, ...]:
    """What to free on the node before evicting a pod for this signal (empty: evict at once)."""
    both = (NodeReclaim.CONTAINERS, NodeReclaim.IMAGES)
    if signal not in (*_NODEFS, *_IMAGEFS, *_CONTAINERFS):
        return ()
    if not layout.dedicated_image_fs:
        return both
    if not layout.split_container_image_fs:
        # As upstream: nodefs pressure with an imagefs has nothing of the node's to free (it "should delete logs").
        return () if signal in _NODEFS else both
    if signal in _IMAGEFS:
        return (NodeReclaim.IMAGES,)
    return (NodeReclaim.CONTAINERS,)


def layout_from_devices(root: int | None, image: int | None, container: int | None = None) -> DiskLayout:
    """What the filesystems' device numbers say (upstream compares the imagefs device with the root one, and, with
    a runtime that reports a separate container filesystem, that one with the imagefs). Unknown devices: one disk."""
    if root is None or image is None:
        return DiskLayout()
    dedicated = image != root
    split = dedicated and container is not None and container != image
    return DiskLayout(dedicated_image_fs=dedicated, split_container_image_fs=split)
