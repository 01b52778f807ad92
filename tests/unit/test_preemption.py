"""Critical-pod preemption at admission (nodeagent.preemption), against upstream's CriticalPodAdmissionHandler:
the choice of pods (table-driven, upstream's getPodsToPreempt to the tie), the handler's verdicts, and the
Kubelet's admission through it with its real objects (a fake runtime and workers): the preempted pod gets the
`Preempting` event, a kill with its grace and upstream's status; the critical pod then goes to its worker."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeagent.admission import AdmitResult, admit
from nodeagent.kubelet import Kubelet
from nodeagent.podworkers import UpdatePodOptions, UpdateType, WorkState
from nodeagent.preemption import (
    CONDITION_MESSAGE,
    EXCEEDED_GRACE_PERIOD,
    MESSAGE,
    PREEMPT_REASON,
    UNEXPECTED_ADMISSION_ERROR,
    CriticalPodAdmissionHandler,
    PreemptionError,
    Requirement,
    distance,
    get_pods_to_preempt,
    kill_timeout,
    requirements_text,
    resource_request,
    subtract,
)
from tests.unit.status.test_kubelet_status import FakeRuntime, Statuses, cached, kubelet, running

CRITICAL = 2_000_001_000  # system-node-critical


class AutoClock:
    """Time jumps by what is slept: a kill that never finishes times out at once, and the test sees when."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=self.t)

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


