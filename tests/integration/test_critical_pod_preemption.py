"""Critical pods on a real node (issue 29), as the upstream kubelet v1.34.4 treats them:

- admission: a system-node-critical pod bound to a node whose cpu is taken by a lower-priority pod is not refused
  OutOfcpu; the kubelet preempts that pod (Warning event `Preempting` "Preempted in order to admit critical pod",
  phase Failed, reason Preempting, DisruptionTarget "Pod was preempted by Kubelet to accommodate a critical pod.")
  and runs the critical one. Before this change the critical pod was refused (phase Failed, OutOfcpu);
- the OOM score: its container's CRI config carries upstream's oom_score_adj -997 (a BestEffort pod, so only the
  node-critical rule gives it); containerd runs with restrict_oom_score_adj = true on these machines (the kernel
  refuses to lower it), so the process gets containerd's own value, never below it. Before this change the config
  said 1000 (BestEffort).

The pods are bound with spec.nodeName, so no scheduler preempts anything: what happens is the node's doing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import pytest_asyncio

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.config.quantity import parse_quantity
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    events,
    eventually,
    start_agent,
    stop_agent,
    wait_node_ready,
)

Obj = dict[str, Any]
CRITICAL_CLASS = "system-node-critical"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-critical-pods.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


@pytest_asyncio.fixture(loop_scope="session")
async def ready(agent: Agent, admin: KubeClient, settings: Settings) -> Agent:
    await wait_node_ready(admin, agent, settings.node_name)
    return agent


def sleeper(name: str, settings: Settings, *, cpu: str | None = None, **spec: Any) -> Obj:
    container: Obj = {"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": settings.node_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            **spec,
        },
    }


async def free_cpu_milli(admin: KubeClient, settings: Settings) -> int:
    """Allocatable cpu less what the active pods bound to the node request (as admission counts, roughly)."""
    node = await admin.get(f"/api/v1/nodes/{settings.node_name}")
    allocatable = parse_quantity(str(node["status"]["allocatable"]["cpu"]))
    listed = await admin.list("/api/v1/pods", field_selector=f"spec.nodeName={settings.node_name}")
    used = Decimal(0)
    for pod in listed["items"]:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"].get("containers") or ():
            used += parse_quantity(str(((container.get("resources") or {}).get("requests") or {}).get("cpu", "0")))
    return int((allocatable - used) * 1000)


async def phase(admin: KubeClient, name: str) -> Obj:
    pod: Obj = await admin.get(paths.pod(NS, name))
    return pod


async def test_a_critical_pod_preempts_a_lower_priority_pod_to_run(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    suffix = uuid.uuid4().hex[:5]
    victim_name, critical_name = f"low-{suffix}", f"critical-{suffix}"
    free = await free_cpu_milli(admin, settings)
    assert free > 600, f"the node has {free}m cpu free"
    # The low-priority pod takes all but 100m; the critical pod asks for 500m.
    victim = await admin.create(paths.pods(NS), sleeper(victim_name, settings, cpu=f"{free - 100}m"))

    async def victim_runs() -> bool:
        return bool((await phase(admin, victim_name))["status"].get("phase") == "Running")

    await eventually(victim_runs, timeout=60, what="the low-priority pod runs", agent=ready)
    critical_body = sleeper(critical_name, settings, cpu="500m", priorityClassName=CRITICAL_CLASS)
    critical = await admin.create(paths.pods(NS), critical_body)
    try:
        assert critical["spec"]["priority"] >= 2_000_000_000

        async def critical_runs() -> Obj | None:
            pod = await phase(admin, critical_name)
            assert pod["status"].get("phase") != "Failed", pod["status"]
            return pod if pod["status"].get("phase") == "Running" else None

        await eventually(critical_runs, timeout=90, what="the critical pod runs", agent=ready)

        async def victim_preempted() -> Obj | None:
            pod = await phase(admin, victim_name)
            return pod if pod["status"].get("phase") == "Failed" else None

        preempted = await eventually(victim_preempted, timeout=60, what="the low-priority pod fails", agent=ready)
        status = preempted["status"]
        assert (status["reason"], status["message"]) == ("Preempting", "Preempted in order to admit critical pod")
        [target] = [c for c in status.get("conditions") or () if c["type"] == "DisruptionTarget"]
        assert (target["status"], target["reason"], target["message"]) == (
            "True",
            "TerminationByKubelet",
            "Pod was preempted by Kubelet to accommodate a critical pod.",
        )
        [event] = await events(admin, victim, "Preempting")
        assert (event["type"], event["message"]) == ("Warning", "Preempted in order to admit critical pod")
        assert await events(admin, critical, "OutOfcpu") == []
    finally:
        for name in (critical_name, victim_name):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_a_node_critical_pod_asks_for_upstreams_oom_score_adj(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = f"oom-{uuid.uuid4().hex[:5]}"
    pod = await admin.create(paths.pods(NS), sleeper(name, settings, priorityClassName=CRITICAL_CLASS))
    try:

        async def container_id() -> str:
            listed = await cri_client.runtime.list_containers(
                api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod["metadata"]["uid"]})
            )
            return listed[0].id if listed else ""

        cid: str = await eventually(container_id, timeout=60, what="the container exists", agent=ready)
        status = await cri_client.runtime.container_status(cid, verbose=True)
        info = json.loads(status.info["info"])
        # What the agent asked for (containerd keeps the CRI config it got) ...
        assert info["config"]["linux"]["resources"]["oom_score_adj"] == -997
        # ... and what the process gets: clamped by restrict_oom_score_adj, never below containerd's own.
        applied = info["runtimeSpec"]["process"].get("oomScoreAdj", 0)
        assert applied > -997
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
