"""Container statuses in the apiserver's shape, from runtime state and the last sync's waiting reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.status import ContainerInput, RuntimeState, TerminatedRun, container_status
from nodeagent.status.container_status import INIT_ASSUMED_COMPLETED, UNKNOWN_WHEN_DELETED, UNKNOWN_WHEN_TERMINATED

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 12, 1, 0, tzinfo=UTC)

BASE: dict[str, Any] = {"name": "app", "image": "busybox:1.36"}
PREVIOUS = TerminatedRun(exit_code=1, reason="Error", started_at=T0, finished_at=T1, container_id="old")
PREVIOUS_JSON = {
    "exitCode": 1,
    "reason": "Error",
    "startedAt": "2024-05-01T12:00:00Z",
    "finishedAt": "2024-05-01T12:01:00Z",
    "containerID": "containerd://old",
}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(
            ContainerInput(**BASE),
            {"state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}, "ready": False, "started": False},
            id="no container yet",
        ),
        pytest.param(
            ContainerInput(**BASE, waiting_reason="ErrImagePull", waiting_message="pull failed"),
            {
                "state": {"waiting": {"reason": "ErrImagePull", "message": "pull failed"}},
                "lastState": {},
                "ready": False,
                "started": False,
            },
            id="image pull error",
        ),
        pytest.param(
            ContainerInput(**BASE, waiting_reason="CreateContainerConfigError", waiting_message='secret "s" not found'),
            {
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "s" not found'}},
                "lastState": {},
                "ready": False,
                "started": False,
            },
            id="config error",
        ),
        pytest.param(
            ContainerInput(
                **BASE,
                state=RuntimeState.RUNNING,
                container_id="abc",
                image_id="docker.io/library/busybox@sha256:1",
                started_at=T1,
                restart_count=1,
                last_terminated=PREVIOUS,
                ready=True,
            ),
            {
                "state": {"running": {"startedAt": "2024-05-01T12:01:00Z"}},
                "lastState": {"terminated": PREVIOUS_JSON},
                "ready": True,
                "restartCount": 1,
                "imageID": "docker.io/library/busybox@sha256:1",
                "containerID": "containerd://abc",
                "started": True,
            },
            id="running after a restart",
        ),
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.RUNNING, container_id="abc", started=False, ready=True),
            {
                "state": {"running": {"startedAt": None}},
                "lastState": {},
                "ready": True,
                "containerID": "containerd://abc",
                "started": False,
            },
            id="running, startup probe not yet passed",
        ),
        pytest.param(
            ContainerInput(
                **BASE,
                state=RuntimeState.EXITED,
                container_id="abc",
                exit_code=0,
                reason="Completed",
                started_at=T0,
                finished_at=T1,
                ready=True,
            ),
            {
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": "2024-05-01T12:00:00Z",
                        "finishedAt": "2024-05-01T12:01:00Z",
                        "containerID": "containerd://abc",
                    }
                },
                "lastState": {},
                "ready": False,
                "containerID": "containerd://abc",
                "started": False,
            },
            id="exited",
        ),
        pytest.param(
            ContainerInput(
                **BASE,
                state=RuntimeState.EXITED,
                container_id="old",
                exit_code=1,
                reason="Error",
                started_at=T0,
                finished_at=T1,
                restart_count=3,
                waiting_reason="CrashLoopBackOff",
                waiting_message="back-off 40s restarting failed container=app pod=p_ns(uid)",
            ),
            {
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "back-off 40s restarting failed container=app pod=p_ns(uid)",
                    }
                },
                "lastState": {"terminated": PREVIOUS_JSON},
                "ready": False,
                "restartCount": 3,
                "containerID": "containerd://old",
                "started": False,
            },
            id="crash loop back-off",
        ),
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.CREATED, container_id="abc"),
            {
                "state": {"waiting": {}},
                "lastState": {},
                "ready": False,
                "containerID": "containerd://abc",
                "started": False,
            },
            id="created not started",
        ),
    ],
)
def test_container_status(given: ContainerInput, expected: dict[str, Any]) -> None:
    full = {"name": "app", "restartCount": 0, "image": "busybox:1.36", "imageID": "", **expected}
    assert container_status(given) == full


def test_pod_initializing_default_and_runtime_type() -> None:
    status = container_status(ContainerInput(**BASE), default_waiting_reason="PodInitializing")
    assert status["state"] == {"waiting": {"reason": "PodInitializing"}}
    running = container_status(
        ContainerInput(**BASE, state=RuntimeState.RUNNING, container_id="x"), runtime_type="cri-o"
    )
    assert running["containerID"] == "cri-o://x"


# --- a container the runtime no longer has, or cannot say anything about (convertToAPIContainerStatuses) -----------

RUNNING_BEFORE: dict[str, Any] = {
    "name": "app",
    "state": {"running": {"startedAt": "2024-05-01T12:00:00Z"}},
    "lastState": {},
    "ready": True,
    "restartCount": 2,
    "image": "busybox:1.36",
    "imageID": "sha",
    "containerID": "containerd://gone",
    "started": True,
}
WAITING_BEFORE: dict[str, Any] = {
    **RUNNING_BEFORE,
    "state": {"waiting": {"reason": "ContainerCreating"}},
    "ready": False,
    "started": False,
}
FAILED_BEFORE: dict[str, Any] = {
    **RUNNING_BEFORE,
    "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": None, "finishedAt": None}},
    "ready": False,
    "started": False,
}
VANISHED = {
    "terminated": {
        "exitCode": 137,
        "reason": "ContainerStatusUnknown",
        "message": UNKNOWN_WHEN_DELETED,
        "startedAt": None,
        "finishedAt": None,
    }
}
LOST_WHILE_RUNNING = {
    "terminated": {
        "exitCode": 137,
        "reason": "ContainerStatusUnknown",
        "message": UNKNOWN_WHEN_TERMINATED,
        "startedAt": None,
        "finishedAt": None,
    }
}
DEFAULT_WAIT = {"ready": False, "image": "busybox:1.36", "imageID": "", "started": False}


@pytest.mark.parametrize(
    ("given", "previous", "options", "expected"),
    [
        pytest.param(
            ContainerInput(**BASE),
            RUNNING_BEFORE,
            {},
            {
                "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": VANISHED,
                "restartCount": 3,
                **DEFAULT_WAIT,
            },
            id="removed while running: stopped with an unknown end, one more restart",
        ),
        pytest.param(
            ContainerInput(**BASE),
            RUNNING_BEFORE,
            {"pod_deleted": True},
            {
                "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": VANISHED,
                "restartCount": 2,
                **DEFAULT_WAIT,
            },
            id="removed while running, pod being deleted: no restart counted",
        ),
        pytest.param(
            ContainerInput(**BASE),
            RUNNING_BEFORE,
            {"default_waiting_reason": "PodInitializing"},
            {
                "state": {"waiting": {"reason": "PodInitializing"}},
                "lastState": VANISHED,
                "restartCount": 3,
                **DEFAULT_WAIT,
            },
            id="removed while running, pod with init containers",
        ),
        pytest.param(
            ContainerInput(**BASE, waiting_reason="CreateContainerConfigError", waiting_message="cm missing"),
            RUNNING_BEFORE,
            {},
            {
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "cm missing"}},
                "lastState": VANISHED,
                "restartCount": 3,
                **DEFAULT_WAIT,
            },
            id="removed while running, and its restart failed",
        ),
        pytest.param(
            ContainerInput(**BASE),
            {**RUNNING_BEFORE, "lastState": {"terminated": {"exitCode": 1}}},
            {},
            {
                "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": {"terminated": {"exitCode": 1}},
                "restartCount": 2,
                **DEFAULT_WAIT,
            },
            id="removed while running, an earlier end known: kept as it is",
        ),
        pytest.param(
            ContainerInput(**BASE),
            {**WAITING_BEFORE, "restartCount": 3, "lastState": VANISHED},
            {},
            {
                "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": VANISHED,
                "restartCount": 3,
                **DEFAULT_WAIT,
            },
            id="still gone at the next sync: counted once",
        ),
        pytest.param(
            ContainerInput(**BASE),
            WAITING_BEFORE,
            {},
            {"state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}, "restartCount": 2, **DEFAULT_WAIT},
            id="never ran: waits, restart count kept",
        ),
        pytest.param(ContainerInput(**BASE), FAILED_BEFORE, {}, FAILED_BEFORE, id="ended before: kept whole"),
        pytest.param(
            ContainerInput(**BASE, waiting_reason="CrashLoopBackOff", waiting_message="back-off"),
            FAILED_BEFORE,
            {},
            {
                **FAILED_BEFORE,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": FAILED_BEFORE["state"],
            },
            id="ended before, garbage-collected, backing off",
        ),
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.UNKNOWN, container_id="lost", restart_count=2),
            RUNNING_BEFORE,
            {},
            {
                "state": LOST_WHILE_RUNNING,
                "lastState": {},
                "ready": False,
                "restartCount": 3,
                "image": "busybox:1.36",
                "imageID": "",
                "containerID": "containerd://lost",
                "started": False,
            },
            id="unknown state after running: terminated, one more restart",
        ),
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.UNKNOWN, container_id="lost"),
            WAITING_BEFORE,
            {},
            {
                "state": {"waiting": {}},
                "lastState": {},
                "ready": False,
                "restartCount": 0,
                "image": "busybox:1.36",
                "imageID": "",
                "containerID": "containerd://lost",
                "started": False,
            },
            id="unknown state, never ran: waiting",
        ),
        pytest.param(
            ContainerInput(**BASE),
            None,
            {"init_completed": True, "default_waiting_reason": "PodInitializing"},
            {
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "message": INIT_ASSUMED_COMPLETED,
                        "startedAt": None,
                        "finishedAt": None,
                    }
                },
                "lastState": {},
                "restartCount": 0,
                **DEFAULT_WAIT,
            },
            id="init container lost after the pod initialized: completed",
        ),
        pytest.param(
            ContainerInput(**BASE),
            FAILED_BEFORE,
            {"init_completed": True},
            FAILED_BEFORE,
            id="init container lost, its end known: kept",
        ),
    ],
)
def test_container_without_a_runtime_view(
    given: ContainerInput, previous: dict[str, Any] | None, options: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert container_status(given, previous=previous, **options) == {"name": "app", **expected}


GUARANTEED = {"limits": {"cpu": "100m", "memory": "32Mi"}, "requests": {"cpu": "100m", "memory": "32Mi"}}
EXITED = ContainerInput(
    **BASE, state=RuntimeState.EXITED, container_id="c1", exit_code=0, reason="Completed", started_at=T0, finished_at=T1
)


@pytest.mark.parametrize(
    ("given", "resources", "expected"),
    [
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.RUNNING, container_id="c1", started_at=T0),
            GUARANTEED,
            {"resources": GUARANTEED, "allocatedResources": GUARANTEED["requests"]},
            id="running: the allocated resources, the requests as allocatedResources",
        ),
        pytest.param(
            EXITED, GUARANTEED, {"resources": GUARANTEED, "allocatedResources": GUARANTEED["requests"]}, id="exited too"
        ),
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.EXITED, container_id="c1", waiting_reason="CrashLoopBackOff"),
            {"limits": {"memory": "24Mi"}},
            {"resources": {"limits": {"memory": "24Mi"}}},
            id="waiting over a runtime container: resources kept; no requests, no allocatedResources",
        ),
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.RUNNING, container_id="c1", started_at=T0),
            {},
            {"resources": {}},
            id="no resources: an empty object, as upstream's empty ResourceRequirements",
        ),
        pytest.param(ContainerInput(**BASE), GUARANTEED, {}, id="no runtime container: neither field"),
        pytest.param(
            ContainerInput(**BASE, state=RuntimeState.RUNNING, container_id="c1", started_at=T0),
            None,
            {},
            id="resources not given: neither field",
        ),
    ],
)
def test_status_resources(given: ContainerInput, resources: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    status = container_status(given, resources=resources)
    assert {k: status[k] for k in ("resources", "allocatedResources") if k in status} == expected


def test_status_resources_are_a_copy() -> None:
    spec = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    status = container_status(EXITED, resources=spec)
    status["resources"]["limits"]["cpu"] = "2"
    status["allocatedResources"]["cpu"] = "2"
    assert spec == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}


@pytest.mark.parametrize(
    ("given", "path", "expected"),
    [
        pytest.param(
            ContainerInput(
                **BASE,
                state=RuntimeState.EXITED,
                container_id="c1",
                exit_code=128,
                reason="StartError",
                finished_at=T1,
            ),
            ("state", "terminated"),
            {"startedAt": "1970-01-01T00:00:00Z", "finishedAt": "2024-05-01T12:01:00Z"},
            id="a container that never started: startedAt the epoch (Go's time.Unix(0, 0)), not null",
        ),
        pytest.param(
            ContainerInput(
                **BASE,
                state=RuntimeState.EXITED,
                container_id="c2",
                last_terminated=TerminatedRun(exit_code=128, reason="StartError", container_id="c1"),
                waiting_reason="RunContainerError",
            ),
            ("lastState", "terminated"),
            {"startedAt": "1970-01-01T00:00:00Z", "finishedAt": "1970-01-01T00:00:00Z"},
            id="the run before, as the runtime reported it",
        ),
    ],
)
def test_exited_runtime_containers_have_times(given: ContainerInput, path: tuple[str, str], expected: Any) -> None:
    terminated = container_status(given)[path[0]][path[1]]
    assert {k: terminated[k] for k in expected} == expected


def test_a_run_nobody_saw_end_has_null_times() -> None:
    previous = {"name": "app", "state": {"running": {"startedAt": "2024-05-01T12:00:00Z"}}, "restartCount": 0}
    given = ContainerInput(**BASE, state=RuntimeState.UNKNOWN, container_id="c1")
    terminated = container_status(given, previous=previous)["state"]["terminated"]
    assert terminated["startedAt"] is None and terminated["finishedAt"] is None
