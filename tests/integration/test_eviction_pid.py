"""PID pressure on the real testbed: evictionHard pid.available is set MARGIN tasks below what the node has
available now (pid_max, or threads-max when smaller, minus the tasks /proc/loadavg counts); a pod then starts
SPAWNED processes, which crosses it for real.

- the Node gets PIDPressure=True with upstream's reason and message, and the controller-manager's
  node.kubernetes.io/pid-pressure:NoSchedule taint;
- of two BestEffort pods of the same priority, the one with the processes is evicted (upstream ranks PID pressure by
  priority, then by process count), with upstream's message; that relieves the pressure and the quiet pod keeps
  running;
- while PIDPressure holds, a new pod is refused at admission with upstream's reason and message.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    one_container_pod,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
TAINT = "node.kubernetes.io/pid-pressure"
# The spawner starts this many processes; the threshold is MARGIN tasks below what is available when the test
# starts, so the spawner alone crosses it even if the rest of the machine moves by a few hundred tasks.
SPAWNED = 1500
MARGIN = 500


def pid_available_now(proc: Path = Path("/proc")) -> int:
    """As the agent observes pid.available: min(pid_max, threads-max) minus the task count in /proc/loadavg."""
    limit = min(int((proc / "sys/kernel/pid_max").read_text()), int((proc / "sys/kernel/threads-max").read_text()))
    return limit - int((proc / "loadavg").read_text().split()[3].split("/")[1])


def pod(name: str, settings: Settings, script: str) -> Obj:
    container: Obj = {"image": configs.busybox_image(settings), "command": ["sh", "-c", script]}
    return one_container_pod(
        name,
        container,
        {},
        nodeName=settings.node_name,
        terminationGracePeriodSeconds=30,
        tolerations=[{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    )


async def _phase(admin: KubeClient, name: str) -> str:
    found: Obj = await admin.get(paths.pod(NS, name))
    return str((found.get("status") or {}).get("phase", ""))


async def _condition(admin: KubeClient, settings: Settings) -> Obj | None:
    node = await admin.get(paths.node(settings.node_name))
    conditions = (node.get("status") or {}).get("conditions") or ()
    found: Obj | None = next((c for c in conditions if c["type"] == "PIDPressure" and c["status"] == "True"), None)
    return found


async def test_pid_pressure_evicts_the_pod_with_most_processes_first(
    testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:5]
    spawner, quiet, late = f"spawner-{suffix}", f"quiet-{suffix}", f"late-{suffix}"
    threshold = pid_available_now() - MARGIN
    config = agent_config(testbed, tmp_path / "pid.yaml", evictionHard={"pid.available": str(threshold)})
    agent: Agent = start_agent(testbed, testbed.layout.logs / "agent-pid.log", config=config)
    try:
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
        # The spawner waits until both pods run (admitted without pressure), then starts its processes.
        script = f"sleep 15; for i in $(seq {SPAWNED}); do sleep 3600 & done; wait"
        await admin.create(paths.pods(NS), pod(spawner, settings, script))
        await admin.create(paths.pods(NS), pod(quiet, settings, "exec sleep 3600"))

        async def both_running() -> bool:
            return all([await _phase(admin, n) == "Running" for n in (spawner, quiet)])

        await eventually(both_running, timeout=15, what="both pods run before the pressure", agent=agent)
        condition = await eventually(
            lambda: _condition(admin, settings), timeout=60, what="PIDPressure=True", agent=agent
        )
        assert (condition["reason"], condition["message"]) == (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        )

        async def evicted() -> Obj | None:
            found: Obj = await admin.get(paths.pod(NS, spawner))
            return found if (found.get("status") or {}).get("reason") == "Evicted" else None

        gone = await eventually(evicted, timeout=60, what=f"{spawner} is evicted", agent=agent)
        message = gone["status"]["message"]
        assert message.startswith(f"The node was low on resource: pids. Threshold quantity: {threshold}, available: ")
        assert gone["status"]["phase"] == "Failed"

        async def tainted() -> bool:
            node = await admin.get(paths.node(settings.node_name))
            return any(t["key"] == TAINT for t in (node.get("spec") or {}).get("taints") or ())

        await eventually(tainted, timeout=60, what=f"the controller-manager's {TAINT} taint", agent=agent)
        # As upstream's admit handler: any condition but MemoryPressure alone refuses a pod that is not critical,
        # and the condition is held for the transition period (5m) after the spawner's processes are gone.
        await admin.create(paths.pods(NS), pod(late, settings, "exec sleep 3600"))

        async def decided() -> str | None:
            phase = await _phase(admin, late)
            return phase if phase != "Pending" else None  # the apiserver writes Pending at creation

        refused = await eventually(decided, timeout=30, what=f"{late} is refused", agent=agent)
        found: Obj = await admin.get(paths.pod(NS, late))
        assert (refused, found["status"].get("reason"), found["status"].get("message")) == (
            "Failed",
            "Evicted",
            "The node had condition: [PIDPressure]. ",
        )
        # Evicting the spawner relieved the pressure: two more monitoring periods evict nobody else.
        await asyncio.sleep(25)
        assert await _phase(admin, quiet) == "Running"
        assert agent.log.read_text().count("eviction manager evicting pod") == 1, agent.tail()
    finally:
        stop_agent(agent)
        for name in (spawner, quiet, late):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
        await clean_up(testbed, settings)
