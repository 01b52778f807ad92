"""A probe verdict applied to a cached status at once: the container flag, ContainersReady and Ready with their
transition times, and the status manager's SetContainerReadiness / SetContainerStartup."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from nodeagent.status.manager import StatusManager
from nodeagent.status.probe_results import with_probe_result
from tests.unit.fakeclock import FakeClock

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
BEFORE = "2026-01-01T11:00:00Z"
SPEC: dict[str, Any] = {"containers": [{"name": "app"}, {"name": "side"}]}


def cond(kind: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": BEFORE, **extra}


def status(app_ready: bool, side_ready: bool = True, *, app_running: bool = True) -> dict[str, Any]:
    not_ready = "containers with unready status: [app]"
    ready = "True" if app_ready and side_ready else "False"
    reason = {} if ready == "True" else {"reason": "ContainersNotReady", "message": not_ready}
    return {
        "phase": "Running",
        "conditions": [
            cond("PodReadyToStartContainers", "True"),
            cond("Initialized", "True"),
            cond("Ready", ready, **reason),
            cond("ContainersReady", ready, **reason),
            cond("PodScheduled", "True"),
        ],
        "containerStatuses": [
            {
                "name": "app",
                "containerID": "containerd://c1",
                "ready": app_ready,
                "started": app_running,
                "state": {"running": {"startedAt": BEFORE}} if app_running else {"terminated": {"exitCode": 0}},
            },
            {
                "name": "side",
                "containerID": "containerd://c2",
                "ready": side_ready,
                "started": True,
                "state": {"running": {"startedAt": BEFORE}},
            },
        ],
    }


def conditions(st: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c.get("reason", ""), c["lastTransitionTime"]) for c in st["conditions"]}


def test_ready_flips_the_conditions_and_moves_only_their_times() -> None:
    new = with_probe_result(SPEC, status(False), "c1", now=NOW, ready=True)
    assert new is not None
    assert new["containerStatuses"][0]["ready"] is True
    got = conditions(new)
    assert got["Ready"] == ("True", "", "2026-01-01T12:00:00Z")
    assert got["ContainersReady"] == ("True", "", "2026-01-01T12:00:00Z")
    assert got["Initialized"] == ("True", "", BEFORE)
    assert [c["type"] for c in new["conditions"]] == [c["type"] for c in status(False)["conditions"]]


def test_not_ready_names_the_container() -> None:
    new = with_probe_result(SPEC, status(True), "c1", now=NOW, ready=False)
    assert new is not None
    ready = next(c for c in new["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "ContainersNotReady"
    assert ready["message"] == "containers with unready status: [app]"


@pytest.mark.parametrize(
    ("old", "cid", "flags"),
    [
        (status(True), "c1", {"ready": True}),  # no change
        (status(False), "nope", {"ready": True}),  # not in this status
        (status(False, app_running=False), "c1", {"ready": True}),  # only a running container becomes ready
        (status(True), "c1", {"started": True}),
        (status(True), "c1", {}),
    ],
    ids=["unchanged", "unknown-container", "not-running", "started-unchanged", "nothing-asked"],
)
def test_nothing_to_change(old: dict[str, Any], cid: str, flags: dict[str, bool]) -> None:
    assert with_probe_result(SPEC, old, cid, now=NOW, **flags) is None


def test_other_containers_keep_the_pod_unready() -> None:
    new = with_probe_result(SPEC, status(False, side_ready=False), "c1", now=NOW, ready=True)
    assert new is not None
    assert conditions(new)["Ready"][0] == "False"
    assert next(c for c in new["conditions"] if c["type"] == "Ready")["message"] == (
        "containers with unready status: [side]"
    )


def test_started_flag() -> None:
    old = status(False)
    old["containerStatuses"][0]["started"] = False
    new = with_probe_result(SPEC, old, "c1", now=NOW, started=True)
    assert new is not None
    assert new["containerStatuses"][0]["started"] is True
    assert new["conditions"] == old["conditions"]


async def test_status_manager_applies_verdicts_to_its_latest_status() -> None:
    manager = StatusManager(None, clock=FakeClock())
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": SPEC}
    manager.set_container_readiness(pod, "c1", True)  # no status yet: nothing to change
    assert manager.get_pod_status("u1") is None
    manager.set_pod_status(pod, status(False))
    manager.set_container_readiness(pod, "c1", True)
    latest = manager.get_pod_status("u1")
    assert latest is not None
    assert latest["containerStatuses"][0]["ready"] is True
    assert conditions(latest)["Ready"][0] == "True"
    manager.set_container_startup(pod, "c1", False)
    latest = manager.get_pod_status("u1")
    assert latest is not None and latest["containerStatuses"][0]["started"] is False
