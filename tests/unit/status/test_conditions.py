"""Kubelet-owned pod conditions: upstream reasons, messages and transition-time keeping."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.status import (
    containers_ready_condition,
    initialized_condition,
    need_to_reconcile_pod_readiness,
    pod_ready_to_start_containers_condition,
    ready_condition,
    stamp_transition_times,
)

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 12, 5, 0, tzinfo=UTC)


def st(name: str, *, ready: bool = False, state: str = "running", exit_code: int = 0, started: bool = True) -> Any:
    body: dict[str, Any] = {"exitCode": exit_code} if state == "terminated" else {}
    return {"name": name, "ready": ready, "started": started, "state": {state: body}}


SPEC = {"containers": [{"name": "a"}, {"name": "b"}]}
SPEC_INIT = {
    "initContainers": [{"name": "i1"}, {"name": "side", "restartPolicy": "Always"}],
    "containers": [{"name": "a"}],
}


@pytest.mark.parametrize(
    ("spec", "statuses", "phase", "expected"),
    [
        (SPEC, [st("a", ready=True), st("b", ready=True)], "Running", {"status": "True"}),
        (
            SPEC,
            [st("a"), st("b")],
            "Running",
            {
                "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [a b]",
            },
        ),
        (
            SPEC,
            [st("b")],
            "Pending",
            {
                "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unknown status: [a], containers with unready status: [b]",
            },
        ),
        (SPEC, None, "Pending", {"status": "False", "reason": "UnknownContainerStatuses"}),
        (
            SPEC,
            [st("a", state="terminated"), st("b", state="terminated")],
            "Succeeded",
            {"status": "False", "reason": "PodCompleted"},
        ),
        (SPEC, [st("a", ready=True), st("b", ready=True)], "Failed", {"status": "False", "reason": "PodFailed"}),
        (
            SPEC_INIT,
            [st("side", ready=False), st("a", ready=True)],
            "Running",
            {
                "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [side]",
            },
        ),
    ],
)
def test_containers_ready(spec: Any, statuses: Any, phase: str, expected: dict[str, str]) -> None:
    assert containers_ready_condition(spec, statuses, phase) == {"type": "ContainersReady", **expected}


@pytest.mark.parametrize(
    ("spec", "statuses", "phase", "expected"),
    [
        (SPEC, [], "Pending", {"status": "True"}),
        (
            SPEC_INIT,
            [],
            "Pending",
            {
                "status": "False",
                "reason": "ContainersNotInitialized",
                "message": "containers with unknown status: [i1 side]",
            },
        ),
        (
            SPEC_INIT,
            [st("i1"), st("side", started=False)],
            "Pending",
            {
                "status": "False",
                "reason": "ContainersNotInitialized",
                "message": "containers with incomplete status: [i1 side]",
            },
        ),
        (
            SPEC_INIT,
            [st("i1", state="terminated", exit_code=1), st("side")],
            "Pending",
            {
                "status": "False",
                "reason": "ContainersNotInitialized",
                "message": "containers with incomplete status: [i1]",
            },
        ),
        (SPEC_INIT, [st("i1", state="terminated"), st("side")], "Pending", {"status": "True"}),
        # An app container that ran means the pod initialized, even if the sidecar restarts now.
        (SPEC_INIT, [st("i1", state="terminated"), st("side", started=False), st("a")], "Running", {"status": "True"}),
        (
            SPEC_INIT,
            [st("i1", state="terminated"), st("side", state="terminated"), st("a", state="terminated")],
            "Succeeded",
            {"status": "True", "reason": "PodCompleted"},
        ),
    ],
)
def test_initialized(spec: Any, statuses: Any, phase: str, expected: dict[str, str]) -> None:
    assert initialized_condition(spec, statuses, phase) == {"type": "Initialized", **expected}


GATED = {"containers": [{"name": "a"}], "readinessGates": [{"conditionType": "x/one"}, {"conditionType": "x/two"}]}


@pytest.mark.parametrize(
    ("spec", "others", "statuses", "expected"),
    [
        ({"containers": [{"name": "a"}]}, [], [st("a", ready=True)], {"status": "True"}),
        (
            {"containers": [{"name": "a"}]},
            [],
            [st("a")],
            {"status": "False", "reason": "ContainersNotReady", "message": "containers with unready status: [a]"},
        ),
        (
            GATED,
            [{"type": "x/one", "status": "True"}, {"type": "x/two", "status": "True"}],
            [st("a", ready=True)],
            {"status": "True"},
        ),
        (
            GATED,
            [{"type": "x/one", "status": "False"}],
            [st("a", ready=True)],
            {
                "status": "False",
                "reason": "ReadinessGatesNotReady",
                "message": 'the status of pod readiness gate "x/one" is not "True", but False, '
                'corresponding condition of pod readiness gate "x/two" does not exist.',
            },
        ),
    ],
)
def test_ready(spec: Any, others: Any, statuses: Any, expected: dict[str, str]) -> None:
    assert ready_condition(spec, others, statuses, "Running") == {"type": "Ready", **expected}


def test_ready_to_start_containers() -> None:
    assert pod_ready_to_start_containers_condition(sandbox_ready=True)["status"] == "True"
    assert pod_ready_to_start_containers_condition(sandbox_ready=False)["status"] == "False"


@pytest.mark.parametrize(
    ("old_status", "new_status", "expected_time"),
    [
        ("True", "True", "2024-05-01T12:00:00Z"),
        ("False", "True", "2024-05-01T12:05:00Z"),
        (None, "True", "2024-05-01T12:05:00Z"),
    ],
)
def test_transition_time_kept_only_when_status_unchanged(
    old_status: str | None, new_status: str, expected_time: str
) -> None:
    old = (
        []
        if old_status is None
        else [{"type": "Ready", "status": old_status, "lastTransitionTime": "2024-05-01T12:00:00Z"}]
    )
    (stamped,) = stamp_transition_times([{"type": "Ready", "status": new_status}], old, now=T1)
    assert stamped["lastTransitionTime"] == expected_time
    assert stamped["lastProbeTime"] is None


def test_reason_change_alone_keeps_transition_time() -> None:
    old = [{"type": "Ready", "status": "False", "reason": "A", "lastTransitionTime": "2024-05-01T12:00:00Z"}]
    (stamped,) = stamp_transition_times([{"type": "Ready", "status": "False", "reason": "B"}], old, now=T1)
    assert stamped == {
        "type": "Ready",
        "status": "False",
        "lastProbeTime": None,
        "lastTransitionTime": "2024-05-01T12:00:00Z",
        "reason": "B",
    }
    assert T0 < T1


def _gated_pod(conditions: list[dict[str, Any]], *, gates: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "a"}]}
    if gates:
        spec["readinessGates"] = [{"conditionType": "x/one"}]
    status = {"phase": "Running", "conditions": conditions, "containerStatuses": [st("a", ready=True)]}
    return {"spec": spec, "status": status}


GATE_MISSING = 'corresponding condition of pod readiness gate "x/one" does not exist.'
GATE_FALSE = 'the status of pod readiness gate "x/one" is not "True", but False'


@pytest.mark.parametrize(
    ("conditions", "gates", "expected"),
    [
        pytest.param([{"type": "Ready", "status": "True"}], False, False, id="no gates: never"),
        pytest.param([], True, False, id="no Ready yet: the first sync reports it"),
        pytest.param(
            [{"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady", "message": GATE_MISSING}],
            True,
            False,
            id="gate missing, Ready says so",
        ),
        pytest.param(
            [
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady", "message": GATE_MISSING},
                {"type": "x/one", "status": "True"},
            ],
            True,
            True,
            id="gate set True: Ready must turn True",
        ),
        pytest.param(
            [{"type": "Ready", "status": "True"}, {"type": "x/one", "status": "False"}],
            True,
            True,
            id="gate set False: Ready must turn False",
        ),
        pytest.param(
            [
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady", "message": GATE_MISSING},
                {"type": "x/one", "status": "False"},
            ],
            True,
            True,
            id="gate now False: the message changes",
        ),
        pytest.param(
            [
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady", "message": GATE_FALSE},
                {"type": "x/one", "status": "False"},
            ],
            True,
            False,
            id="gate False, Ready says so",
        ),
        pytest.param(
            [{"type": "Ready", "status": "True"}, {"type": "x/one", "status": "True"}],
            True,
            False,
            id="gate True, Ready True",
        ),
    ],
)
def test_need_to_reconcile_pod_readiness(conditions: list[dict[str, Any]], gates: bool, expected: bool) -> None:
    assert need_to_reconcile_pod_readiness(_gated_pod(conditions, gates=gates)) is expected
