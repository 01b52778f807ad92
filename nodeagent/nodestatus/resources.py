"""Node capacity and allocatable, as the kubelet's MachineInfo setter and container manager compute them.

allocatable = capacity - systemReserved - kubeReserved - hard eviction threshold, never below zero. Only the
memory.available (memory) and nodefs.available (ephemeral-storage) thresholds reserve anything, as upstream; a
percentage threshold is a fraction of the capacity. Hugepages are carved out of allocatable memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

from nodeagent.config import parse_percentage, parse_quantity
from nodeagent.nodestatus._quantity import format_binary, format_decimal, format_millicores

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
HUGEPAGES_PREFIX = "hugepages-"

# Which capacity a hard eviction signal keeps back.
_EVICTION_SIGNAL_RESOURCE = {"memory.available": MEMORY, "nodefs.available": EPHEMERAL_STORAGE}


def _is_bytes(name: str) -> bool:
    return name in (MEMORY, EPHEMERAL_STORAGE) or name.startswith(HUGEPAGES_PREFIX)


def format_resource(name: str, value: Decimal) -> str:
    """One resource's value in the apiserver's canonical form for that resource."""
    if name == CPU:
        return format_millicores(math.ceil(value * 1000))
    if _is_bytes(name):
        return format_binary(math.ceil(value))
    return format_decimal(math.ceil(value))


def capacity(
    cpu_count: int,
    memory_bytes: int,
    ephemeral_storage_bytes: int,
    max_pods: int,
    hugepages: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """The node's capacity; `hugepages` maps a page size ("2Mi") to the bytes of that size reserved."""
    result = {
        CPU: format_decimal(cpu_count),
        EPHEMERAL_STORAGE: format_binary(ephemeral_storage_bytes),
        MEMORY: format_binary(memory_bytes),
        PODS: format_decimal(max_pods),
    }
    for size, total in (hugepages or {}).items():
        result[HUGEPAGES_PREFIX + size] = format_binary(total)
    return dict(sorted(result.items()))


def _eviction_reservation(
    capacity_values: Mapping[str, Decimal], eviction_hard: Mapping[str, str]
) -> dict[str, Decimal]:
    reserved: dict[str, Decimal] = {}
    for signal, threshold in eviction_hard.items():
        resource = _EVICTION_SIGNAL_RESOURCE.get(signal)
        if resource is None or resource not in capacity_values:
            continue
        if threshold.endswith("%"):
            # int64(float64(capacity) * percentage) upstream: truncated to whole bytes.
            amount = Decimal(math.floor(capacity_values[resource] * parse_percentage(threshold)))
        else:
            amount = parse_quantity(threshold)
        reserved[resource] = reserved.get(resource, Decimal(0)) + amount
    return reserved


def allocatable(
    capacity: Mapping[str, str],
    system_reserved: Mapping[str, str],
    kube_reserved: Mapping[str, str],
    eviction_hard: Mapping[str, str],
) -> dict[str, str]:
    """What pods may use: capacity minus the reservations and the hard eviction thresholds, floored at zero."""
    values = {name: parse_quantity(text) for name, text in capacity.items()}
    reserved = _eviction_reservation(values, eviction_hard)
    for reservation in (system_reserved, kube_reserved):
        for name, text in reservation.items():
            reserved[name] = reserved.get(name, Decimal(0)) + parse_quantity(text)
    result: dict[str, Decimal] = {}
    for name, value in values.items():
        result[name] = max(value - reserved.get(name, Decimal(0)), Decimal(0))
    if MEMORY in result:
        hugepages = sum((v for n, v in values.items() if n.startswith(HUGEPAGES_PREFIX)), Decimal(0))
        result[MEMORY] = max(result[MEMORY] - hugepages, Decimal(0))
    return {name: format_resource(name, value) for name, value in result.items()}
