"""The kubelet-owned pod conditions, with the reasons and messages of upstream pkg/kubelet/status/generate.go.

Each generator returns a condition without times; `stamp_transition_times` then carries lastTransitionTime over
from the old status when the condition's status did not change, as the status manager's updateLastTransitionTime
does, so a resync with nothing new does not move the times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from nodeagent.status._common import (
    JSON,
    find_status,
    format_time,
    go_list,
    has_any_regular_container_started,
    is_restartable_init_container,
    state_of,
)
from nodeagent.status.phase import FAILED, SUCCEEDED

POD_READY_TO_START_CONTAINERS = "PodReadyToStartContainers"
INITIALIZED = "Initialized"
CONTAINERS_READY = "ContainersReady"
READY = "Ready"
POD_SCHEDULED = "PodScheduled"

POD_RESIZE_PENDING = "PodResizePending"
POD_RESIZE_IN_PROGRESS = "PodResizeInProgress"

# The condition types the kubelet owns (upstream PodConditionsByKubelet, the resize conditions included); any other
# type (readiness gates, DisruptionTarget set by others) is kept.
KUBELET_CONDITIONS = frozenset(
    {
        POD_READY_TO_START_CONTAINERS,
        INITIALIZED,
        CONTAINERS_READY,
        READY,
        POD_SCHEDULED,
        POD_RESIZE_PENDING,
        POD_RESIZE_IN_PROGRESS,
    }
)

UNKNOWN_CONTAINER_STATUSES = "UnknownContainerStatuses"
POD_COMPLETED = "PodCompleted"
POD_FAILED = "PodFailed"
CONTAINERS_NOT_READY = "ContainersNotReady"
CONTAINERS_NOT_INITIALIZED = "ContainersNotInitialized"
READINESS_GATES_NOT_READY = "ReadinessGatesNotReady"

TRUE = "True"
FALSE = "False"


def _condition(kind: str, status: str, reason: str = "", message: str = "") -> JSON:
    condition: JSON = {"type": kind, "status": status}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def pod_ready_to_start_containers_condition(*, sandbox_ready: bool) -> JSON:
    """True once the pod has a ready sandbox with networking, so containers can start."""
    return _condition(POD_READY_TO_START_CONTAINERS, TRUE if sandbox_ready else FALSE)


def initialized_condition(
    pod_spec: Mapping[str, Any], container_statuses: Sequence[Mapping[str, Any]], phase: str
) -> JSON:
    """Initialized: every regular init container exited 0 and every sidecar started (GeneratePodInitializedCondition).

    `container_statuses` holds init and app container statuses together.
    """
    init_containers = pod_spec.get("initContainers") or ()
    unknown: list[str] = []
    incomplete: list[str] = []
    for container in init_containers:
        name = container.get("name", "")
        status = find_status(container_statuses, name)
        if status is None:
            unknown.append(name)
            continue
        if is_restartable_init_container(container):
            if not status.get("started"):
                incomplete.append(name)
            continue
        terminated = state_of(status).get("terminated")
        if terminated is None or terminated.get("exitCode", 0) != 0:
            incomplete.append(name)

    # As upstream, also without init containers: a completed pod says so in every condition.
    if phase == SUCCEEDED and not unknown:
        return _condition(INITIALIZED, TRUE, POD_COMPLETED)
    # An app container that ran means initialization finished once, even if a sidecar is restarting now.
    if has_any_regular_container_started(pod_spec, container_statuses):
        return _condition(INITIALIZED, TRUE)
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {go_list(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {go_list(incomplete)}")
    if messages:
        return _condition(INITIALIZED, FALSE, CONTAINERS_NOT_INITIALIZED, ", ".join(messages))
    return _condition(INITIALIZED, TRUE)


def containers_ready_condition(
    pod_spec: Mapping[str, Any], container_statuses: Sequence[Mapping[str, Any]] | None, phase: str
) -> JSON:
    """ContainersReady: every app container and sidecar is ready (GenerateContainersReadyCondition)."""
    if container_statuses is None:
        return _condition(CONTAINERS_READY, FALSE, UNKNOWN_CONTAINER_STATUSES)
    unknown: list[str] = []
    unready: list[str] = []
    sidecars = [c for c in pod_spec.get("initContainers") or () if is_restartable_init_container(c)]
    for container in [*sidecars, *(pod_spec.get("containers") or ())]:
        name = container.get("name", "")
        status = find_status(container_statuses, name)
        if status is None:
            unknown.append(name)
        elif not status.get("ready"):
            unready.append(name)

    if phase == SUCCEEDED and not unknown:
        return _condition(CONTAINERS_READY, FALSE, POD_COMPLETED)
    # Containers of a failed pod may still be terminating; the pod is not ready whatever they report.
    if phase == FAILED:
        return _condition(CONTAINERS_READY, FALSE, POD_FAILED)
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {go_list(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {go_list(unready)}")
    if messages:
        return _condition(CONTAINERS_READY, FALSE, CONTAINERS_NOT_READY, ", ".join(messages))
    return _condition(CONTAINERS_READY, TRUE)


def ready_condition(
    pod_spec: Mapping[str, Any],
    conditions: Iterable[Mapping[str, Any]],
    container_statuses: Sequence[Mapping[str, Any]] | None,
    phase: str,
) -> JSON:
    """Ready: ContainersReady and every readiness gate's condition True (GeneratePodReadyCondition).

    `conditions` are the pod's other conditions, where the readiness gates' condition types are looked up.
    """
    containers_ready = containers_ready_condition(pod_spec, container_statuses, phase)
    if containers_ready["status"] != TRUE:
        return _condition(
            READY, containers_ready["status"], containers_ready.get("reason", ""), containers_ready.get("message", "")
        )
    by_type = {c.get("type"): c for c in conditions}
    messages = []
    for gate in pod_spec.get("readinessGates") or ():
        kind = gate.get("conditionType", "")
        found = by_type.get(kind)
        if found is None:
            messages.append(f'corresponding condition of pod readiness gate "{kind}" does not exist.')
        elif found.get("status") != TRUE:
            messages.append(f'the status of pod readiness gate "{kind}" is not "True", but {found.get("status", "")}')
    if messages:
        return _condition(READY, FALSE, READINESS_GATES_NOT_READY, ", ".join(messages))
    return _condition(READY, TRUE)


def pod_scheduled_condition() -> JSON:
    """PodScheduled is True on the node: the pod reached the kubelet because it was bound here."""
    return _condition(POD_SCHEDULED, TRUE)


def stamp_transition_times(
    conditions: Iterable[Mapping[str, Any]], old_conditions: Iterable[Mapping[str, Any]], *, now: datetime
) -> list[JSON]:
    """Set lastProbeTime and lastTransitionTime: kept from the old condition of the same type when its status is
    unchanged, `now` otherwise (status_manager.go updateLastTransitionTime)."""
    old_by_type = {c.get("type"): c for c in old_conditions}
    stamped: list[JSON] = []
    for condition in conditions:
        old = old_by_type.get(condition.get("type"))
        if old is not None and old.get("status") == condition.get("status") and old.get("lastTransitionTime"):
            transition = old["lastTransitionTime"]
        else:
            transition = format_time(now)
        out: JSON = {"type": condition["type"], "status": condition["status"], "lastProbeTime": None}
        out["lastTransitionTime"] = transition
        for key in ("reason", "message"):
            if condition.get(key):
                out[key] = condition[key]
        for key, value in condition.items():
            if key not in out and key not in ("lastProbeTime", "lastTransitionTime"):
                out[key] = value
        stamped.append(out)
    return stamped


def with_observed_generation(conditions: Iterable[Mapping[str, Any]], generation: int) -> list[JSON]:
    """The conditions with observedGeneration set to the pod's metadata.generation, as the kubelet stamps every
    condition it generates (CalculatePodConditionObservedGeneration with PodObservedGenerationTracking, on by
    default since 1.34). A generation of 0 (a pod no apiserver numbered, e.g. from a file) leaves it unset."""
    out: list[JSON] = []
    for condition in conditions:
        stamped = dict(condition)
        if generation > 0:
            stamped["observedGeneration"] = generation
        else:
            stamped.pop("observedGeneration", None)
        out.append(stamped)
    return out


def need_to_reconcile_pod_readiness(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's Ready condition, as the apiserver shows it, disagrees with its readiness gates' conditions
    there, so the pod must be synced (upstream NeedToReconcilePodReadiness, which HandlePodReconcile asks).

    A controller or user that sets a gate's condition changes only the status: no spec change syncs the pod.
    Upstream looks at containerStatuses alone; the init statuses are looked at too, so that a pod with a sidecar is
    not synced again on every status change for want of the sidecar's status.
    """
    spec: Mapping[str, Any] = pod.get("spec") or {}
    if not spec.get("readinessGates"):
        return False
    status: Mapping[str, Any] = pod.get("status") or {}
    conditions = list(status.get("conditions") or ())
    current = find_condition(conditions, READY)
    if current is None:
        return False  # the kubelet has not reported readiness yet: its first sync will
    statuses = [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    expected = ready_condition(spec, conditions, statuses, str(status.get("phase", "")))
    return bool(
        current.get("status") != expected["status"] or current.get("message", "") != expected.get("message", "")
    )


def find_condition(conditions: Iterable[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    """The condition of that type (podutil.GetPodConditionFromList)."""
    return next((c for c in conditions if c.get("type") == kind), None)
