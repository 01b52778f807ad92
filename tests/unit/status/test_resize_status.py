"""A container status's resources after an in-place resize: what the runtime reports it applied, never only what
the allocation asks for (upstream convertContainerStatusResources); and the resize conditions in the pod status."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from nodeagent.status.container_status import ContainerInput, RuntimeState, container_status
from nodeagent.status.generate import generate_pod_status

Obj = dict[str, Any]
ALLOCATED = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "300m", "memory": "64Mi"}}


def running(**runtime: Any) -> ContainerInput:
    return ContainerInput(name="main", image="busybox", state=RuntimeState.RUNNING, container_id="c1", **runtime)


@pytest.mark.parametrize(
    ("case", "given", "previous", "expected"),
    [
        ("the runtime lags the allocation: its values show",
         running(cpu_limit_milli=200, cpu_request_milli=100, memory_limit=64 * 1024 * 1024), None,
         {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}),
        ("applied: the allocation's values",
         running(cpu_limit_milli=300, cpu_request_milli=100, memory_limit=64 * 1024 * 1024), None, ALLOCATED),
        ("whole cores and binary memory print as the apiserver does",
         running(cpu_limit_milli=2000, cpu_request_milli=1000, memory_limit=96 * 1024 * 1024), None,
         {"requests": {"cpu": "1", "memory": "32Mi"}, "limits": {"cpu": "2", "memory": "96Mi"}}),
        ("nothing reported: the previous status's values for the same running instance",
         running(), {"name": "main", "state": {"running": {}}, "containerID": "containerd://c1",
                     "resources": {"limits": {"cpu": "250m"}, "requests": {"cpu": "90m"}}},
         {"requests": {"cpu": "90m", "memory": "32Mi"}, "limits": {"cpu": "250m", "memory": "64Mi"}}),
        ("nothing reported, another instance before: the allocation", running(),
         {"name": "main", "state": {"running": {}}, "containerID": "containerd://old",
          "resources": {"limits": {"cpu": "250m"}}}, ALLOCATED),
        ("the memory request as last actuated", running(actuated_memory_request="16Mi"), None,
         {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "300m", "memory": "64Mi"}}),
        ("not running: the allocation",
         ContainerInput(name="main", image="busybox", state=RuntimeState.EXITED, container_id="c1",
                        cpu_limit_milli=200), None, ALLOCATED),
    ],
)  # fmt: skip
def test_status_resources(case: str, given: ContainerInput, previous: Obj | None, expected: Obj) -> None:
    status = container_status(given, previous=previous, resources=ALLOCATED)
    assert status["resources"] == expected, case
    assert status["allocatedResources"] == ALLOCATED["requests"], case


def test_the_same_instance_is_known_by_the_runtimes_type() -> None:
    # The previous status's containerID carries the runtime's name (the fleet's fake runtime here), not containerd.
    previous = {"name": "main", "state": {"running": {}}, "containerID": "fakeRuntime://c1",
                "resources": {"limits": {"cpu": "250m"}}}  # fmt: skip
    status = container_status(running(), previous=previous, resources=ALLOCATED, runtime_type="fakeRuntime")
    assert status["containerID"] == "fakeRuntime://c1"
    assert status["resources"]["limits"]["cpu"] == "250m"


def test_a_cpu_limit_at_the_minimum_keeps_the_allocated_text() -> None:
    status = container_status(running(cpu_limit_milli=10), resources={"limits": {"cpu": "5m"}})
    assert status["resources"] == {"limits": {"cpu": "5m"}}


RESIZING = {
    "type": "PodResizeInProgress",
    "status": "True",
    "lastProbeTime": "2026-01-01T00:00:00Z",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
    "observedGeneration": 2,
}


def _generate(phase_terminal: bool) -> Obj:
    pod = {"metadata": {"uid": "u", "generation": 2}, "spec": {"containers": [{"name": "main", "image": "b"}]}}
    return generate_pod_status(
        pod,
        now=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        containers=[running()],
        sandbox_ready=True,
        pod_is_terminal=phase_terminal,
        resize_conditions=[RESIZING],
    )


def test_resize_conditions_come_before_the_kubelets_generated_ones() -> None:
    types = [c["type"] for c in _generate(False)["conditions"]]
    assert types == [
        "PodResizeInProgress",
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]


def test_a_terminal_pod_has_no_resize_conditions() -> None:
    assert "PodResizeInProgress" not in [c["type"] for c in _generate(True)["conditions"]]