def mk(
    name: str,
    qos: str = "bu",
    *,
    cpu: int = 0,
    memory: int = 0,
    priority: int | None = None,
    source: str = "api",
    grace: int | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod: `be` no resources, `bu` requests only, `gu` requests = limits (cpu in millicores, memory in Mi)."""
    resources: dict[str, Any] = {}
    amounts = {k: v for k, v in (("cpu", f"{cpu}m"), ("memory", f"{memory}Mi")) if not v.startswith("0")}
    if qos == "bu":
        resources = {"requests": amounts}
    elif qos == "gu":
        both = {"cpu": f"{cpu or 1}m", "memory": f"{memory or 1}Mi"}
        resources = {"requests": both, "limits": both}
    body: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox", "resources": resources}], **spec}
    if priority is not None:
        body["priority"] = priority
    if grace is not None:
        body["terminationGracePeriodSeconds"] = grace
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": {"kubernetes.io/config.source": source},
        },
        "spec": body,
        "status": {"phase": "Running"},
    }


def names(pods: list[dict[str, Any]] | list[Any]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


PREEMPTOR = mk("critical", "gu", cpu=100, memory=100, priority=CRITICAL)
MI = 1024 * 1024


@pytest.mark.parametrize(
    ("requirements", "pods", "expected"),
    [
        ((), [mk("b1", cpu=100)], []),
        ((Requirement("pods", 1),), [mk("be1", "be")], ["be1"]),
        # The only class needed: a Burstable pod suffices, the Guaranteed one stays.
        ((Requirement("cpu", 100),), [mk("g1", "gu", cpu=300), mk("b1", cpu=200)], ["b1"]),
        # BestEffort first: it frees a pod slot as well as any other.
        ((Requirement("pods", 1),), [mk("g1", "gu", cpu=300), mk("b1", cpu=200), mk("be1", "be")], ["be1"]),
        # Guaranteed only when the others cannot cover it; then the Burstable pods still needed beside it.
        (
            (Requirement("cpu", 500),),
            [mk("be1", "be"), mk("b1", cpu=200), mk("g1", "gu", cpu=300), mk("g2", "gu", cpu=400)],
            ["b1", "g1"],
        ),
        # Closest first: one pod of 250m rather than two of 100m (fewest pods).
        ((Requirement("cpu", 200),), [mk("b1", cpu=100), mk("b2", cpu=100), mk("b3", cpu=250)], ["b3"]),
        # Equally close: the smaller request goes (memory first, then cpu).
        ((Requirement("cpu", 100),), [mk("b1", cpu=200, memory=64), mk("b2", cpu=300, memory=32)], ["b2"]),
        ((Requirement("cpu", 100),), [mk("b1", cpu=300, memory=32), mk("b2", cpu=200, memory=32)], ["b2"]),
        # Equal requests: the later candidate wins the tie (upstream's "smaller" is true when equal).
        ((Requirement("cpu", 100),), [mk("b1", cpu=200), mk("b2", cpu=200)], ["b2"]),
        # Two resources weigh the same: the pod that covers both beats one that covers more of one.
        (
            (Requirement("cpu", 100), Requirement("memory", 100 * MI)),
            [mk("b1", cpu=1000), mk("b2", cpu=100, memory=100), mk("b3", memory=1000)],
            ["b2"],
        ),
        # Critical pods (priority >= 2e9, static) of the same priority are never preempted.
        (
            (Requirement("cpu", 100),),
            [mk("c1", cpu=100, priority=CRITICAL), mk("s1", cpu=100, source="file"), mk("b1", cpu=900)],
            ["b1"],
        ),
        # ... but a lower critical priority is: system-node-critical preempts system-cluster-critical.
        ((Requirement("cpu", 100),), [mk("c1", cpu=500, priority=2_000_000_000)], ["c1"]),
    ],
)
def test_get_pods_to_preempt(
    requirements: tuple[Requirement, ...], pods: list[dict[str, Any]], expected: list[str]
) -> None:
    assert names(get_pods_to_preempt(PREEMPTOR, pods, requirements)) == expected


@pytest.mark.parametrize(
    ("requirements", "pods", "error"),
    [
        ((Requirement("cpu", 1000),), [mk("b1", cpu=200), mk("g1", "gu", cpu=300)], "[(res: cpu, q: 500), ]"),
        ((Requirement("cpu", 100),), [], "[(res: cpu, q: 100), ]"),
        ((Requirement("cpu", 100),), [mk("c1", cpu=500, priority=CRITICAL)], "[(res: cpu, q: 100), ]"),
        (
            (Requirement("pods", 2), Requirement("memory", 10)),
            [mk("b1", memory=1)],
            "[(res: pods, q: 1), ]",
        ),
    ],
)
def test_get_pods_to_preempt_cannot(
    requirements: tuple[Requirement, ...], pods: list[dict[str, Any]], error: str
) -> None:
    with pytest.raises(PreemptionError) as failure:
        get_pods_to_preempt(PREEMPTOR, pods, requirements)
    assert str(failure.value) == f"no set of running pods found to reclaim resources: {error}"


def test_priority_between_non_critical_pods() -> None:
    # Upstream Preemptable: without criticality, a strictly higher priority, both set.
    low, high = mk("low", cpu=100, priority=10), mk("high", cpu=100, priority=20)
    assert names(get_pods_to_preempt(high, [low], (Requirement("cpu", 100),))) == ["low"]
    with pytest.raises(PreemptionError):
        get_pods_to_preempt(low, [high], (Requirement("cpu", 100),))
    with pytest.raises(PreemptionError):
        get_pods_to_preempt(mk("unset", cpu=100), [low], (Requirement("cpu", 100),))


@pytest.mark.parametrize(
    ("pod", "name", "expected"),
    [
        (mk("b", cpu=250), "cpu", 250),
        (mk("b", cpu=250), "pods", 1),
        (mk("b", memory=2), "memory", 2 * MI),
        # The overhead counts only where the pod requests some of the resource (upstream GetResourceRequest).
        (mk("b", cpu=250, overhead={"cpu": "50m", "memory": "1Mi"}), "cpu", 300),
        (mk("b", cpu=250, overhead={"cpu": "50m", "memory": "1Mi"}), "memory", 0),
        # Init containers: the largest one, sidecars added (the scheduler's count).
        (
            mk(
                "b",
                cpu=100,
                initContainers=[
                    {"name": "i", "resources": {"requests": {"cpu": "500m"}}},
                    {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                ],
            ),
            "cpu",
            500,
        ),
    ],
)
def test_resource_request(pod: dict[str, Any], name: str, expected: int) -> None:
    assert resource_request(pod, name) == expected


def test_distance_and_subtract() -> None:
    requirements = (Requirement("cpu", 100), Requirement("memory", 100 * MI))
    assert distance(requirements, mk("b", cpu=50)) == 0.25 + 1.0
    assert distance(requirements, mk("b", cpu=500, memory=500)) == 0.0
    assert subtract(requirements, [mk("b", cpu=50), mk("c", cpu=10, memory=100)]) == (Requirement("cpu", 40),)
    assert requirements_text(requirements) == f"[(res: cpu, q: 100), (res: memory, q: {100 * MI}), ]"
    assert (kill_timeout(0), kill_timeout(6), kill_timeout(30)) == (10, 10, 45)


# --- the handler -----------------------------------------------------------------------------------------------


def node(cpu: str = "1", pods: int = 10, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux"}},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "1Gi", "pods": str(pods), "ephemeral-storage": "10Gi"}},
    }


@dataclass
class Recorded:
    kills: list[tuple[str, int]] = field(default_factory=list)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)
    killed: set[str] = field(default_factory=set)


def handler(
    active: list[dict[str, Any]], record: Recorded, *, kills_finish: bool = True
) -> CriticalPodAdmissionHandler:
    def kill(pod: Any, grace: int) -> None:
        record.kills.append((pod["metadata"]["name"], grace))
        if kills_finish:
            record.killed.add(pod["metadata"]["uid"])

    return CriticalPodAdmissionHandler(
        active_pods=lambda: active,
        kill_pod=kill,
        pod_killed=lambda pod: pod["metadata"]["uid"] in record.killed,
        record_event=lambda pod, type_, reason, message: record.events.append(
            (pod["metadata"]["name"], type_, reason, message)
        ),
        clock=AutoClock(),
    )


def decide(
    pod: dict[str, Any], others: list[dict[str, Any]], n: dict[str, Any], h: CriticalPodAdmissionHandler
) -> AdmitResult:
    return h.handle_admission_failure(pod, n, others, admit(pod, n, others, host_apparmor=False))


async def test_a_critical_pod_short_of_cpu_preempts_and_is_admitted() -> None:
    record = Recorded()
    others = [mk("be1", "be"), mk("b1", cpu=400, grace=7), mk("g1", "gu", cpu=500)]
    critical = mk("critical", "gu", cpu=300, memory=10, priority=CRITICAL)
    h = handler(others, record)
    assert admit(critical, node(), others, host_apparmor=False).reason == "OutOfcpu"
    assert decide(critical, others, node(), h) == AdmitResult(admit=True)
    assert record.kills == []  # decided in admission, carried out after it
    await h.evict_preempted()
    assert record.kills == [("b1", 7)]
    assert record.events == [("b1", "Warning", PREEMPT_REASON, MESSAGE)]
    await h.evict_preempted()  # once
    assert record.kills == [("b1", 7)]


@pytest.mark.parametrize(
    ("pod", "n", "expected"),
    [
        # Not critical: refused as before.
        (
            mk("plain", "gu", cpu=300, priority=1000),
            node(),
            ("OutOfcpu", "Node didn't have enough resource: cpu, requested: 300, used: 900, capacity: 1000"),
        ),
        # Critical, but also failing another predicate: that one is reported, nothing is preempted.
        (
            mk("critical", "gu", cpu=300, priority=CRITICAL, nodeSelector={"disk": "ssd"}),
            node(),
            ("NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"),
        ),
        # Critical, and even every preemptable pod is not enough.
        (
            mk("critical", "gu", cpu=2000, priority=CRITICAL),
            node(),
            (
                UNEXPECTED_ADMISSION_ERROR,
                "Unexpected error while attempting to recover from admission failure: preemption: error finding a "
                "set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 1000), ]",
            ),
        ),
    ],
)
async def test_refusals(pod: dict[str, Any], n: dict[str, Any], expected: tuple[str, str]) -> None:
    record = Recorded()
    others = [mk("be1", "be"), mk("b1", cpu=400), mk("g1", "gu", cpu=500)]
    h = handler(others, record)
    verdict = decide(pod, others, n, h)
    assert (verdict.admit, verdict.reason, verdict.message) == (False, *expected)
    await h.evict_preempted()
    assert record.kills == []


async def test_pods_and_cpu_short_at_once() -> None:
    # Short of a pod slot and of 100m: the Burstable pod frees both, so the BestEffort one stays (upstream counts
    # the BestEffort pods as gone only while choosing the classes above them).
    record = Recorded()
    others = [mk("be1", "be"), mk("b1", cpu=800)]
    h = handler(others, record)
    critical = mk("critical", "gu", cpu=300, priority=CRITICAL)
    reasons = admit(critical, node(pods=2), others, host_apparmor=False).reason
    assert reasons == "OutOfpods"
    assert decide(critical, others, node(pods=2), h).admit
    await h.evict_preempted()
    assert [name for name, _ in record.kills] == ["b1"]


async def test_a_kill_that_times_out_is_reported_and_the_next_goes_on() -> None:
    record = Recorded()
    others = [mk("b1", cpu=600, grace=0), mk("b2", cpu=400, grace=0)]
    h = handler(others, record, kills_finish=False)
    assert decide(mk("critical", "gu", cpu=1000, priority=CRITICAL), others, node(), h).admit
    await h.evict_preempted()
    assert [name for name, _ in record.kills] == ["b1", "b2"]
    assert [(n, r) for n, _, r, _ in record.events] == [
        ("b1", PREEMPT_REASON),
        ("b1", EXCEEDED_GRACE_PERIOD),
        ("b2", PREEMPT_REASON),
        ("b2", EXCEEDED_GRACE_PERIOD),
    ]
    assert record.events[1][3] == "Container runtime did not kill the pod within specified grace period."


async def test_after_preemption_apparmor_may_still_refuse() -> None:
    record = Recorded()
    others = [mk("b1", cpu=900)]
    h = handler(others, record)
    critical = mk("critical", "gu", cpu=300, priority=CRITICAL)
    critical["spec"]["securityContext"] = {"appArmorProfile": {"type": "RuntimeDefault"}}
    critical["status"] = {"phase": "Pending"}
    verdict = decide(critical, others, node(), h)
    assert (verdict.admit, verdict.reason) == (False, "AppArmor")
    await h.evict_preempted()  # as upstream: the predicate handler preempted before the AppArmor handler refused
    assert record.kills == [("b1", 30)]


# --- through the Kubelet's admission ---------------------------------------------------------------------------


@dataclass
class Workers:
    states: dict[str, WorkState] = field(default_factory=dict)
    updates: list[UpdatePodOptions] = field(default_factory=list)

    def state(self, uid: str) -> WorkState | None:
        return self.states.get(uid)

    def update_pod(self, options: UpdatePodOptions) -> None:
        self.updates.append(options)
        if options.update_type is UpdateType.KILL:
            self.states[options.pod["metadata"]["uid"]] = WorkState.TERMINATED  # the worker finished the kill


@dataclass
class KillingRuntime(FakeRuntime):
    kills: list[int | None] = field(default_factory=list)

    async def kill_pod(self, pod: dict[str, Any] | None, status: Any, *, grace_period: int | None) -> None:
        self.kills.append(grace_period)

    async def get_pod_status(self, uid: str) -> Any:
        from nodeagent.kuberuntime.actions import from_pod_status  # noqa: PLC0415

        return from_pod_status(cached())


def kubelet_with(others: list[dict[str, Any]]) -> tuple[Kubelet, Statuses, Workers, list[tuple[str, str, str]]]:
    from nodeagent.podconfig.storage import Operation, SourceUpdate  # noqa: PLC0415

    statuses = Statuses()
    k = kubelet(statuses)
    k.node = node
    events: list[tuple[str, str, str]] = []
    k.record_event = lambda pod, type_, reason, message: events.append((pod["metadata"]["name"], reason, message))
    workers = Workers()
    k.workers = workers  # type: ignore[assignment]
    k.runtime = KillingRuntime()  # type: ignore[assignment]
    k.preemption.clock = AutoClock()
    k.pod_config.push(SourceUpdate("api", Operation.SET, tuple(others)))
    for other in others:
        workers.states[other["metadata"]["uid"]] = WorkState.SYNCING
    return k, statuses, workers, events


async def test_kubelet_admits_a_critical_pod_by_preempting() -> None:
    others = [mk("b1", cpu=400, grace=5), mk("g1", "gu", cpu=500)]
    k, statuses, workers, events = kubelet_with(others)
    critical = mk("critical", "gu", cpu=300, priority=CRITICAL)
    await k.handle_pod_additions([critical])
    assert [(u.update_type, u.pod["metadata"]["name"], u.grace_period_override) for u in workers.updates] == [
        (UpdateType.KILL, "b1", 5),
        (UpdateType.CREATE, "critical", None),
    ]
    assert events == [("b1", PREEMPT_REASON, MESSAGE)]
    assert "uid-critical" not in statuses.published  # admitted: no rejection status
    # The preempted pod's worker terminates it with upstream's status (Failed, Preempting, DisruptionTarget).
    await k.sync_terminating_pod(others[0], cached(running("c1", "app")), 5, PREEMPT_REASON)
    shown = statuses.published["uid-b1"]
    assert (shown["phase"], shown["reason"], shown["message"]) == ("Failed", PREEMPT_REASON, MESSAGE)
    [target] = [c for c in shown["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "TerminationByKubelet",
        CONDITION_MESSAGE,
    )
    assert [p["metadata"]["name"] for p in k.active_pods()] == ["g1"]


async def test_kubelet_refuses_a_non_critical_pod_as_before() -> None:
    others = [mk("b1", cpu=400), mk("g1", "gu", cpu=500)]
    k, statuses, workers, events = kubelet_with(others)
    await k.handle_pod_additions([mk("plain", "gu", cpu=300, priority=1000)])
    assert workers.updates == [] and events == [("plain", "OutOfcpu", statuses.published["uid-plain"]["message"])]
    assert statuses.published["uid-plain"]["reason"] == "OutOfcpu"
