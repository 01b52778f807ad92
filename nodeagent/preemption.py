"""Critical-pod preemption at admission (upstream pkg/kubelet/preemption, CriticalPodAdmissionHandler, v1.34).

When a critical pod (nodeagent.criticalpod: static, mirror, or priority >= 2e9) fails the GeneralPredicates only
because the node lacks resources (cpu, memory, ephemeral-storage, pods, extended), the kubelet does not refuse it:
it evicts a set of lower-priority pods whose requests cover what is missing, then admits it. A failure of any other
kind (node affinity, name, host ports, taints) is reported instead, the first of them, as upstream.

The choice (`get_pods_to_preempt`) is upstream's, to the tie: the pods the critical pod may preempt
(`criticalpod.preemptable`) are split by QoS class; first the Guaranteed pods that would still be needed if every
BestEffort and Burstable pod went, then the Burstable pods still needed beside those and every BestEffort pod, then
the BestEffort pods still needed; in each class the pod closest to the remaining requirement goes first (distance:
the sum over the requirements of the squared fraction left unmet; a tie goes to the smaller request, memory then
cpu). Requests are upstream's GetResourceRequest: the sidecar-aware pod request, plus the overhead when it is not
zero, and 1 for `pods`. When no set of pods covers the need, the pod is refused with reason
UnexpectedAdmissionError and upstream's message.

Each chosen pod gets, as upstream's evictPodsToFreeRequests: a Warning event `Preempting` "Preempted in order to
admit critical pod", then a kill with its own grace period whose status is phase Failed, reason `Preempting`, that
message, and a DisruptionTarget condition (TerminationByKubelet, "Pod was preempted by Kubelet to accommodate a
critical pod."). The kills run one after the other, each awaited (upstream's killPodNow blocks until the pod's
worker is done, at most max(10 s, 1.5 x grace); past it: an `ExceededGracePeriod` event, and the next pod). The
decision is taken inside admission (sync); the kills are carried out by `evict_preempted`, which the kubelet awaits
right after admission and before the critical pod goes to its worker.

Requests are nodeagent.admission.resources' GetResourceRequestQuantity: the pod-level request when pod-level
resources (spec.resources) are set, else the containers'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.admission import (
    AdmitResult,
    SysctlAllowlist,
    admit,
    general_predicate_failures,
    is_insufficient_resource,
)
from nodeagent.admission.resources import CPU, MEMORY, PODS, scaled
from nodeagent.admission.resources import resource_request as pod_resource_request
from nodeagent.clock import Clock, SystemClock
from nodeagent.criticalpod import is_critical_pod, preemptable
from nodeagent.kuberuntime.qos import QOSClass, pod_qos

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]

# pkg/kubelet/events and pkg/kubelet/preemption.
PREEMPT_REASON = "Preempting"
MESSAGE = "Preempted in order to admit critical pod"
CONDITION_MESSAGE = "Pod was preempted by Kubelet to accommodate a critical pod."
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
EXCEEDED_GRACE_PERIOD = "ExceededGracePeriod"
EXCEEDED_GRACE_PERIOD_MESSAGE = "Container runtime did not kill the pod within specified grace period."
KILL_MIN_TIMEOUT_SECONDS = 10
DEFAULT_GRACE_PERIOD_SECONDS = 30
KILL_POLL_SECONDS = 0.1


class PreemptionError(Exception):
    """No set of pods frees what the critical pod needs; str() is upstream's error text."""


@dataclass(frozen=True)
class Requirement:
    """How much of one resource must be freed (upstream admissionRequirement), in the scheduler's integers."""

    resource: str
    quantity: int


def requirements_text(requirements: Sequence[Requirement]) -> str:
    """Upstream admissionRequirementList.toString."""
    return "[" + "".join(f"(res: {r.resource}, q: {r.quantity}), " for r in requirements) + "]"


def _meta(pod: Pod) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _ref(pod: Pod) -> str:
    return f"{_meta(pod).get('namespace', '')}/{_meta(pod).get('name', '')}"


def resource_request(pod: Pod, name: str) -> int:
    """Upstream resource.GetResourceRequest: 1 for pods; else GetResourceRequestQuantity (the pod-level request when
    pod-level resources are set, else init containers and sidecars as the scheduler counts them; plus the overhead
    when that request is not zero); millicores for cpu."""
    if name == PODS:
        return 1
    return scaled(name, pod_resource_request(pod, name))


