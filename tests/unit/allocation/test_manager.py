"""The allocation manager: checkpoints that survive a new manager, resize conditions as upstream sets them, the
pending queue, and ResizeCompleted once the actuated resources catch up. Time is a fake clock."""

from __future__ import annotations

import errno
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nodeagent.allocation import AllocationManager, AllocationStateError
from nodeagent.allocation.state import ALLOCATED_PODS_STATE, ResourceState
from tests.unit.fakeclock import FakeClock

Obj = dict[str, Any]


def pod(cpu_limit: str, *, uid: str = "u1", generation: int = 1, cpu_request: str = "100m") -> Obj:
    return {
        "metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "ns", "generation": generation},
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": cpu_request}, "limits": {"cpu": cpu_limit}}}
            ]
        },
    }


def admits(pod: Any, others: Any) -> tuple[str, str] | None:
    del pod, others
    return None


def manager(
    tmp_path: Path | None, clock: FakeClock, events: list[tuple[str, str, str]] | None = None
) -> AllocationManager:
    def record(pod: Any, type_: str, reason: str, message: str) -> None:
        if events is not None:
            events.append((type_, reason, message))

    return AllocationManager(
        str(tmp_path) if tmp_path is not None else None,
        {"cpu": "2", "memory": "4Gi"},
        wall=clock.wall,
        monotonic=clock.monotonic,
        record_event=record,
    )


def test_the_allocation_survives_a_new_manager(tmp_path: Path) -> None:
    clock = FakeClock()
    first = manager(tmp_path, clock)
    assert first.add_pod(pod("200m"), lambda p: None) is None
    assert first.handle_resize(pod("300m", generation=2), [], admits)
    second = manager(tmp_path, clock)
    allocated, changed = second.update_pod_from_allocation(pod("400m"))
    assert changed
    assert allocated["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "300m"}
    blob = json.loads((tmp_path / ALLOCATED_PODS_STATE).read_text())
    assert json.loads(blob["data"])["entries"]["u1"]["ContainerResources"]["main"]["limits"] == {"cpu": "300m"}


def test_a_corrupt_checkpoint_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / ALLOCATED_PODS_STATE).write_text(json.dumps({"data": '{"entries":{}}', "checksum": 1}))
    with pytest.raises(AllocationStateError, match="checksum mismatch"):
        ResourceState(str(tmp_path), ALLOCATED_PODS_STATE)


def test_admission_sees_the_pod_as_allocated(tmp_path: Path) -> None:
    clock = FakeClock()
    m = manager(tmp_path, clock)
    m.add_pod(pod("200m"), lambda p: None)
    seen: list[str] = []

    def admit(candidate: Any) -> tuple[str, str] | None:
        seen.append(candidate["spec"]["containers"][0]["resources"]["limits"]["cpu"])
        return None

    m.add_pod(pod("900"), admit)  # the spec asks for more: the allocation is what is admitted
    assert seen == ["200m"]


def test_conditions_follow_upstream(tmp_path: Path) -> None:
    clock = FakeClock()
    m = manager(None, clock)
    m.add_pod(pod("200m"), lambda p: None)

    def refuses(pod: Any, others: Any) -> tuple[str, str] | None:
        return ("OutOfcpu", "no room")

    assert not m.handle_resize(pod("300m", generation=2), [], refuses)
    (pending,) = m.resize_conditions("u1")
    assert pending == {
        "type": "PodResizePending",
        "status": "True",
        "lastProbeTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 2,
        "reason": "Deferred",
        "message": "no room",
    }
    clock.t = 5
    assert not m.handle_resize(pod("300m", generation=2), [], refuses)
    (pending,) = m.resize_conditions("u1")
    assert (pending["lastProbeTime"], pending["lastTransitionTime"]) == ("2026-01-01T00:00:05Z", "2026-01-01T00:00:00Z")
    assert m.handle_resize(pod("300m", generation=3), [], admits)
    (progress,) = m.resize_conditions("u1")
    assert (progress["type"], progress["observedGeneration"], "reason" in progress) == ("PodResizeInProgress", 3, False)
    m.set_in_progress("u1", "Error", "boom", 4)
    (progress,) = m.resize_conditions("u1")
    assert (progress["reason"], progress["message"], progress["observedGeneration"]) == ("Error", "boom", 3)


