"""The pure resize decisions (nodeagent.allocation.resize), table-driven, with upstream's reasons and messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nodeagent.allocation import resize

Obj = dict[str, Any]
ALLOCATABLE = {"cpu": "2", "memory": "4Gi", "pods": "110"}


def pod(
    cpu_req: str | None = "100m",
    cpu_lim: str | None = "200m",
    mem_req: str | None = None,
    mem_lim: str | None = None,
    *,
    uid: str = "u1",
    source: str = "api",
    init: Sequence[Obj] = (),
) -> Obj:
    requests = {k: v for k, v in (("cpu", cpu_req), ("memory", mem_req)) if v is not None}
    limits = {k: v for k, v in (("cpu", cpu_lim), ("memory", mem_lim)) if v is not None}
    resources: Obj = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {
        "metadata": {
            "uid": uid,
            "name": "p",
            "namespace": "ns",
            "generation": 2,
            "annotations": {"kubernetes.io/config.source": source},
        },
        "spec": {"containers": [{"name": "main", "resources": resources}], "initContainers": list(init)},
    }


def admits(pod: Any, others: Any) -> tuple[str, str] | None:
    del pod, others
    return None


def refuses(pod: Any, others: Any) -> tuple[str, str] | None:
    del pod, others
    return ("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000")


@pytest.mark.parametrize(
    ("case", "wanted", "allocated", "admit", "policy", "expected"),
    [
        ("fits", pod(cpu_lim="300m"), {"main": pod()["spec"]["containers"][0]["resources"]}, admits, "none",
         resize.ResizeDecision(True)),
        ("static pod", pod(cpu_lim="300m", source="file"), {"main": {}}, admits, "none",
         resize.ResizeDecision(False, "Infeasible", "In-place resize of static-pods is not supported")),
        ("beyond node cpu", pod(cpu_req="3", cpu_lim="3"), {"main": {}}, admits, "none",
         resize.ResizeDecision(False, "Infeasible",
                               "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000")),
        ("beyond node memory, named first", pod(cpu_req="3", cpu_lim="3", mem_req="5Gi", mem_lim="5Gi"), {"main": {}},
         admits, "none",
         resize.ResizeDecision(False, "Infeasible", "Node didn't have enough capacity: memory, "
                                                    "requested: 5368709120, capacity: 4294967296")),
        ("no room beside the others", pod(cpu_req="1500m", cpu_lim="2"), {"main": {}}, refuses, "none",
         resize.ResizeDecision(False, "Deferred",
                               "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000")),
        ("guaranteed cpu under static cpu manager",
         pod(cpu_req="1", cpu_lim="1", mem_req="64Mi", mem_lim="64Mi"),
         {"main": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "64Mi"}}},
         admits, "static",
         resize.ResizeDecision(False, "Infeasible",
                               'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"')),
        ("guaranteed memory only under static cpu manager",
         pod(cpu_req="1", cpu_lim="1", mem_req="128Mi", mem_lim="128Mi"),
         {"main": {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}},
         admits, "static", resize.ResizeDecision(True)),
    ],
)  # fmt: skip
def test_decide_resize(
    case: str, wanted: Obj, allocated: Obj, admit: Any, policy: str, expected: resize.ResizeDecision
) -> None:
    got = resize.decide_resize(
        wanted, allocated, other_pods=[], allocatable=ALLOCATABLE, admit=admit, cpu_manager_policy=policy
    )
    assert got == expected, case


def test_the_admit_handlers_see_the_other_pods_without_the_pod_itself() -> None:
    seen: list[list[str]] = []

    def record(pod: Any, others: Sequence[Any]) -> tuple[str, str] | None:
        del pod
        seen.append([o["metadata"]["uid"] for o in others])
        return None

    others = [pod(uid="u1"), pod(uid="u2")]
    resize.decide_resize(pod(cpu_lim="300m"), {}, other_pods=others, allocatable=ALLOCATABLE, admit=record)
    assert seen == [["u2"]]


@pytest.mark.parametrize(
    ("case", "spec_pod", "allocated", "updated", "cpu_limit"),
    [
        ("nothing allocated yet", pod(cpu_lim="300m"), None, False, "300m"),
        ("same values in other words", pod(cpu_lim="0.2"),
         {"main": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}}, False, "0.2"),
        ("a resize asked", pod(cpu_lim="300m"), {"main": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}},
         True, "200m"),
    ],
)  # fmt: skip
def test_update_pod_from_allocation(
    case: str, spec_pod: Obj, allocated: Obj | None, updated: bool, cpu_limit: str
) -> None:
    got, changed = resize.update_pod_from_allocation(spec_pod, allocated)
    assert changed is updated, case
    assert got["spec"]["containers"][0]["resources"]["limits"]["cpu"] == cpu_limit
    assert spec_pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] != "200m" or not updated  # not mutated


def test_allocation_covers_regular_containers_and_sidecars_only() -> None:
    init = [
        {"name": "setup", "resources": {"requests": {"cpu": "1"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
    ]
    assert set(resize.allocation_from_pod(pod(init=init))) == {"main", "proxy"}


@pytest.mark.parametrize(
    ("case", "running", "actuated", "expected"),
    [
        ("actuated as allocated", True, {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}, False),
        ("actuated lags", True, {"requests": {"cpu": "100m"}, "limits": {"cpu": "150m"}}, True),
        ("not running: nothing to actuate", False, {"limits": {"cpu": "150m"}}, False),
        ("no record: zero values differ", True, None, True),
    ],
)
def test_resize_in_progress(case: str, running: bool, actuated: Obj | None, expected: bool) -> None:
    got = resize.resize_in_progress(pod(), lambda name: running, lambda name: actuated)
    assert got is expected, case


def test_completion_message_is_upstreams_json() -> None:
    message = resize.completion_message(pod(cpu_lim="300m", mem_req="32Mi", mem_lim="64Mi"))
    assert message == (
        'Pod resize completed: {"containers":[{"name":"main","resources":'
        '{"limits":{"cpu":"300m","memory":"64Mi"},"requests":{"cpu":"100m","memory":"32Mi"}}}]}'
    )


def test_completion_message_without_resources() -> None:
    assert resize.completion_message(pod(None, None)) == (
        'Pod resize completed: {"containers":[{"name":"main","resources":{}}]}'
    )
