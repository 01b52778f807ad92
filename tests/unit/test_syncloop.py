"""The syncLoop dispatches each kind of event to the right SyncHandler call, and ticks on an injected clock."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeagent.podconfig import Operation, PodUpdate
from nodeagent.syncloop import ProbeResult, SyncLoop, SyncLoopChannels
from pleg.events import PodLifecycleEvent, PodLifecycleEventType
from tests.unit.fakeclock import FakeClock

Pod = dict[str, Any]


def pod(uid: str) -> Pod:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default"}, "spec": {}}


class RecordingHandler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def _record(self, name: str, pods: Sequence[Pod]) -> None:
        self.calls.append((name, [p["metadata"]["uid"] for p in pods]))

    async def handle_pod_additions(self, pods: Sequence[Pod]) -> None:
        self._record("add", pods)

    async def handle_pod_updates(self, pods: Sequence[Pod]) -> None:
        self._record("update", pods)

    async def handle_pod_removes(self, pods: Sequence[Pod]) -> None:
        self._record("remove", pods)

    async def handle_pod_reconcile(self, pods: Sequence[Pod]) -> None:
        self._record("reconcile", pods)

    async def handle_pod_syncs(self, pods: Sequence[Pod]) -> None:
        self._record("sync", pods)

    async def handle_pod_cleanups(self) -> None:
        self.calls.append(("cleanup", []))


@dataclass
class Harness:
    channels: SyncLoopChannels
    handler: RecordingHandler
    clock: FakeClock
    known: dict[str, Pod] = field(default_factory=dict)
    due: list[Pod] = field(default_factory=list)
    ready: bool = True


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness(
        SyncLoopChannels(asyncio.Queue(), asyncio.Queue(maxsize=10), asyncio.Queue()), RecordingHandler(), FakeClock()
    )
    loop = SyncLoop(
        h.channels,
        h.handler,
        pod_by_uid=h.known.get,
        pods_due=lambda: h.due,
        sources_ready=lambda: h.ready,
        clock=h.clock,
    )
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)
    yield h
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("op", "pods", "expected"),
    [
        (Operation.ADD, ("a", "b"), [("add", ["a", "b"])]),
        (Operation.ADD, (), []),  # a source's first empty report: nothing to add
        (Operation.UPDATE, ("a",), [("update", ["a"])]),
        (Operation.DELETE, ("a",), [("update", ["a"])]),  # graceful deletion is an update of the pod
        (Operation.REMOVE, ("a",), [("remove", ["a"])]),
        (Operation.RECONCILE, ("a",), [("reconcile", ["a"])]),
    ],
)
async def test_config_updates(harness: Harness, op: Operation, pods: tuple[str, ...], expected: list[Any]) -> None:
    harness.channels.config.put_nowait(PodUpdate("api", op, tuple(pod(u) for u in pods)))
    await settle()
    assert harness.handler.calls == expected


@pytest.mark.parametrize(
    ("event_type", "uid", "expected"),
    [
        (PodLifecycleEventType.CONTAINER_DIED, "a", [("sync", ["a"])]),
        (PodLifecycleEventType.CONTAINER_STARTED, "a", [("sync", ["a"])]),
        (PodLifecycleEventType.CONTAINER_REMOVED, "a", []),
        (PodLifecycleEventType.CONTAINER_DIED, "unknown", []),
    ],
)
async def test_pleg_events(harness: Harness, event_type: PodLifecycleEventType, uid: str, expected: list[Any]) -> None:
    harness.known["a"] = pod("a")
    harness.channels.pleg.put_nowait(PodLifecycleEvent(uid, event_type, "cid"))
    await settle()
    assert harness.handler.calls == expected


async def test_probe_result_syncs_the_pod(harness: Harness) -> None:
    harness.known["a"] = pod("a")
    harness.channels.probes.put_nowait(ProbeResult("a", "cid", "readiness", success=True))
    await settle()
    assert harness.handler.calls == [("sync", ["a"])]


async def test_ticks_sync_due_pods_and_housekeep_when_sources_ready(harness: Harness) -> None:
    harness.due = [pod("due")]
    harness.ready = False
    await harness.clock.advance(0.5)
    assert harness.handler.calls == []
    await harness.clock.advance(0.5)
    assert harness.handler.calls == [("sync", ["due"])]
    await harness.clock.advance(1.0)
    # At 2 s: a sync, and no housekeeping while a source has not reported yet.
    assert harness.handler.calls == [("sync", ["due"]), ("sync", ["due"])]
    harness.ready = True
    await harness.clock.advance(2.0)
    assert ("cleanup", []) in harness.handler.calls


async def test_a_source_counts_as_handled_only_after_its_update_was_handled() -> None:
    # Upstream's sourcesReady.AddSource comes after HandlePodAdditions: while a source's first pods are admitted,
    # that source is not ready yet (the device manager keeps running containers' devices then).
    channels = SyncLoopChannels(asyncio.Queue(), asyncio.Queue(maxsize=10), asyncio.Queue())
    seen_during: list[set[str]] = []

    class Handler(RecordingHandler):
        async def handle_pod_additions(self, pods: Sequence[Pod]) -> None:
            seen_during.append(set(loop.handled_sources))

    loop = SyncLoop(
        channels, Handler(), pod_by_uid=lambda uid: None, pods_due=list, sources_ready=lambda: True, clock=FakeClock()
    )
    task = asyncio.create_task(loop.run())
    channels.config.put_nowait(PodUpdate("api", Operation.ADD, (pod("a"),)))
    channels.config.put_nowait(PodUpdate("file", Operation.ADD, ()))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen_during == [set()]
    assert loop.handled_sources == {"api", "file"}


async def test_a_flood_of_config_updates_does_not_starve_the_pleg() -> None:
    # Go's select picks at random among ready cases; a loop that always preferred config would leave the PLEG's
    # events queued for as long as the apiserver echoes status updates (the churn soak's full channel, NotReady).
    channels = SyncLoopChannels(asyncio.Queue(), asyncio.Queue(maxsize=10), asyncio.Queue())
    offered: list[list[str]] = []

    def choose(names: Sequence[str]) -> str:
        offered.append(list(names))
        return "pleg" if "pleg" in names else names[0]

    handler = RecordingHandler()
    known = {"p": pod("p")}
    loop = SyncLoop(
        channels,
        handler,
        pod_by_uid=known.get,
        pods_due=list,
        sources_ready=lambda: True,
        clock=FakeClock(),
        choose=choose,
    )
    for i in range(20):
        channels.config.put_nowait(PodUpdate("api", Operation.UPDATE, (pod(f"u{i}"),)))
    channels.pleg.put_nowait(PodLifecycleEvent("p", PodLifecycleEventType.CONTAINER_STARTED, "c1"))
    task = asyncio.create_task(loop.run())
    await until(lambda: len(handler.calls) >= 21)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ["config", "pleg"] in offered
    # the PLEG's sync came before the config backlog was through
    assert handler.calls.index(("sync", ["p"])) < len(handler.calls) - 1
    assert handler.calls.count(("sync", ["p"])) == 1
    assert sum(1 for name, _ in handler.calls if name == "update") == 20


async def test_random_choice_serves_every_ready_channel() -> None:
    channels = SyncLoopChannels(asyncio.Queue(), asyncio.Queue(maxsize=100), asyncio.Queue())
    handler = RecordingHandler()
    known = {f"p{i}": pod(f"p{i}") for i in range(50)}
    rng = random.Random(7)
    loop = SyncLoop(
        channels,
        handler,
        pod_by_uid=known.get,
        pods_due=list,
        sources_ready=lambda: True,
        clock=FakeClock(),
        choose=rng.choice,
    )
    for i in range(50):
        channels.config.put_nowait(PodUpdate("api", Operation.UPDATE, (pod(f"u{i}"),)))
        channels.pleg.put_nowait(PodLifecycleEvent(f"p{i}", PodLifecycleEventType.CONTAINER_STARTED, "c"))
    task = asyncio.create_task(loop.run())
    await until(lambda: len(handler.calls) >= 100)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    first_half = handler.calls[:50]
    # both channels are served while both are ready, not one after the other
    assert 10 < sum(1 for name, _ in first_half if name == "sync") < 40
    assert len(handler.calls) == 100


async def test_a_long_housekeeping_pass_does_not_hold_up_pleg_events() -> None:
    # Under a 100-pod churn housekeeping's runtime calls took 1 to 3.5 s every 2 s, and the PLEG's channel filled
    # behind them. It now runs beside the loop, one pass at a time.
    channels = SyncLoopChannels(asyncio.Queue(), asyncio.Queue(maxsize=10), asyncio.Queue())
    release = asyncio.Event()
    passes = 0

    class SlowCleanups(RecordingHandler):
        async def handle_pod_cleanups(self) -> None:
            nonlocal passes
            passes += 1
            await release.wait()

    handler = SlowCleanups()
    clock = FakeClock()
    known = {"p": pod("p")}
    loop = SyncLoop(channels, handler, pod_by_uid=known.get, pods_due=list, sources_ready=lambda: True, clock=clock)
    task = asyncio.create_task(loop.run())
    await settle()
    await clock.advance(2.0)  # the first housekeeping pass starts and blocks
    assert passes == 1
    channels.pleg.put_nowait(PodLifecycleEvent("p", PodLifecycleEventType.CONTAINER_DIED, "c1"))
    await until(lambda: ("sync", ["p"]) in handler.calls)
    assert ("sync", ["p"]) in handler.calls  # served while housekeeping is still running
    await clock.advance(2.0)  # the next tick finds the pass still running: no second one
    await settle()
    assert passes == 1
    release.set()
    await settle()
    await clock.advance(2.0)
    await settle()
    assert passes == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_failing_housekeeping_pass_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    channels = SyncLoopChannels(asyncio.Queue(), asyncio.Queue(maxsize=10), asyncio.Queue())

    class FailingCleanups(RecordingHandler):
        async def handle_pod_cleanups(self) -> None:
            raise RuntimeError("boom")

    handler = FailingCleanups()
    clock = FakeClock()
    known = {"p": pod("p")}
    loop = SyncLoop(channels, handler, pod_by_uid=known.get, pods_due=list, sources_ready=lambda: True, clock=clock)
    task = asyncio.create_task(loop.run())
    await settle()
    await clock.advance(2.0)
    await settle()
    channels.pleg.put_nowait(PodLifecycleEvent("p", PodLifecycleEventType.CONTAINER_DIED, "c1"))
    await until(lambda: ("sync", ["p"]) in handler.calls)
    assert not task.done()
    assert ("sync", ["p"]) in handler.calls
    assert "housekeeping failed" in caplog.text
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
