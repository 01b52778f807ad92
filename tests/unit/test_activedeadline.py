"""spec.activeDeadlineSeconds: the pure decision by table on a fake clock, then how the Kubelet wires it (the pod
fails with upstream's reason, message and event without being synced to the runtime, its termination keeps the
reason, a running pod is woken exactly at its deadline, and one past it is due on the next sync tick)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeagent import activedeadline
from nodeagent.kubelet import Kubelet
from nodeagent.kuberuntime.actions import RuntimePodStatus, from_pod_status
from nodeagent.kuberuntime.manager import SyncResult
from nodeagent.podconfig import PodConfig
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.podworkers import UpdateType
from pleg.cache import Cache
from pleg.status import PodStatus
from tests.unit.fakeclock import FakeClock

START = "2026-01-01T00:00:00Z"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def pod(deadline: int | None = 5, start: str | None = START, uid: str = "u1") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}]}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    status = {"phase": "Running", "startTime": start} if start else {"phase": "Pending"}
    return {"metadata": {"name": f"web-{uid}", "namespace": "default", "uid": uid}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("the_pod", "status", "elapsed", "left", "past"),
    [
        (pod(deadline=None), None, 100, None, False),  # no deadline
        (pod(start=None), None, 100, None, False),  # never started here: no start time, no deadline yet
        (pod(), None, 0, 5.0, False),
        (pod(), None, 4.5, 0.5, False),
        (pod(), None, 5, 0.0, True),  # reached: upstream compares with >=
        (pod(), None, 7, -2.0, True),
        (pod(deadline=0), None, 0, 0.0, True),
        # The kubelet's own latest status wins over the pod's (upstream: the status manager's first).
        (pod(start=None), {"startTime": "2026-01-01T00:00:03Z"}, 7, 1.0, False),
        (pod(), {"startTime": "2026-01-01T00:00:03+00:00"}, 8, 0.0, True),
        (pod(), {"startTime": "not a time"}, 100, None, False),
    ],
    ids=[
        "no-deadline",
        "no-start-time",
        "just-started",
        "half-a-second-left",
        "at-the-deadline",
        "past-it",
        "zero-deadline",
        "kubelet-status-start-time",
        "kubelet-status-offset-form",
        "unreadable-start-time",
    ],
)
def test_time_left_and_past_active_deadline(
    the_pod: dict[str, Any], status: dict[str, Any] | None, elapsed: float, left: float | None, past: bool
) -> None:
    clock = FakeClock(elapsed)
    assert activedeadline.time_left(the_pod, status, clock.wall()) == left
    assert activedeadline.past_active_deadline(the_pod, status, clock.wall()) is past


# --- the Kubelet's wiring -------------------------------------------------------------------------------------


def cached(uid: str = "u1") -> PodStatus:
    return PodStatus(uid=uid, name="web", namespace="default")


@dataclass
class FakeRuntime:
    calls: list[tuple[str, Any]] = field(default_factory=list)
    result: SyncResult = field(default_factory=lambda: SyncResult({}, ("198.18.0.9",)))

    async def sync_pod(self, pod: dict[str, Any], status: RuntimePodStatus, **_: Any) -> SyncResult:
        self.calls.append(("sync_pod", pod["metadata"]["uid"]))
        return self.result

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        return from_pod_status(cached(uid))

    def runtime_status(self, status: PodStatus) -> RuntimePodStatus:
        return from_pod_status(status)

    async def kill_pod(self, pod: Any, status: RuntimePodStatus, *, grace_period: int) -> None:
        self.calls.append(("kill_pod", grace_period))


@dataclass
class Statuses:
    published: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set_pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.published[pod["metadata"]["uid"]] = status

    def get_pod_status(self, uid: str) -> dict[str, Any] | None:
        return self.published.get(uid)

    def pod_status_view(self, uid: str) -> Mapping[str, Any] | None:
        return self.published.get(uid)

    def remove_orphans(self, known_uids: set[str]) -> None:
        pass


@dataclass
class Events:
    recorded: list[tuple[str, str, str]] = field(default_factory=list)

    def __call__(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.recorded.append((type_, reason, message))


def kubelet(clock: FakeClock, runtime: FakeRuntime, statuses: Statuses, events: Events) -> Kubelet:
    return Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=runtime,  # type: ignore[arg-type]
        status_manager=statuses,
        node=lambda: None,
        pod_cache=Cache(),
        record_event=events,
        monotonic=clock.monotonic,
        wall=clock.wall,
    )


async def test_a_pod_past_its_deadline_fails_without_a_runtime_sync() -> None:
    clock, runtime, statuses, events = FakeClock(6), FakeRuntime(), Statuses(), Events()
    k = kubelet(clock, runtime, statuses, events)
    finished = await k.sync_pod(UpdateType.SYNC, pod(), cached())
    assert finished  # the worker moves on to terminating, which kills the containers
    assert runtime.calls == []  # nothing is started any more, as upstream's SyncPod returns early
    published = statuses.published["u1"]
    assert (published["phase"], published["reason"], published["message"]) == (
        "Failed",
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    )
    assert events.recorded == [
        ("Normal", "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    ]

    await k.sync_terminating_pod(pod(), cached(), 30, None)
    assert runtime.calls == [("kill_pod", 30)]  # the pod's own grace, as upstream's SyncTerminatingPod
    published = statuses.published["u1"]
    assert (published["phase"], published["reason"]) == ("Failed", "DeadlineExceeded")
    assert len(events.recorded) == 1  # one event per pod


async def test_an_eviction_reason_wins_over_the_deadline_in_termination() -> None:
    clock, runtime, statuses, events = FakeClock(6), FakeRuntime(), Statuses(), Events()
    k = kubelet(clock, runtime, statuses, events)
    await k.sync_terminating_pod(pod(), cached(), 0, "Evicted")
    assert statuses.published["u1"]["reason"] == "Evicted"


async def test_a_running_pod_is_woken_exactly_at_its_deadline() -> None:
    clock, runtime, statuses, events = FakeClock(2), FakeRuntime(), Statuses(), Events()
    k = kubelet(clock, runtime, statuses, events)
    assert not await k.sync_pod(UpdateType.SYNC, pod(deadline=5), cached())
    assert runtime.calls == [("sync_pod", "u1")]
    assert statuses.published["u1"]["phase"] != "Failed"
    wakeup = k._wakeups["u1"]
    assert wakeup.when() - asyncio.get_running_loop().time() == pytest.approx(3.0, abs=0.1)  # startTime + 5 s
    assert k._next_sync["u1"] == pytest.approx(5.0)  # on the injected monotonic clock
    wakeup.cancel()


async def test_a_deadline_beyond_the_resync_waits_for_the_resync() -> None:
    clock, runtime, statuses, events = FakeClock(2), FakeRuntime(), Statuses(), Events()
    k = kubelet(clock, runtime, statuses, events)
    await k.sync_pod(UpdateType.SYNC, pod(deadline=3600), cached())
    assert k._next_sync["u1"] == pytest.approx(2 + k.sync_frequency)
    k._wakeups.pop("u1").cancel()


async def test_a_pod_past_its_deadline_is_due_at_the_next_tick_whatever_its_schedule() -> None:
    clock, runtime, statuses, events = FakeClock(2), FakeRuntime(), Statuses(), Events()
    k = kubelet(clock, runtime, statuses, events)
    the_pod, other = pod(deadline=5), pod(deadline=None, uid="u2")
    k.pod_config.push(SourceUpdate("api", Operation.SET, (the_pod, other)))
    await k.handle_pod_additions([the_pod, other])
    assert {p["metadata"]["uid"] for p in k.pods_due()} == {"u1", "u2"}  # never synced: both due
    assert k.pods_due() == []  # next resync in a minute
    await clock.advance(3)
    assert [p["metadata"]["uid"] for p in k.pods_due()] == ["u1"]  # past its deadline: due at once
    await k.workers.stop()
