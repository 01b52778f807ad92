"""Node conditions: upstream reasons and messages, heartbeat always, transition only on change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.nodestatus import node_conditions

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 12, 0, 10, tzinfo=UTC)
S0 = "2024-05-01T12:00:00Z"
S1 = "2024-05-01T12:00:10Z"


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conditions}


def test_healthy_node_from_scratch() -> None:
    conditions = node_conditions([], now=T0, runtime_ready=True, network_ready=True)
    assert conditions == [
        {
            "type": "MemoryPressure",
            "status": "False",
            "lastHeartbeatTime": S0,
            "lastTransitionTime": S0,
            "reason": "KubeletHasSufficientMemory",
            "message": "kubelet has sufficient memory available",
        },
        {
            "type": "DiskPressure",
            "status": "False",
            "lastHeartbeatTime": S0,
            "lastTransitionTime": S0,
            "reason": "KubeletHasNoDiskPressure",
            "message": "kubelet has no disk pressure",
        },
        {
            "type": "PIDPressure",
            "status": "False",
            "lastHeartbeatTime": S0,
            "lastTransitionTime": S0,
            "reason": "KubeletHasSufficientPID",
            "message": "kubelet has sufficient PID available",
        },
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": S0,
            "lastTransitionTime": S0,
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        },
    ]


@pytest.mark.parametrize(
    ("kwargs", "kind", "status", "reason", "message"),
    [
        (
            {"memory_pressure": True},
            "MemoryPressure",
            "True",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        ),
        ({"disk_pressure": True}, "DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure"),
        (
            {"pid_pressure": True},
            "PIDPressure",
            "True",
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        ),
        ({"runtime_ready": False}, "Ready", "False", "KubeletNotReady", "container runtime is down"),
        (
            {
                "network_ready": False,
                "network_message": "NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized",
            },
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
            "message:cni plugin not initialized",
        ),
        (
            {"pleg_healthy_message": "pleg was last seen active 3m0s ago; threshold is 3m0s"},
            "Ready",
            "False",
            "KubeletNotReady",
            "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s",
        ),
        (
            {"runtime_ready": False, "network_ready": False, "network_message": "x"},
            "Ready",
            "False",
            "KubeletNotReady",
            "[container runtime is down, container runtime network not ready: x]",
        ),
        # The storage state's error (no CSINode yet), after the network's and before the shutdown manager's.
        (
            {
                "network_ready": False,
                "network_message": "x",
                "storage_message": "CSINode is not yet initialized",
                "shutdown_message": "node is shutting down",
            },
            "Ready",
            "False",
            "KubeletNotReady",
            "[container runtime network not ready: x, CSINode is not yet initialized, node is shutting down]",
        ),
        # The node shutdown manager's ShutdownStatus, after the runtime's errors as upstream's ReadyCondition.
        ({"shutdown_message": "node is shutting down"}, "Ready", "False", "KubeletNotReady", "node is shutting down"),
        (
            {"runtime_ready": False, "shutdown_message": "node is shutting down"},
            "Ready",
            "False",
            "KubeletNotReady",
            "[container runtime is down, node is shutting down]",
        ),
    ],
)
def test_reasons_and_messages(kwargs: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
    args: dict[str, Any] = {"runtime_ready": True, "network_ready": True, **kwargs}
    condition = by_type(node_conditions([], now=T0, **args))[kind]
    assert (condition["status"], condition["reason"], condition["message"]) == (status, reason, message)


def test_transition_time_moves_only_on_status_change() -> None:
    first = node_conditions([], now=T0, runtime_ready=True)
    second = by_type(node_conditions(first, now=T1, runtime_ready=False))
    assert second["Ready"]["lastTransitionTime"] == S1
    assert second["MemoryPressure"]["lastTransitionTime"] == S0
    assert all(c["lastHeartbeatTime"] == S1 for c in second.values())


def test_foreign_conditions_kept_in_place() -> None:
    foreign = {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"}
    old = [foreign, *node_conditions([], now=T0, runtime_ready=True)]
    new = node_conditions(old, now=T1, runtime_ready=True)
    assert new[0] == foreign
    assert [c["type"] for c in new] == ["NetworkUnavailable", "MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