def distance(requirements: Sequence[Requirement], pod: Pod) -> float:
    """Upstream admissionRequirementList.distance: each requirement weighs the same, whatever its size."""
    total = 0.0
    for requirement in requirements:
        remaining = float(requirement.quantity - resource_request(pod, requirement.resource))
        if remaining > 0:
            total += (remaining / float(requirement.quantity)) ** 2
    return total


def subtract(requirements: Sequence[Requirement], pods: Sequence[Pod]) -> tuple[Requirement, ...]:
    """Upstream admissionRequirementList.subtract: what is still missing once `pods` are gone."""
    out = []
    for requirement in requirements:
        left = requirement.quantity
        for pod in pods:
            left -= resource_request(pod, requirement.resource)
            if left <= 0:
                break
        if left > 0:
            out.append(Requirement(requirement.resource, left))
    return tuple(out)


def smaller_resource_request(first: Pod, second: Pod) -> bool:
    """Upstream smallerResourceRequest: memory, then cpu; equal counts as smaller."""
    for name in (MEMORY, CPU):
        a, b = resource_request(first, name), resource_request(second, name)
        if a != b:
            return a < b
    return True


def sort_pods_by_qos(preemptor: Pod, pods: Sequence[Pod]) -> tuple[list[Pod], list[Pod], list[Pod]]:
    """Upstream sortPodsByQOS: the pods `preemptor` may preempt, as (BestEffort, Burstable, Guaranteed)."""
    best_effort: list[Pod] = []
    burstable: list[Pod] = []
    guaranteed: list[Pod] = []
    by_class = {QOSClass.BEST_EFFORT: best_effort, QOSClass.BURSTABLE: burstable, QOSClass.GUARANTEED: guaranteed}
    for pod in pods:
        if preemptable(preemptor, pod):
            by_class[pod_qos(pod)].append(pod)
    return best_effort, burstable, guaranteed


def pods_to_preempt_by_distance(pods: Sequence[Pod], requirements: Sequence[Requirement]) -> list[Pod]:
    """Upstream getPodsToPreemptByDistance: repeatedly the pod closest to what is left (a tie: the smaller request;
    the candidates are kept in upstream's order, the chosen one replaced by the last)."""
    candidates = list(pods)
    chosen: list[Pod] = []
    left = tuple(requirements)
    while left:
        if not candidates:
            raise PreemptionError(f"no set of running pods found to reclaim resources: {requirements_text(left)}")
        best_distance = float(len(left) + 1)
        best = 0
        for index, pod in enumerate(candidates):
            d = distance(left, pod)
            if d < best_distance or (d == best_distance and smaller_resource_request(pod, candidates[best])):
                best_distance, best = d, index
        left = subtract(left, [candidates[best]])
        chosen.append(candidates[best])
        candidates[best] = candidates[-1]
        candidates.pop()
    return chosen


def get_pods_to_preempt(preemptor: Pod, pods: Sequence[Pod], requirements: Sequence[Requirement]) -> list[Pod]:
    """Upstream getPodsToPreempt: the pods to evict so that `requirements` are freed, BestEffort first in the
    result, then Burstable, then Guaranteed; PreemptionError when even all of them would not do."""
    best_effort, burstable, guaranteed = sort_pods_by_qos(preemptor, pods)
    missing = subtract(requirements, [*best_effort, *burstable, *guaranteed])
    if missing:
        raise PreemptionError(f"no set of running pods found to reclaim resources: {requirements_text(missing)}")
    guaranteed_out = pods_to_preempt_by_distance(guaranteed, subtract(requirements, [*best_effort, *burstable]))
    burstable_out = pods_to_preempt_by_distance(burstable, subtract(requirements, [*best_effort, *guaranteed_out]))
    best_effort_out = pods_to_preempt_by_distance(
        best_effort, subtract(requirements, [*burstable_out, *guaranteed_out])
    )
    return [*best_effort_out, *burstable_out, *guaranteed_out]


