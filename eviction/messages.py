"""The words of eviction, as upstream writes them: the pod's status reason and message, the events, the node
conditions' reasons and messages, and the admission refusal under pressure (eviction_manager.go Admit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from eviction.pods import PodInfo, PodUsage, QOSClass
from eviction.quantity import Quantity, format_binary, format_decimal
from eviction.signals import BYTE_SIGNALS, SIGNAL_TO_RESOURCE, NodeCondition, Observations, Resource, Signal
from eviction.thresholds import Threshold, threshold_quantity_text

# The pod status reason, the pod event reason and the admission refusal reason.
REASON = "Evicted"
# The node event when a threshold is met ("Attempting to reclaim memory").
THRESHOLD_MET_EVENT_REASON = "EvictionThresholdMet"
# The DisruptionTarget condition's reason on a pod evicted for node pressure.
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"

# The eviction event's annotations (upstream's keys).
OFFENDING_CONTAINERS_KEY = "offending_containers"
OFFENDING_CONTAINERS_USAGE_KEY = "offending_containers_usage"
OFFENDING_POD_KEY = "offending_pod"
OFFENDING_POD_USAGE_KEY = "offending_pod_usage"
STARVED_RESOURCE_KEY = "starved_resource"

# The taints the node lifecycle controller puts on a node with these conditions.
TAINT_MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
TAINT_DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
TAINT_PID_PRESSURE = "node.kubernetes.io/pid-pressure"
NO_SCHEDULE = "NoSchedule"


@dataclass(frozen=True)
class ConditionText:
    reason: str
    message: str
    event: str  # the node event recorded when the condition turns to this status


# Condition -> (text when False, text when True), from pkg/kubelet/nodestatus/setters.go.
NODE_CONDITION_TEXT: Mapping[NodeCondition, tuple[ConditionText, ConditionText]] = {
    NodeCondition.MEMORY_PRESSURE: (
        ConditionText(
            "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "NodeHasSufficientMemory"
        ),
        ConditionText(
            "KubeletHasInsufficientMemory", "kubelet has insufficient memory available", "NodeHasInsufficientMemory"
        ),
    ),
    NodeCondition.DISK_PRESSURE: (
        ConditionText("KubeletHasNoDiskPressure", "kubelet has no disk pressure", "NodeHasNoDiskPressure"),
        ConditionText("KubeletHasDiskPressure", "kubelet has disk pressure", "NodeHasDiskPressure"),
    ),
    NodeCondition.PID_PRESSURE: (
        ConditionText("KubeletHasSufficientPID", "kubelet has sufficient PID available", "NodeHasSufficientPID"),
        ConditionText("KubeletHasInsufficientPID", "kubelet has insufficient PID available", "NodeHasInsufficientPID"),
    ),
}


def condition_text(condition: NodeCondition, *, pressure: bool) -> ConditionText:
    return NODE_CONDITION_TEXT[condition][pressure]


def threshold_met_event_message(resource: Resource) -> str:
    """The node's EvictionThresholdMet event (Warning)."""
    return f"Attempting to reclaim {resource}"


def _available_text(signal: Signal, available: int) -> str:
    return format_binary(available) if signal in BYTE_SIGNALS else format_decimal(available)


def _threshold_met_info(
    resource: Resource, thresholds: Iterable[Threshold], observations: Observations
) -> tuple[str, str] | None:
    """The first threshold on that resource with an observation: its quantity and the available amount, printed."""
    for threshold in thresholds:
        if SIGNAL_TO_RESOURCE.get(threshold.signal) != resource:
            continue
        observed = observations.get(threshold.signal)
        if observed is not None:
            return (
                threshold_quantity_text(threshold.value, observed.capacity),
                _available_text(threshold.signal, observed.available),
            )
    return None


