"""The volume manager over a scripted plugin, a fake mounter and a fake clock: waits, events, tear down,
reconstruction after a restart and orphan cleanup."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from nodeagent.volume.errors import SetUpError
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.mounter import MountInfo
from nodeagent.volume.token import TokenManager
from nodeagent.volumemanager import VolumeManager, VolumeWaitError
from tests.unit.fakeclock import FakeClock
from tests.unit.volume.fakes import FakeMounter, exists, is_dir, real

PLUGIN = "fake.io/fake"


class FakePlugin:
    name = PLUGIN
    requires_remount = True
    read_only = True

    def __init__(self, dirs: PodDirs) -> None:
        self.dirs = dirs
        self.failures: dict[str, str] = {}
        self.set_ups: list[tuple[str, str]] = []
        self.tear_downs: list[tuple[str, str]] = []

    def can_support(self, volume: Mapping[str, Any]) -> bool:
        return "fake" in volume

    async def set_up(self, pod: Mapping[str, Any], volume: Mapping[str, Any]) -> str:
        await asyncio.sleep(0)
        uid, name = pod["metadata"]["uid"], volume["name"]
        self.set_ups.append((uid, name))
        if name in self.failures:
            raise SetUpError(self.failures[name])
        path = self.dirs.volume_dir(uid, PLUGIN, name)
        os.makedirs(path, exist_ok=True)
        return path

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        self.tear_downs.append((pod_uid, volume_name))
        os.rmdir(self.dirs.volume_dir(pod_uid, PLUGIN, volume_name))

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        path = self.dirs.volume_dir(pod_uid, PLUGIN, volume_name)
        return path if os.path.isdir(path) else None


def pod(uid: str, *names: str, unsupported: tuple[str, ...] = ()) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": n, "fake": {}} for n in names]
    volumes += [{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in unsupported]
    return {
        "metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "default"},
        "spec": {
            "volumes": volumes,
            "containers": [{"name": "c", "volumeMounts": [{"name": v["name"], "mountPath": "/x"} for v in volumes]}],
        },
    }


class Harness:
    def __init__(self, root: Path) -> None:
        self.dirs = PodDirs(str(root))
        self.clock = FakeClock()
        self.plugin = FakePlugin(self.dirs)
        self.mounter = FakeMounter()
        self.events: list[tuple[str, str, str, str]] = []
        self.manager = self.new_manager()

    def new_manager(self) -> VolumeManager:
        self.plugin = FakePlugin(self.dirs)
        return VolumeManager(
            [self.plugin],
            dirs=self.dirs,
            mounter=self.mounter,
            clock=self.clock,
            events=lambda p, t, r, m: self.events.append((p["metadata"]["uid"], t, r, m)),
        )


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path)
    await h.manager.start()
    task = asyncio.create_task(h.manager.run())
    try:
        yield h
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_wait_returns_once_everything_is_set_up(harness: Harness) -> None:
    await asyncio.wait_for(harness.manager.wait_for_attach_and_mount(pod("u1", "a", "b")), 5)
    assert sorted(harness.plugin.set_ups) == [("u1", "a"), ("u1", "b")]
    assert sorted(harness.manager.mounted_volumes("u1")) == ["a", "b"]
    assert harness.manager.mounted_volumes("u1")["a"].read_only is True
    assert is_dir(harness.dirs.pod_dir("u1"), "plugins")


async def test_resync_sets_up_again_the_volumes_that_follow_objects(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert harness.plugin.set_ups == [("u1", "a"), ("u1", "a")]


async def test_failure_records_failed_mount_and_retries_with_backoff(harness: Harness) -> None:
    harness.plugin.failures["cfg"] = 'configmap "missing" not found'
    waiting = asyncio.create_task(harness.manager.wait_for_attach_and_mount(pod("u1", "cfg")))
    for _ in range(20):
        await asyncio.sleep(0)
    assert harness.events == [
        ("u1", "Warning", "FailedMount", 'MountVolume.SetUp failed for volume "cfg" : configmap "missing" not found')
    ]
    assert not waiting.done()
    await harness.clock.advance(0.4)
    assert len(harness.plugin.set_ups) == 1
    await harness.clock.advance(0.2)
    assert len(harness.plugin.set_ups) == 2
    del harness.plugin.failures["cfg"]
    await harness.clock.advance(1.1)
    await asyncio.wait_for(waiting, 5)
    assert len(harness.events) == 2


async def test_wait_times_out_with_upstreams_message(harness: Harness) -> None:
    harness.plugin.failures["cfg"] = "nope"
    waiting = asyncio.create_task(harness.manager.wait_for_attach_and_mount(pod("u1", "cfg", "ok")))
    for _ in range(20):
        await asyncio.sleep(0)
    for _ in range(130):
        await harness.clock.advance(1.0)
    with pytest.raises(VolumeWaitError) as caught:
        await asyncio.wait_for(waiting, 5)
    assert str(caught.value) == (
        "unmounted volumes=[cfg], unattached volumes=[], failed to process volumes=[]: "
        "timed out waiting for the condition"
    )
    assert caught.value.interrupted is False


async def test_unsupported_volume_fails_at_once(harness: Harness) -> None:
    with pytest.raises(VolumeWaitError) as caught:
        await harness.manager.wait_for_attach_and_mount(pod("u1", "a", unsupported=("data",)))
    assert str(caught.value) == (
        "unmounted volumes=[a data], unattached volumes=[], failed to process volumes=[data]: "
        'failed to get Plugin from volumeSpec for volume "data" '
        "err=persistentVolumeClaim volumes are not supported on this node (no volume plugin matched)"
    )


async def test_terminating_pod_stops_waiting(harness: Harness) -> None:
    harness.plugin.failures["a"] = "nope"
    stop = {"now": False}
    waiting = asyncio.create_task(
        harness.manager.wait_for_attach_and_mount(pod("u1", "a"), cancelled=lambda: stop["now"])
    )
    for _ in range(20):
        await asyncio.sleep(0)
    stop["now"] = True
    await harness.clock.advance(0.3)
    with pytest.raises(VolumeWaitError) as caught:
        await asyncio.wait_for(waiting, 5)
    assert caught.value.interrupted is True


async def test_unmount_pod_tears_down(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    await asyncio.wait_for(harness.manager.unmount_pod("u1"), 5)
    assert harness.plugin.tear_downs == [("u1", "a")]
    assert harness.manager.mounted_volumes("u1") == {}


async def test_restart_reconstructs_without_setting_up_again_first(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    # A new manager over the same disk, as after a restart.
    restarted = harness.new_manager()
    await restarted.start()
    assert sorted(restarted.mounted_volumes("u1")) == ["a"]
    task = asyncio.create_task(restarted.run())
    try:
        # The pod's wait does not wait: the volume is set up already; it is set up once more, idempotently.
        await asyncio.wait_for(restarted.wait_for_attach_and_mount(pod("u1", "a")), 1)
        for _ in range(20):
            await asyncio.sleep(0)
        assert harness.plugin.set_ups == [("u1", "a")]
        assert restarted.actual.get(("u1", "a")).reconstructed is False  # type: ignore[union-attr]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_orphans_are_released_and_their_directories_removed(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    restarted = harness.new_manager()
    await restarted.start()
    # Another orphan: a pod directory with a tmpfs left mounted below it and no volume the plugin knows.
    stray = harness.dirs.volume_dir("u2", "kubernetes.io/secret", "s")
    os.makedirs(stray)
    harness.mounter.table.append(MountInfo(real(stray), "tmpfs", "tmpfs"))
    task = asyncio.create_task(restarted.run())
    try:
        await restarted.cleanup_orphaned_pod_dirs(lambda uid: False)
        assert not exists(harness.dirs.pod_dir("u2"))
        assert ("unmount", real(stray)) in harness.mounter.calls
        # u1's volume is torn down by the reconciler (its tear-down in a thread), its directory goes at the next pass.
        await until(lambda: bool(harness.plugin.tear_downs))
        assert harness.plugin.tear_downs == [("u1", "a")]
        await restarted.cleanup_orphaned_pod_dirs(lambda uid: False)
        assert os.listdir(harness.dirs.pods_dir) == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_known_pods_keep_their_directories(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    os.makedirs(harness.dirs.pod_dir("u3"))
    await harness.manager.cleanup_orphaned_pod_dirs(lambda uid: uid == "u3")
    assert sorted(os.listdir(harness.dirs.pods_dir)) == ["u1", "u3"]
    assert harness.plugin.tear_downs == []


async def test_a_housekeeping_pass_with_no_orphan_hands_nothing_to_a_thread(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    handed: list[object] = []

    async def to_thread(function: Callable[..., object], /, *args: object) -> object:
        handed.append(function)
        return function(*args)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    await harness.manager.cleanup_orphaned_pod_dirs(lambda uid: False)
    assert handed == []  # the listing ran in the loop; nothing was an orphan
    os.makedirs(harness.dirs.pod_dir("u9"))
    await harness.manager.cleanup_orphaned_pod_dirs(lambda uid: False)
    assert len(handed) == 1  # the orphan's removal (it may unmount) still goes to a thread
    assert sorted(os.listdir(harness.dirs.pods_dir)) == ["u1"]


async def settle() -> None:
    """Let the manager's tasks run, without (fake) time going by."""
    for _ in range(20):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool]) -> None:
    """Let the manager's tasks (and their threads) run until the condition holds, without (fake) time going by."""

    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the condition did not come true")


