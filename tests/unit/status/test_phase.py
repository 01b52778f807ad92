"""getPhase as upstream: init containers, sidecars, restart policies, terminal pods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nodeagent.status import FAILED, PENDING, RUNNING, SUCCEEDED, get_phase


def running(name: str, *, started: bool = True) -> dict[str, Any]:
    return {"name": name, "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}, "started": started}


def exited(name: str, code: int) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code}}}


def waiting(name: str, *, last_exit: int | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "state": {"waiting": {"reason": "ContainerCreating"}}}
    if last_exit is not None:
        status["lastState"] = {"terminated": {"exitCode": last_exit}}
    return status


def spec(
    containers: list[str], *, init: Sequence[str] = (), sidecars: Sequence[str] = (), policy: str = "Always"
) -> dict[str, Any]:
    inits = [{"name": n} for n in init] + [{"name": n, "restartPolicy": "Always"} for n in sidecars]
    return {"containers": [{"name": n} for n in containers], "initContainers": inits, "restartPolicy": policy}


CASES = [
    # (id, spec, app statuses, init statuses, pod_is_terminal, expected)
    ("no statuses yet", spec(["a"]), [], [], False, PENDING),
    ("waiting", spec(["a"]), [waiting("a")], [], False, PENDING),
    ("all running", spec(["a", "b"]), [running("a"), running("b")], [], False, RUNNING),
    ("one running one unknown", spec(["a", "b"]), [running("a")], [], False, PENDING),
    ("one running one exited", spec(["a", "b"]), [running("a"), exited("b", 1)], [], False, RUNNING),
    ("all succeeded, Always restarts", spec(["a"]), [exited("a", 0)], [], False, RUNNING),
    ("all succeeded, OnFailure", spec(["a"], policy="OnFailure"), [exited("a", 0)], [], False, SUCCEEDED),
    ("all succeeded, Never", spec(["a"], policy="Never"), [exited("a", 0)], [], False, SUCCEEDED),
    ("one failed, Never", spec(["a", "b"], policy="Never"), [exited("a", 0), exited("b", 2)], [], False, FAILED),
    ("one failed, OnFailure restarts", spec(["a"], policy="OnFailure"), [exited("a", 1)], [], False, RUNNING),
    ("failed, Always, terminal pod", spec(["a"]), [exited("a", 1)], [], True, FAILED),
    ("succeeded, Always, terminal pod", spec(["a"]), [exited("a", 0)], [], True, SUCCEEDED),
    ("crash loop counts as stopped", spec(["a"], policy="Never"), [waiting("a", last_exit=1)], [], False, FAILED),
    ("crash loop with Always", spec(["a"]), [waiting("a", last_exit=1)], [], False, RUNNING),
    ("init not started", spec(["a"], init=["i"]), [waiting("a")], [], False, PENDING),
    ("init running", spec(["a"], init=["i"]), [waiting("a")], [running("i")], False, PENDING),
    ("init failed, Never", spec(["a"], init=["i"], policy="Never"), [waiting("a")], [exited("i", 1)], False, FAILED),
    ("init failed, Always retries", spec(["a"], init=["i"]), [waiting("a")], [exited("i", 1)], False, PENDING),
    (
        "init back-off after failure, Never",
        spec(["a"], init=["i"], policy="Never"),
        [waiting("a")],
        [waiting("i", last_exit=3)],
        False,
        FAILED,
    ),
    ("init done, app running", spec(["a"], init=["i"]), [running("a")], [exited("i", 0)], False, RUNNING),
    ("sidecar not started yet", spec(["a"], sidecars=["s"]), [], [running("s", started=False)], False, PENDING),
    ("sidecar running, app running", spec(["a"], sidecars=["s"]), [running("a")], [running("s")], False, RUNNING),
    (
        "sidecar restarting after app ran",
        spec(["a"], sidecars=["s"]),
        [running("a")],
        [running("s", started=False)],
        False,
        RUNNING,
    ),
    (
        "job with sidecar: app done, sidecar still running",
        spec(["a"], sidecars=["s"], policy="Never"),
        [exited("a", 0)],
        [running("s")],
        False,
        RUNNING,
    ),
    (
        "job with sidecar: app done, sidecar stopped",
        spec(["a"], sidecars=["s"], policy="Never"),
        [exited("a", 0)],
        [exited("s", 137)],
        False,
        SUCCEEDED,
    ),
    ("sidecar without status", spec(["a"], sidecars=["s"]), [running("a")], [], False, PENDING),
]


@pytest.mark.parametrize(
    ("spec_", "apps", "inits", "terminal", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_get_phase(
    spec_: dict[str, Any], apps: list[dict[str, Any]], inits: list[dict[str, Any]], terminal: bool, expected: str
) -> None:
    assert get_phase(spec_, apps, inits, pod_is_terminal=terminal) == expected


def test_default_restart_policy_is_always() -> None:
    assert get_phase({"containers": [{"name": "a"}]}, [exited("a", 1)], []) == RUNNING


def test_static_pod_keeps_restart_policy_when_terminal() -> None:
    assert get_phase(spec(["a"]), [exited("a", 1)], [], pod_is_terminal=True, is_static_pod=True) == RUNNING
