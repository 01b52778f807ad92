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

import uuid
from pathlib import Path

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, agent_config, eventually
from tests.integration.evictionkit import (
    PID_TAINT,
    assert_nobody_else_evicted,
    pid_available_now,
    pod_status,
    pressure_pod,
    running_agent,
    wait_evicted,
    wait_pressure,
    wait_tainted,
)

# The spawner starts this many processes; the threshold is MARGIN tasks below what is available when the test
# starts, so the spawner alone crosses it even if the rest of the machine moves by a few hundred tasks.
SPAWNED = 1500
MARGIN = 500


async def _phase(admin: KubeClient, name: str) -> str:
    return str((await pod_status(admin, name)).get("phase", ""))


async def test_pid_pressure_evicts_the_pod_with_most_processes_first(
    testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:5]
    spawner, quiet, late = f"spawner-{suffix}", f"quiet-{suffix}", f"late-{suffix}"
    threshold = pid_available_now() - MARGIN
    config = agent_config(testbed, tmp_path / "pid.yaml", evictionHard={"pid.available": str(threshold)})
    async with running_agent(testbed, settings, admin, "agent-pid.log", (spawner, quiet, late), config=config) as agent:
        # The spawner waits until both pods run (admitted without pressure), then starts its processes.
        script = f"sleep 15; for i in $(seq {SPAWNED}); do sleep 3600 & done; wait"
        await admin.create(paths.pods(NS), pressure_pod(spawner, settings, script, taint=PID_TAINT))
        await admin.create(paths.pods(NS), pressure_pod(quiet, settings, "exec sleep 3600", taint=PID_TAINT))

        async def both_running() -> bool:
            return all([await _phase(admin, n) == "Running" for n in (spawner, quiet)])

        await eventually(both_running, timeout=15, what="both pods run before the pressure", agent=agent)
        condition = await wait_pressure(admin, settings, agent, "PIDPressure")
        assert (condition["reason"], condition["message"]) == (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        )
        gone = await wait_evicted(admin, agent, spawner, timeout=60)
        message = gone["status"]["message"]
        assert message.startswith(f"The node was low on resource: pids. Threshold quantity: {threshold}, available: ")
        assert gone["status"]["phase"] == "Failed"
        await wait_tainted(admin, settings, agent, PID_TAINT)
        # As upstream's admit handler: any condition but MemoryPressure alone refuses a pod that is not critical,
        # and the condition is held for the transition period (5m) after the spawner's processes are gone.
        await admin.create(paths.pods(NS), pressure_pod(late, settings, "exec sleep 3600", taint=PID_TAINT))

        async def decided() -> str | None:
            phase = await _phase(admin, late)
            return phase if phase != "Pending" else None  # the apiserver writes Pending at creation

        refused = await eventually(decided, timeout=30, what=f"{late} is refused", agent=agent)
        found = await pod_status(admin, late)
        assert (refused, found.get("reason"), found.get("message")) == (
            "Failed",
            "Evicted",
            "The node had condition: [PIDPressure]. ",
        )
        # Evicting the spawner relieved the pressure.
        await assert_nobody_else_evicted(admin, agent, (quiet,))
