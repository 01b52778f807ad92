"""The status of a terminated pod, as upstream's TerminatePod settles it."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.status.container_status import UNKNOWN_WHEN_TERMINATED
from nodeagent.status.terminate import has_pod_initialized, terminated_pod_status

UNKNOWN = {
    "terminated": {
        "exitCode": 137,
        "reason": "ContainerStatusUnknown",
        "message": UNKNOWN_WHEN_TERMINATED,
        "startedAt": None,
        "finishedAt": None,
    }
}


def st(name: str, state: str, *, code: int = 0, last_code: int | None = None, started: bool = False) -> Any:
    body: dict[str, Any] = {"exitCode": code} if state == "terminated" else {}
    out: dict[str, Any] = {"name": name, "state": {state: body}, "lastState": {}, "started": started}
    if last_code is not None:
        out["lastState"] = {"terminated": {"exitCode": last_code}}
    return out


def spec(*, init: tuple[str, ...] = (), sidecar: bool = False) -> dict[str, Any]:
    inits = [{"name": n} for n in init]
    if sidecar and inits:
        inits[-1]["restartPolicy"] = "Always"
    return {"containers": [{"name": "a"}], "initContainers": inits}


def states(statuses: list[dict[str, Any]]) -> list[str]:
    return ["unknown" if s["state"] == UNKNOWN else next(iter(s["state"])) for s in statuses]


@pytest.mark.parametrize(
    ("pod_spec", "init", "app", "phase", "expected_init", "expected_app", "expected_phase"),
    [
        pytest.param(
            spec(), [], [st("a", "running")], "Running", [], ["unknown"], "Failed", id="still running: unknown, Failed"
        ),
        pytest.param(
            spec(), [], [st("a", "terminated")], "Succeeded", [], ["terminated"], "Succeeded", id="ended: kept"
        ),
        pytest.param(
            spec(), [], [st("a", "waiting")], "Pending", [], ["unknown"], "Failed", id="never started, no init"
        ),
        pytest.param(
            spec(init=("i1", "i2")),
            [st("i1", "terminated", code=1), st("i2", "waiting")],
            [st("a", "waiting")],
            "Pending",
            ["terminated", "waiting"],
            ["waiting"],
            "Failed",
            id="init failed: app containers that never ran stay waiting, the init suffix too",
        ),
        pytest.param(
            spec(init=("i1", "i2")),
            [st("i1", "waiting"), st("i2", "waiting")],
            [st("a", "waiting")],
            "Pending",
            ["unknown", "waiting"],
            ["waiting"],
            "Failed",
            id="nothing ran: the first init container is marked",
        ),
        pytest.param(
            spec(init=("i1", "i2")),
            [st("i1", "terminated"), st("i2", "running")],
            [st("a", "waiting")],
            "Pending",
            ["terminated", "unknown"],
            ["waiting"],
            "Failed",
            id="second init running",
        ),
        pytest.param(
            spec(init=("i1",)),
            [st("i1", "terminated")],
            [st("a", "waiting", last_code=1)],
            "Running",
            ["terminated"],
            ["unknown"],
            "Failed",
            id="initialized, app backing off: unknown",
        ),
    ],
)
def test_terminated_pod_status(
    pod_spec: dict[str, Any],
    init: list[Any],
    app: list[Any],
    phase: str,
    expected_init: list[str],
    expected_app: list[str],
    expected_phase: str,
) -> None:
    status = {"phase": phase, "initContainerStatuses": init, "containerStatuses": app}
    out = terminated_pod_status(pod_spec, status)
    assert states(out["initContainerStatuses"]) == expected_init
    assert states(out["containerStatuses"]) == expected_app
    assert out["phase"] == expected_phase
    assert status["containerStatuses"] == app  # not changed in place


def test_a_static_pod_keeps_its_phase() -> None:
    status = {"phase": "Running", "containerStatuses": [st("a", "running")]}
    out = terminated_pod_status(spec(), status, is_static=True)
    assert out["phase"] == "Running"
    assert out["containerStatuses"][0]["state"] == UNKNOWN


@pytest.mark.parametrize(
    ("pod_spec", "init", "app", "initialized"),
    [
        (spec(), [], [], True),
        (spec(init=("i1",)), [], [st("a", "waiting")], False),
        (spec(init=("i1",)), [st("i1", "running")], [st("a", "waiting")], False),
        (spec(init=("i1",)), [st("i1", "terminated")], [st("a", "waiting")], True),
        (spec(init=("i1",)), [st("i1", "waiting", last_code=0)], [st("a", "waiting")], True),
        (spec(init=("i1",)), [st("i1", "terminated", code=1)], [st("a", "waiting")], False),
        (spec(init=("i1",)), [st("i1", "waiting")], [st("a", "waiting", last_code=2)], True),
        (spec(init=("side",), sidecar=True), [st("side", "running", started=True)], [st("a", "waiting")], True),
        (spec(init=("side",), sidecar=True), [st("side", "running")], [st("a", "waiting")], False),
    ],
)
def test_has_pod_initialized(pod_spec: dict[str, Any], init: list[Any], app: list[Any], initialized: bool) -> None:
    status = {"initContainerStatuses": init, "containerStatuses": app}
    assert has_pod_initialized(pod_spec, status) is initialized