def test_deferred_resizes_are_retried_and_infeasible_ones_dropped(tmp_path: Path) -> None:
    clock = FakeClock()
    m = manager(None, clock)
    pods = {"u1": pod("300m", uid="u1"), "u2": pod("3", uid="u2", cpu_request="3")}
    for uid in pods:
        m.add_pod(pod("200m", uid=uid), lambda p: None)
        m.push_pending_resize(uid)
    room = {"ok": False}

    def admit(candidate: Any, others: Any) -> tuple[str, str] | None:
        return None if room["ok"] else ("OutOfcpu", "no room")

    assert not m.retry_due()
    synced = m.retry_pending_resizes("pod_updated", pod_by_uid=pods.get, active_pods=lambda: [], admit=admit)
    assert sorted(synced) == ["u1", "u2"]  # both got a condition
    assert m.resize_conditions("u2")[0]["reason"] == "Infeasible"
    assert m.resize_conditions("u1")[0]["reason"] == "Deferred"
    assert m.has_pending_resizes()  # only the deferred one stays
    clock.t = 179
    assert not m.retry_due()
    clock.t = 181
    assert m.retry_due()
    room["ok"] = True
    assert m.retry_pending_resizes("periodic_retry", pod_by_uid=pods.get, active_pods=lambda: [], admit=admit) == ["u1"]
    assert not m.has_pending_resizes()
    assert m.resize_conditions("u1")[0]["type"] == "PodResizeInProgress"


def test_resize_completed_once_the_actuated_resources_catch_up() -> None:
    clock = FakeClock()
    events: list[tuple[str, str, str]] = []
    m = manager(None, clock, events)
    m.add_pod(pod("200m"), lambda p: None)
    m.set_actuated("u1", "main", {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}})
    assert m.handle_resize(pod("300m"), [], admits)
    allocated = m.allocated_pod(pod("300m"))
    m.check_resize_in_progress(allocated, lambda name: True)
    assert [c["type"] for c in m.resize_conditions("u1")] == ["PodResizeInProgress"] and not events
    m.set_actuated("u1", "main", {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}})
    m.check_resize_in_progress(allocated, lambda name: True)
    m.check_resize_in_progress(allocated, lambda name: True)
    assert m.resize_conditions("u1") == []
    assert events == [
        (
            "Normal",
            "ResizeCompleted",
            'Pod resize completed: {"containers":[{"name":"main","resources":'
            '{"limits":{"cpu":"300m"},"requests":{"cpu":"100m"}}}]}',
        )
    ]


def test_a_reverted_resize_is_no_longer_pending() -> None:
    m = manager(None, FakeClock())
    m.add_pod(pod("200m"), lambda p: None)
    m.handle_resize(pod("3000", cpu_request="3000"), [], admits)
    assert m.resize_conditions("u1")[0]["reason"] == "Infeasible"
    assert not m.handle_resize(pod("200m"), [], admits)
    assert m.resize_conditions("u1") == []


def test_a_checkpoint_that_cannot_be_written_admits_the_pod_and_is_written_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full root dir (ENOSPC) failed the checkpoint write, and the OSError ended the agent's sync loop (found by
    tests/integration/test_root_dir_full.py, issue 34). Upstream logs "Failed to save pod allocation checkpoint" and
    goes on with its in-memory state; the next write saves everything."""
    clock = FakeClock()
    m = manager(tmp_path, clock)
    real = tempfile.mkstemp

    def full(*args: Any, **kwargs: Any) -> Any:
        del args, kwargs
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    assert m.add_pod(pod("200m"), lambda p: None) is None
    allocated, changed = m.update_pod_from_allocation(pod("400m"))
    assert changed and allocated["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "200m"}
    assert not (tmp_path / ALLOCATED_PODS_STATE).exists()
    monkeypatch.setattr(tempfile, "mkstemp", real)
    m.remove_pod("other")  # no change: nothing written
    m.add_pod(pod("200m", uid="u2"), lambda p: None)
    blob = json.loads((tmp_path / ALLOCATED_PODS_STATE).read_text())
    assert sorted(json.loads(blob["data"])["entries"]) == ["u1", "u2"]
