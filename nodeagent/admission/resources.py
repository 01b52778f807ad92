"""A pod's effective resource requests, as upstream resourcehelper.PodRequests computes them.

App containers add up; init containers run one at a time, so the pod needs the largest of them, except sidecars
(init containers with restartPolicy Always), which keep running and add to everything started after them. The
pod overhead (RuntimeClass) is added on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from nodeagent.config.quantity import ceil_int64, parse_quantity

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

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


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """The pod's requests by resource name, exact (cpu in cores, memory in bytes)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or ():
        _add(total, _requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or ():
        requests = _requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            step = dict(sidecars)
        else:
            step = dict(requests)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(total, init_peak)
    overhead = spec.get("overhead") or {}
    _add(total, {name: parse_quantity(str(value)) for name, value in overhead.items()})
    return total


def scaled(name: str, value: Decimal) -> int:
    """The integer the scheduler compares: millicores for cpu, rounded up as Quantity.MilliValue; else Value()."""
    # Saturated at int64, as upstream's int64 fields hold it (a valid quantity can be as large as 1e999999).
    return ceil_int64(value, milli=name == CPU)
