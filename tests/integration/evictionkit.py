"""What the eviction tests on the real testbed share (test_eviction*.py): thresholds set from what the node has
available now, the pods they run (bound to the node, tolerating the pressure taint), an agent started with a
threshold and torn down with the test's pods, and the waits on the Node's conditions, taints and evicted pods.

Available memory and PIDs are measured the way the agent observes them, so a threshold placed relative to them is
met (or not) for real: memory.available is MemTotal minus the root memory cgroup's working set (eviction.cgroup, as
the agent; this machine is cgroup v1), pid.available is min(pid_max, threads-max) minus the tasks /proc/loadavg counts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from eviction.cgroup import working_set_v1
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
    eventually,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
)

Obj = dict[str, Any]
MI = 1 << 20
GI = 1 << 30
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")
MEMORY_TAINT = "node.kubernetes.io/memory-pressure"
PID_TAINT = "node.kubernetes.io/pid-pressure"
EVICTING = "eviction manager evicting pod"  # the agent's log line for each pod it evicts


def memory_available_now() -> tuple[int, int]:
    """(available, capacity) as the agent observes memory.available: MemTotal minus the root cgroup's working set
    (cgroup v1 usage minus total_inactive_file, as this machine is v1)."""
    capacity = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            capacity = int(line.split()[1]) * 1024
    usage = (MEMORY_CGROUP / "memory.usage_in_bytes").read_text()
    working_set = working_set_v1(usage, (MEMORY_CGROUP / "memory.stat").read_text())
    return capacity - working_set, capacity


def pressure_threshold_mi() -> int:
    """A memory.available threshold (Mi) above what is available now, below capacity: met at the first observation."""
    available, capacity = memory_available_now()
    threshold = min(available + GI, capacity - 64 * MI)
    assert threshold > available + 256 * MI, f"cannot set a threshold above available={available} capacity={capacity}"
    return threshold // MI


def pid_available_now(proc: Path = Path("/proc")) -> int:
    """As the agent observes pid.available: min(pid_max, threads-max) minus the task count in /proc/loadavg."""
    limit = min(int((proc / "sys/kernel/pid_max").read_text()), int((proc / "sys/kernel/threads-max").read_text()))
    return limit - int((proc / "loadavg").read_text().split()[3].split("/")[1])


def best_effort(name: str, settings: Settings, *, tolerate: bool) -> Obj:
    """A BestEffort sleeper bound to the node (the scheduler would not place it on the tainted node); `tolerate`: it
    tolerates the memory-pressure taint."""
    spec: Obj = {
        "nodeName": settings.node_name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}],
    }
    if tolerate:
        spec["tolerations"] = [{"key": MEMORY_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def pressure_pod(name: str, settings: Settings, script: str, *, taint: str, resources: Obj | None = None) -> Obj:
    """A busybox pod running `script`, bound to the node, tolerating `taint`, with 30 s to stop (its trap decides)."""
    container: Obj = {"image": configs.busybox_image(settings), "command": ["sh", "-c", script]}
    if resources is not None:
        container["resources"] = resources
    return one_container_pod(
        name,
        container,
        {},
        nodeName=settings.node_name,
        terminationGracePeriodSeconds=30,
        tolerations=[{"key": taint, "operator": "Exists", "effect": "NoSchedule"}],
    )


@contextlib.asynccontextmanager
async def running_agent(
    testbed: Testbed,
    settings: Settings,
    admin: KubeClient,
    log: str,
    pods: Sequence[str],
    *,
    config: Path | None = None,
) -> AsyncIterator[Agent]:
    """An agent (the testbed's config, or `config`) logging to `log` in the testbed's logs, with the node Ready; on
    the way out, even on failure: the agent stopped, the test's `pods` deleted, the testbed cleaned up."""
    agent = start_agent(testbed, testbed.layout.logs / log, config=config)
    try:
        await wait_node_ready(admin, agent, settings.node_name)
        yield agent
    finally:
        stop_agent(agent)
        for name in pods:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
        await clean_up(testbed, settings)


async def pod_status(admin: KubeClient, name: str) -> Obj:
    found: Obj = (await admin.get(paths.pod(NS, name))).get("status") or {}
    return found


async def wait_evicted(admin: KubeClient, agent: Agent, name: str, *, timeout: float) -> Obj:
    """The pod once its status says reason Evicted."""

    async def evicted() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        return pod if (pod.get("status") or {}).get("reason") == "Evicted" else None

    found: Obj = await eventually(evicted, timeout=timeout, what=f"{name} is evicted", agent=agent)
    return found


async def node_condition(admin: KubeClient, node_name: str, kind: str) -> Obj | None:
    """The Node's condition of type `kind`; None while the Node or the condition is not there."""
    try:
        node = await admin.get(paths.node(node_name))
    except NotFound:
        return None
    found: Obj | None = next((c for c in (node.get("status") or {}).get("conditions") or () if c["type"] == kind), None)
    return found


async def wait_pressure(admin: KubeClient, settings: Settings, agent: Agent, kind: str, *, timeout: float = 60) -> Obj:
    """The Node's `kind` condition (MemoryPressure, PIDPressure) once it is True."""

    async def pressure() -> Obj | None:
        condition = await node_condition(admin, settings.node_name, kind)
        return condition if condition is not None and condition["status"] == "True" else None

    found: Obj = await eventually(pressure, timeout=timeout, what=f"{kind}=True", agent=agent)
    return found


async def wait_tainted(admin: KubeClient, settings: Settings, agent: Agent, taint: str) -> None:
    """The controller-manager's `taint`:NoSchedule on the Node (it follows the pressure condition)."""

    async def tainted() -> bool:
        node = await admin.get(paths.node(settings.node_name))
        return any(
            t["key"] == taint and t["effect"] == "NoSchedule" for t in (node.get("spec") or {}).get("taints") or ()
        )

    await eventually(tainted, timeout=60, what=f"the controller-manager's {taint} taint", agent=agent)


async def assert_nobody_else_evicted(admin: KubeClient, agent: Agent, still_running: Sequence[str]) -> None:
    """One eviction relieved the pressure: two more monitoring periods (10 s each) evict nobody else."""
    await asyncio.sleep(25)
    for name in still_running:
        assert (await pod_status(admin, name)).get("phase") == "Running", name
    assert agent.log.read_text().count(EVICTING) == 1, agent.tail()
