"""Ranking as upstream's rankMemoryPressure / rankDiskPressureFunc / rankPIDPressure."""

from __future__ import annotations

import pytest

from eviction.disks import DiskLayout, FsStats, NodeReclaim, fs_stats_for, node_reclaim_for
from eviction.pods import ContainerUsage, FsUsage, PodInfo, PodUsage
from eviction.rank import pod_disk_usage, rank_for_signal
from eviction.signals import Resource, Signal

MI = 2**20
ONE_FS = DiskLayout()
IMAGEFS = DiskLayout(dedicated_image_fs=True)
SPLIT = DiskLayout(dedicated_image_fs=True, split_container_image_fs=True)


def pod(name: str, *, priority: int = 0, memory_request: int = 0, storage_request: int = 0) -> PodInfo:
    return PodInfo(
        uid=name,
        namespace="default",
        name=name,
        priority=priority,
        memory_request=memory_request,
        ephemeral_storage_request=storage_request,
        local_volumes=("scratch",),
    )


def mem(working_set: int) -> PodUsage:
    return PodUsage(memory_working_set=working_set)


def disk(rootfs: int = 0, logs: int = 0, volume: int = 0, inodes: int = 0) -> PodUsage:
    return PodUsage(
        containers=(ContainerUsage("c", rootfs=FsUsage(rootfs, inodes), logs=FsUsage(logs, 0)),),
        volumes={"scratch": FsUsage(volume, 0), "not-local": FsUsage(10**12, 10**9)},
    )


def names(pods: list[PodInfo]) -> list[str]:
    return [p.name for p in pods]


@pytest.mark.parametrize(
    ("pods", "usage", "expected"),
    [
        pytest.param(
            [pod("guaranteed", memory_request=500 * MI), pod("hog", memory_request=100 * MI)],
            {"guaranteed": mem(400 * MI), "hog": mem(200 * MI)},
            ["hog", "guaranteed"],
            id="exceeding its request goes first, though smaller",
        ),
        pytest.param(
            [pod("high", priority=1000), pod("low", priority=-5)],
            {"high": mem(900 * MI), "low": mem(10 * MI)},
            ["low", "high"],
            id="both exceed (request 0): lower priority first",
        ),
        pytest.param(
            [pod("a", memory_request=100 * MI), pod("b", memory_request=10 * MI)],
            {"a": mem(300 * MI), "b": mem(150 * MI)},
            ["a", "b"],
            id="same priority: more above request first",
        ),
        pytest.param(
            [pod("a"), pod("b"), pod("nostats")],
            {"a": mem(300 * MI), "b": mem(400 * MI)},
            ["nostats", "b", "a"],
            id="no stats first",
        ),
        pytest.param(
            [pod("x"), pod("y")],
            {"x": mem(MI), "y": mem(MI)},
            ["x", "y"],
            id="ties keep the given order",
        ),
        pytest.param(
            [pod("under", memory_request=MI * 100, priority=-10), pod("over", priority=100)],
            {"under": mem(MI), "over": mem(MI * 2)},
            ["over", "under"],
            id="exceeding requests beats priority",
        ),
    ],
)
def test_memory_ranking(pods: list[PodInfo], usage: dict[str, PodUsage], expected: list[str]) -> None:
    assert names(rank_for_signal(Signal.MEMORY_AVAILABLE, pods, usage, ONE_FS)) == expected
    assert names(rank_for_signal(Signal.ALLOCATABLE_MEMORY_AVAILABLE, pods, usage, ONE_FS)) == expected


def test_pid_ranking_priority_then_processes() -> None:
    pods = [pod("few", priority=0), pod("many", priority=0), pod("low", priority=-1)]
    usage = {
        "few": PodUsage(process_count=3),
        "many": PodUsage(process_count=300),
        "low": PodUsage(process_count=1),
    }
    assert names(rank_for_signal(Signal.PID_AVAILABLE, pods, usage, ONE_FS)) == ["low", "many", "few"]


