"""The assembled pod status, and what is worth sending."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.status import (
    ContainerInput,
    RuntimeState,
    failed_pod_status,
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
    # As upstream: with init containers every container waits as PodInitializing, the init containers too.
    assert status["initContainerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
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
        (  # a lower count is taken, as upstream takes it (after the runtime lost its containers)
            {"phase": "Running", "containerStatuses": [{"name": "a", "restartCount": 2}]},
            {"phase": "Running", "containerStatuses": [{"name": "a", "restartCount": 1}]},
            False,
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


@pytest.mark.parametrize(
    ("old", "new", "stale"),
    [
        ({"phase": "Failed"}, {"phase": "Succeeded"}, False),
        ({"phase": "Succeeded"}, {"phase": "Failed"}, False),
        ({"phase": "Failed"}, {"phase": "Running"}, True),
        ({"phase": "Failed"}, {"phase": "Failed"}, False),
    ],
)
def test_a_terminal_phase_not_sent_yet_may_become_the_other(
    old: dict[str, Any], new: dict[str, Any], stale: bool
) -> None:
    assert is_stale(old, new, old_sent=False) is stale


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


# --- init containers: ready once done, PodInitializing while they run ----------------------------------------------


def exited(name: str, code: int, **fields: Any) -> ContainerInput:
    return ContainerInput(
        name=name, image="img", state=RuntimeState.EXITED, container_id=f"id-{name}", exit_code=code, **fields
    )


INIT_POD = pod(initContainers=[{"name": "i1", "image": "img"}, {"name": "i2", "image": "img"}])


def _states(statuses: list[dict[str, Any]]) -> dict[str, tuple[str, str, bool]]:
    """name -> (state, waiting reason or exit code, ready)."""
    out = {}
    for s in statuses:
        [(kind, body)] = s["state"].items()
        detail = str(body.get("reason", "")) if kind == "waiting" else str(body.get("exitCode", ""))
        out[s["name"]] = (kind, detail, s["ready"])
    return out


@pytest.mark.parametrize(
    ("init", "app", "expected_init", "expected_app", "phase"),
    [
        pytest.param(
            [],
            [],
            {"i1": ("waiting", "PodInitializing", False), "i2": ("waiting", "PodInitializing", False)},
            ("waiting", "PodInitializing", False),
            "Pending",
            id="before the sandbox exists",
        ),
        pytest.param(
            [ContainerInput(name="i1", image="img", waiting_reason="ErrImagePull", waiting_message="no such image")],
            [],
            {"i1": ("waiting", "ErrImagePull", False), "i2": ("waiting", "PodInitializing", False)},
            ("waiting", "PodInitializing", False),
            "Pending",
            id="first init image pull failing",
        ),
        pytest.param(
            [exited("i1", 0), running("i2")],
            [],
            {"i1": ("terminated", "0", True), "i2": ("running", "", False)},
            ("waiting", "PodInitializing", False),
            "Pending",
            id="second init running: the first is ready, the running one not",
        ),
        pytest.param(
            [exited("i1", 1, restart_count=2, waiting_reason="CrashLoopBackOff", waiting_message="back-off 20s")],
            [],
            {"i1": ("waiting", "CrashLoopBackOff", False), "i2": ("waiting", "PodInitializing", False)},
            ("waiting", "PodInitializing", False),
            "Pending",
            id="first init failed and restarting",
        ),
        pytest.param(
            [exited("i1", 0), exited("i2", 0)],
            [running("a")],
            {"i1": ("terminated", "0", True), "i2": ("terminated", "0", True)},
            ("running", "", True),
            "Running",
            id="initialized",
        ),
        pytest.param(
            [],
            [running("a")],
            {"i1": ("terminated", "0", True), "i2": ("terminated", "0", True)},
            ("running", "", True),
            "Running",
            id="init containers garbage-collected after the pod initialized: completed",
        ),
    ],
)
def test_init_container_statuses(
    init: list[ContainerInput],
    app: list[ContainerInput],
    expected_init: dict[str, tuple[str, str, bool]],
    expected_app: tuple[str, str, bool],
    phase: str,
) -> None:
    status = generate_pod_status(INIT_POD, now=T0, containers=app, init_containers=init, sandbox_ready=bool(init))
    assert _states(status["initContainerStatuses"]) == expected_init
    assert _states(status["containerStatuses"]) == {"a": expected_app}
    assert status["phase"] == phase
    assert status["containerStatuses"][0]["restartCount"] == 0


def test_a_running_init_container_has_started_but_is_not_ready() -> None:
    # The prober's view says ready (no readiness probe), but a regular init container is ready only once done.
    status = generate_pod_status(INIT_POD, now=T0, containers=[], init_containers=[running("i1")], sandbox_ready=True)
    first = status["initContainerStatuses"][0]
    assert (first["ready"], first["started"]) == (False, True)


def test_a_sidecar_is_ready_from_its_probes() -> None:
    p = pod(initContainers=[{"name": "side", "image": "img", "restartPolicy": "Always"}])
    status = generate_pod_status(
        p, now=T0, containers=[running("a")], init_containers=[running("side", ready=True)], sandbox_ready=True
    )
    assert status["initContainerStatuses"][0]["ready"] is True
    assert conditions_by_type(status)["Ready"]["status"] == "True"


def test_app_statuses_are_sorted_by_name_as_upstream() -> None:
    p = pod()
    p["spec"]["containers"] = [{"name": "zeta", "image": "img"}, {"name": "alpha", "image": "img"}]
    status = generate_pod_status(p, now=T0, containers=[running("zeta"), running("alpha")], sandbox_ready=True)
    assert [c["name"] for c in status["containerStatuses"]] == ["alpha", "zeta"]


# --- a container removed behind the kubelet's back ----------------------------------------------------------------


def test_a_vanished_container_keeps_the_pod_running_and_counts_a_restart() -> None:
    first = generate_pod_status(pod(), now=T0, containers=[running("a")], sandbox_ready=True)
    gone = generate_pod_status(
        pod(first), now=T1, containers=[ContainerInput(name="a", image="img")], sandbox_ready=True
    )
    (only,) = gone["containerStatuses"]
    assert only["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert only["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert only["lastState"]["terminated"]["exitCode"] == 137
    assert only["restartCount"] == 1
    assert gone["phase"] == "Running"  # stopped, not pending
    assert not is_stale(first, gone)


# --- ephemeral containers -------------------------------------------------------------------------------------------

EPHEMERAL_POD = pod(
    ephemeralContainers=[
        {"name": "debug-b", "image": "img", "targetContainerName": "a"},
        {"name": "debug-a", "image": "img"},
    ]
)


@pytest.mark.parametrize(
    ("ephemeral", "expected"),
    [
        pytest.param(
            [],
            {"debug-a": ("waiting", "ContainerCreating", False), "debug-b": ("waiting", "ContainerCreating", False)},
            id="not started yet",
        ),
        pytest.param(
            [running("debug-b"), exited("debug-a", 3)],
            {"debug-a": ("terminated", "3", False), "debug-b": ("running", "", False)},
            id="one running, one exited",
        ),
        pytest.param(
            [ContainerInput(name="debug-a", image="img", waiting_reason="ErrImagePull", waiting_message="no")],
            {"debug-a": ("waiting", "ErrImagePull", False), "debug-b": ("waiting", "ContainerCreating", False)},
            id="image pull failing",
        ),
    ],
)
def test_ephemeral_container_statuses(
    ephemeral: list[ContainerInput], expected: dict[str, tuple[str, str, bool]]
) -> None:
    status = generate_pod_status(
        EPHEMERAL_POD, now=T0, containers=[running("a")], ephemeral_containers=ephemeral, sandbox_ready=True
    )
    statuses = status["ephemeralContainerStatuses"]
    assert [s["name"] for s in statuses] == ["debug-a", "debug-b"]  # sorted by name, as upstream
    assert _states(statuses) == expected
    assert all("started" not in s for s in statuses)  # no probes: upstream says nothing of started
    # They count for neither the phase nor readiness.
    assert status["phase"] == "Running"
    assert conditions_by_type(status)["Ready"]["status"] == "True"
    assert conditions_by_type(status)["ContainersReady"]["status"] == "True"


def test_no_ephemeral_containers_no_ephemeral_statuses() -> None:
    status = generate_pod_status(pod(), now=T0, containers=[running("a")], sandbox_ready=True)
    assert "ephemeralContainerStatuses" not in status


def test_a_finished_ephemeral_container_keeps_its_status_once_removed() -> None:
    first = generate_pod_status(
        EPHEMERAL_POD,
        now=T0,
        containers=[running("a")],
        ephemeral_containers=[exited("debug-a", 0), running("debug-b")],
        sandbox_ready=True,
    )
    later = generate_pod_status(
        {**EPHEMERAL_POD, "status": first}, now=T1, containers=[running("a")], sandbox_ready=True
    )
    assert later["ephemeralContainerStatuses"][0] == first["ephemeralContainerStatuses"][0]


# --- readiness gates: the conditions others own come from the apiserver's view ---------------------------------------

GATE = "example.com/feature-1"


def _gate(value: str) -> dict[str, Any]:
    return {"type": GATE, "status": value, "lastProbeTime": None, "lastTransitionTime": "2024-05-01T11:00:00Z"}


@pytest.mark.parametrize(
    ("api_conditions", "ready", "message"),
    [
        ([], "False", f'corresponding condition of pod readiness gate "{GATE}" does not exist.'),
        ([_gate("False")], "False", f'the status of pod readiness gate "{GATE}" is not "True", but False'),
        ([_gate("True")], "True", None),
    ],
)
def test_readiness_gates_read_the_apiservers_conditions(
    api_conditions: list[dict[str, Any]], ready: str, message: str | None
) -> None:
    gated = pod(readinessGates=[{"conditionType": GATE}])
    # The status the kubelet set last knows nothing of the gate: a user set it through the apiserver since.
    last_set = generate_pod_status(gated, now=T0, containers=[running("a")], sandbox_ready=True)
    api_view = {**last_set, "conditions": [*last_set["conditions"], *api_conditions]}
    status = generate_pod_status(
        pod(api_view, readinessGates=[{"conditionType": GATE}]),
        now=T1,
        containers=[running("a")],
        sandbox_ready=True,
        old_status=last_set,
    )
    conditions = conditions_by_type(status)
    assert (conditions["Ready"]["status"], conditions["Ready"].get("message")) == (ready, message)
    assert [c for c in status["conditions"] if c["type"] == GATE] == api_conditions  # carried over unchanged
    # Times continue the status the kubelet set.
    assert conditions["Initialized"]["lastTransitionTime"] == "2024-05-01T12:00:00Z"


def test_the_old_status_not_the_apiservers_gives_container_history() -> None:
    last_set = generate_pod_status(pod(), now=T0, containers=[running("a")], sandbox_ready=True)
    status = generate_pod_status(
        pod({"phase": "Pending"}), now=T1, containers=[ContainerInput(name="a", image="img")], sandbox_ready=True,
        old_status=last_set,
    )  # fmt: skip
    assert status["containerStatuses"][0]["restartCount"] == 1  # it ran (by the kubelet's own record) and vanished
    assert status["startTime"] == "2024-05-01T12:00:00Z"


@pytest.mark.parametrize(("generation", "expected"), [(3, 3), (None, None)])
def test_kubelet_conditions_carry_the_generation_they_saw(generation: int | None, expected: int | None) -> None:
    gate = {"type": "example.com/gate", "status": "True"}
    given = pod({"conditions": [gate]}, readinessGates=[{"conditionType": "example.com/gate"}])
    if generation is not None:
        given["metadata"]["generation"] = generation
    status = generate_pod_status(given, now=T0, containers=[running("a")], sandbox_ready=True)
    by_type = conditions_by_type(status)
    assert by_type.pop("example.com/gate") == gate  # not the kubelet's: untouched
    assert {kind: c.get("observedGeneration") for kind, c in by_type.items()} == dict.fromkeys(
        ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"], expected
    )
    assert "observedGeneration" not in status  # the status manager sets the pod-wide one


@pytest.mark.parametrize(
    ("restart_policy", "code", "phase", "initialized"),
    [
        ("Never", 0, "Succeeded", {"status": "True", "reason": "PodCompleted"}),
        ("Never", 1, "Failed", {"status": "True"}),
        ("Always", 0, "Running", {"status": "True"}),
    ],
)
def test_initialized_says_pod_completed_without_init_containers(
    restart_policy: str, code: int, phase: str, initialized: dict[str, str]
) -> None:
    status = generate_pod_status(
        pod(restartPolicy=restart_policy), now=T0, containers=[exited("a", code)], sandbox_ready=False
    )
    assert status["phase"] == phase
    condition = conditions_by_type(status)["Initialized"]
    assert {k: condition[k] for k in ("status", "reason") if k in condition} == initialized


def test_container_statuses_report_the_spec_resources() -> None:
    resources = {"limits": {"cpu": "200m", "memory": "24Mi"}, "requests": {"cpu": "200m", "memory": "24Mi"}}
    given = pod(
        containers=[{"name": "a", "image": "img", "resources": resources}, {"name": "b", "image": "img"}],
        initContainers=[{"name": "i", "image": "img"}],
        ephemeralContainers=[{"name": "e", "image": "img"}],
    )
    status = generate_pod_status(
        given,
        now=T0,
        containers=[running("a"), running("b")],
        init_containers=[exited("i", 0)],
        ephemeral_containers=[running("e")],
        sandbox_ready=True,
    )
    a, b = status["containerStatuses"]
    assert (a["resources"], a["allocatedResources"]) == (resources, resources["requests"])
    assert (b["resources"], "allocatedResources" in b) == ({}, False)
    assert status["initContainerStatuses"][0]["resources"] == {}
    assert status["ephemeralContainerStatuses"][0]["resources"] == {}


def test_a_pod_failed_by_the_kubelet_says_so_in_its_conditions_while_it_runs() -> None:
    gate = {"type": "example.com/gate", "status": "True"}
    given = pod({"conditions": [gate]}, readinessGates=[{"conditionType": "example.com/gate"}])
    given["metadata"]["generation"] = 2
    status = generate_pod_status(given, now=T0, containers=[running("a")], sandbox_ready=True)
    assert status["phase"] == "Running"
    failed = failed_pod_status(given, status, reason="DeadlineExceeded", message="too long", now=T1)
    assert (failed["phase"], failed["reason"], failed["message"]) == ("Failed", "DeadlineExceeded", "too long")
    by_type = conditions_by_type(failed)
    assert [c["type"] for c in failed["conditions"]] == [c["type"] for c in status["conditions"]]
    assert by_type["example.com/gate"] == gate
    for kind in ("Ready", "ContainersReady"):
        assert by_type[kind] == {
            "type": kind,
            "status": "False",
            "reason": "PodFailed",
            "lastProbeTime": None,
            "lastTransitionTime": "2024-05-01T12:05:00Z",
            "observedGeneration": 2,
        }
    # Unchanged conditions keep their times; the containers are untouched (still running).
    assert by_type["Initialized"]["lastTransitionTime"] == "2024-05-01T12:00:00Z"
    assert failed["containerStatuses"] == status["containerStatuses"]
