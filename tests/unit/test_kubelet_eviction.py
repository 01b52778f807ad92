"""The Kubelet's side of eviction: the eviction admit handler comes first and a refused pod ends Failed with its
reason and message; `evict_pod` hands the worker a KILL with the eviction's grace period, and termination publishes
phase Failed, reason Evicted, the message and DisruptionTarget before and after the kill; an evicted pod is no
longer active."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kubelet import PREEMPTION, Kubelet, PodEviction
from nodeagent.kuberuntime.actions import RuntimePodStatus, from_pod_status
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.podworkers import UpdatePodOptions, UpdateType, WorkState
from pleg.status import ContainerRecord, PodStatus
from tests.unit.status.test_kubelet_status import FakeRuntime, Statuses, cached, kubelet, pod, running

MESSAGE = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "


@dataclass
class KillingRuntime(FakeRuntime):
    kills: list[int | None] = field(default_factory=list)
    published_at_kill: list[dict[str, Any]] = field(default_factory=list)
    statuses: Statuses | None = None

    async def kill_pod(self, pod: dict[str, Any] | None, status: RuntimePodStatus, *, grace_period: int | None) -> None:
        self.kills.append(grace_period)
        if self.statuses is not None:
            self.published_at_kill.append(dict(self.statuses.published.get("u1") or {}))

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        return from_pod_status(cached())


@dataclass
class Workers:
    states: dict[str, WorkState] = field(default_factory=dict)
    updates: list[UpdatePodOptions] = field(default_factory=list)

    def state(self, uid: str) -> WorkState | None:
        return self.states.get(uid)

    def update_pod(self, options: UpdatePodOptions) -> None:
        self.updates.append(options)


def with_workers(k: Kubelet) -> Workers:
    workers = Workers()
    k.workers = workers  # type: ignore[assignment]
    return workers


async def test_the_eviction_admit_handler_refuses_first() -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    workers = with_workers(k)
    k.eviction_admit = lambda p: ("Evicted", "The node had condition: [MemoryPressure]. ")
    await k.handle_pod_additions([pod()])
    assert workers.updates == []
    published = statuses.published["u1"]
    assert (published["phase"], published["reason"], published["message"]) == (
        "Failed",
        "Evicted",
        "The node had condition: [MemoryPressure]. ",
    )


async def test_admitted_when_the_eviction_handler_says_so() -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    workers = with_workers(k)
    k.eviction_admit = lambda p: None
    await k.handle_pod_additions([pod()])
    assert [(u.update_type, u.pod["metadata"]["uid"]) for u in workers.updates] == [(UpdateType.CREATE, "u1")]


async def test_evict_pod_kills_with_the_grace_and_publishes_the_eviction() -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    runtime = KillingRuntime(statuses=statuses)
    k.runtime = runtime  # type: ignore[assignment]
    workers = with_workers(k)
    k.evict_pod(pod(), PodEviction("Evicted", MESSAGE, disruption_target=True), 1)
    [kill] = workers.updates
    assert (kill.update_type, kill.grace_period_override, kill.kill_reason) == (UpdateType.KILL, 1, "Evicted")
    status: PodStatus = cached(running("c1", "app"))
    await k.sync_terminating_pod(pod(), status, 1, "Evicted")
    assert runtime.kills == [1]
    for shown in (runtime.published_at_kill[0], statuses.published["u1"]):  # before the kill, and after
        assert (shown["phase"], shown["reason"], shown["message"]) == ("Failed", "Evicted", MESSAGE)
        [target] = [c for c in shown["conditions"] if c["type"] == "DisruptionTarget"]
        assert (target["status"], target["reason"], target["message"]) == ("True", "TerminationByKubelet", MESSAGE)


async def test_the_status_before_the_kill_keeps_the_sandbox_ready() -> None:
    """As upstream's generateAPIPodStatus before the kill: the sandbox still runs, so PodReadyToStartContainers stays
    True until the status after the kill (the upstream kubelet never showed an evicted pod with it False and its
    container running: tests/differential/scenarios/evict-storage-limit-*)."""
    statuses = Statuses()
    k = kubelet(statuses)
    runtime = KillingRuntime(statuses=statuses)
    k.runtime = runtime  # type: ignore[assignment]
    with_workers(k)
    k.evict_pod(pod(), PodEviction("Evicted", MESSAGE), 1)
    await k.sync_terminating_pod(pod(), cached(running("c1", "app")), 1, "Evicted")
    [before] = [c for c in runtime.published_at_kill[0]["conditions"] if c["type"] == "PodReadyToStartContainers"]
    [after] = [c for c in statuses.published["u1"]["conditions"] if c["type"] == "PodReadyToStartContainers"]
    assert (before["status"], after["status"]) == ("True", "False")


@dataclass
class EndingRuntime(KillingRuntime):
    """Its containers end with `exit_code` at the kill."""

    exit_code: int = 0

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        return from_pod_status(cached(exited("c1", "app", self.exit_code)))


def exited(cid: str, name: str, code: int) -> ContainerRecord:
    record = running(cid, name)
    status = api_pb2.ContainerStatus()
    status.CopyFrom(record.status)
    status.state = api_pb2.CONTAINER_EXITED
    status.finished_at = 2
    status.exit_code = code
    status.reason = "Completed" if code == 0 else "Error"
    return ContainerRecord(record.sandbox_id, status)


@pytest.mark.parametrize(
    ("code", "phase", "reason"),
    [(0, "Succeeded", None), (137, "Failed", "Preempting")],
)
async def test_after_the_kill_the_phase_is_how_the_containers_ended(code: int, phase: str, reason: str | None) -> None:
    """As upstream (the e2e_node CriticalPod specs): the kill's Failed is the status while the containers stop; once
    stopped, the status is generated from how they ended. All exited 0: Succeeded, without the kill's reason; any
    failed: Failed with the kill's reason and message. The DisruptionTarget condition stays either way."""
    statuses = Statuses()
    k = kubelet(statuses)
    runtime = EndingRuntime(statuses=statuses, exit_code=code)
    k.runtime = runtime  # type: ignore[assignment]
    with_workers(k)
    k.evict_pod(pod(), PREEMPTION, 30)
    await k.sync_terminating_pod(pod(), cached(running("c1", "app")), 30, PREEMPTION.reason)
    before = runtime.published_at_kill[0]
    assert (before["phase"], before["reason"]) == ("Failed", "Preempting")
    after = statuses.published["u1"]
    assert (after["phase"], after.get("reason")) == (phase, reason)
    [target] = [c for c in after["conditions"] if c["type"] == "DisruptionTarget"]
    [was] = [c for c in before["conditions"] if c["type"] == "DisruptionTarget"]
    assert target == was


