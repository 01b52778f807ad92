"""The strategic merge patch the status manager sends, and the conditions it leaves to their owners."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.status.compare import merge_pod_status, status_patch


def cond(kind: str, status: str = "True", **fields: Any) -> dict[str, Any]:
    return {"type": kind, "status": status, **fields}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            {"conditions": [cond("Ready", "False", reason="ContainersNotReady"), cond("Initialized")]},
            {"conditions": [cond("Ready", "True"), cond("Initialized")]},
            {
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Initialized"}],
                "conditions": [{"type": "Ready", "status": "True", "reason": None}],
            },
            id="a changed condition: its own diff, named by type, a removed field set to null",
        ),
        pytest.param(
            {"conditions": [cond("Initialized")]},
            {"conditions": [cond("Initialized"), cond("Ready", "False")]},
            {
                "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}],
                "conditions": [cond("Ready", "False")],
            },
            id="a new condition: whole",
        ),
        pytest.param(
            {"conditions": [cond("Initialized"), cond("Ready")]},
            {"conditions": [cond("Initialized")]},
            {
                "$setElementOrder/conditions": [{"type": "Initialized"}],
                "conditions": [{"type": "Ready", "$patch": "delete"}],
            },
            id="a condition gone: deleted by key",
        ),
        pytest.param(
            {"podIP": "198.18.0.5", "podIPs": [{"ip": "198.18.0.5"}]},
            {"podIP": "198.18.0.6", "podIPs": [{"ip": "198.18.0.6"}]},
            {
                "podIP": "198.18.0.6",
                "$setElementOrder/podIPs": [{"ip": "198.18.0.6"}],
                "podIPs": [{"ip": "198.18.0.6"}, {"ip": "198.18.0.5", "$patch": "delete"}],
            },
            id="a new pod IP replaces the old one",
        ),
        pytest.param(
            {},
            {"podIPs": [{"ip": "198.18.0.5"}], "conditions": [cond("Ready")]},
            {"podIPs": [{"ip": "198.18.0.5"}], "conditions": [cond("Ready")]},
            id="lists the apiserver does not have yet: whole",
        ),
        pytest.param(
            {"containerStatuses": [{"name": "a", "restartCount": 0}, {"name": "b", "restartCount": 0}]},
            {"containerStatuses": [{"name": "a", "restartCount": 1}, {"name": "b", "restartCount": 0}]},
            {"containerStatuses": [{"name": "a", "restartCount": 1}, {"name": "b", "restartCount": 0}]},
            id="container statuses are atomic: replaced whole",
        ),
        pytest.param({"conditions": [cond("Ready")]}, {"conditions": [cond("Ready")]}, None, id="nothing changed"),
    ],
)
def test_status_patch(old: dict[str, Any], new: dict[str, Any], expected: dict[str, Any] | None) -> None:
    patch = status_patch(old, new, uid="u1")
    assert patch == ({} if expected is None else {"metadata": {"uid": "u1"}, "status": expected})


GATE = "example.com/gate"
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NOW_TEXT = "2024-05-01T12:00:00Z"


@pytest.mark.parametrize(
    ("api", "new", "conditions"),
    [
        pytest.param(
            {"conditions": [cond("Ready", "False"), cond(GATE, "True")]},
            {"conditions": [cond("Ready", "True"), cond(GATE, "False")]},
            [cond(GATE, "True"), cond("Ready", "True")],
            id="a gate as the apiserver has it, the kubelet's own as generated",
        ),
        pytest.param(
            {"conditions": [cond("Ready", "False")]},
            {"conditions": [cond("Ready", "False"), cond(GATE, "True")]},
            [cond("Ready", "False")],
            id="a gate the apiserver does not have is not added",
        ),
        pytest.param(
            {"phase": "Running", "conditions": []},
            {"phase": "Failed", "conditions": [cond("DisruptionTarget", reason="EvictionByEvictionAPI")]},
            [cond("DisruptionTarget", reason="EvictionByEvictionAPI", lastTransitionTime=NOW_TEXT)],
            id="DisruptionTarget sent as the pod turns terminal, stamped as it goes out",
        ),
        pytest.param(
            {"phase": "Running", "conditions": []},
            {"phase": "Running", "conditions": [cond("DisruptionTarget")]},
            [],
            id="DisruptionTarget not sent before",
        ),
    ],
)
def test_merge_pod_status_keeps_the_conditions_others_own(
    api: dict[str, Any], new: dict[str, Any], conditions: list[dict[str, Any]]
) -> None:
    merged = merge_pod_status(api, new, now=NOW)
    assert merged["conditions"] == conditions
    assert {k: v for k, v in merged.items() if k != "conditions"} == {k: v for k, v in new.items() if k != "conditions"}


RUNNING_API = {"phase": "Running", "conditions": [cond("Ready", "True", lastTransitionTime="t0")]}
SUCCEEDED = {
    "phase": "Succeeded",
    "conditions": [cond("Ready", "False", reason="PodCompleted", lastTransitionTime="t1")],
    "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 0}}}],
}


@pytest.mark.parametrize(
    ("api", "new", "could_run", "expected"),
    [
        pytest.param(
            RUNNING_API,
            SUCCEEDED,
            True,
            {**SUCCEEDED, "phase": "Running"},
            id="terminal phase held while containers may run; the rest goes out",
        ),
        pytest.param(RUNNING_API, SUCCEEDED, False, SUCCEEDED, id="terminal phase sent once nothing runs"),
        pytest.param(
            {"phase": "Running", "conditions": []},
            {"phase": "Failed", "reason": "DeadlineExceeded", "message": "m", "conditions": []},
            True,
            {"phase": "Running", "conditions": []},
            id="reason and message held with the phase",
        ),
        pytest.param(
            {"phase": "Running", "reason": "R", "conditions": []},
            {"phase": "Running", "reason": "R", "conditions": []},
            True,
            {"phase": "Running", "reason": "R", "conditions": []},
            id="not turning terminal: nothing held",
        ),
        pytest.param(
            {"phase": "Failed", "conditions": []},
            {"phase": "Failed", "conditions": [cond("Ready", "True", lastTransitionTime="t0", message="x")]},
            True,
            {
                "phase": "Failed",
                "conditions": [cond("Ready", "False", lastTransitionTime=NOW_TEXT, reason="PodFailed")],
            },
            id="a terminal pod is never sent ready",
        ),
        pytest.param(
            {"phase": "Running", "conditions": []},
            {"phase": "Succeeded", "conditions": [cond("ContainersReady", "True")]},
            False,
            {
                "phase": "Succeeded",
                "conditions": [cond("ContainersReady", "False", lastTransitionTime=NOW_TEXT, reason="PodCompleted")],
            },
            id="containers ready forced False with the completed reason",
        ),
        pytest.param(
            {"phase": "Running", "conditions": []},
            {"phase": "Failed", "conditions": [cond("DisruptionTarget", reason="TerminationByKubelet")]},
            True,
            {"phase": "Running", "conditions": []},
            id="DisruptionTarget waits for the terminal phase",
        ),
    ],
)
def test_merge_pod_status_holds_the_terminal_phase(
    api: dict[str, Any], new: dict[str, Any], could_run: bool, expected: dict[str, Any]
) -> None:
    assert merge_pod_status(api, new, could_have_running_containers=could_run, now=NOW) == expected


@pytest.mark.parametrize(
    ("api", "new", "expected"),
    [
        pytest.param(
            {"phase": "Pending", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]},
            {"phase": "Running"},
            {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]},
            id="kept-when-the-kubelet-has-none",
        ),
        pytest.param(
            {"phase": "Pending"},
            {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu"}], "extendedResourceClaimStatus": {}},
            {"phase": "Running"},
            id="never-added-by-the-kubelet",
        ),
        pytest.param(
            {"extendedResourceClaimStatus": {"resourceClaimName": "c"}, "resourceClaimStatuses": [{"name": "a"}]},
            {"resourceClaimStatuses": [{"name": "b"}]},
            {"extendedResourceClaimStatus": {"resourceClaimName": "c"}, "resourceClaimStatuses": [{"name": "a"}]},
            id="never-changed-by-the-kubelet",
        ),
    ],
)
def test_merge_pod_status_keeps_the_claim_statuses_of_the_apiserver(
    api: dict[str, Any], new: dict[str, Any], expected: dict[str, Any]
) -> None:
    # NodeRestriction refuses a node's status update that changes them ("cannot update resource claim statues").
    assert merge_pod_status(api, new, now=datetime(2026, 1, 1, tzinfo=UTC)) == expected
