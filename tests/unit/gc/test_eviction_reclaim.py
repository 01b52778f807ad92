"""The eviction manager's node-level reclaim (upstream's reclaimNodeLevelResources): under disk pressure, dead
containers then unused images are freed, the node is observed again, and no pod goes when that was enough. Memory
pressure has nothing of the node's to free. Time is a fake clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from nodeagent.config import KubeletConfiguration
from nodeagent.evictionmanager import EvictionInputs, EvictionManager, eviction_config
from nodeagent.stats.types import FsStats, RuntimeStats, Summary
from tests.unit.fakeclock import FakeClock
from tests.unit.test_evictionmanager import GI, MI, T0, Harness, node, pod, pod_stats


def disk(available: int, memory_available: int = 3 * GI) -> Summary:
    base = node(available=memory_available, working_set=1 * GI)
    fs = FsStats(time=T0, available_bytes=available, capacity_bytes=100 * GI, inodes_free=900, inodes=1000)
    return Summary(
        node=replace(base, fs=fs, runtime=RuntimeStats(image_fs=fs, container_fs=fs)),
        pods=(pod_stats("u1", "app", 16 * MI),),
    )


class Reclaim:
    """Reclaim steps that free `frees` bytes each (on the harness's summary) and record their order."""

    def __init__(self, harness: Harness, frees: dict[str, int], *, fail: str = "") -> None:
        self.harness = harness
        self.frees = frees
        self.fail = fail
        self.calls: list[str] = []

    def step(self, name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            self.calls.append(name)
            if name == self.fail:
                raise RuntimeError(f"{name} failed")
            fs = self.harness.summary.node.fs
            assert fs is not None and fs.available_bytes is not None
            self.harness.summary = disk(fs.available_bytes + self.frees.get(name, 0))

        return run

    def inputs(self) -> EvictionInputs:
        return replace(
            self.harness.inputs(),
            delete_all_unused_containers=self.step("containers"),
            delete_unused_images=self.step("images"),
        )


def manager(**hard: str) -> EvictionManager:
    return EvictionManager(eviction_config(replace(KubeletConfiguration(), eviction_hard=hard)), clock=FakeClock())


CASES = [
    # (threshold, available before, freed by containers, freed by images, fail, evicted)
    pytest.param("10Gi", 9 * GI, 0, 2 * GI, "", False, id="images free enough: nobody evicted"),
    pytest.param("10Gi", 9 * GI, 2 * GI, 0, "", False, id="containers free enough: images still run, as upstream"),
    pytest.param("10Gi", 9 * GI, 0, GI // 2, "", True, id="too little freed: one pod evicted"),
    pytest.param("10Gi", 9 * GI, 0, 2 * GI, "containers", False, id="a failed step does not stop the next"),
]


@pytest.mark.parametrize(("threshold", "before", "containers", "images", "fail", "evicted"), CASES)
async def test_disk_pressure_reclaims_node_level_resources_first(
    threshold: str, before: int, containers: int, images: int, fail: str, evicted: bool
) -> None:
    harness = Harness(disk(before), [pod("u1", "app")])
    reclaim = Reclaim(harness, {"containers": containers, "images": images}, fail=fail)
    evictions = manager(**{"imagefs.available": threshold})
    await evictions.synchronize(reclaim.inputs())
    # Upstream's order: the event, then dead containers, then unused images; the condition holds either way.
    assert harness.node_events == [("Warning", "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage")]
    assert reclaim.calls == ["containers", "images"]
    assert evictions.pressure_conditions() == frozenset({"DiskPressure"})
    assert [name for name, _ in harness.evicted] == (["app"] if evicted else [])


async def test_the_minimum_reclaim_must_be_reached_too() -> None:
    harness = Harness(disk(9 * GI), [pod("u1", "app")])
    reclaim = Reclaim(harness, {"images": 2 * GI})  # 11Gi available: above 10Gi, short of 10Gi + 2Gi
    config = replace(
        KubeletConfiguration(),
        eviction_hard={"imagefs.available": "10Gi"},
        eviction_minimum_reclaim={"imagefs.available": "2Gi"},
    )
    evictions = EvictionManager(eviction_config(config), clock=FakeClock())
    await evictions.synchronize(reclaim.inputs())
    assert [name for name, _ in harness.evicted] == ["app"]


async def test_memory_pressure_has_nothing_to_reclaim_on_the_node() -> None:
    harness = Harness(disk(50 * GI, memory_available=42 * MI), [pod("u1", "app")])
    reclaim = Reclaim(harness, {"images": 10 * GI})
    evictions = manager(**{"memory.available": "100Mi"})
    await evictions.synchronize(reclaim.inputs())
    assert reclaim.calls == []
    assert [name for name, _ in harness.evicted] == ["app"]


async def test_without_reclaim_wired_the_pod_is_evicted_at_once() -> None:
    harness = Harness(disk(9 * GI), [pod("u1", "app")])
    evictions = manager(**{"imagefs.available": "10Gi"})
    await evictions.synchronize(harness.inputs())
    assert [name for name, _ in harness.evicted] == ["app"]
