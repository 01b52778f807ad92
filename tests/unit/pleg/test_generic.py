"""GenericPLEG: events from relist diffs, the cache it writes, failures, health, and never blocking."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from prometheus_client import CollectorRegistry

from cri.errors import UnavailableError
from cri.v1 import api_pb2
from pleg.cache import Cache, PodStatusUnavailable
from pleg.events import PodLifecycleEvent
from pleg.events import PodLifecycleEventType as T
from pleg.generic import EXITED, NON_EXISTENT, RUNNING, UNKNOWN, GenericPLEG, compute_pod_events, generate_events
from pleg.health import RelistDuration
from pleg.inspect import RuntimeObject, RuntimePod
from pleg.metrics import PLEGMetrics
from pleg.status import PodStatus
from tests.unit.fakeclock import FakeClock
from tests.unit.pleg.conftest import drain
from tests.unit.pleg.fakeruntime import FakeRuntime

E = PodLifecycleEvent
DOWN = UnavailableError("ListPodSandbox", grpc.StatusCode.UNAVAILABLE, "connection refused")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (NON_EXISTENT, RUNNING, [E("u", T.CONTAINER_STARTED, "c")]),
        (NON_EXISTENT, EXITED, [E("u", T.CONTAINER_DIED, "c")]),
        (NON_EXISTENT, UNKNOWN, [E("u", T.CONTAINER_CHANGED, "c")]),
        (RUNNING, EXITED, [E("u", T.CONTAINER_DIED, "c")]),
        (RUNNING, RUNNING, []),
        (EXITED, NON_EXISTENT, [E("u", T.CONTAINER_REMOVED, "c")]),
        (RUNNING, NON_EXISTENT, [E("u", T.CONTAINER_DIED, "c"), E("u", T.CONTAINER_REMOVED, "c")]),
        (UNKNOWN, NON_EXISTENT, [E("u", T.CONTAINER_DIED, "c"), E("u", T.CONTAINER_REMOVED, "c")]),
        (EXITED, RUNNING, [E("u", T.CONTAINER_STARTED, "c")]),
    ],
)
def test_generate_events(old: str, new: str, expected: list[PodLifecycleEvent]) -> None:
    assert generate_events("u", "c", old, new) == expected


def pod(*objects: RuntimeObject, sandboxes: tuple[RuntimeObject, ...] = ()) -> RuntimePod:
    return RuntimePod("u", "p", "ns", sandboxes=sandboxes, containers=objects)


RUN, EXIT, CREATED = api_pb2.CONTAINER_RUNNING, api_pb2.CONTAINER_EXITED, api_pb2.CONTAINER_CREATED


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, pod(RuntimeObject("c1", RUN)), [E("u", T.CONTAINER_STARTED, "c1")]),
        (None, pod(RuntimeObject("c1", CREATED)), [E("u", T.CONTAINER_CHANGED, "c1")]),
        (pod(RuntimeObject("c1", RUN)), pod(RuntimeObject("c1", RUN)), []),
        (pod(RuntimeObject("c1", RUN)), pod(RuntimeObject("c1", EXIT)), [E("u", T.CONTAINER_DIED, "c1")]),
        (pod(RuntimeObject("c1", EXIT)), None, [E("u", T.CONTAINER_REMOVED, "c1")]),
        (
            pod(sandboxes=(RuntimeObject("s1", api_pb2.SANDBOX_READY),)),
            pod(sandboxes=(RuntimeObject("s1", api_pb2.SANDBOX_NOTREADY),)),
            [E("u", T.CONTAINER_DIED, "s1")],  # as upstream, a sandbox counts as a container
        ),
        (
            pod(RuntimeObject("c1", EXIT)),
            pod(RuntimeObject("c2", RUN)),
            [E("u", T.CONTAINER_REMOVED, "c1"), E("u", T.CONTAINER_STARTED, "c2")],
        ),
    ],
)
def test_compute_pod_events(old: RuntimePod | None, new: RuntimePod | None, expected: list[PodLifecycleEvent]) -> None:
    assert compute_pod_events("u", old, new) == expected


async def test_first_relist_reports_what_runs_and_fills_the_cache(
    generic: GenericPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1", "web", ip="198.18.0.4")
    c = runtime.run_container(sb, "main")
    runtime.run_foreign_sandbox()
    assert await generic.relist()
    assert set(drain(channel)) == {E("u1", T.CONTAINER_STARTED, c), E("u1", T.CONTAINER_STARTED, sb)}
    status = cache.get("u1")
    assert status.name == "web" and status.ips == ("198.18.0.4",)
    assert [x.status.id for x in status.containers] == [c]
    assert cache.timestamp == generic.last_relist_wall
    assert len(cache.get_all()) == 1  # the foreign sandbox is not ours
    assert all(t == 0.05 for t in runtime.timeouts)  # every call bounded


async def test_an_unchanged_runtime_costs_two_list_calls(generic: GenericPLEG, runtime: FakeRuntime) -> None:
    sb = runtime.run_sandbox("u1")
    runtime.run_container(sb, "main")
    await generic.relist()
    runtime.calls.clear()
    await generic.relist()
    assert runtime.calls == ["ListPodSandbox", "ListContainers"]


async def test_death_then_removal(
    generic: GenericPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1")
    c = runtime.run_container(sb, "main")
    await generic.relist()
    drain(channel)
    runtime.exit_container(c, 3)
    await generic.relist()
    assert drain(channel) == [E("u1", T.CONTAINER_DIED, c)]
    assert cache.get("u1").containers[0].status.exit_code == 3
    runtime.remove_sandbox(sb)
    await generic.relist()
    assert drain(channel) == [
        E("u1", T.CONTAINER_REMOVED, c),
        E("u1", T.CONTAINER_DIED, sb),
        E("u1", T.CONTAINER_REMOVED, sb),
    ]
    assert cache.get_all() == []


async def test_a_failed_list_changes_nothing_and_ages_health(
    generic: GenericPLEG, runtime: FakeRuntime, clock: FakeClock, cache: Cache, registry: CollectorRegistry
) -> None:
    assert generic.healthy() == (False, "pleg has yet to be successful")
    await generic.relist()
    stamp = cache.timestamp
    assert generic.healthy() == (True, "")
    runtime.fail["ListPodSandbox"] = DOWN
    await clock.advance(180)
    assert not await generic.relist()
    assert cache.timestamp == stamp
    assert generic.healthy() == (True, "")  # exactly at the threshold
    await clock.advance(1.5)
    assert generic.healthy() == (False, "pleg was last seen active 3m1.5s ago; threshold is 3m0s")
    assert registry.get_sample_value("kubelet_pleg_last_seen_seconds") == stamp
    del runtime.fail["ListPodSandbox"]
    assert await generic.relist()
    assert generic.healthy() == (True, "")
    assert registry.get_sample_value("kubelet_pleg_relist_duration_seconds_count") == 3
    assert registry.get_sample_value("kubelet_pleg_relist_interval_seconds_count") == 2


async def test_a_failed_inspection_stores_the_error_and_is_retried_with_a_pod_sync(
    generic: GenericPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1")
    c = runtime.run_container(sb, "main")
    runtime.fail["ContainerStatus"] = UnavailableError("ContainerStatus", grpc.StatusCode.UNAVAILABLE, "gone")
    await generic.relist()
    assert drain(channel) == []
    with pytest.raises(PodStatusUnavailable):
        await cache.get_newer_than("u1", 0.0)
    del runtime.fail["ContainerStatus"]
    await generic.relist()  # nothing new in the lists: the pod is inspected again and its events come now
    assert set(drain(channel)) == {E("u1", T.CONTAINER_STARTED, c), E("u1", T.CONTAINER_STARTED, sb)}
    runtime.fail["ContainerStatus"] = UnavailableError("ContainerStatus", grpc.StatusCode.UNAVAILABLE, "gone")
    runtime.exit_container(c)
    await generic.relist()
    del runtime.fail["ContainerStatus"]
    await generic.relist()
    assert drain(channel) == [E("u1", T.CONTAINER_DIED, c)]
    await generic.relist()
    assert drain(channel) == []  # reinspected once, then quiet
    runtime.fail["ContainerStatus"] = UnavailableError("ContainerStatus", grpc.StatusCode.UNAVAILABLE, "gone")
    await generic.relist()  # no change in the lists: no inspection, nothing fails
    assert drain(channel) == []


async def test_only_a_reinspection_brings_a_pod_sync(
    generic: GenericPLEG, runtime: FakeRuntime, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1")
    await generic.relist()
    drain(channel)
    runtime.fail["PodSandboxStatus"] = UnavailableError("PodSandboxStatus", grpc.StatusCode.UNAVAILABLE, "x")
    c = runtime.run_container(sb, "main")
    await generic.relist()
    runtime.exit_container(c)  # changed again before the retry: the record still holds the old view
    del runtime.fail["PodSandboxStatus"]
    await generic.relist()
    assert drain(channel) == [E("u1", T.CONTAINER_DIED, c)]
    # A change that undid itself before the retry: no event is left, so the reinspected pod gets a PodSync.
    created = runtime.create_container(sb, "side")  # "created" counts as unknown: ContainerChanged, never sent
    runtime.fail["PodSandboxStatus"] = UnavailableError("PodSandboxStatus", grpc.StatusCode.UNAVAILABLE, "x")
    await generic.relist()
    del runtime.fail["PodSandboxStatus"]
    runtime.remove_container(created)
    await generic.relist()
    assert drain(channel) == [E("u1", T.POD_SYNC)]


async def test_a_slow_pod_does_not_hold_back_the_others(
    runtime: FakeRuntime,
    channel: asyncio.Queue[PodLifecycleEvent],
    cache: Cache,
    clock: FakeClock,
    metrics: PLEGMetrics,
) -> None:
    generic = GenericPLEG(runtime, channel, cache, clock=clock, metrics=metrics, call_timeout=30.0)  # type: ignore[arg-type]
    slow_sb, fast_sb = runtime.run_sandbox("slow"), runtime.run_sandbox("fast")
    slow_c = runtime.run_container(slow_sb, "main")
    fast_c = runtime.run_container(fast_sb, "main")
    runtime.hold[slow_c] = asyncio.Event()
    relist = asyncio.create_task(generic.relist())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not relist.done()
    assert set(drain(channel)) == {E("fast", T.CONTAINER_STARTED, fast_c), E("fast", T.CONTAINER_STARTED, fast_sb)}
    assert cache.get("fast").containers[0].status.id == fast_c
    runtime.hold[slow_c].set()
    await relist
    assert {e.pod_uid for e in drain(channel)} == {"slow"}


async def test_a_hanging_status_call_is_cut_by_its_timeout(
    generic: GenericPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    sb = runtime.run_sandbox("u1")
    runtime.hold[sb] = asyncio.Event()  # never answers
    await generic.relist()  # returns: the call had a 50 ms deadline
    assert drain(channel) == []
    with pytest.raises(PodStatusUnavailable):
        await cache.get_newer_than("u1", 0.0)


async def test_a_full_channel_drops_and_counts(
    runtime: FakeRuntime, cache: Cache, clock: FakeClock, metrics: PLEGMetrics, registry: CollectorRegistry
) -> None:
    channel: asyncio.Queue[PodLifecycleEvent] = asyncio.Queue(maxsize=1)
    generic = GenericPLEG(runtime, channel, cache, clock=clock, metrics=metrics)  # type: ignore[arg-type]
    for uid in ("a", "b", "c"):
        runtime.run_container(runtime.run_sandbox(uid), "main")
    await generic.relist()  # returns at once although 6 events do not fit
    assert channel.qsize() == 1
    assert registry.get_sample_value("kubelet_pleg_discard_events_total") == 5
    assert {s.uid for s in cache.get_all()} == {"a", "b", "c"}  # the cache is complete all the same


async def test_a_newer_status_from_an_event_is_not_overwritten(
    generic: GenericPLEG, runtime: FakeRuntime, cache: Cache, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    runtime.run_sandbox("u1")
    cache.set("u1", PodStatus(uid="u1", name="from-an-event"), None, 10**10)
    await generic.relist()
    assert cache.get("u1").name == "from-an-event"
    assert drain(channel) == []
    inspections = runtime.calls.count("PodSandboxStatus")
    await generic.relist()
    assert runtime.calls.count("PodSandboxStatus") == inspections + 1  # the record did not advance: looked again
    assert cache.get("u1").name == "from-an-event"


async def test_relist_pods_updates_those_pods_and_marks_them_observed(
    generic: GenericPLEG,
    runtime: FakeRuntime,
    cache: Cache,
    channel: asyncio.Queue[PodLifecycleEvent],
    clock: FakeClock,
) -> None:
    sb1, sb2 = runtime.run_sandbox("u1"), runtime.run_sandbox("u2")
    await generic.relist()
    drain(channel)
    await clock.advance(5)
    c1, c2 = runtime.run_container(sb1, "main"), runtime.run_container(sb2, "main")
    runtime.calls.clear()
    reader = asyncio.create_task(cache.get_newer_than("u1", clock.wall().timestamp() - 1))
    runtime.selectors.clear()
    await generic.relist_pods(["u1"])
    assert drain(channel) == [E("u1", T.CONTAINER_STARTED, c1)]
    assert "ListPodSandbox" in runtime.calls and (await reader).containers[0].status.id == c1
    # One pod: its objects listed by its UID label, not every pod's.
    assert runtime.selectors == [{"io.kubernetes.pod.uid": "u1"}] * 2
    # An unchanged pod is marked observed, so a worker waiting on it is answered.
    await clock.advance(1)
    unchanged = asyncio.create_task(cache.get_newer_than("u1", clock.wall().timestamp() - 0.5))
    await generic.relist_pods(["u1"])
    assert (await unchanged).containers[0].status.id == c1
    await generic.relist()
    assert drain(channel) == [E("u2", T.CONTAINER_STARTED, c2)]


async def test_run_relists_every_period_and_serves_requests_between(
    generic: GenericPLEG, runtime: FakeRuntime, clock: FakeClock, channel: asyncio.Queue[PodLifecycleEvent]
) -> None:
    task = asyncio.create_task(generic.run())
    try:
        await clock.advance(0)
        assert generic.relists == 1
        sb = runtime.run_sandbox("u1")
        await clock.advance(0.5)
        assert generic.relists == 1 and drain(channel) == []
        generic.request_relist("u1")
        await clock.advance(0)
        assert drain(channel) == [E("u1", T.CONTAINER_STARTED, sb)]
        await clock.advance(0.6)
        assert generic.relists == 2
        generic.update(RelistDuration(period=300.0, threshold=600.0))
        await clock.advance(0)
        assert generic.relists == 3  # a new period takes effect at once
        await clock.advance(299)
        assert generic.relists == 3
        await clock.advance(1)
        assert generic.relists == 4
        generic.update(RelistDuration(period=1.0, threshold=5.0))
        runtime.fail["ListPodSandbox"] = DOWN
        for _ in range(6):
            await clock.advance(1)
        assert generic.healthy() == (False, "pleg was last seen active 6s ago; threshold is 5s")
    finally:
        task.cancel()


async def test_queued_relist_requests_are_served_by_one_pair_of_lists(
    generic: GenericPLEG,
    runtime: FakeRuntime,
    clock: FakeClock,
    cache: Cache,
    channel: asyncio.Queue[PodLifecycleEvent],
) -> None:
    task = asyncio.create_task(generic.run())
    try:
        await clock.advance(0)
        sandboxes = [runtime.run_sandbox(f"u{i}") for i in range(5)]
        await clock.advance(0.1)
        runtime.calls.clear()
        gone = asyncio.create_task(cache.get_newer_than("gone", clock.wall().timestamp() - 0.05))
        for i in range(5):
            generic.request_relist(f"u{i}")
        generic.request_relist("gone")  # a pod the runtime has nothing of: its waiting worker is answered too
        await clock.advance(0)
        assert runtime.calls.count("ListPodSandbox") == 1
        assert {e.data for e in drain(channel)} == set(sandboxes)
        assert await gone == PodStatus(uid="gone")
    finally:
        task.cancel()
