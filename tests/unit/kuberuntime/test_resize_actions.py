"""In-place resize in compute_pod_actions (upstream computePodResizeAction) and the pod cgroup sizing
(ResourceConfigForPod), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.kuberuntime import actions as acts
from nodeagent.kuberuntime.backoff import Backoff
from nodeagent.kuberuntime.cgroups import PodResourceConfig, pod_resource_config
from nodeagent.kuberuntime.hashing import hash_container

Obj = dict[str, Any]
RUNNING = acts.ContainerState.RUNNING


def container(resources: Obj, policy: dict[str, str] | None = None, name: str = "main") -> Obj:
    out: Obj = {"name": name, "image": "busybox", "resources": resources}
    if policy:
        out["resizePolicy"] = [{"resourceName": k, "restartPolicy": v} for k, v in policy.items()]
    return out


def res(cpu_req: str = "100m", cpu_lim: str = "200m", mem_req: str = "32Mi", mem_lim: str = "64Mi") -> Obj:
    return {"requests": {"cpu": cpu_req, "memory": mem_req}, "limits": {"cpu": cpu_lim, "memory": mem_lim}}


def plan_for(containers: list[Obj], actuated: dict[str, Obj | None], *, source: str = "api") -> acts.PodActions:
    pod = {
        "metadata": {
            "uid": "u1",
            "name": "p",
            "namespace": "ns",
            "annotations": {"kubernetes.io/config.source": source},
        },
        "spec": {"containers": containers},
    }
    status = acts.RuntimePodStatus(
        uid="u1",
        sandboxes=(acts.SandboxStatus("s1", acts.SandboxState.READY, ip="198.18.0.5", host_network=False),),
        containers=tuple(
            acts.ContainerStatus(f"id-{c['name']}", c["name"], RUNNING, hash=hash_container(c), created_at=1)
            for c in containers
        ),
    )
    return acts.compute_pod_actions(pod, status, now=0.0, backoff=Backoff(clock=lambda: 0.0), actuated=actuated.get)


def updates(plan: acts.PodActions) -> dict[str, list[str]]:
    return {r: [u.name for u in queue] for r, queue in plan.containers_to_update.items()}


@pytest.mark.parametrize(
    ("case", "containers", "actuated", "to_update", "to_kill", "to_start"),
    [
        ("nothing changed", [container(res())], {"main": res()}, {}, [], []),
        ("cpu limit up, in place", [container(res(cpu_lim="300m"))], {"main": res()}, {"cpu": ["main"]}, [], []),
        ("memory limit up, in place", [container(res(mem_lim="96Mi"))], {"main": res()}, {"memory": ["main"]}, [], []),
        ("memory under RestartContainer restarts", [container(res(mem_lim="96Mi"), {"memory": "RestartContainer"})],
         {"main": res()}, {}, ["main"], ["main"]),
        ("cpu change under a memory-only restart policy stays in place",
         [container(res(cpu_lim="300m"), {"memory": "RestartContainer"})], {"main": res()}, {"cpu": ["main"]}, [], []),
        ("no record: zero values, updated", [container(res())], {}, {"cpu": ["main"], "memory": ["main"]}, [], []),
        ("a static pod is never resized", [container(res(cpu_lim="300m"))], {"main": res()}, {}, [], []),
    ],
)  # fmt: skip
def test_compute_resize_action(
    case: str,
    containers: list[Obj],
    actuated: dict[str, Obj | None],
    to_update: dict[str, list[str]],
    to_kill: list[str],
    to_start: list[str],
) -> None:
    plan = plan_for(containers, actuated, source="file" if "static" in case else "api")
    assert updates(plan) == to_update, case
    assert [k.name for k in plan.containers_to_kill] == to_kill, case
    assert list(plan.containers_to_start) == to_start, case
    assert plan.update_pod_resources is bool(to_kill), case
    assert not plan.kill_pod
    for kill in plan.containers_to_kill:
        assert kill.message == f"Container {kill.name} resize requires restart"


def test_decreases_are_updated_before_increases() -> None:
    plan = plan_for(
        [container(res(cpu_lim="300m"), name="a"), container(res(cpu_lim="100m"), name="b"),
         container(res(cpu_lim="400m"), name="c")],
        {"a": res(), "b": res(), "c": res()},
    )  # fmt: skip
    assert updates(plan) == {"cpu": ["b", "a", "c"]}
    b = plan.containers_to_update["cpu"][0]
    assert (b.desired.cpu_limit, b.current.cpu_limit) == (100, 200)


def test_a_request_change_is_ordered_by_the_request_when_limits_stay() -> None:
    plan = plan_for([container(res(cpu_req="150m"))], {"main": res()})
    (update,) = plan.containers_to_update["cpu"]
    assert (update.desired.cpu_request, update.current.cpu_request) == (150, 100)


@pytest.mark.parametrize(
    ("case", "spec", "expected"),
    [
        ("guaranteed", {"containers": [container(res("300m", "300m", "64Mi", "64Mi"))]},
         PodResourceConfig(cpu_shares=307, cpu_quota=30000, cpu_period=100000, memory=64 * 1024 * 1024)),
        ("burstable with all limits", {"containers": [container(res())]},
         PodResourceConfig(cpu_shares=102, cpu_quota=20000, cpu_period=100000, memory=64 * 1024 * 1024)),
        ("burstable, one container without limits",
         {"containers": [container(res()), container({"requests": {"cpu": "50m"}}, name="b")]},
         PodResourceConfig(cpu_shares=153)),
        ("best effort", {"containers": [container({})]}, PodResourceConfig(cpu_shares=2)),
        ("overhead counts", {"containers": [container(res())], "overhead": {"cpu": "100m", "memory": "16Mi"}},
         PodResourceConfig(cpu_shares=204, cpu_quota=30000, cpu_period=100000, memory=80 * 1024 * 1024)),
    ],
)  # fmt: skip
def test_pod_resource_config(case: str, spec: Obj, expected: PodResourceConfig) -> None:
    assert pod_resource_config({"metadata": {"uid": "u"}, "spec": spec}) == expected, case


def test_runtime_resources_read_back_as_upstream() -> None:
    applied = acts.RuntimeResources(cpu_shares=102, cpu_quota=30000, cpu_period=100000, memory_limit=1)
    assert (applied.cpu_request_milli, applied.cpu_limit_milli) == (100, 300)
    assert acts.RuntimeResources(cpu_shares=2, cpu_quota=-1, cpu_period=100000).cpu_limit_milli == 0
