"""In-place pod resize on a real node (InPlacePodVerticalScaling, beta and on by default in v1.34): a change made
through the pod's `resize` subresource reaches the container's cgroup, the status reports what the runtime applied,
and upstream's conditions and events say how it went.

One agent serves every case. The cgroup values are read on the host, from the container's process (/proc/PID/cgroup,
cgroup v1 cpu and memory hierarchies), never from the status under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.config.quantity import parse_quantity
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, processes
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    cstatus,
    eventually,
    start_agent,
    stop_agent,
    wait_node_ready,
)

Obj = dict[str, Any]
CGROUP_ROOT = Path("/sys/fs/cgroup")
MI = 1024 * 1024


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-pod-resize.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _pod(name: str, image: str, resources: Obj, resize_policy: list[Obj] | None = None) -> Obj:
    container: Obj = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "3600"],
        "resources": resources,
    }
    if resize_policy is not None:
        container["resizePolicy"] = resize_policy
    return {
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False, "containers": [container]},
    }


def _name(prefix: str) -> str:
    return f"resize-{prefix}-{uuid.uuid4().hex[:5]}"


async def _running_pod(admin: KubeClient, agent: Agent, name: str) -> Obj:
    async def check() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        return pod if "running" in (cstatus(pod, "main").get("state") or {}) else None

    found: Obj = await eventually(check, timeout=90, what=f"{name} running", agent=agent)
    return found


async def _resize(admin: KubeClient, name: str, resources: Obj) -> Obj:
    """What `kubectl patch --subresource resize` sends."""
    body = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
    out: Obj = await admin.patch(paths.pod(NS, name), body, subresource="resize")
    return out


def _read_cgroup(pid: int, controller: str, file: str, *, up: int) -> int:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            directory = CGROUP_ROOT / controller / path.lstrip("/")
            for _ in range(up):
                directory = directory.parent
            return int((directory / file).read_text())
    raise AssertionError(f"no {controller} cgroup for pid {pid}")


async def _cgroup_value(
    cri_client: CRIClient, container_id: str, controller: str, file: str, *, pod: bool = False
) -> int:
    """The value in the cgroup the container's process is in (cgroup v1), or in its parent, the pod cgroup."""
    status = await cri_client.runtime.container_status(container_id, verbose=True)
    pid = int(json.loads(status.info["info"])["pid"])
    return await asyncio.to_thread(_read_cgroup, pid, controller, file, up=1 if pod else 0)


def _container_id(pod: Obj) -> str:
    return str(cstatus(pod, "main")["containerID"]).rpartition("://")[2]


def _condition(pod: Obj, kind: str) -> Obj | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


async def _events(admin: KubeClient, name: str, reason: str) -> list[Obj]:
    listed = await admin.list(paths.events(NS), field_selector=f"involvedObject.name={name},reason={reason}")
    items: list[Obj] = listed["items"]
    return items


async def _delete(admin: KubeClient, *names: str) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_a_cpu_limit_raised_through_the_resize_subresource_reaches_the_cgroup(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    name = _name("cpu")
    resources = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}
    await admin.create(paths.pods(NS), _pod(name, configs.busybox_image(settings), resources))
    try:
        pod = await _running_pod(admin, agent, name)
        container_id = _container_id(pod)
        assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us") == 20000
        assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us", pod=True) == 20000

        await _resize(
            admin, name, {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "300m", "memory": "64Mi"}}
        )

        async def completed() -> Obj | None:
            pod: Obj = await admin.get(paths.pod(NS, name))
            status = cstatus(pod, "main")
            done = (status.get("resources") or {}).get("limits", {}).get("cpu") == "300m"
            settled = _condition(pod, "PodResizeInProgress") is None and _condition(pod, "PodResizePending") is None
            return pod if done and settled and await _events(admin, name, "ResizeCompleted") else None

        pod = await eventually(completed, timeout=30, what="resize to 300m completed", agent=agent)
        # The process's own cgroup, not the status: 300m of a 100 ms period; the pod cgroup above it too.
        assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us") == 30000
        assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us", pod=True) == 30000
        status = cstatus(pod, "main")
        assert _container_id(pod) == container_id and status["restartCount"] == 0  # in place, not restarted
        assert status["resources"] == {
            "limits": {"cpu": "300m", "memory": "64Mi"},
            "requests": {"cpu": "100m", "memory": "32Mi"},
        }
        assert status["allocatedResources"] == {"cpu": "100m", "memory": "32Mi"}
        (event,) = await _events(admin, name, "ResizeCompleted")
        assert event["type"] == "Normal"
        assert event["message"] == (
            'Pod resize completed: {"containers":[{"name":"main","resources":'
            '{"limits":{"cpu":"300m","memory":"64Mi"},"requests":{"cpu":"100m","memory":"32Mi"}}}]}'
        )
    finally:
        await _delete(admin, name)


