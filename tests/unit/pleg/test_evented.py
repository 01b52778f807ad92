"""EventedPLEG: container events into the cache and the channel; retries, fallback to relisting and recovery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from cri.errors import UnavailableError
from cri.v1 import api_pb2
from pleg.cache import Cache
from pleg.evented import EventedPLEG, pleg_events, retry_backoff
from pleg.events import PodLifecycleEvent
from pleg.events import PodLifecycleEventType as T
from pleg.generic import GenericPLEG
from pleg.health import EVENTED_RELIST, GENERIC_RELIST
from pleg.metrics import PLEGMetrics
from tests.unit.fakeclock import FakeClock
from tests.unit.pleg.conftest import drain
from tests.unit.pleg.fakeruntime import FakeRuntime

E = PodLifecycleEvent
DOWN = UnavailableError("GetContainerEvents", grpc.StatusCode.UNAVAILABLE, "connection refused")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (api_pb2.CONTAINER_STARTED_EVENT, [E("u", T.CONTAINER_STARTED, "c")]),
        (api_pb2.CONTAINER_STOPPED_EVENT, [E("u", T.CONTAINER_DIED, "c")]),
        (api_pb2.CONTAINER_CREATED_EVENT, []),
        (api_pb2.CONTAINER_DELETED_EVENT, [E("u", T.CONTAINER_DIED, "c"), E("u", T.CONTAINER_REMOVED, "c")]),
    ],
)
def test_pleg_events(kind: int, expected: list[PodLifecycleEvent]) -> None:
    event = api_pb2.ContainerEventResponse(container_id="c", container_event_type=kind)  # type: ignore[arg-type]
    assert pleg_events(event, "u") == expected


@pytest.mark.parametrize(("failures", "delay"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 5.0), (9, 5.0)])
def test_retry_backoff(failures: int, delay: float) -> None:
    assert retry_backoff(failures) == delay


@pytest.fixture
def evented(
    runtime: FakeRuntime, generic: GenericPLEG, cache: Cache, clock: FakeClock, metrics: PLEGMetrics
) -> EventedPLEG:
    return EventedPLEG(runtime, generic, cache, clock=clock, metrics=metrics)  # type: ignore[arg-type]


async def test_an_event_updates_the_cache_with_its_own_status_and_time(
    evented: EventedPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1", "web")
    c = runtime.run_container(sb, "main")
    runtime.calls.clear()
    event = runtime.make_event(c, sb, api_pb2.CONTAINER_STARTED_EVENT)
    evented.process(event)
    assert drain(channel) == [E("u1", T.CONTAINER_STARTED, c)]
    assert cache.get("u1").containers[0].status.state == api_pb2.CONTAINER_RUNNING
    assert runtime.calls == []  # the event's status is used: no call to the runtime
    assert not cache.set("u1", None, None, event.created_at / 1e9 - 0.001)  # stored at the event's time
    runtime.exit_container(c, 2)
    evented.process(runtime.make_event(c, sb, api_pb2.CONTAINER_STOPPED_EVENT))
    assert drain(channel) == [E("u1", T.CONTAINER_DIED, c)]
    assert cache.get("u1").containers[0].status.exit_code == 2


async def test_an_event_older_than_the_cached_status_is_news_to_nobody(
    evented: EventedPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1")
    c = runtime.run_container(sb, "main")
    newer = runtime.make_event(c, sb, api_pb2.CONTAINER_STARTED_EVENT)
    older = runtime.make_event(c, sb, api_pb2.CONTAINER_STARTED_EVENT, created_at=newer.created_at - 10**9)
    evented.process(newer)
    evented.process(older)
    assert drain(channel) == [E("u1", T.CONTAINER_STARTED, c)]


async def test_an_event_from_before_the_last_relist_is_dropped(
    evented: EventedPLEG,
    generic: GenericPLEG,
    runtime: FakeRuntime,
    cache: Cache,
    clock: FakeClock,
    channel: asyncio.Queue[PodLifecycleEvent],
) -> None:
    sb = runtime.run_sandbox("gone")
    stale = runtime.make_event(sb, sb, api_pb2.CONTAINER_STARTED_EVENT)
    runtime.remove_sandbox(sb)
    await clock.advance(1)
    await generic.relist()  # the runtime no longer has the pod
    evented.process(stale)  # buffered by the runtime while nobody listened
    assert drain(channel) == [] and cache.get_all() == []


async def test_foreign_sandboxes_and_statusless_events_are_ignored(
    evented: EventedPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    foreign = runtime.run_foreign_sandbox()
    evented.process(runtime.make_event(foreign, foreign, api_pb2.CONTAINER_STARTED_EVENT))
    evented.process(runtime.make_event("c-x", "sb-gone", api_pb2.CONTAINER_STOPPED_EVENT))
    assert drain(channel) == [] and cache.get_all() == []


async def test_deletions_remove_containers_then_the_pod(
    evented: EventedPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1")
    c = runtime.run_container(sb, "main")
    evented.process(runtime.make_event(c, sb, api_pb2.CONTAINER_STARTED_EVENT))
    runtime.stop_sandbox(sb)
    runtime.remove_container(c)
    evented.process(runtime.make_event(c, sb, api_pb2.CONTAINER_DELETED_EVENT))
    assert cache.get("u1").containers == () and [s.id for s in cache.get("u1").sandboxes] == [sb]
    runtime.remove_sandbox(sb)
    sandbox_gone = runtime.make_event(sb, sb, api_pb2.CONTAINER_DELETED_EVENT)
    assert not sandbox_gone.HasField("pod_sandbox_status")  # as containerd: the sandbox is gone by then
    evented.process(sandbox_gone)
    assert cache.get_all() == []
    assert drain(channel) == [
        E("u1", T.CONTAINER_STARTED, c),
        E("u1", T.CONTAINER_DIED, c),
        E("u1", T.CONTAINER_REMOVED, c),
        E("u1", T.CONTAINER_DIED, sb),
        E("u1", T.CONTAINER_REMOVED, sb),
    ]


async def test_health_is_the_slow_relists_age_and_a_full_channel(
    runtime: FakeRuntime, cache: Cache, clock: FakeClock, metrics: PLEGMetrics
) -> None:
    channel: asyncio.Queue[PodLifecycleEvent] = asyncio.Queue(maxsize=2)
    generic = GenericPLEG(runtime, channel, cache, clock=clock, metrics=metrics, duration=EVENTED_RELIST)  # type: ignore[arg-type]
    evented = EventedPLEG(runtime, generic, cache, clock=clock, metrics=metrics)  # type: ignore[arg-type]
    await evented.relist()
    await clock.advance(599)
    assert evented.healthy() == (True, "")
    await clock.advance(2)
    assert evented.healthy() == (False, "pleg was last seen active 10m1s ago; threshold is 10m0s")
    await evented.relist()
    channel.put_nowait(E("u", T.POD_SYNC))
    channel.put_nowait(E("u", T.POD_SYNC))
    assert evented.healthy() == (False, "pleg event channel capacity is full with 2 events")


@pytest_asyncio.fixture
async def running(evented: EventedPLEG, clock: FakeClock) -> AsyncIterator[EventedPLEG]:
    task = asyncio.create_task(evented.run())
    await clock.advance(0)
    try:
        yield evented
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_running_follows_the_stream_with_a_slow_relist_underneath(
    running: EventedPLEG,
    generic: GenericPLEG,
    runtime: FakeRuntime,
    clock: FakeClock,
    cache: Cache,
    channel: asyncio.Queue[PodLifecycleEvent],
) -> None:
    assert running.in_use and runtime.subscribers == 1
    assert generic.duration == EVENTED_RELIST
    relists = generic.relists
    sb = runtime.run_sandbox("u1")
    await clock.advance(0)
    # The first event of a new stream brings a relist (events may have gone to stale handlers of closed streams).
    assert generic.relists == relists + 1
    assert E("u1", T.CONTAINER_STARTED, sb) in drain(channel)
    c = runtime.run_container(sb, "main")
    ran_at = clock.wall().timestamp()
    await clock.advance(0)
    assert drain(channel) == [E("u1", T.CONTAINER_STARTED, c)]
    assert generic.relists == relists + 1  # later events do not relist
    await clock.advance(2)
    assert cache.timestamp == ran_at  # the 2 s tick: as fresh as the last event received, never "now"
    await clock.advance(298)
    assert generic.relists == relists + 2  # the 5-minute safety net


async def test_five_failures_fall_back_to_relisting_then_evented_comes_back(
    running: EventedPLEG,
    generic: GenericPLEG,
    runtime: FakeRuntime,
    clock: FakeClock,
    registry: CollectorRegistry,
    channel: asyncio.Queue[PodLifecycleEvent],
) -> None:
    runtime.open_failures = [DOWN] * 20
    runtime.break_stream(DOWN)  # the runtime went away: the stream breaks and cannot be opened again
    await clock.advance(0)
    for delay in (0.5, 1.0, 2.0, 4.0):
        assert running.in_use
        await clock.advance(delay)
    assert not running.in_use and running.fallbacks == 1
    assert generic.duration == GENERIC_RELIST  # relisting every second again
    assert registry.get_sample_value("kubelet_evented_pleg_connection_error_count_total") == 5
    relists = generic.relists
    for _ in range(10):
        await clock.advance(1)
    assert generic.relists >= relists + 9
    # The runtime is back: the next attempt (30 s after the last) opens a stream that proves itself with an event.
    runtime.open_failures = []
    await clock.advance(20)
    assert runtime.subscribers == 1 and not running.in_use
    sb = runtime.run_sandbox("u1")
    await clock.advance(0)
    assert running.in_use and generic.duration == EVENTED_RELIST
    assert E("u1", T.CONTAINER_STARTED, sb) in drain(channel)


async def test_a_quiet_stream_proves_itself_after_ten_seconds(
    running: EventedPLEG, generic: GenericPLEG, runtime: FakeRuntime, clock: FakeClock
) -> None:
    runtime.open_failures = [DOWN] * 4  # the broken stream is the first failure, four reopenings the rest
    runtime.break_stream(DOWN)
    for delay in (0, 0.5, 1.0, 2.0, 4.0):
        await clock.advance(delay)
    assert not running.in_use
    await clock.advance(30)  # the retry opens a stream; no event comes
    assert runtime.subscribers == 1 and not running.in_use
    await clock.advance(10)
    assert running.in_use and generic.duration == EVENTED_RELIST


async def test_a_death_during_a_short_outage_is_seen_once_the_stream_is_back(
    running: EventedPLEG, generic: GenericPLEG, runtime: FakeRuntime, clock: FakeClock, cache: Cache
) -> None:
    sb = runtime.run_sandbox("u1")
    c = runtime.run_container(sb, "main")
    await clock.advance(0)
    await clock.advance(1)
    assert _state(cache, "u1") == api_pb2.CONTAINER_RUNNING
    # containerd goes away for about 2 s: the stream breaks, the relists fail, two reopenings fail (no fallback).
    runtime.fail["ListPodSandbox"] = DOWN
    runtime.open_failures = [DOWN] * 2
    runtime.break_stream(DOWN)
    await clock.advance(0)
    assert runtime.subscribers == 0
    runtime.exit_container(c, 137)  # nobody listens: containerd drops this event
    for delay in (0.5, 1.0):
        await clock.advance(delay)
    assert running.relist_owed
    del runtime.fail["ListPodSandbox"]
    await clock.advance(2.0)  # a quiet stream is open again
    assert runtime.subscribers == 1 and running.in_use and running.fallbacks == 0
    await clock.advance(0)
    assert not running.relist_owed
    assert _state(cache, "u1") == api_pb2.CONTAINER_EXITED


async def test_the_cache_tick_holds_while_a_relist_is_owed(
    running: EventedPLEG, runtime: FakeRuntime, clock: FakeClock, cache: Cache
) -> None:
    runtime.run_sandbox("u1")
    sent = clock.wall().timestamp()
    await clock.advance(0)  # the event, and the relist the first event of a stream brings, both at `sent`
    await clock.advance(2)
    assert not running.relist_owed and cache.timestamp == sent
    runtime.fail["ListPodSandbox"] = DOWN
    runtime.break_stream(DOWN)
    for delay in (0, 0.5):
        await clock.advance(delay)
    assert runtime.subscribers == 1 and running.relist_owed  # a stream is open, the runtime cannot be listed
    held = cache.timestamp
    for _ in range(4):
        await clock.advance(1)
    assert cache.timestamp == held  # no worker is told the stale status is fresh
    del runtime.fail["ListPodSandbox"]
    await clock.advance(1)  # the owed relist is retried every second and now succeeds
    assert not running.relist_owed
    runtime.run_sandbox("u2")
    sent = clock.wall().timestamp()
    await clock.advance(0)  # the event, and the relist the first event of a stream brings, both at `sent`
    await clock.advance(2)
    assert cache.timestamp == sent


def _state(cache: Cache, uid: str) -> int:
    status = cache.get(uid)
    assert status is not None
    return next(c.status.state for c in status.containers if c.status.metadata.name == "main")


async def test_a_stream_that_worked_resets_the_failure_count(
    running: EventedPLEG, runtime: FakeRuntime, clock: FakeClock
) -> None:
    for _ in range(8):  # one failure at a time, each followed by a working stream
        runtime.break_stream(DOWN)
        await clock.advance(0)
        await clock.advance(0.5)
        assert runtime.subscribers == 1
        runtime.run_sandbox("u1")
        await clock.advance(0)
    assert running.in_use and running.fallbacks == 0


@pytest.mark.parametrize(("auto", "keeps_trying"), [(True, False), (False, True)])
async def test_a_runtime_without_the_call(
    runtime: FakeRuntime,
    generic: GenericPLEG,
    cache: Cache,
    clock: FakeClock,
    metrics: PLEGMetrics,
    auto: bool,
    keeps_trying: bool,
) -> None:
    runtime.unimplemented = True
    evented = EventedPLEG(runtime, generic, cache, clock=clock, metrics=metrics, stay_generic_if_unimplemented=auto)  # type: ignore[arg-type]
    task = asyncio.create_task(evented.run())
    try:
        for _ in range(20):
            await clock.advance(1)
        assert not evented.in_use and generic.duration == GENERIC_RELIST
        attempts = runtime.calls.count("GetContainerEvents")
        await clock.advance(60)
        assert (runtime.calls.count("GetContainerEvents") > attempts) is keeps_trying
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_without_a_stream_the_cache_is_not_declared_fresh(
    running: EventedPLEG, runtime: FakeRuntime, clock: FakeClock, cache: Cache
) -> None:
    runtime.run_sandbox("u1")
    sent = clock.wall().timestamp()
    await clock.advance(0)  # the event, and the relist the first event of a stream brings, both at `sent`
    await clock.advance(2)
    assert cache.timestamp == sent  # the tick, while the stream is open
    runtime.fail["ListPodSandbox"] = DOWN  # the runtime is gone: relists fail too
    runtime.open_failures = [DOWN] * 3
    runtime.break_stream(DOWN)
    stamp = cache.timestamp
    for delay in (0, 0.5, 1.0, 0.5):
        await clock.advance(delay)
    assert running.in_use and not running.streaming
    assert cache.timestamp == stamp  # a worker waiting for a newer status keeps waiting


async def test_the_tick_never_declares_fresh_a_start_whose_event_has_not_arrived(
    running: EventedPLEG, runtime: FakeRuntime, clock: FakeClock, cache: Cache
) -> None:
    """The soak's killed containers (docs/reliability.md): StartContainer returned, the worker's sync ended, and the
    STARTED event was still in flight when the tick moved the cache's time to "now", past the sync's end. The next
    sync read the container as created, never started, and removed it while it ran."""
    sb = runtime.run_sandbox("u1")
    c = runtime.create_container(sb, "main")
    await clock.advance(0)
    assert _state(cache, "u1") == api_pb2.CONTAINER_CREATED
    container = runtime.containers[c]
    container.state = api_pb2.CONTAINER_RUNNING  # started in the runtime; its event not delivered yet
    sync_ended = clock.wall().timestamp() + 0.01
    await clock.advance(2)  # the tick
    assert not cache.has_newer_than("u1", sync_ended)  # the worker asks for a relist of its pod instead
    runtime.start_container(c)  # the event arrives
    await clock.advance(0)
    assert cache.has_newer_than("u1", sync_ended) and _state(cache, "u1") == api_pb2.CONTAINER_RUNNING
