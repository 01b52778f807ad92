"""Pure decisions of in-place pod resize (InPlacePodVerticalScaling, beta and on by default in v1.34), as upstream's
allocation manager (pkg/kubelet/allocation/allocation_manager.go) makes them:

- `update_pod_from_allocation`: the pod as the kubelet allocated it (each container's resources replaced by the
  allocated ones where they differ); whether they differed is whether a resize is asked for;
- `allocation_from_pod`: what is allocated for a pod: its regular containers and its sidecars (restartable init
  containers; a plain init container is never resized);
- `decide_resize` (handlePodResourcesResize + canResizePod): a static pod is Infeasible ("In-place resize of
  static-pods is not supported"); a Guaranteed pod whose cpu (memory) requests change under the static CPU (memory)
  manager policy is Infeasible; requests beyond the node's allocatable are Infeasible ("Node didn't have enough
  capacity: cpu, requested: N, capacity: M", millicores for cpu, bytes for memory, memory named first); requests that
  do not fit beside the other pods' allocations are Deferred with the admission message; otherwise it is allocated.
  Swap never applies here: the agent runs no container with swap (NoSwap), so upstream's "In-place resize of
  containers with swap is not supported." cannot arise;
- `resize_in_progress` (isPodResizeInProgress): some running resizable container's actuated cpu/memory requests or
  limits differ from its allocated ones;
- `completion_message`: the ResizeCompleted event's text, "Pod resize completed: " and the allocated resources as
  upstream's podResourceSummary marshals them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from nodeagent.admission.resources import CPU, MEMORY, pod_requests, scaled
from nodeagent.config.quantity import parse_quantity
from nodeagent.kuberuntime.qos import QOSClass, compute_pod_qos
from nodeagent.staticpods import is_static_pod

DEFERRED = "Deferred"
INFEASIBLE = "Infeasible"
ERROR = "Error"
POD_RESIZE_PENDING = "PodResizePending"
POD_RESIZE_IN_PROGRESS = "PodResizeInProgress"
RESIZE_COMPLETED = "ResizeCompleted"

STATIC_POD_MESSAGE = "In-place resize of static-pods is not supported"
CPU_MANAGER_STATIC = "static"
MEMORY_MANAGER_STATIC = "Static"

Pod = Mapping[str, Any]
# (pod, the other pods as allocated) -> None when admitted, else (reason, message): the kubelet's admit handlers.
AdmitFunc = Callable[[Pod, Sequence[Pod]], "tuple[str, str] | None"]


def _spec(pod: Pod) -> Mapping[str, Any]:
    out: Mapping[str, Any] = pod.get("spec") or {}
    return out


def is_resizable_container(container: Mapping[str, Any], *, init: bool) -> bool:
    """Upstream IsResizableContainer: regular containers and sidecars (restartable init containers)."""
    return not init or container.get("restartPolicy") == "Always"


def resizable_containers(pod: Pod) -> list[Mapping[str, Any]]:
    spec = _spec(pod)
    out = [c for c in spec.get("initContainers") or () if is_resizable_container(c, init=True)]
    return out + list(spec.get("containers") or ())


def _quantities(part: Any) -> dict[str, Decimal]:
    if not isinstance(part, Mapping):
        return {}
    return {str(k): parse_quantity(str(v)) for k, v in part.items()}


def requirements_equal(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Semantic equality of two ResourceRequirements (quantities by value; an empty list is no list)."""
    a, b = a or {}, b or {}
    return all(_quantities(a.get(key)) == _quantities(b.get(key)) for key in ("limits", "requests"))


def allocation_from_pod(pod: Pod) -> dict[str, dict[str, Any]]:
    """Upstream allocationFromPod: each regular container's and sidecar's resources."""
    return {str(c.get("name", "")): copy.deepcopy(dict(c.get("resources") or {})) for c in resizable_containers(pod)}


def update_pod_from_allocation(pod: Pod, allocated: Mapping[str, Mapping[str, Any]] | None) -> tuple[Pod, bool]:
    """The pod with its containers' resources as allocated; whether any differed (upstream updatePodFromAllocation).
    The pod given is not changed; a copy is returned when something differs."""
    if not allocated:
        return pod, False
    spec = _spec(pod)
    out: dict[str, Any] | None = None
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(kind) or ()):
            wanted = allocated.get(str(container.get("name", "")))
            if wanted is None or requirements_equal(container.get("resources"), wanted):
                continue
            if out is None:
                out = copy.deepcopy(dict(pod))
            out["spec"][kind][index]["resources"] = copy.deepcopy(dict(wanted))
    return (out, True) if out is not None else (pod, False)


@dataclass(frozen=True)
class ResizeDecision:
    """Allocate now, or leave the resize pending with a reason (Deferred: retried later; Infeasible: not retried
    until the spec changes) and upstream's message."""

    allocate: bool
    reason: str = ""
    message: str = ""


ALLOCATE = ResizeDecision(True)


def _request_changed(pod: Pod, allocated: Mapping[str, Mapping[str, Any]], resource: str) -> bool:
    """Upstream guaranteedPodResourceResizeRequired: some resizable container's request of `resource` differs from
    its allocation."""
    for container in resizable_containers(pod):
        wanted = _quantities((container.get("resources") or {}).get("requests")).get(resource, Decimal(0))
        had = _quantities((allocated.get(str(container.get("name", ""))) or {}).get("requests")).get(
            resource, Decimal(0)
        )
        if wanted != had:
            return True
    return False


