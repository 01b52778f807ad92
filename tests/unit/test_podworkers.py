"""PodWorkers: one task per UID, latest update wins, never two syncs of one pod at once, and the state machine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeagent.podworkers import PodWorkers, UpdatePodOptions, UpdateType, WorkState, grace_period

Pod = dict[str, Any]


def pod(uid: str, *, image: str = "busybox", deleted: bool = False, grace: int | None = None) -> Pod:
    meta: dict[str, Any] = {"name": f"p-{uid}", "namespace": "default", "uid": uid}
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = 5
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": image}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": spec}


class RecordingSyncer:
    """Records calls; a sync can be held open with `gate` to observe coalescing and exclusivity."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.gate: asyncio.Event | None = None
        self.running: dict[str, int] = {}
        self.max_concurrent_per_pod = 0
        self.finish_after: set[str] = set()
        self.fail_terminated_once: set[str] = set()

    async def _enter(self, uid: str) -> None:
        self.running[uid] = self.running.get(uid, 0) + 1
        self.max_concurrent_per_pod = max(self.max_concurrent_per_pod, self.running[uid])
        if self.gate is not None:
            await self.gate.wait()

    def _leave(self, uid: str) -> None:
        self.running[uid] -= 1

    async def sync_pod(self, update_type: UpdateType, pod: Pod) -> bool:
        uid = pod["metadata"]["uid"]
        await self._enter(uid)
        self.calls.append(("sync", uid, pod["spec"]["containers"][0]["image"]))
        self._leave(uid)
        return uid in self.finish_after

    async def sync_terminating_pod(self, pod: Pod, grace_period: int, kill_reason: str | None) -> None:
        uid = pod["metadata"]["uid"]
        await self._enter(uid)
        self.calls.append(("terminating", uid, (grace_period, kill_reason)))
        self._leave(uid)

    async def sync_terminated_pod(self, pod: Pod) -> None:
        uid = pod["metadata"]["uid"]
        self.calls.append(("terminated", uid, None))
        if uid in self.fail_terminated_once:
            self.fail_terminated_once.discard(uid)
            raise RuntimeError("cleanup failed")


async def settle(workers: PodWorkers) -> None:
    for _ in range(20):
        await workers.wait_idle()
        await asyncio.sleep(0)


async def test_latest_update_wins_while_a_sync_runs() -> None:
    syncer = RecordingSyncer()
    syncer.gate = asyncio.Event()
    workers = PodWorkers(syncer)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a", image="v1")))
    await asyncio.sleep(0)  # the first sync is now held open by the gate
    for version in ("v2", "v3", "v4"):
        workers.update_pod(UpdatePodOptions(UpdateType.UPDATE, pod("a", image=version)))
    syncer.gate.set()
    await settle(workers)
    assert [c[2] for c in syncer.calls] == ["v1", "v4"]
    assert syncer.max_concurrent_per_pod == 1
    await workers.stop()


async def test_pods_sync_independently() -> None:
    syncer = RecordingSyncer()
    workers = PodWorkers(syncer)
    for uid in ("a", "b", "c"):
        workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod(uid)))
    await settle(workers)
    assert sorted(c[1] for c in syncer.calls) == ["a", "b", "c"]
    assert all(workers.state(u) is WorkState.SYNCING for u in ("a", "b", "c"))
    await workers.stop()


async def test_deletion_goes_terminating_then_terminated_and_never_back() -> None:
    syncer = RecordingSyncer()
    workers = PodWorkers(syncer)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await settle(workers)
    workers.update_pod(UpdatePodOptions(UpdateType.UPDATE, pod("a", deleted=True)))
    await settle(workers)
    assert [c[0] for c in syncer.calls] == ["sync", "terminating", "terminated"]
    assert syncer.calls[1][2] == (5, None)  # the deletion's grace period
    assert workers.state("a") is WorkState.TERMINATED
    # A later update of the same UID does not resurrect it.
    workers.update_pod(UpdatePodOptions(UpdateType.UPDATE, pod("a")))
    await settle(workers)
    assert [c[0] for c in syncer.calls] == ["sync", "terminating", "terminated"]
    workers.forget("a")
    assert workers.known_uids() == []
    await workers.stop()


async def test_final_phase_starts_termination() -> None:
    syncer = RecordingSyncer()
    syncer.finish_after = {"job"}
    workers = PodWorkers(syncer)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("job", grace=7)))
    await settle(workers)
    assert [c[0] for c in syncer.calls] == ["sync", "terminating", "terminated"]
    assert syncer.calls[1][2] == (7, None)
    await workers.stop()


async def test_kill_uses_shortest_override_and_reason() -> None:
    syncer = RecordingSyncer()
    syncer.gate = asyncio.Event()
    workers = PodWorkers(syncer)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await asyncio.sleep(0)
    workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod("a"), grace_period_override=20, kill_reason="Evicted"))
    workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod("a"), grace_period_override=3))
    syncer.gate.set()
    await settle(workers)
    assert ("terminating", "a", (3, "Evicted")) in syncer.calls
    await workers.stop()


async def test_failed_cleanup_is_retried_by_the_next_update() -> None:
    syncer = RecordingSyncer()
    syncer.fail_terminated_once = {"a"}
    errors: list[str] = []
    workers = PodWorkers(syncer, on_error=lambda uid, exc: errors.append(f"{uid}:{exc}"))
    workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod("a")))
    await settle(workers)
    assert errors == ["a:cleanup failed"]
    workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod("a")))
    await settle(workers)
    assert [c[0] for c in syncer.calls] == ["terminating", "terminated", "terminated"]
    workers.forget("a")
    assert workers.known_uids() == []
    await workers.stop()


@pytest.mark.parametrize(
    ("p", "override", "expected"),
    [
        (pod("a"), None, 30),
        (pod("a", grace=10), None, 10),
        (pod("a", grace=10, deleted=True), None, 5),
        (pod("a", grace=10, deleted=True), 1, 1),
        (pod("a"), -4, 0),
    ],
)
def test_grace_period(p: Pod, override: int | None, expected: int) -> None:
    assert grace_period(p, override) == expected
