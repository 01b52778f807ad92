"""The image GC manager over a fake runtime: records kept across passes, the high/low thresholds, the minimum and
maximum age, the sandbox image, events, the metric and the failure loop. Time is a fake clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from eviction.imagegc import ImagePolicy
from nodeagent.gc import ImageGCError, ImageGCManager, ImageGCMetrics
from nodeagent.gc.images import is_sandbox_image, sandbox_image_from_status
from tests.unit.fakeclock import FakeClock
from tests.unit.gc.fakes import FakeRuntime, container, image

MI = 1 << 20
CAPACITY = 1000 * MI
PAUSE = "127.0.0.1:5000/pause:3.10"


class Harness:
    def __init__(self, runtime: FakeRuntime, *, available: int, policy: ImagePolicy | None = None) -> None:
        self.runtime = runtime
        self.available = available
        self.capacity = CAPACITY
        self.events: list[tuple[str, str, str]] = []
        self.clock = FakeClock()
        self.metrics = ImageGCMetrics()
        self.manager = ImageGCManager(
            runtime,
            runtime,
            image_fs=self.image_fs,
            policy=policy or ImagePolicy(),
            clock=self.clock,
            metrics=self.metrics,
            record_node_event=lambda t, r, m: self.events.append((t, r, m)),
        )

    async def image_fs(self) -> tuple[int, int] | None:
        # Removing an image frees its size, as the runtime's filesystem would show.
        if not self.capacity:
            return None
        freed = sum(i.size for i in ALL.values() if i.id not in self.runtime.images)
        return self.capacity, self.available + freed

    def collected(self, reason: str) -> float | None:
        return self.metrics.registry.get_sample_value("kubelet_image_garbage_collected_total", {"reason": reason})


ALL = {
    "sha256:pause": image("sha256:pause", 1 * MI, tags=(PAUSE,)),
    "sha256:busybox": image("sha256:busybox", 2 * MI, tags=("127.0.0.1:5000/busybox:1.37",)),
    "sha256:old": image("sha256:old", 30 * MI),
    "sha256:older": image("sha256:older", 40 * MI),
    "sha256:pinned": image("sha256:pinned", 100 * MI, pinned=True),
}


def runtime() -> FakeRuntime:
    fake = FakeRuntime(sandbox_image=PAUSE).add(*ALL.values())
    # An exited container still holds its image, as upstream's GetPods(all).
    fake.add(container("c1", "p1", "main", created=0, image_ref="sha256:busybox"))
    return fake


async def test_below_the_high_threshold_nothing_goes() -> None:
    harness = Harness(runtime(), available=200 * MI)  # 80% used
    await harness.manager.garbage_collect()
    assert harness.runtime.removed == []
    assert set(harness.manager.records) == set(ALL)


async def test_over_the_high_threshold_lru_images_past_the_minimum_age_go_down_to_the_low_threshold() -> None:
    harness = Harness(runtime(), available=140 * MI)  # 86% used: 60Mi to free to reach 80%
    with pytest.raises(ImageGCError, match="Attempted to free 62914560 bytes, but only found 0 bytes"):
        await harness.manager.garbage_collect()  # first detection at t=0: all too young (2m)
    assert harness.runtime.removed == []
    assert harness.events[-1][1] == "FreeDiskSpaceFailed"
    await harness.clock.advance(120)
    # Both never used, detected together: 30Mi alone is not enough, so both go.
    await harness.manager.garbage_collect()
    assert sorted(harness.runtime.removed) == ["sha256:old", "sha256:older"]
    assert harness.collected("space") == 2
    assert harness.collected("age") == 0
    # Never the sandbox image, an image a container uses, or a pinned one.
    assert {"sha256:pause", "sha256:busybox", "sha256:pinned"} <= set(harness.runtime.images)


async def test_stops_once_enough_is_freed_least_recently_used_first() -> None:
    fake = runtime()
    harness = Harness(fake, available=900 * MI)
    await harness.manager.garbage_collect()  # first detection at t=0
    # "older" is used by a container for a while, then that container goes: "old" was never used, so it goes first.
    fake.add(container("c2", "p2", "main", created=10, image_ref="sha256:older"))
    await harness.clock.advance(60)
    await harness.manager.detect_images(harness.clock.wall())
    del fake.containers["c2"]
    await harness.clock.advance(60)
    harness.available = 150 * MI  # 85% used: 50Mi to free; "old" (30Mi) then "older" (40Mi)
    await harness.manager.garbage_collect()
    assert fake.removed == ["sha256:old", "sha256:older"]
    harness.available = 80 * MI  # with the 70Mi freed: 85% used again
    fake.add(image("sha256:new", 60 * MI))
    with pytest.raises(ImageGCError):
        await harness.manager.garbage_collect()  # the new one is too young
    assert harness.events == [
        (
            "Warning",
            "FreeDiskSpaceFailed",
            "Failed to garbage collect required amount of images. Attempted to free 52428800 bytes, "
            "but only found 0 bytes eligible to free.",
        )
    ]


async def test_images_unused_past_the_maximum_age_go_whatever_the_disk() -> None:
    policy = ImagePolicy(min_age=timedelta(minutes=2), max_age=timedelta(minutes=10))
    harness = Harness(runtime(), available=900 * MI, policy=policy)
    await harness.manager.garbage_collect()
    await harness.clock.advance(600)  # the agent has run only the maximum age: it cannot know yet
    await harness.manager.garbage_collect()
    assert harness.runtime.removed == []
    await harness.clock.advance(1)
    await harness.manager.garbage_collect()
    assert sorted(harness.runtime.removed) == ["sha256:old", "sha256:older"]
    assert harness.collected("age") == 2


async def test_delete_unused_images_frees_everything_eligible() -> None:
    harness = Harness(runtime(), available=900 * MI)
    await harness.manager.garbage_collect()
    await harness.clock.advance(120)
    harness.runtime.add(image("sha256:fresh", 5 * MI))  # pulled just now: kept (minimum age)
    await harness.manager.delete_unused_images()
    assert sorted(harness.runtime.removed) == ["sha256:old", "sha256:older"]
    assert "sha256:fresh" in harness.runtime.images
    assert harness.collected("space") == 2


async def test_a_failed_removal_does_not_stop_the_others_and_fails_the_pass() -> None:
    harness = Harness(runtime(), available=900 * MI, policy=ImagePolicy(min_age=timedelta(0)))
    harness.runtime.fail_remove.add("sha256:older")
    with pytest.raises(ImageGCError, match="errors in image deletion"):
        await harness.manager.delete_unused_images()
    assert harness.runtime.removed == ["sha256:old"]
    assert "sha256:older" in harness.manager.records  # still there, still known


async def test_run_records_image_gc_failed_from_the_second_failure_in_a_row() -> None:
    harness = Harness(runtime(), available=900 * MI)
    harness.runtime.fail_list = True
    task = asyncio.create_task(harness.manager.run(period=300))
    try:
        await harness.clock.advance(0)
        assert harness.events == []  # once: only logged, as upstream
        await harness.clock.advance(300)
        assert [e[1] for e in harness.events] == ["ImageGCFailed"]
        harness.runtime.fail_list = False
        await harness.clock.advance(300)
        await harness.clock.advance(300)
        assert [e[1] for e in harness.events] == ["ImageGCFailed"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_zero_capacity_records_invalid_disk_capacity() -> None:
    harness = Harness(runtime(), available=0)
    harness.capacity = 0
    with pytest.raises(ImageGCError, match="invalid capacity 0 on image filesystem"):
        await harness.manager.garbage_collect()
    assert harness.events == [("Warning", "InvalidDiskCapacity", "invalid capacity 0 on image filesystem")]


@pytest.mark.parametrize(
    ("configured", "tags", "expected"),
    [
        (PAUSE, (PAUSE,), True),
        ("registry.k8s.io/pause:3.10", ("registry.k8s.io/pause:3.10",), True),
        ("pause:3.10", ("docker.io/library/pause:3.10",), True),
        ("example.com/pause", ("example.com/pause:latest",), True),
        (PAUSE, ("127.0.0.1:5000/busybox:1.37",), False),
        (None, (PAUSE,), False),
    ],
)
def test_is_sandbox_image(configured: str | None, tags: tuple[str, ...], expected: bool) -> None:
    assert is_sandbox_image(image("sha256:x", 1, tags=tags), configured) is expected


async def test_sandbox_image_from_the_runtimes_verbose_status() -> None:
    fake = FakeRuntime(sandbox_image=PAUSE)
    assert sandbox_image_from_status(await fake.status(verbose=True)) == PAUSE
    assert sandbox_image_from_status(await fake.status()) is None