async def test_a_memory_limit_raised_under_restart_container_restarts_it_with_the_new_limit(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    name = _name("mem")
    resources = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}
    policy = [
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]
    await admin.create(paths.pods(NS), _pod(name, configs.busybox_image(settings), resources, policy))
    try:
        pod = await _running_pod(admin, agent, name)
        first_id = _container_id(pod)
        assert await _cgroup_value(cri_client, first_id, "memory", "memory.limit_in_bytes") == 64 * MI

        await _resize(
            admin, name, {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "96Mi"}}
        )

        async def restarted() -> Obj | None:
            pod: Obj = await admin.get(paths.pod(NS, name))
            status = cstatus(pod, "main")
            running = "running" in (status.get("state") or {})
            done = running and status.get("restartCount") == 1 and _condition(pod, "PodResizeInProgress") is None
            return pod if done and (status.get("resources") or {}).get("limits", {}).get("memory") == "96Mi" else None

        pod = await eventually(restarted, timeout=60, what="restarted with 96Mi", agent=agent)
        second_id = _container_id(pod)
        assert second_id != first_id
        assert await _cgroup_value(cri_client, second_id, "memory", "memory.limit_in_bytes") == 96 * MI
        assert await _cgroup_value(cri_client, second_id, "memory", "memory.limit_in_bytes", pod=True) == 96 * MI
        killing = await _events(admin, name, "Killing")
        assert any(e["message"] == "Container main resize requires restart" for e in killing), killing
    finally:
        await _delete(admin, name)


def _verbose_info(status: Any) -> Obj:
    info: Obj = json.loads(status.info["info"])
    return info


def _oom_score_adj(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


async def _resize_actuated(admin: KubeClient, agent: Agent, name: str, resources: Obj) -> Obj:
    """The pod once e2e's WaitForPodResizeActuation would let it go: its status shows `resources`, no resize
    condition is left, and it is Ready."""

    async def actuated() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or ()}
        done = cstatus(pod, "main").get("resources") == resources
        settled = "PodResizeInProgress" not in conditions and "PodResizePending" not in conditions
        return pod if done and settled and conditions.get("Ready") == "True" else None

    found: Obj = await eventually(actuated, timeout=60, what=f"resize of {name} to {resources} actuated", agent=agent)
    return found


async def test_a_guaranteed_pod_raised_and_rolled_back_under_restart_container_restarts_each_time(
    agent: Agent, admin: KubeClient, settings: Settings, testbed: Testbed, cri_client: CRIClient
) -> None:
    """What e2e's `Guaranteed QoS pod, one container - increase CPU (NotRequired) & memory (RestartContainer)` checks,
    both ways, after each of its waits (status resources as asked, no resize condition, Ready): one restart per
    resize (1, then 2), the new cgroup values, and oom_score_adj -997 asked of the runtime for every new container
    of the still Guaranteed pod. The spec itself cannot pass on these machines: it reads -997 in the container, and
    containerd (`restrict_oom_score_adj`) never gives a container less than its own value, 0 where root lacks
    CAP_SYS_RESOURCE; the upstream kubelet fails it alike (docs/conformance.md)."""
    await wait_node_ready(admin, agent, settings.node_name)
    name = _name("gu")
    policy = [
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]

    def guaranteed(cpu: str, memory: str) -> Obj:
        return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}

    await admin.create(paths.pods(NS), _pod(name, configs.busybox_image(settings), guaranteed("100m", "32Mi"), policy))
    containerd = processes.load(testbed.layout.pids, "containerd")
    assert containerd is not None
    floor = await asyncio.to_thread(_oom_score_adj, containerd.pid)
    try:
        pod = await _running_pod(admin, agent, name)
        seen = [_container_id(pod)]
        for restarts, (cpu, memory, mib, shares) in enumerate(
            (("150m", "48Mi", 48, 153), ("100m", "32Mi", 32, 102)), 1
        ):
            await _resize(admin, name, guaranteed(cpu, memory))
            pod = await _resize_actuated(admin, agent, name, guaranteed(cpu, memory))
            status = cstatus(pod, "main")
            assert (status["restartCount"], status["allocatedResources"]) == (restarts, {"cpu": cpu, "memory": memory})
            container_id = _container_id(pod)
            assert container_id not in seen
            seen.append(container_id)
            assert await _cgroup_value(cri_client, container_id, "memory", "memory.limit_in_bytes") == mib * MI
            assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us") == int(cpu[:-1]) * 100
            assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.shares") == shares
            assert (
                await _cgroup_value(cri_client, container_id, "memory", "memory.limit_in_bytes", pod=True) == mib * MI
            )
            info = _verbose_info(await cri_client.runtime.container_status(container_id, verbose=True))
            assert info["config"]["linux"]["resources"]["oom_score_adj"] == -997
            assert await asyncio.to_thread(_oom_score_adj, int(info["pid"])) == max(-997, floor)
        assert len(await _events(admin, name, "ResizeCompleted")) == 2
    finally:
        await _delete(admin, name)


