"""Pod QoS class, as upstream's GetPodQOS / ComputePodQOS (pkg/apis/core/v1/helper/qos).

Requests and limits of cpu and memory are summed over init and regular containers. A request missing where a limit
is set defaults to the limit, as API defaulting would have done (static pods reach us undefaulted). Zero quantities
count as unset. When the pod has `spec.resources` (PodLevelResources, beta and on in v1.34), only the pod-level
requests and limits count, as upstream's ComputePodQOS: Guaranteed needs pod-level cpu and memory limits equal to
the requests, whatever the containers say. `pod_qos` trusts `status.qosClass` when the apiserver already set it, as
upstream does.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from nodeagent.admission.resources import pod_level_limits, pod_level_requests
from nodeagent.config.quantity import parse_quantity

_QOS_RESOURCES = ("cpu", "memory")


class QOSClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


def effective_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    """The container's non-zero requests, with each unset request defaulted to its limit."""
    resources: Mapping[str, Any] = container.get("resources") or {}
    out = {name: parse_quantity(str(v)) for name, v in (resources.get("limits") or {}).items()}
    out.update({name: parse_quantity(str(v)) for name, v in (resources.get("requests") or {}).items()})
    return {name: v for name, v in out.items() if v != 0}


def effective_limits(container: Mapping[str, Any]) -> dict[str, Decimal]:
    resources: Mapping[str, Any] = container.get("resources") or {}
    out = {name: parse_quantity(str(v)) for name, v in (resources.get("limits") or {}).items()}
    return {name: v for name, v in out.items() if v != 0}


def _qos_resources(values: Mapping[str, Decimal]) -> dict[str, Decimal]:
    return {name: value for name, value in values.items() if name in _QOS_RESOURCES and value > 0}


def compute_pod_qos(pod: Mapping[str, Any]) -> QOSClass:
    spec: Mapping[str, Any] = pod.get("spec") or {}
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    # As upstream: a non-nil spec.resources (even one naming nothing) decides alone; the containers are not read.
    if spec.get("resources") is not None:
        requests = _qos_resources(pod_level_requests(pod))
        limits = _qos_resources(pod_level_limits(pod))
        guaranteed = all(name in limits for name in _QOS_RESOURCES)
        containers = []
    for container in containers:
        container_requests = effective_requests(container)
        container_limits = effective_limits(container)
        for name in _QOS_RESOURCES:
            if name in container_requests:
                requests[name] = requests.get(name, Decimal(0)) + container_requests[name]
            if name in container_limits:
                limits[name] = limits.get(name, Decimal(0)) + container_limits[name]
        if not all(name in container_limits for name in _QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return QOSClass.BEST_EFFORT
    if guaranteed and requests == limits:
        return QOSClass.GUARANTEED
    return QOSClass.BURSTABLE


def pod_qos(pod: Mapping[str, Any]) -> QOSClass:
    """`status.qosClass` when set (it is immutable once set), else computed."""
    recorded = (pod.get("status") or {}).get("qosClass")
    if recorded in {q.value for q in QOSClass}:
        return QOSClass(recorded)
    return compute_pod_qos(pod)