def grace_period(pod: Pod) -> int:
    """The grace a preempted pod is killed with: its own (upstream passes no override)."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return int(value) if value is not None else DEFAULT_GRACE_PERIOD_SECONDS


def kill_timeout(grace: int) -> int:
    """Upstream killPodNow: how long a kill is waited for."""
    return max(KILL_MIN_TIMEOUT_SECONDS, grace + grace // 2)


@dataclass(frozen=True)
class _Preemption:
    preemptor: Pod
    victims: tuple[Pod, ...]
    requirements: tuple[Requirement, ...]


@dataclass
class CriticalPodAdmissionHandler:
    """Upstream's CriticalPodAdmissionHandler, the admission failure handler of the GeneralPredicates.

    It takes narrow callables, as upstream (ActivePodsFunc, KillPodFunc, a recorder): `active_pods` (the admitted
    pods still running), `kill_pod(pod, grace)` (starts the pod's kill with the preemption's status; returns at
    once), `pod_killed(pod)` (its worker is done with it) and `record_event(pod, type, reason, message)`.
    """

    active_pods: Callable[[], Sequence[Pod]]
    kill_pod: Callable[[Pod, int], None]
    pod_killed: Callable[[Pod], bool]
    record_event: Callable[[Pod, str, str, str], None] = lambda pod, type_, reason, message: None
    clock: Clock = field(default_factory=SystemClock)
    _pending: list[_Preemption] = field(default_factory=list)

    def handle_admission_failure(
        self,
        pod: Pod,
        node: Mapping[str, Any] | None,
        other_pods: Sequence[Pod],
        verdict: AdmitResult,
        *,
        sysctls: SysctlAllowlist | None = None,
    ) -> AdmitResult:
        """`verdict` (nodeagent.admission.admit of `pod` among `other_pods`) as the critical-pod handler leaves it:
        unchanged unless the pod is critical and its first failure is a lack of resources; then the first other
        GeneralPredicates failure if there is one, else the pods to preempt are chosen (carried out by
        `evict_preempted`) and the admission goes on without them (the handlers after the predicates, AppArmor,
        may still refuse)."""
        if node is None or not is_critical_pod(pod) or not is_insufficient_resource(verdict):
            return verdict
        resources, others = general_predicate_failures(pod, node, other_pods)
        if others:
            # As upstream: only the reasons that are not about resources are returned; the first is reported.
            return others[0]
        requirements = tuple(Requirement(r.name, r.insufficient_amount) for r in resources)
        try:
            victims = get_pods_to_preempt(pod, self.active_pods(), requirements)
        except PreemptionError as exc:
            message = (
                "Unexpected error while attempting to recover from admission failure: "
                f"preemption: error finding a set of pods to preempt: {exc}"
            )
            log.info(
                "preemption failed to admit critical pod pod=%s requirements=%s error=%s",
                _ref(pod),
                requirements_text(requirements),
                exc,
            )
            return AdmitResult(admit=False, reason=UNEXPECTED_ADMISSION_ERROR, message=message)
        self._pending.append(_Preemption(pod, tuple(victims), requirements))
        gone = {_meta(v).get("uid") for v in victims}
        rest = [p for p in other_pods if _meta(p).get("uid") not in gone]
        after = admit(pod, node, rest, sysctls=sysctls)
        # The resources are upstream's to count as freed: the handlers after the predicates decide from here on.
        return AdmitResult(admit=True) if after.admit or is_insufficient_resource(after) else after

    async def evict_preempted(self) -> None:
        """Upstream evictPodsToFreeRequests for the preemptions decided so far: each pod in turn gets the event, its
        kill, and is waited for. A kill that times out is logged and left to its worker, as upstream."""
        while self._pending:
            preemption = self._pending.pop(0)
            for victim in preemption.victims:
                self.record_event(victim, "Warning", PREEMPT_REASON, MESSAGE)
                grace = grace_period(victim)
                log.info(
                    "preempting pod to free up resources pod=%s uid=%s requesting_pod=%s requirements=%s grace=%d",
                    _ref(victim),
                    _meta(victim).get("uid", ""),
                    _ref(preemption.preemptor),
                    requirements_text(preemption.requirements),
                    grace,
                )
                self.kill_pod(victim, grace)
                if await self._wait_killed(victim, kill_timeout(grace)):
                    log.info("preemption pod evicted successfully pod=%s", _ref(victim))
                else:
                    self.record_event(victim, "Warning", EXCEEDED_GRACE_PERIOD, EXCEEDED_GRACE_PERIOD_MESSAGE)
                    log.warning("preemption failed to evict pod pod=%s error=timeout waiting to kill pod", _ref(victim))

    async def _wait_killed(self, pod: Pod, timeout: float) -> bool:
        deadline = self.clock.monotonic() + timeout
        while not self.pod_killed(pod):
            if self.clock.monotonic() >= deadline:
                return False
            await self.clock.sleep(KILL_POLL_SECONDS)
        return True
