"""The eviction manager on the real testbed, under real memory pressure made by a threshold above what the node has:
evictionHard memory.available is set to what the root memory cgroup leaves available now + 1Gi (below capacity), so
the first observation already meets it.

- the Node gets MemoryPressure=True with upstream's reason and message, and the controller-manager taints it
  node.kubernetes.io/memory-pressure:NoSchedule;
- a BestEffort pod bound to the node is refused at admission: Failed, reason Evicted, "The node had condition:
  [MemoryPressure]. ", and a Warning event;
- a BestEffort pod that tolerates the taint is admitted (as upstream) and then evicted at a monitoring cycle: Failed,
  reason Evicted, upstream's message, the DisruptionTarget condition, an Evicted event, its containers stopped;
- a threshold that cannot be parsed stops start-up with the field and the signal named.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from eviction.quantity import format_binary
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
from tests.integration.agentproc import NS, Agent, agent_config, clean_up, eventually, start_agent, stop_agent
from tests.integration.evictionkit import (
    MEMORY_TAINT,
    MI,
    best_effort,
    node_condition,
    pressure_threshold_mi,
    wait_pressure,
    wait_tainted,
)

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def threshold_mi() -> int:
    return pressure_threshold_mi()


VICTIM = f"victim-{uuid.uuid4().hex[:5]}"


async def _start_victim(testbed: Testbed, settings: Settings) -> None:
    """A BestEffort pod that tolerates the memory-pressure taint, Running under an agent with the default
    thresholds (no pressure), before the agent under pressure starts."""
    normal = start_agent(testbed, testbed.layout.logs / "agent-eviction-before.log")
    try:
        async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
            await admin.create(paths.pods(NS), best_effort(VICTIM, settings, tolerate=True))

            async def running() -> bool:
                pod = await admin.get(paths.pod(NS, VICTIM))
                return (pod.get("status") or {}).get("phase") == "Running"

            await eventually(running, timeout=60, what=f"{VICTIM} runs before the pressure", agent=normal)
    finally:
        stop_agent(normal)


@pytest.fixture(scope="module")
def agent(
    testbed: Testbed, settings: Settings, threshold_mi: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Agent]:
    try:
        asyncio.run(_start_victim(testbed, settings))
    except BaseException:
        asyncio.run(clean_up(testbed, settings))
        raise
    config = agent_config(
        testbed,
        tmp_path_factory.mktemp("eviction") / "pressure.yaml",
        evictionHard={"memory.available": f"{threshold_mi}Mi"},
    )
    running = start_agent(testbed, testbed.layout.logs / "agent-eviction.log", config=config)
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def _failed(admin: KubeClient, agent: Agent, name: str, timeout: float) -> Obj:
    async def failed() -> Obj | None:
        pod = await admin.get(paths.pod(NS, name))
        return pod if (pod.get("status") or {}).get("phase") == "Failed" else None

    found: Obj = await eventually(failed, timeout=timeout, what=f"{name} fails", agent=agent)
    return found


async def _events(admin: KubeClient, uid: str) -> set[tuple[str, str, str]]:
    items = (await admin.list(paths.events(NS), field_selector=f"involvedObject.uid={uid}"))["items"]
    return {(e["type"], e["reason"], e["message"]) for e in items}


async def test_memory_pressure_condition_and_taint(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    condition = await wait_pressure(admin, settings, agent, "MemoryPressure")
    assert (condition["reason"], condition["message"]) == (
        "KubeletHasInsufficientMemory",
        "kubelet has insufficient memory available",
    )
    ready = await node_condition(admin, settings.node_name, "Ready")
    assert ready is not None and ready["status"] == "True"  # pressure is not NotReady
    for kind in ("DiskPressure", "PIDPressure"):
        other = await node_condition(admin, settings.node_name, kind)
        assert other is not None and other["status"] == "False", other
    await wait_tainted(admin, settings, agent, MEMORY_TAINT)
    wanted = {
        ("Warning", "EvictionThresholdMet", "Attempting to reclaim memory"),
        ("Normal", "NodeHasInsufficientMemory", f"Node {settings.node_name} status is now: NodeHasInsufficientMemory"),
    }

    async def node_events() -> set[tuple[str, str, str]]:
        # The event recorder sends asynchronously: the condition can be in the Node before its event is stored.
        selector = f"involvedObject.kind=Node,involvedObject.name={settings.node_name}"
        items = (await admin.list(paths.events(NS), field_selector=selector))["items"]
        seen = {(e["type"], e["reason"], e.get("message", "")) for e in items}
        return seen if wanted <= seen else set()

    await eventually(node_events, timeout=30, what="the node's pressure events", agent=agent)


async def test_a_best_effort_pod_is_refused_under_memory_pressure(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await wait_pressure(admin, settings, agent, "MemoryPressure")
    name = f"refused-{uuid.uuid4().hex[:5]}"
    created = await admin.create(paths.pods(NS), best_effort(name, settings, tolerate=False))
    uid = created["metadata"]["uid"]
    try:
        pod = await _failed(admin, agent, name, timeout=30)
        message = "The node had condition: [MemoryPressure]. "
        assert (pod["status"]["reason"], pod["status"]["message"]) == ("Evicted", message)
        assert ("Warning", "Evicted", message) in await _events(admin, uid)
        selector = api_pb2.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": uid})
        assert list(await cri_client.runtime.list_pod_sandbox(selector)) == []  # nothing reached the runtime
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_a_best_effort_pod_running_before_is_evicted(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient, threshold_mi: int, testbed: Testbed
) -> None:
    await wait_pressure(admin, settings, agent, "MemoryPressure")
    # It ran before the pressure; it tolerates the taint, so the restarted agent admits it again (as upstream) and
    # eviction still ranks it.
    name = VICTIM
    uid = (await admin.get(paths.pod(NS, name)))["metadata"]["uid"]
    assert ("Normal", "Started", "Started container main") in await _events(admin, uid)
    try:
        # Within two monitoring periods (10 s each) and the kill's grace (1 s for a hard threshold).
        pod = await _failed(admin, agent, name, timeout=45)
        status = pod["status"]
        assert status["reason"] == "Evicted"
        prefix = (
            f"The node was low on resource: memory. Threshold quantity: {format_binary(threshold_mi * MI)}, available: "
        )
        assert status["message"].startswith(prefix), status["message"]
        [target] = [c for c in status.get("conditions") or () if c["type"] == "DisruptionTarget"]
        assert (target["status"], target["reason"], target["message"]) == (
            "True",
            "TerminationByKubelet",
            status["message"],
        )
        assert ("Warning", "Evicted", status["message"]) in await _events(admin, uid)
        # Upstream's AnnotatedEventf: the Evicted event names the starved resource and the offending container.
        items = (await admin.list(paths.events(NS), field_selector=f"involvedObject.uid={uid}"))["items"]
        [evicted] = [e for e in items if e["reason"] == "Evicted"]
        annotations = evicted["metadata"].get("annotations") or {}
        assert (annotations.get("starved_resource"), annotations.get("offending_containers")) == ("memory", "main")
        # kubelet_evictions on the agent's /metrics, read through the apiserver's node proxy.
        metrics = await asyncio.to_thread(
            subprocess.run,
            [
                str(kubernetes_bin_dir() / "kubectl"),
                "--kubeconfig",
                str(testbed.layout.admin_kubeconfig),
                "get",
                "--raw",
                f"/api/v1/nodes/{settings.node_name}/proxy/metrics",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert 'kubelet_evictions_total{eviction_signal="memory.available"} 1.0' in metrics.stdout.splitlines()

        async def stopped() -> bool:
            selector = api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": uid})
            containers = await cri_client.runtime.list_containers(selector)
            return all(c.state != api_pb2.CONTAINER_RUNNING for c in containers)

        await eventually(stopped, timeout=30, what="the evicted pod's containers stop", agent=agent)
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


def test_a_bad_threshold_stops_start_up(testbed: Testbed, tmp_path: Path) -> None:
    config = agent_config(testbed, tmp_path / "bad.yaml", evictionHard={"memory.available": "lots"})
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", "run", "--config", str(config), "--standalone"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.startswith("nodeagent: ")
    assert '\nnodeagent: evictionHard: memory.available: invalid quantity "lots"' in done.stderr, done.stderr
