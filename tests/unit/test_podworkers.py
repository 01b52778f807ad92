"""PodWorkers: one task per UID, latest update wins, never two syncs of one pod at once, the state machine, and
statuses read from the PLEG's cache newer than the worker's last sync."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from cri.errors import UnavailableError
from nodeagent.kube.errors import ApiUnavailable
from nodeagent.podworkers import PodWorkers, UpdatePodOptions, UpdateType, WorkState, grace_period
from pleg.cache import Cache, PodStatusUnavailable
from pleg.status import PodStatus

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
        self.failure: Exception = RuntimeError("cleanup failed")
        self.statuses: list[tuple[str, PodStatus]] = []

    async def _enter(self, uid: str) -> None:
        self.running[uid] = self.running.get(uid, 0) + 1
        self.max_concurrent_per_pod = max(self.max_concurrent_per_pod, self.running[uid])
        if self.gate is not None:
            await self.gate.wait()

    def _leave(self, uid: str) -> None:
        self.running[uid] -= 1

    async def sync_pod(self, update_type: UpdateType, pod: Pod, status: PodStatus) -> bool:
        uid = pod["metadata"]["uid"]
        self.statuses.append(("sync", status))
        await self._enter(uid)
        self.calls.append(("sync", uid, pod["spec"]["containers"][0]["image"]))
        self._leave(uid)
        return uid in self.finish_after

    async def sync_terminating_pod(
        self, pod: Pod, status: PodStatus, grace_period: int, kill_reason: str | None
    ) -> None:
        uid = pod["metadata"]["uid"]
        self.statuses.append(("terminating", status))
        await self._enter(uid)
        self.calls.append(("terminating", uid, (grace_period, kill_reason)))
        self._leave(uid)

    async def sync_terminated_pod(self, pod: Pod, status: PodStatus) -> None:
        uid = pod["metadata"]["uid"]
        self.statuses.append(("terminated", status))
        self.calls.append(("terminated", uid, None))
        if uid in self.fail_terminated_once:
            self.fail_terminated_once.discard(uid)
            raise self.failure


def fresh_cache() -> Cache:
    """A cache that is always newer than any sync of workers whose clock stays at 0."""
    cache = Cache()
    cache.update_time(1.0)
    return cache


def new_workers(syncer: RecordingSyncer, **kwargs: Any) -> PodWorkers:
    return PodWorkers(syncer, pod_cache=fresh_cache(), now=lambda: 0.0, **kwargs)


async def settle(workers: PodWorkers) -> None:
    for _ in range(20):
        await workers.wait_idle()
        await asyncio.sleep(0)


async def test_latest_update_wins_while_a_sync_runs() -> None:
    syncer = RecordingSyncer()
    syncer.gate = asyncio.Event()
    workers = new_workers(syncer)
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
    workers = new_workers(syncer)
    for uid in ("a", "b", "c"):
        workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod(uid)))
    await settle(workers)
    assert sorted(c[1] for c in syncer.calls) == ["a", "b", "c"]
    assert all(workers.state(u) is WorkState.SYNCING for u in ("a", "b", "c"))
    await workers.stop()


async def test_deletion_goes_terminating_then_terminated_and_never_back() -> None:
    syncer = RecordingSyncer()
    workers = new_workers(syncer)
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


async def test_containers_could_run_until_the_worker_finished_terminating() -> None:
    syncer = RecordingSyncer()
    workers = new_workers(syncer)
    assert not workers.could_have_running_containers("a")  # no worker: nothing runs
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await settle(workers)
    assert workers.could_have_running_containers("a")
    syncer.gate = asyncio.Event()
    workers.update_pod(UpdatePodOptions(UpdateType.UPDATE, pod("a", deleted=True)))
    await asyncio.sleep(0)  # terminating, held open by the gate
    assert workers.state("a") is WorkState.TERMINATING
    assert workers.could_have_running_containers("a")
    syncer.gate.set()
    await settle(workers)
    assert workers.state("a") is WorkState.TERMINATED
    assert not workers.could_have_running_containers("a")
    await workers.stop()


async def test_final_phase_starts_termination() -> None:
    syncer = RecordingSyncer()
    syncer.finish_after = {"job"}
    workers = new_workers(syncer)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("job", grace=7)))
    await settle(workers)
    assert [c[0] for c in syncer.calls] == ["sync", "terminating", "terminated"]
    assert syncer.calls[1][2] == (7, None)
    await workers.stop()


async def test_kill_uses_shortest_override_and_reason() -> None:
    syncer = RecordingSyncer()
    syncer.gate = asyncio.Event()
    workers = new_workers(syncer)
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
    workers = new_workers(syncer, on_error=lambda uid, exc: errors.append(f"{uid}:{exc}"))
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
    ("failure", "traceback"),
    [(ApiUnavailable("DELETE /api/v1/namespaces/default/pods/a: ReadError"), False), (RuntimeError("a bug"), True)],
)
async def test_an_api_error_is_logged_in_one_line_and_a_bug_with_its_traceback(
    failure: Exception, traceback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    syncer = RecordingSyncer()
    syncer.fail_terminated_once = {"a"}
    syncer.failure = failure
    workers = new_workers(syncer)
    with caplog.at_level(logging.ERROR, logger="nodeagent.podworkers"):
        workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod("a")))
        await settle(workers)
    [record] = [r for r in caplog.records if r.getMessage().startswith("pod worker sync failed")]
    assert record.getMessage().endswith(f"state=terminated error={failure}")
    assert bool(record.exc_info) is traceback
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


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_a_sync_waits_for_a_status_newer_than_the_last_sync() -> None:
    syncer = RecordingSyncer()
    cache, clock = Cache(), Clock()
    workers = PodWorkers(syncer, pod_cache=cache, now=clock)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await asyncio.sleep(0)
    assert syncer.calls == []  # the cache knows nothing yet: no first relist
    cache.update_time(50.0)  # the first relist finished
    await settle(workers)
    assert [c[0] for c in syncer.calls] == ["sync"]
    assert syncer.statuses[-1][1] == PodStatus(uid="a")  # nothing of the pod in the runtime yet
    # The sync ended at 100: a status the cache got at 90 is older than what the worker did itself.
    cache.set("a", PodStatus(uid="a", name="seen-at-90"), None, 90.0)
    workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod("a")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert [c[0] for c in syncer.calls] == ["sync"]
    assert cache.waiting() == 1
    cache.set("a", PodStatus(uid="a", name="seen-at-101"), None, 101.0)
    await settle(workers)
    assert [c[0] for c in syncer.calls] == ["sync", "sync"]
    assert syncer.statuses[-1][1].name == "seen-at-101"
    await workers.stop()


async def test_a_worker_that_needs_a_newer_status_asks_for_a_relist_of_its_pod() -> None:
    """Without the request the worker waits for the next relist or cache tick (seconds with the evented PLEG): a
    delete right after a sync was killed 3.3 s late. With it, a stale cache brings one request, a fresh one none."""
    syncer = RecordingSyncer()
    cache, clock = Cache(), Clock()
    cache.update_time(50.0)
    asked: list[str] = []
    workers = PodWorkers(syncer, pod_cache=cache, now=clock, request_relist=asked.append)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await settle(workers)
    assert asked == []  # the cache was newer than the (never) last sync: nothing to ask for
    workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod("a", deleted=True)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert asked == ["a"] and cache.waiting() == 1
    assert [c[0] for c in syncer.calls] == ["sync"]
    cache.set_observed_time("a", 100.2)  # what the requested relist does for an unchanged pod
    for _ in range(5):
        await asyncio.sleep(0)
    assert [c[0] for c in syncer.calls] == ["sync", "terminating"]
    await workers.stop()


async def test_a_relist_that_finished_after_the_sync_answers_for_an_unchanged_pod() -> None:
    syncer = RecordingSyncer()
    cache, clock = Cache(), Clock()
    cache.set("a", PodStatus(uid="a", name="old"), None, 10.0)
    cache.update_time(20.0)
    workers = PodWorkers(syncer, pod_cache=cache, now=clock)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await settle(workers)
    workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod("a")))
    await asyncio.sleep(0)
    assert len(syncer.calls) == 1
    cache.update_time(100.5)
    await settle(workers)
    assert [s[1].name for s in syncer.statuses] == ["old", "old"]
    await workers.stop()


async def test_a_failed_inspection_is_never_acted_on() -> None:
    syncer = RecordingSyncer()
    cache = Cache()
    errors: list[BaseException] = []
    workers = PodWorkers(syncer, pod_cache=cache, now=lambda: 0.0, on_error=lambda uid, exc: errors.append(exc))
    cache.set("a", None, UnavailableError("ContainerStatus", None, "runtime gone"), 5.0)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await settle(workers)
    assert syncer.calls == []
    assert len(errors) == 1 and isinstance(errors[0], PodStatusUnavailable)
    cache.set("a", PodStatus(uid="a", name="back"), None, 6.0)
    workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod("a")))
    await settle(workers)
    assert [s[1].name for s in syncer.statuses] == ["back"]
    await workers.stop()


async def test_termination_reads_a_fresh_status_before_each_step() -> None:
    syncer = RecordingSyncer()
    cache, clock = Cache(), Clock()
    cache.update_time(99.0)
    workers = PodWorkers(syncer, pod_cache=cache, now=clock)
    workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod("a")))
    for _ in range(10):
        await asyncio.sleep(0)
    assert [c[0] for c in syncer.calls] == ["terminating"]  # cleanup waits for a status newer than the kill
    assert cache.waiting() == 1
    cache.set("a", PodStatus(uid="a", name="after-kill"), None, 100.5)
    await settle(workers)
    assert [(kind, status.name) for kind, status in syncer.statuses] == [
        ("terminating", ""),
        ("terminated", "after-kill"),
    ]
    await workers.stop()


async def delete_while_terminating(workers: PodWorkers, syncer: RecordingSyncer) -> None:
    """Pod "a" finishes on its own (sync_pod says so; `syncer.finish_after` holds it) and its delete arrives while
    the terminating sync is held open."""
    syncer.gate = asyncio.Event()
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("a")))
    await asyncio.sleep(0)
    syncer.gate.set()
    syncer.gate = asyncio.Event()  # the terminating sync is now held open
    for _ in range(5):
        await asyncio.sleep(0)
    workers.update_pod(UpdatePodOptions(UpdateType.UPDATE, pod("a", deleted=True)))
    syncer.gate.set()
    await settle(workers)


async def test_a_delete_that_arrives_while_the_pod_terminates_on_its_own_is_not_lost() -> None:
    """The pod finished by itself (sync_pod said so) and was deleted while the worker was killing what was left:
    the terminated sync runs again with the deleted pod, so the agent removes the API object."""
    syncer = RecordingSyncer()
    syncer.finish_after.add("a")
    workers = new_workers(syncer)
    seen: list[bool] = []
    terminated = syncer.sync_terminated_pod

    async def record(p: Pod, status: PodStatus) -> None:
        seen.append("deletionTimestamp" in p["metadata"])
        await terminated(p, status)

    syncer.sync_terminated_pod = record  # type: ignore[method-assign,assignment]
    await delete_while_terminating(workers, syncer)
    assert seen == [False, True]
    assert workers.state("a") is WorkState.TERMINATED
    await workers.stop()


async def test_a_late_delete_whose_sync_failed_is_retried() -> None:
    """The late delete's terminated sync fails (the apiserver answered 401 in the CI run at 556e353): the worker is
    not finished, the failure goes to on_error (the kubelet's back-off), and the next update runs the terminated sync
    again with the deleted pod, as upstream retries a pod's last sync."""
    syncer = RecordingSyncer()
    syncer.finish_after.add("a")
    failed: list[str] = []
    workers = new_workers(syncer, on_error=lambda uid, exc: failed.append(uid))
    seen: list[bool] = []
    terminated = syncer.sync_terminated_pod
    failures = [RuntimeError("401 Unauthorized")]

    async def record(p: Pod, status: PodStatus) -> None:
        seen.append("deletionTimestamp" in p["metadata"])
        if seen[-1] and failures:
            raise failures.pop()
        await terminated(p, status)

    syncer.sync_terminated_pod = record  # type: ignore[method-assign,assignment]
    await delete_while_terminating(workers, syncer)
    assert (seen, failed) == ([False, True], ["a"])
    assert workers.could_have_running_containers("a") is False

    workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod("a", deleted=True)))  # the kubelet's retry
    await settle(workers)
    assert seen == [False, True, True]
    workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod("a", deleted=True)))  # finished now: nothing runs
    await settle(workers)
    assert seen == [False, True, True]
    await workers.stop()