def eviction_message(
    resource: Resource,
    pod: PodInfo,
    usage: PodUsage | None,
    thresholds: Sequence[Threshold],
    observations: Observations,
) -> tuple[str, dict[str, str]]:
    """The evicted pod's status message (also the event's), and the event's annotations (upstream's
    evictionMessage): "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. Container
    hog was using 512Mi, request is 0, has larger consumption of memory. "."""
    message = f"The node was low on resource: {resource}. "
    annotations: dict[str, str] = {}
    met = _threshold_met_info(resource, thresholds, observations)
    if met is not None:
        message += f"Threshold quantity: {met[0]}, available: {met[1]}. "
    if usage is None:
        return message, annotations
    pod_request = pod.pod_level_memory_request
    if resource == Resource.MEMORY and pod_request is not None and usage.memory_working_set is not None:
        pod_usage = format_binary(usage.memory_working_set)
        message += (
            f"Pod {pod.name} was using {pod_usage}, request is {pod_request}, has larger consumption of {resource}. "
        )
        annotations[OFFENDING_POD_KEY] = pod.name
        annotations[OFFENDING_POD_USAGE_KEY] = pod_usage
    offenders: list[str] = []
    offender_usage: list[str] = []
    containers = {c.name: c for c in reversed(pod.containers)}  # the first of a name wins, as upstream's loop
    for stats in usage.containers:
        container = containers.get(stats.name)
        if container is None:
            continue
        amount: int | None = None
        request: Quantity
        if resource == Resource.EPHEMERAL_STORAGE:
            request = container.ephemeral_storage_request
            rootfs, logs = stats.rootfs, stats.logs
            if rootfs and logs and rootfs.used_bytes is not None and logs.used_bytes is not None:
                amount = rootfs.used_bytes + logs.used_bytes
        elif resource == Resource.MEMORY:
            request = container.memory_request
            amount = stats.memory_working_set
        else:
            continue
        if amount is not None and amount > request.value:
            printed = format_binary(amount)
            message += (
                f"Container {container.name} was using {printed}, request is {request}, "
                f"has larger consumption of {resource}. "
            )
            offenders.append(container.name)
            offender_usage.append(printed)
    annotations[OFFENDING_CONTAINERS_KEY] = ",".join(offenders)
    annotations[OFFENDING_CONTAINERS_USAGE_KEY] = ",".join(offender_usage)
    annotations[STARVED_RESOURCE_KEY] = str(resource)
    return message, annotations


# Local storage limits (upstream's localStorageEviction messages).


def empty_dir_limit_message(volume: str, limit: Quantity) -> str:
    return f'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". '


def pod_ephemeral_storage_limit_message(limit: Quantity) -> str:
    return f"Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "


def container_ephemeral_storage_limit_message(container: str, limit: Quantity) -> str:
    return f'Container {container} exceeded its local ephemeral storage limit "{limit}". '


# Admission under pressure.


@dataclass(frozen=True)
class AdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


def _go_slice(conditions: Sequence[NodeCondition]) -> str:
    return "[" + " ".join(conditions) + "]"


def admit(pod: PodInfo, conditions: Sequence[NodeCondition]) -> AdmitResult:
    """Whether a pod may start on a node with these eviction conditions (upstream's Admit):

    - no condition, or a critical pod: admitted;
    - MemoryPressure alone: admitted unless BestEffort, and BestEffort too when it tolerates the memory-pressure
      NoSchedule taint;
    - anything else (DiskPressure, PIDPressure, or MemoryPressure with another): refused, "The node had condition:
      [DiskPressure]. ".
    """
    if not conditions or pod.critical:
        return AdmitResult(admit=True)
    if list(conditions) == [NodeCondition.MEMORY_PRESSURE]:
        if pod.qos != QOSClass.BEST_EFFORT:
            return AdmitResult(admit=True)
        if any(t.tolerates(TAINT_MEMORY_PRESSURE, NO_SCHEDULE) for t in pod.tolerations):
            return AdmitResult(admit=True)
    return AdmitResult(admit=False, reason=REASON, message=f"The node had condition: {_go_slice(conditions)}. ")
