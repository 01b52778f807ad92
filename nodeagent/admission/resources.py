"""A pod's effective resource requests and limits, as upstream's resourcehelper.PodRequests / PodLimits compute them.

App containers add up; init containers run one at a time, so the pod needs the largest of them, except sidecars
(init containers with restartPolicy Always), which keep running and add to everything started after them. Pod-level
resources (`spec.resources`, PodLevelResources, beta and on in v1.34) then replace the containers' aggregate for the
resources they name that pod-level resources cover (cpu, memory, hugepages-*). The pod overhead (RuntimeClass) is
added on top: to every request, and to the limits that are set and not zero.

This is the one place that sums a pod's resources: admission, the QoS class, the pod cgroup, the sandbox's and
containers' CRI resources, emptyDir's tmpfs size and the downward API read it, each with the options upstream passes.
A pod-level request left unset where its limit is set defaults to that limit, as API defaulting does (static pods
reach us undefaulted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from nodeagent.config.quantity import ceil_int64, parse_quantity

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"

Resources = dict[str, Decimal]


def _requests(container: Mapping[str, Any]) -> Resources:
    raw = (container.get("resources") or {}).get("requests") or {}
    return {name: parse_quantity(str(value)) for name, value in raw.items()}


def _add(into: Resources, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, Decimal(0)) + value


def _max(into: Resources, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        into[name] = max(into.get(name, Decimal(0)), value)


def _limits(container: Mapping[str, Any]) -> Resources:
    raw = (container.get("resources") or {}).get("limits") or {}
    return {str(name): parse_quantity(str(value)) for name, value in raw.items()}


def is_supported_pod_level_resource(name: str) -> bool:
    """Upstream IsSupportedPodLevelResource: cpu, memory and every hugepages size."""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def _pod_level(pod: Mapping[str, Any], kind: str) -> Resources:
    raw = (((pod.get("spec") or {}).get("resources") or {}).get(kind)) or {}
    return {
        str(name): parse_quantity(str(value))
        for name, value in raw.items()
        if is_supported_pod_level_resource(str(name))
    }


def pod_level_limits(pod: Mapping[str, Any]) -> Resources:
    """`spec.resources.limits`, the names pod-level resources cover only."""
    return _pod_level(pod, "limits")


def pod_level_requests(pod: Mapping[str, Any]) -> Resources:
    """`spec.resources.requests`, the names pod-level resources cover only; where only a limit is set, the request
    is that limit (API defaulting, SetDefaults_Pod)."""
    return {**pod_level_limits(pod), **_pod_level(pod, "requests")}


def is_pod_level_requests_set(pod: Mapping[str, Any]) -> bool:
    """Upstream IsPodLevelRequestsSet: spec.resources.requests names a supported resource."""
    return bool(_pod_level(pod, "requests"))


def is_pod_level_limits_set(pod: Mapping[str, Any]) -> bool:
    """Upstream IsPodLevelLimitsSet: spec.resources.limits names a supported resource."""
    return bool(pod_level_limits(pod))


def is_pod_level_resources_set(pod: Mapping[str, Any]) -> bool:
    """Upstream IsPodLevelResourcesSet: spec.resources names cpu, memory or a hugepages size."""
    return is_pod_level_requests_set(pod) or is_pod_level_limits_set(pod)


def _aggregate(pod: Mapping[str, Any], of: Callable[[Mapping[str, Any]], Resources]) -> Resources:
    """Upstream aggregateContainerResourcesByFn: regular containers and sidecars add up, an init container counts
    with the sidecars started before it, and the larger wins."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or ():
        _add(total, of(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or ():
        own = of(container)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            step = dict(sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(total, init_peak)
    return total


def _overhead(pod: Mapping[str, Any]) -> Resources:
    raw = ((pod.get("spec") or {}).get("overhead")) or {}
    return {str(name): parse_quantity(str(value)) for name, value in raw.items()}


def pod_requests(
    pod: Mapping[str, Any], *, pod_level: bool = True, container_level: bool = True, overhead: bool = True
) -> Resources:
    """The pod's requests by resource name, exact (cpu in cores, memory in bytes). `pod_level=False` is upstream's
    SkipPodLevelResources (the containers' aggregate only), `container_level=False` its SkipContainerLevelResources
    (the pod-level requests only), `overhead=False` its ExcludeOverhead."""
    total = _aggregate(pod, _requests) if container_level else {}
    if pod_level:
        # Upstream checks IsPodLevelRequestsSet on the defaulted pod: the requests, or the limits they default to.
        total.update(pod_level_requests(pod))
    if overhead:
        _add(total, _overhead(pod))
    return total


def resource_request(pod: Mapping[str, Any], name: str) -> Decimal:
    """Upstream GetResourceRequestQuantity (eviction ranking, critical-pod preemption): with pod-level resources set,
    the pod-level request alone (zero for a resource they do not cover); else the containers' aggregate; plus the
    overhead when that is not zero."""
    request = pod_requests(pod, container_level=not is_pod_level_resources_set(pod), overhead=False).get(name)
    if not request:
        return Decimal(0)
    return request + _overhead(pod).get(name, Decimal(0))


def pod_limits(pod: Mapping[str, Any], *, pod_level: bool = True, overhead: bool = True) -> Resources:
    """The pod's limits by resource name, as upstream PodLimits: the containers' aggregate (AggregateContainerLimits),
    pod-level limits in its place where set, and the overhead added to each limit that is set and not zero."""
    total = _aggregate(pod, _limits)
    if pod_level and is_pod_level_resources_set(pod):
        total.update(pod_level_limits(pod))
    if overhead:
        for name, value in _overhead(pod).items():
            if total.get(name):
                total[name] += value
    return total


def scaled(name: str, value: Decimal) -> int:
    """The integer the scheduler compares: millicores for cpu, rounded up as Quantity.MilliValue; else Value()."""
    # Saturated at int64, as upstream's int64 fields hold it (a valid quantity can be as large as 1e999999).
    return ceil_int64(value, milli=name == CPU)
