"""Node conditions with upstream's types, reasons and messages (pkg/kubelet/nodestatus/setters.go).

lastHeartbeatTime is always `now`; lastTransitionTime moves only when a condition's status changes. Conditions the
kubelet does not own (NetworkUnavailable, node-problem-detector's) stay where they are, untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from nodeagent.nodestatus._quantity import format_time

READY = "Ready"
MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"

# type -> ((reason, message) when False, (reason, message) when True)
_PRESSURE = {
    MEMORY_PRESSURE: (
        ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    ),
    DISK_PRESSURE: (
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    ),
    PID_PRESSURE: (
        ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
    ),
}

KUBELET_READY_MESSAGE = "kubelet is posting ready status"
RUNTIME_DOWN_MESSAGE = "container runtime is down"


def _aggregate(messages: Iterable[str]) -> str:
    """utilerrors.Aggregate's Error(): one message alone, several deduplicated in brackets."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


def ready_errors(
    *,
    runtime_ready: bool,
    runtime_message: str = "",
    network_ready: bool = True,
    network_message: str = "",
    pleg_healthy_message: str | None = None,
    storage_message: str | None = None,
    shutdown_message: str | None = None,
) -> list[str]:
    """The reasons the node is not ready, in the order upstream's ReadyCondition lists them: the runtime's, the
    network's, the storage's (`storage_message`: "CSINode is not yet initialized" until the CSI plugin's Init has
    made the node's CSINode), then the node shutdown manager's ("node is shutting down", `shutdown_message`)."""
    errors = []
    if not runtime_ready:
        errors.append(runtime_message or RUNTIME_DOWN_MESSAGE)
    if pleg_healthy_message is not None:
        errors.append(f"PLEG is not healthy: {pleg_healthy_message}")
    if not network_ready:
        errors.append(f"container runtime network not ready: {network_message}")
    if storage_message is not None:
        errors.append(storage_message)
    if shutdown_message is not None:
        errors.append(shutdown_message)
    return errors


def node_conditions(
    old_conditions: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    runtime_ready: bool,
    runtime_message: str = "",
    network_ready: bool = True,
    network_message: str = "",
    pleg_healthy_message: str | None = None,
    storage_message: str | None = None,
    shutdown_message: str | None = None,
    memory_pressure: bool = False,
    disk_pressure: bool = False,
    pid_pressure: bool = False,
) -> list[dict[str, Any]]:
    """The node's conditions after this update.

    `runtime_message` is the full error when the runtime is not ready (default "container runtime is down");
    `network_message` follows "container runtime network not ready: "; `pleg_healthy_message` (None when healthy)
    follows "PLEG is not healthy: "; `storage_message` (None when ready) is the storage state's error.
    """
    stamp = format_time(now)
    wanted: dict[str, tuple[str, str, str]] = {}
    for kind, pressure in (
        (MEMORY_PRESSURE, memory_pressure),
        (DISK_PRESSURE, disk_pressure),
        (PID_PRESSURE, pid_pressure),
    ):
        reason, message = _PRESSURE[kind][1 if pressure else 0]
        wanted[kind] = ("True" if pressure else "False", reason, message)
    errors = ready_errors(
        runtime_ready=runtime_ready,
        runtime_message=runtime_message,
        network_ready=network_ready,
        network_message=network_message,
        pleg_healthy_message=pleg_healthy_message,
        storage_message=storage_message,
        shutdown_message=shutdown_message,
    )
    wanted[READY] = (
        ("False", "KubeletNotReady", _aggregate(errors)) if errors else ("True", "KubeletReady", KUBELET_READY_MESSAGE)
    )

    def build(kind: str, old: Mapping[str, Any] | None) -> dict[str, Any]:
        status, reason, message = wanted[kind]
        keep = old is not None and old.get("status") == status and old.get("lastTransitionTime")
        return {
            "type": kind,
            "status": status,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": old["lastTransitionTime"] if keep and old is not None else stamp,
            "reason": reason,
            "message": message,
        }

    result: list[dict[str, Any]] = []
    seen: set[str] = set()
    for old in old_conditions:
        kind = old.get("type", "")
        if kind in wanted:
            result.append(build(kind, old))
            seen.add(kind)
        else:
            result.append(dict(old))
    result.extend(build(kind, None) for kind in wanted if kind not in seen)
    return result