@pytest.mark.parametrize(
    ("signal", "layout", "expected"),
    [
        pytest.param(Signal.NODEFS_AVAILABLE, ONE_FS, ["writer", "logger", "volume"], id="one fs counts all"),
        # with an imagefs, nodefs counts logs and local volumes, not the writable layer
        pytest.param(Signal.NODEFS_AVAILABLE, IMAGEFS, ["logger", "volume", "writer"], id="imagefs: nodefs"),
        # imagefs counts the writable layer only: the two others use nothing there and keep their order
        pytest.param(Signal.IMAGEFS_AVAILABLE, IMAGEFS, ["writer", "volume", "logger"], id="imagefs: rootfs only"),
        # split: containerfs is nodefs and counts all but images
        pytest.param(Signal.CONTAINERFS_AVAILABLE, SPLIT, ["writer", "logger", "volume"], id="split: containerfs"),
    ],
)
def test_disk_ranking_follows_layout(signal: Signal, layout: DiskLayout, expected: list[str]) -> None:
    pods = [pod("volume"), pod("logger"), pod("writer")]
    usage = {
        "writer": disk(rootfs=500 * MI),
        "logger": disk(logs=300 * MI),
        "volume": disk(volume=200 * MI),
    }
    assert names(rank_for_signal(signal, pods, usage, layout)) == expected


def test_disk_ranking_requests_then_priority() -> None:
    pods = [pod("big-but-requested", storage_request=1000 * MI), pod("small", priority=5), pod("smaller")]
    usage = {"big-but-requested": disk(rootfs=900 * MI), "small": disk(rootfs=20 * MI), "smaller": disk(rootfs=MI)}
    ranked = rank_for_signal(Signal.NODEFS_AVAILABLE, pods, usage, ONE_FS)
    assert names(ranked) == ["smaller", "small", "big-but-requested"]


def test_inode_ranking_counts_inodes() -> None:
    pods = [pod("bytes"), pod("files")]
    usage = {"bytes": disk(rootfs=900 * MI, inodes=10), "files": disk(rootfs=MI, inodes=100000)}
    assert names(rank_for_signal(Signal.NODEFS_INODES_FREE, pods, usage, ONE_FS)) == ["files", "bytes"]


def test_pod_disk_usage_only_local_volumes() -> None:
    p, u = pod("p"), disk(rootfs=1, logs=2, volume=4)
    assert pod_disk_usage(p, u, frozenset(FsStats), Resource.EPHEMERAL_STORAGE) == 7
    assert pod_disk_usage(p, u, frozenset({FsStats.LOGS}), Resource.EPHEMERAL_STORAGE) == 2


@pytest.mark.parametrize(
    ("signal", "layout", "expected"),
    [
        (Signal.MEMORY_AVAILABLE, ONE_FS, ()),
        (Signal.PID_AVAILABLE, ONE_FS, ()),
        (Signal.NODEFS_AVAILABLE, ONE_FS, (NodeReclaim.CONTAINERS, NodeReclaim.IMAGES)),
        (Signal.IMAGEFS_INODES_FREE, ONE_FS, (NodeReclaim.CONTAINERS, NodeReclaim.IMAGES)),
        (Signal.NODEFS_AVAILABLE, IMAGEFS, ()),
        (Signal.IMAGEFS_AVAILABLE, IMAGEFS, (NodeReclaim.CONTAINERS, NodeReclaim.IMAGES)),
        (Signal.CONTAINERFS_AVAILABLE, IMAGEFS, (NodeReclaim.CONTAINERS, NodeReclaim.IMAGES)),
        (Signal.IMAGEFS_AVAILABLE, SPLIT, (NodeReclaim.IMAGES,)),
        (Signal.NODEFS_INODES_FREE, SPLIT, (NodeReclaim.CONTAINERS,)),
        (Signal.CONTAINERFS_AVAILABLE, SPLIT, (NodeReclaim.CONTAINERS,)),
    ],
)
def test_node_reclaim(signal: Signal, layout: DiskLayout, expected: tuple[NodeReclaim, ...]) -> None:
    assert node_reclaim_for(signal, layout) == expected


def test_fs_stats_not_for_memory() -> None:
    assert fs_stats_for(Signal.MEMORY_AVAILABLE, ONE_FS) is None
