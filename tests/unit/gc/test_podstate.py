"""What the container GC is told of a pod (upstream's ShouldPodContentBeRemoved / ShouldPodRuntimeBeRemoved), and
the collectors' periods."""

from __future__ import annotations

from typing import Any

import pytest

from eviction.containergc import PodState
from nodeagent.gc import gc_periods, pod_gc_state
from nodeagent.podworkers import WorkState

RUNNING: dict[str, Any] = {"metadata": {"uid": "u"}, "status": {"phase": "Running"}}
DELETED: dict[str, Any] = {"metadata": {"uid": "u", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
EVICTED: dict[str, Any] = {"metadata": {"uid": "u"}, "status": {"phase": "Failed", "reason": "Evicted"}}
DONE: dict[str, Any] = {"metadata": {"uid": "u"}, "status": {"phase": "Succeeded"}}

CASES = [
    pytest.param(None, None, True, PodState.REMOVED, id="unknown to the workers, sources ready: gone"),
    pytest.param(None, None, False, PodState.ACTIVE, id="unknown before the sources are ready: maybe not seen yet"),
    pytest.param(None, RUNNING, True, PodState.ACTIVE, id="in a source, no worker yet: being admitted"),
    pytest.param(WorkState.SYNCING, RUNNING, True, PodState.ACTIVE, id="running"),
    pytest.param(WorkState.TERMINATING, DELETED, True, PodState.ACTIVE, id="deleted, still stopping"),
    pytest.param(WorkState.TERMINATING, EVICTED, True, PodState.REMOVED, id="evicted: content may go at once"),
    pytest.param(WorkState.TERMINATED, DONE, True, PodState.TERMINATED, id="finished, not deleted"),
    pytest.param(WorkState.TERMINATED, DELETED, True, PodState.REMOVED, id="finished and deleted"),
    pytest.param(WorkState.TERMINATED, None, True, PodState.REMOVED, id="finished and gone from its source"),
]


@pytest.mark.parametrize(("state", "pod", "ready", "expected"), CASES)
def test_pod_gc_state(state: WorkState | None, pod: dict[str, Any] | None, ready: bool, expected: PodState) -> None:
    found = pod_gc_state("u", worker_state=lambda uid: state, pod_by_uid=lambda uid: pod, sources_ready=lambda: ready)
    assert found is expected


@pytest.mark.parametrize("state", [WorkState.TERMINATING, WorkState.TERMINATED])
def test_evicted_by_the_kill_whatever_the_phase(state: WorkState) -> None:
    """An evicted pod whose containers all exited 0 ends Succeeded without reason Evicted (upstream's
    SyncTerminatingPod): its content goes all the same, as upstream's ShouldPodContentBeRemoved asks the worker."""
    found = pod_gc_state(
        "u",
        worker_state=lambda uid: state,
        pod_by_uid=lambda uid: DONE,
        sources_ready=lambda: True,
        evicted_by_kill=lambda uid: uid == "u",
    )
    assert found is PodState.REMOVED


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, (300.0, 60.0)),
        ({"NODEAGENT_IMAGE_GC_PERIOD": "5", "NODEAGENT_CONTAINER_GC_PERIOD": "2.5"}, (5.0, 2.5)),
        ({"NODEAGENT_IMAGE_GC_PERIOD": "soon", "NODEAGENT_CONTAINER_GC_PERIOD": "-1"}, (300.0, 60.0)),
    ],
)
def test_gc_periods(environ: dict[str, str], expected: tuple[float, float]) -> None:
    assert gc_periods(environ) == expected
