"""A real memory hog under a real threshold is evicted before a BestEffort sleeper and a Guaranteed pod.

The agent starts with evictionHard memory.available = what the node has available now - MARGIN_MI. Three pods run
first without pressure: a BestEffort sleeper, a Guaranteed pod (requests = limits) and a BestEffort hog, which then
holds HOG_MI in a never-ending line that busybox's tail keeps in memory: that takes the node HOG_MI - MARGIN_MI
below the threshold, for real. Upstream's memory ranking puts the pods whose usage exceeds their requests first
(the hog and the sleeper; the Guaranteed pod uses less than it requests), then by priority (all 0), then by usage
above requests: the hog. Its eviction frees the memory at once, so the other two keep running.
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
from tests.integration.test_eviction import MI, TAINT, memory_available_now

Obj = dict[str, Any]
MARGIN_MI = 600  # the threshold below what is available: more than the rest of the machine moves while this runs
HOG_MI = 1000  # 400Mi past the threshold
# PID 1 is sh: the trap makes it exit on SIGTERM. The hog waits 15 s (so all three run before the pressure), then
# holds HOG_MI in tail's line.
HOG = (
    f'trap "exit 0" TERM; (sleep 15; {{ dd if=/dev/zero bs=1M count={HOG_MI} 2>/dev/null; sleep 3600; }} | tail) & wait'
)


def pod(name: str, settings: Settings, script: str, resources: Obj | None = None) -> Obj:
    container: Obj = {"image": configs.busybox_image(settings), "command": ["sh", "-c", script]}
    if resources is not None:
        container["resources"] = resources
    return one_container_pod(
        name,
        container,
        {},
        nodeName=settings.node_name,
        terminationGracePeriodSeconds=30,
        tolerations=[{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    )


async def _status(admin: KubeClient, name: str) -> Obj:
    found: Obj = (await admin.get(paths.pod(NS, name))).get("status") or {}
    return found


async def test_a_real_memory_hog_goes_before_the_sleeper_and_the_guaranteed_pod(
    testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:5]
    hog, sleeper, guaranteed = f"hog-{suffix}", f"sleeper-{suffix}", f"guaranteed-{suffix}"
    available, _ = memory_available_now()
    threshold_mi = available // MI - MARGIN_MI
    config = agent_config(testbed, tmp_path / "memory.yaml", evictionHard={"memory.available": f"{threshold_mi}Mi"})
    agent: Agent = start_agent(testbed, testbed.layout.logs / "agent-eviction-order.log", config=config)
    try:
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
        limits = {"cpu": "10m", "memory": "64Mi"}
        await admin.create(paths.pods(NS), pod(sleeper, settings, "exec sleep 3600"))
        await admin.create(
            paths.pods(NS), pod(guaranteed, settings, "exec sleep 3600", {"requests": limits, "limits": limits})
        )
        await admin.create(paths.pods(NS), pod(hog, settings, HOG))

        async def all_running() -> bool:
            return all([(await _status(admin, n)).get("phase") == "Running" for n in (hog, sleeper, guaranteed)])

        await eventually(all_running, timeout=15, what="the three pods run before the pressure", agent=agent)
        assert (await _status(admin, guaranteed)).get("qosClass") == "Guaranteed"

        async def hog_evicted() -> Obj | None:
            status = await _status(admin, hog)
            return status if status.get("reason") == "Evicted" else None

        status = await eventually(hog_evicted, timeout=60, what=f"{hog} is evicted", agent=agent)
        assert status["phase"] == "Failed"
        assert status["message"].startswith(
            f"The node was low on resource: memory. Threshold quantity: {threshold_mi}Mi, available: "
        ), status["message"]
        assert "Container main was using" in status["message"], status["message"]
        # The hog's memory went with it: two more monitoring periods evict nobody else.
        await asyncio.sleep(25)
        for name in (sleeper, guaranteed):
            assert (await _status(admin, name)).get("phase") == "Running", name
        assert agent.log.read_text().count("eviction manager evicting pod") == 1, agent.tail()
    finally:
        stop_agent(agent)
        for name in (hog, sleeper, guaranteed):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
        await clean_up(testbed, settings)