def decide_resize(
    pod: Pod,
    allocated: Mapping[str, Mapping[str, Any]],
    *,
    other_pods: Sequence[Pod],
    allocatable: Mapping[str, str],
    admit: AdmitFunc,
    cpu_manager_policy: str = "none",
    memory_manager_policy: str = "None",
) -> ResizeDecision:
    """Whether the resize `pod` asks for (its spec, against its `allocated` resources) can be allocated now.

    `other_pods` are the node's other active pods as allocated; `allocatable` the node's allocatable before eviction
    thresholds (upstream GetNodeAllocatableAbsolute: capacity less the reservations)."""
    if is_static_pod(pod):
        return ResizeDecision(False, INFEASIBLE, STATIC_POD_MESSAGE)
    if compute_pod_qos(pod) is QOSClass.GUARANTEED:
        if cpu_manager_policy == CPU_MANAGER_STATIC and _request_changed(pod, allocated, CPU):
            message = f'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "{CPU_MANAGER_STATIC}"'
            return ResizeDecision(False, INFEASIBLE, message)
        if memory_manager_policy == MEMORY_MANAGER_STATIC and _request_changed(pod, allocated, MEMORY):
            message = (
                f'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "{MEMORY_MANAGER_STATIC}"'
            )
            return ResizeDecision(False, INFEASIBLE, message)
    requests = pod_requests(pod)
    cpu_requested = scaled(CPU, requests.get(CPU, Decimal(0)))
    memory_requested = scaled(MEMORY, requests.get(MEMORY, Decimal(0)))
    cpu_available = scaled(CPU, parse_quantity(str(allocatable.get(CPU, "0"))))
    memory_available = scaled(MEMORY, parse_quantity(str(allocatable.get(MEMORY, "0"))))
    if cpu_requested > cpu_available or memory_requested > memory_available:
        if memory_requested > memory_available:
            detail = f"memory, requested: {memory_requested}, capacity: {memory_available}"
        else:
            detail = f"cpu, requested: {cpu_requested}, capacity: {cpu_available}"
        return ResizeDecision(False, INFEASIBLE, "Node didn't have enough capacity: " + detail)
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    others = [p for p in other_pods if str((p.get("metadata") or {}).get("uid", "")) != uid]
    refused = admit(pod, others)
    if refused is not None:
        return ResizeDecision(False, DEFERRED, refused[1])
    return ALLOCATE


def _cpu_milli(part: Mapping[str, Any] | None) -> int:
    value = _quantities(part).get(CPU)
    return scaled(CPU, value) if value is not None else 0


def _memory_bytes(part: Mapping[str, Any] | None) -> int:
    value = _quantities(part).get(MEMORY)
    return scaled(MEMORY, value) if value is not None else 0


def resource_values(resources: Mapping[str, Any] | None) -> tuple[int, int, int, int]:
    """(cpu request m, cpu limit m, memory request bytes, memory limit bytes), 0 for unset: upstream's
    containerResourcesFromRequirements."""
    resources = resources or {}
    return (
        _cpu_milli(resources.get("requests")),
        _cpu_milli(resources.get("limits")),
        _memory_bytes(resources.get("requests")),
        _memory_bytes(resources.get("limits")),
    )


def resize_in_progress(
    allocated_pod: Pod, running: Callable[[str], bool], actuated: Callable[[str], Mapping[str, Any] | None]
) -> bool:
    """Upstream isPodResizeInProgress: a running resizable container whose actuated cpu/memory requests or limits
    are not its allocated ones."""
    for container in resizable_containers(allocated_pod):
        name = str(container.get("name", ""))
        if not running(name):
            continue
        if resource_values(container.get("resources")) != resource_values(actuated(name)):
            return True
    return False


def _summary_entry(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    out: dict[str, Any] = {}
    # Go's struct order: limits, requests, claims; each left out when empty.
    for key in ("limits", "requests", "claims"):
        if resources.get(key):
            out[key] = dict(sorted(resources[key].items())) if isinstance(resources[key], Mapping) else resources[key]
    return {"name": str(container.get("name", "")), "resources": out}


def completion_message(allocated_pod: Pod) -> str:
    """Upstream podResizeCompletionMsg: the allocated resources of every init and regular container, as JSON."""
    spec = _spec(allocated_pod)
    summary: dict[str, Any] = {}
    init = [_summary_entry(c) for c in spec.get("initContainers") or ()]
    regular = [_summary_entry(c) for c in spec.get("containers") or ()]
    if init:
        summary["initContainers"] = init
    if regular:
        summary["containers"] = regular
    return "Pod resize completed: " + json.dumps(summary, separators=(",", ":"))


def requests_increase(pod: Pod, allocated_pod: Pod) -> bool:
    """Upstream isResizeIncreasingRequests: the pod asks for more cpu or memory than it has allocated."""
    new, old = pod_requests(pod), pod_requests(allocated_pod)
    return any(new.get(r, Decimal(0)) > old.get(r, Decimal(0)) for r in (CPU, MEMORY))
