"""A real memory hog under a real threshold is evicted before a BestEffort sleeper and a Guaranteed pod.

The agent starts with evictionHard memory.available = what the node has available now - MARGIN_MI. Three pods run
first without pressure: a BestEffort sleeper, a Guaranteed pod (requests = limits) and a BestEffort hog, which then
holds HOG_MI in a never-ending line that busybox's tail keeps in memory: that takes the node HOG_MI - MARGIN_MI
below the threshold, for real. Upstream's memory ranking puts the pods whose usage exceeds their requests first
(the hog and the sleeper; the Guaranteed pod uses less than it requests), then by priority (all 0), then by usage
above requests: the hog. Its eviction frees the memory at once, so the other two keep running.
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
    MEMORY_TAINT,
    MI,
    assert_nobody_else_evicted,
    memory_available_now,
    pod_status,
    pressure_pod,
    running_agent,
    wait_evicted,
)

MARGIN_MI = 600  # the threshold below what is available: more than the rest of the machine moves while this runs
HOG_MI = 1000  # 400Mi past the threshold
# PID 1 is sh: the trap makes it exit on SIGTERM, with 143 as a process the signal ended (exiting 0 would make the
# evicted pod Succeeded, without reason Evicted, as on upstream: its status after the kill comes from how the
# containers ended). The hog waits 15 s (so all three run before the pressure), then holds HOG_MI in tail's line.
HOG = (
    'trap "exit 143" TERM; '
    f"(sleep 15; {{ dd if=/dev/zero bs=1M count={HOG_MI} 2>/dev/null; sleep 3600; }} | tail) & wait"
)


async def test_a_real_memory_hog_goes_before_the_sleeper_and_the_guaranteed_pod(
    testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:5]
    hog, sleeper, guaranteed = f"hog-{suffix}", f"sleeper-{suffix}", f"guaranteed-{suffix}"
    available, _ = memory_available_now()
    threshold_mi = available // MI - MARGIN_MI
    config = agent_config(testbed, tmp_path / "memory.yaml", evictionHard={"memory.available": f"{threshold_mi}Mi"})
    pods = (hog, sleeper, guaranteed)
    async with running_agent(testbed, settings, admin, "agent-eviction-order.log", pods, config=config) as agent:
        limits = {"cpu": "10m", "memory": "64Mi"}
        await admin.create(paths.pods(NS), pressure_pod(sleeper, settings, "exec sleep 3600", taint=MEMORY_TAINT))
        resources = {"requests": limits, "limits": limits}
        guaranteed_pod = pressure_pod(guaranteed, settings, "exec sleep 3600", taint=MEMORY_TAINT, resources=resources)
        await admin.create(paths.pods(NS), guaranteed_pod)
        await admin.create(paths.pods(NS), pressure_pod(hog, settings, HOG, taint=MEMORY_TAINT))

        async def all_running() -> bool:
            return all([(await pod_status(admin, n)).get("phase") == "Running" for n in pods])

        await eventually(all_running, timeout=15, what="the three pods run before the pressure", agent=agent)
        assert (await pod_status(admin, guaranteed)).get("qosClass") == "Guaranteed"
        status = (await wait_evicted(admin, agent, hog, timeout=60))["status"]
        assert status["phase"] == "Failed"
        assert status["message"].startswith(
            f"The node was low on resource: memory. Threshold quantity: {threshold_mi}Mi, available: "
        ), status["message"]
        assert "Container main was using" in status["message"], status["message"]
        # The hog's memory went with it.
        await assert_nobody_else_evicted(admin, agent, (sleeper, guaranteed))