async def _infeasible_pod(admin: KubeClient, agent: Agent, settings: Settings, name: str) -> tuple[Obj, str]:
    """A running pod asked for more cpu than the node has: (the pod once PodResizePending says so, the message)."""
    resources = {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}
    await admin.create(paths.pods(NS), _pod(name, configs.busybox_image(settings), resources))
    await _running_pod(admin, agent, name)
    node = await admin.get(paths.node(settings.node_name))
    capacity = int(node["status"]["allocatable"]["cpu"]) * 1000  # this node's allocatable is whole cores
    await _resize(admin, name, {"requests": {"cpu": "1000"}, "limits": {"cpu": "1000"}})
    message = f"Node didn't have enough capacity: cpu, requested: 1000000, capacity: {capacity}"

    async def pending() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        found = _condition(pod, "PodResizePending")
        return pod if found is not None and found.get("reason") == "Infeasible" else None

    pod = await eventually(pending, timeout=30, what="PodResizePending Infeasible", agent=agent)
    return pod, message


async def test_a_request_beyond_the_node_is_infeasible_and_changes_nothing(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    name = _name("big")
    try:
        pod, message = await _infeasible_pod(admin, agent, settings, name)
        found = _condition(pod, "PodResizePending")
        assert found is not None
        assert (found["status"], found["message"]) == ("True", message)
        assert found.get("observedGeneration") == pod["metadata"]["generation"]
        await asyncio.sleep(2)  # a few syncs later, still nothing done
        pod = await admin.get(paths.pod(NS, name))
        status = cstatus(pod, "main")
        assert status["resources"] == {"limits": {"cpu": "200m"}, "requests": {"cpu": "100m"}}
        assert status["allocatedResources"] == {"cpu": "100m"}
        assert await _cgroup_value(cri_client, _container_id(pod), "cpu", "cpu.cfs_quota_us") == 20000
        assert not await _events(admin, name, "ResizeCompleted")
    finally:
        await _delete(admin, name)


async def test_the_allocation_survives_an_agent_restart(
    agent: Agent, admin: KubeClient, settings: Settings, testbed: Testbed, cri_client: CRIClient
) -> None:
    """The checkpoint, not the spec, says what a pod was given: after a restart the resized pod keeps its container
    and cgroup, and a pod whose spec asks for more than the node has is still admitted (as allocated) and still
    pending, where admitting its spec would refuse it (OutOfcpu)."""
    await wait_node_ready(admin, agent, settings.node_name)
    resized, big = _name("kept"), _name("kept-big")
    resources = {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}
    try:
        await admin.create(paths.pods(NS), _pod(resized, configs.busybox_image(settings), resources))
        pod = await _running_pod(admin, agent, resized)
        container_id = _container_id(pod)
        await _resize(admin, resized, {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}})

        async def resized_done() -> bool:
            return await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us") == 30000

        await eventually(resized_done, timeout=30, what="resized to 300m", agent=agent)
        await _infeasible_pod(admin, agent, settings, big)
        checkpoint = await asyncio.to_thread((testbed.layout.kubelet_root / "allocated_pods_state").read_text)
        allocated = json.loads(json.loads(checkpoint)["data"])
        assert allocated["entries"][pod["metadata"]["uid"]]["ContainerResources"]["main"]["limits"] == {"cpu": "300m"}

        stop_agent(agent)
        agent.proc = start_agent(testbed, agent.log).proc
        await wait_node_ready(admin, agent, settings.node_name)

        async def settled_again() -> Obj | None:
            pod: Obj = await admin.get(paths.pod(NS, big))
            found = _condition(pod, "PodResizePending")
            # A sync by the new agent: it stamps lastProbeTime again; the pod still runs.
            return pod if found is not None and pod["status"]["phase"] == "Running" else None

        await eventually(settled_again, timeout=60, what="pending pod still running after restart", agent=agent)
        await asyncio.sleep(3)  # the restarted agent's first syncs and retries are done
        big_pod = await admin.get(paths.pod(NS, big))
        assert big_pod["status"]["phase"] == "Running", big_pod["status"]
        found = _condition(big_pod, "PodResizePending")
        assert found is not None and found["reason"] == "Infeasible"
        assert cstatus(big_pod, "main")["allocatedResources"] == {"cpu": "100m"}
        pod = await admin.get(paths.pod(NS, resized))
        status = cstatus(pod, "main")
        assert (_container_id(pod), status["restartCount"]) == (container_id, 0)
        assert status["resources"]["limits"] == {"cpu": "300m"}
        assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us") == 30000
        assert len(await _events(admin, resized, "ResizeCompleted")) == 1  # not completed a second time
    finally:
        await _delete(admin, resized, big)