async def test_idle_manager_runs_no_passes_while_time_goes_by(harness: Harness) -> None:
    await settle()
    assert harness.manager.idle is True
    passes = harness.manager.passes
    for _ in range(50):
        await harness.clock.advance(0.1)
    assert harness.manager.passes == passes
    assert harness.clock.sleepers == 0  # waiting for a change, no timer


async def test_pod_added_to_an_idle_manager_is_set_up_at_once(harness: Harness) -> None:
    await settle()
    assert harness.manager.idle is True
    # No time passes: the pod's arrival wakes the reconciler.
    await asyncio.wait_for(harness.manager.wait_for_attach_and_mount(pod("u1", "a")), 5)
    assert harness.plugin.set_ups == [("u1", "a")]
    await settle()
    assert harness.manager.idle is True
    passes = harness.manager.passes
    for _ in range(20):
        await harness.clock.advance(0.1)
    assert harness.manager.passes == passes  # everything set up: idle again


async def test_pod_removed_from_an_idle_manager_is_torn_down(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    await settle()
    assert harness.manager.idle is True
    await asyncio.wait_for(harness.manager.unmount_pod("u1"), 5)
    assert harness.plugin.tear_downs == [("u1", "a")]
    await settle()
    assert harness.manager.idle is True


async def test_a_volume_in_backoff_keeps_the_reconciler_polling(harness: Harness) -> None:
    harness.plugin.failures["cfg"] = "nope"
    waiting = asyncio.create_task(harness.manager.wait_for_attach_and_mount(pod("u1", "cfg")))
    await settle()
    assert len(harness.plugin.set_ups) == 1
    assert harness.manager.idle is False
    passes = harness.manager.passes
    await harness.clock.advance(0.1)
    await harness.clock.advance(0.1)
    assert harness.manager.passes == passes + 2  # one pass per 0.1 s while the volume waits out its back-off
    del harness.plugin.failures["cfg"]
    for _ in range(5):
        await harness.clock.advance(0.1)
    await asyncio.wait_for(waiting, 5)
    assert len(harness.plugin.set_ups) == 2
    await settle()
    assert harness.manager.idle is True


async def test_failed_tear_down_is_retried(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    await settle()
    # The volume directory is not empty: the fake plugin's rmdir fails, the tear down backs off and is retried.
    stray = os.path.join(harness.dirs.volume_dir("u1", PLUGIN, "a"), "busy")
    os.makedirs(stray)
    unmounting = asyncio.create_task(harness.manager.unmount_pod("u1"))
    await until(lambda: bool(harness.plugin.tear_downs))
    await settle()
    assert harness.plugin.tear_downs == [("u1", "a")]
    assert harness.manager.idle is False
    os.rmdir(stray)
    for _ in range(6):
        await harness.clock.advance(0.1)
    await asyncio.wait_for(unmounting, 5)
    assert harness.plugin.tear_downs == [("u1", "a"), ("u1", "a")]


async def test_reconstructed_volume_of_an_unsynced_pod_leaves_the_manager_idle(harness: Harness) -> None:
    await harness.manager.wait_for_attach_and_mount(pod("u1", "a"))
    restarted = harness.new_manager()
    await restarted.start()
    task = asyncio.create_task(restarted.run())
    try:
        await settle()
        assert restarted.idle is True  # nothing to do until the pod syncs or housekeeping lets it go
        await restarted.cleanup_orphaned_pod_dirs(lambda uid: False)
        await until(lambda: bool(harness.plugin.tear_downs))  # the tear-down runs in a thread
        assert harness.plugin.tear_downs == [("u1", "a")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class CountingTokens(TokenManager):
    def __init__(self) -> None:
        super().__init__(None, now=lambda: 0.0)
        self.cleanups = 0

    def cleanup(self) -> None:
        self.cleanups += 1
        super().cleanup()


async def test_idle_manager_still_cleans_the_token_cache_every_minute(tmp_path: Path) -> None:
    clock = FakeClock()
    tokens = CountingTokens()
    dirs = PodDirs(str(tmp_path))
    manager = VolumeManager([FakePlugin(dirs)], dirs=dirs, mounter=FakeMounter(), clock=clock, tokens=tokens)
    await manager.start()
    task = asyncio.create_task(manager.run())
    try:
        await settle()
        passes = manager.passes
        await clock.advance(59.0)
        assert (tokens.cleanups, manager.passes) == (0, passes)
        await clock.advance(1.0)
        assert tokens.cleanups == 1
        assert manager.passes == passes + 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