def test_evicted_by_kill_is_the_kills_word_not_the_status() -> None:
    """Upstream's podSyncStatus.evicted: set by the eviction manager's and preemption's kill, not the node shutdown
    manager's (isEvicted false); the container GC removes such a pod's content even when it ended Succeeded."""
    k = kubelet(Statuses())
    with_workers(k)
    k.evict_pod(pod(), PodEviction("Evicted", MESSAGE), 0)
    assert k.evicted_by_kill("u1")
    k.evict_pod(pod(), PodEviction("Terminated", "node shutdown", evict=False), 0)
    assert not k.evicted_by_kill("u1")
    assert not k.evicted_by_kill("other")


async def test_an_evicted_pod_is_not_active() -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    workers = with_workers(k)
    k.pod_config.push(SourceUpdate("api", Operation.SET, (pod(),)))
    workers.states["u1"] = WorkState.SYNCING
    assert [p["metadata"]["uid"] for p in k.active_pods()] == ["u1"]
    k.evict_pod(pod(), PodEviction("Evicted", MESSAGE), 0)
    assert k.active_pods() == []


async def test_active_pod_views_are_the_stored_pods_and_active_pods_copies() -> None:
    k = kubelet(Statuses())
    workers = with_workers(k)
    k.pod_config.push(SourceUpdate("api", Operation.SET, (pod(),)))
    workers.states["u1"] = WorkState.SYNCING
    (view,) = k.active_pod_views()
    assert view is k.pod_config.pod_view("u1")  # no copy: the QoS update reads it at every pod sync
    (copied,) = k.active_pods()
    assert copied == view and copied is not view
    copied["metadata"]["name"] = "changed"  # a caller that keeps and edits its copy changes nothing stored
    assert k.pod_config.pod_view("u1")["metadata"]["name"] != "changed"  # type: ignore[index]
    k.evict_pod(pod(), PodEviction("Evicted", MESSAGE), 0)
    assert k.active_pod_views() == []
