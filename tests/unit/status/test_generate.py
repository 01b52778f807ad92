"""The assembled pod status, and what is worth sending."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.status import (
    ContainerInput,
    RuntimeState,
    generate_pod_status,
    is_stale,
    needs_update,
    qos_class,
    status_equal_ignoring_time,
    status_patch,
)

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 12, 5, 0, tzinfo=UTC)


def pod(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "a", "image": "img"}], **spec}
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": body, "status": status or {}}


def running(name: str, *, ready: bool = True) -> ContainerInput:
    return ContainerInput(name=name, image="img", state=RuntimeState.RUNNING, container_id=f"id-{name}", ready=ready)


def conditions_by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_running_ready_pod() -> None:
    status = generate_pod_status(
        pod(),
        now=T0,
        containers=[running("a")],
        sandbox_ready=True,
        pod_ips=["10.0.0.5", "fd00::5"],
        host_ips=["192.168.1.2"],
    )
    assert status["phase"] == "Running"
    assert [c["type"] for c in status["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert all(c["status"] == "True" for c in status["conditions"])
    assert all(c["lastTransitionTime"] == "2024-05-01T12:00:00Z" for c in status["conditions"])
    assert status["podIP"] == "10.0.0.5"
    assert status["podIPs"] == [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]
    assert status["hostIP"] == "192.168.1.2"
    assert status["hostIPs"] == [{"ip": "192.168.1.2"}]
    assert status["startTime"] == "2024-05-01T12:00:00Z"
    assert status["qosClass"] == "BestEffort"
    assert "initContainerStatuses" not in status
    assert status["containerStatuses"][0]["containerID"] == "containerd://id-a"


def test_new_pod_with_init_containers_is_pending_and_app_waits_for_init() -> None:
    status = generate_pod_status(
        pod(initContainers=[{"name": "i", "image": "img"}]), now=T0, containers=[], sandbox_ready=False
    )
    assert status["phase"] == "Pending"
    assert status["initContainerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    conditions = conditions_by_type(status)
    assert conditions["PodReadyToStartContainers"]["status"] == "False"
    assert conditions["Initialized"]["reason"] == "ContainersNotInitialized"
    assert conditions["Ready"]["message"] == "containers with unready status: [a]"


def test_resync_keeps_times_and_foreign_conditions() -> None:
    first = generate_pod_status(pod(), now=T0, containers=[running("a", ready=False)], sandbox_ready=True)
    gate = {"type": "example.com/gate", "status": "True", "lastProbeTime": None, "lastTransitionTime": "x"}
    first["conditions"].append(gate)
    again = generate_pod_status(
        pod(first, readinessGates=[{"conditionType": "example.com/gate"}]),
        now=T1,
        containers=[running("a", ready=True)],
        sandbox_ready=True,
    )
    conditions = conditions_by_type(again)
    assert conditions["example.com/gate"] == gate
    assert again["conditions"][0] == gate  # foreign conditions first, as upstream
    assert conditions["Initialized"]["lastTransitionTime"] == "2024-05-01T12:00:00Z"
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["lastTransitionTime"] == "2024-05-01T12:05:00Z"
    assert again["startTime"] == "2024-05-01T12:00:00Z"


def test_readiness_gate_missing_blocks_ready() -> None:
    status = generate_pod_status(
        pod(readinessGates=[{"conditionType": "g"}]), now=T0, containers=[running("a")], sandbox_ready=True
    )
    ready = conditions_by_type(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert conditions_by_type(status)["ContainersReady"]["status"] == "True"


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ([{"name": "a"}], "BestEffort"),
        ([{"name": "a", "resources": {"requests": {"cpu": "0"}}}], "BestEffort"),
        ([{"name": "a", "resources": {"requests": {"cpu": "100m"}}}], "Burstable"),
        ([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}], "Guaranteed"),
        (
            [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m"}}}],
            "Guaranteed",
        ),
        (
            [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}],
            "Burstable",
        ),
        (
            [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, {"name": "b"}],
            "Burstable",
        ),
        ([{"name": "a", "resources": {"limits": {"cpu": "1"}}}], "Burstable"),
    ],
)
def test_qos_class(containers: list[dict[str, Any]], expected: str) -> None:
    assert qos_class({"containers": containers}) == expected


OLD: dict[str, Any] = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "t0"}],
    "containerStatuses": [{"name": "a", "restartCount": 2, "ready": True}],
    "podIP": "10.0.0.5",
}


@pytest.mark.parametrize(
    ("new", "equal"),
    [
        (OLD, True),
        ({**OLD, "conditions": [{**OLD["conditions"][0], "lastTransitionTime": "t1"}]}, True),
        ({**OLD, "conditions": [{**OLD["conditions"][0], "status": "False"}]}, False),
        ({**OLD, "podIP": "10.0.0.6"}, False),
        ({k: v for k, v in OLD.items() if k != "podIP"}, False),
    ],
)
def test_equal_ignoring_time(new: dict[str, Any], equal: bool) -> None:
    assert status_equal_ignoring_time(OLD, new) is equal
    assert needs_update(OLD, new) is not equal


def test_needs_update_without_old() -> None:
    assert needs_update(None, OLD)


def test_status_patch_carries_only_changes() -> None:
    new = {
        **OLD,
        "podIPs": [{"ip": "10.0.0.5"}],
        "containerStatuses": [{"name": "a", "restartCount": 3, "ready": True}],
    }
    del new["phase"]
    assert status_patch(OLD, new, uid="u1") == {
        "metadata": {"uid": "u1"},
        "status": {
            "containerStatuses": [{"name": "a", "restartCount": 3, "ready": True}],
            "podIPs": [{"ip": "10.0.0.5"}],
            "phase": None,
        },
    }
    assert status_patch(OLD, dict(OLD)) == {}


def test_status_patch_recurses_into_objects() -> None:
    old = {"a": {"x": 1, "y": 2}}
    assert status_patch(old, {"a": {"x": 1, "y": 3}}) == {"status": {"a": {"y": 3}}}


@pytest.mark.parametrize(
    ("old", "new", "stale"),
    [
        (None, {"phase": "Running"}, False),
        ({"phase": "Pending"}, {"phase": "Running"}, False),
        ({"phase": "Running"}, {"phase": "Succeeded"}, False),
        ({"phase": "Succeeded"}, {"phase": "Succeeded"}, False),
        ({"phase": "Succeeded"}, {"phase": "Running"}, True),
        ({"phase": "Failed"}, {"phase": "Pending"}, True),
        ({"phase": "Failed"}, {"phase": "Succeeded"}, True),
        (
            {"phase": "Running", "containerStatuses": [{"name": "a", "restartCount": 2}]},
            {"phase": "Running", "containerStatuses": [{"name": "a", "restartCount": 1}]},
            True,
        ),
        (
            {"phase": "Running", "initContainerStatuses": [{"name": "a", "restartCount": 2}]},
            {"phase": "Running", "containerStatuses": [{"name": "a", "restartCount": 0}]},
            False,
        ),
        (
            {"phase": "Running", "containerStatuses": [{"name": "a", "restartCount": 2}]},
            {"phase": "Running", "containerStatuses": [{"name": "a", "restartCount": 3}]},
            False,
        ),
    ],
)
def test_is_stale(old: dict[str, Any] | None, new: dict[str, Any], stale: bool) -> None:
    assert is_stale(old, new) is stale


def _terminated(name: str, code: int) -> dict[str, Any]:
    return {"name": name, "restartCount": 0, "state": {"terminated": {"exitCode": code}}}


def _running_status(name: str) -> dict[str, Any]:
    return {"name": name, "restartCount": 0, "state": {"running": {}}}


@pytest.mark.parametrize(
    ("policy", "code", "key", "sidecar", "stale"),
    [
        ("Never", 0, "containerStatuses", False, True),
        ("Never", 1, "containerStatuses", False, True),
        ("OnFailure", 0, "containerStatuses", False, True),
        ("OnFailure", 1, "containerStatuses", False, False),
        ("Always", 0, "containerStatuses", False, False),
        ("Never", 0, "initContainerStatuses", False, True),
        ("Never", 0, "initContainerStatuses", True, False),
    ],
)
def test_terminated_container_may_not_restart_against_policy(
    policy: str, code: int, key: str, sidecar: bool, stale: bool
) -> None:
    init = [{"name": "c", "restartPolicy": "Always"}] if sidecar else [{"name": "c"}]
    spec = {"restartPolicy": policy, "containers": [{"name": "c"}], "initContainers": init}
    old = {"phase": "Running", key: [_terminated("c", code)]}
    new = {"phase": "Running", key: [_running_status("c")]}
    assert is_stale(old, new, pod_spec=spec) is stale
    assert is_stale(old, new) is False  # without the spec only phase and restart counts are checked


def test_container_gone_from_runtime_keeps_old_terminated_status() -> None:
    done = {
        "name": "a",
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        "lastState": {},
        "ready": False,
        "restartCount": 0,
        "image": "img",
        "imageID": "sha",
        "started": False,
    }
    status = generate_pod_status(
        pod({"phase": "Succeeded", "containerStatuses": [done]}, restartPolicy="Never"),
        now=T1,
        containers=[],
        sandbox_ready=False,
    )
    assert status["containerStatuses"] == [done]
    assert status["phase"] == "Succeeded"


def test_container_gone_from_runtime_keeps_restart_count() -> None:
    previous = {"name": "a", "state": {"running": {}}, "restartCount": 4, "lastState": {"terminated": {"exitCode": 1}}}
    status = generate_pod_status(
        pod({"phase": "Running", "containerStatuses": [previous]}), now=T1, containers=[], sandbox_ready=True
    )
    (only,) = status["containerStatuses"]
    assert only["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert (only["restartCount"], only["lastState"]) == (4, {"terminated": {"exitCode": 1}})