async def _cpu_requested_on_node(admin: KubeClient, node_name: str) -> int:
    """Millicores the node's running pods request (what admission counts besides a new pod)."""
    listed = await admin.list(paths.pods(NS), field_selector=f"spec.nodeName={node_name}")
    total = 0
    for item in listed["items"]:
        if (item.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in item["spec"]["containers"]:
            cpu = ((container.get("resources") or {}).get("requests") or {}).get("cpu")
            if cpu is not None:
                total += math.ceil(parse_quantity(str(cpu)) * 1000)
    return total


async def test_a_resize_without_room_is_deferred_until_a_pod_leaves(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    """Deferred with the admission's words, then allocated and actuated as soon as a pod's removal makes room (the
    retry upstream's HandlePodRemoves makes), not at the 3 min timer."""
    await wait_node_ready(admin, agent, settings.node_name)
    hog, small = _name("hog"), _name("small")
    try:
        await admin.create(
            paths.pods(NS),
            _pod(small, configs.busybox_image(settings), {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}),
        )
        pod = await _running_pod(admin, agent, small)
        container_id = _container_id(pod)
        node = await admin.get(paths.node(settings.node_name))
        capacity = math.ceil(parse_quantity(str(node["status"]["allocatable"]["cpu"])) * 1000)
        free = capacity - await _cpu_requested_on_node(admin, settings.node_name)
        hog_cpu = free - 200  # leaves 200m: the small pod's 500m request no longer fits
        await admin.create(
            paths.pods(NS), _pod(hog, configs.busybox_image(settings), {"requests": {"cpu": f"{hog_cpu}m"}})
        )
        await _running_pod(admin, agent, hog)
        await _resize(admin, small, {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}})

        async def deferred() -> Obj | None:
            found = _condition(await admin.get(paths.pod(NS, small)), "PodResizePending")
            return found if found is not None and found.get("reason") == "Deferred" else None

        found = await eventually(deferred, timeout=30, what="PodResizePending Deferred", agent=agent)
        # The other pods hold all but the 300m the small pod had (100m) plus the 200m left; its own is not counted.
        assert found["message"] == (
            f"Node didn't have enough resource: cpu, requested: 500, used: {capacity - 300}, capacity: {capacity}"
        )
        assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us") == 20000

        await _delete(admin, hog)

        async def allocated() -> bool:
            pod: Obj = await admin.get(paths.pod(NS, small))
            done = cstatus(pod, "main").get("allocatedResources") == {"cpu": "500m"}
            return (
                done
                and _condition(pod, "PodResizePending") is None
                and bool(await _events(admin, small, "ResizeCompleted"))
            )

        await eventually(allocated, timeout=60, what="deferred resize allocated once the hog left", agent=agent)
        assert await _cgroup_value(cri_client, container_id, "cpu", "cpu.cfs_quota_us") == 50000
    finally:
        await _delete(admin, hog, small)
