"""An agent restart under real memory pressure neither forgets the condition nor evicts twice.

The threshold is set above what the node has available now (as in test_eviction.py), so the pressure lasts over the
restart. The first agent evicts the one BestEffort pod; a second agent, started with the same config right after the
first stops, must:
- keep MemoryPressure=True on the Node throughout (the status is never posted False, its lastTransitionTime does not
  move), since the Node's conditions are restored before the first node status post and the first observation;
- not evict the pod again: it is Failed, so it is not active; there is still one Evicted event, counted once, and the
  second agent's log says nobody is left to evict.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, agent_config, clean_up, eventually, start_agent, stop_agent
from tests.integration.evictionkit import (
    EVICTING,
    best_effort,
    node_condition,
    pressure_threshold_mi,
    wait_evicted,
    wait_pressure,
)

Obj = dict[str, Any]


async def _memory_pressure(admin: KubeClient, settings: Settings) -> Obj | None:
    return await node_condition(admin, settings.node_name, "MemoryPressure")


async def _evicted_events(admin: KubeClient, uid: str) -> list[Obj]:
    items = (await admin.list(paths.events(NS), field_selector=f"involvedObject.uid={uid}"))["items"]
    return [e for e in items if e["reason"] == "Evicted"]


async def test_a_restart_under_pressure_keeps_the_condition_and_evicts_once(
    testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> None:
    name = f"once-{uuid.uuid4().hex[:5]}"
    normal = start_agent(testbed, testbed.layout.logs / "agent-restart-before.log")
    first: Agent | None = None
    second: Agent | None = None
    try:
        created = await admin.create(paths.pods(NS), best_effort(name, settings, tolerate=True))
        uid = created["metadata"]["uid"]

        async def running() -> bool:
            pod = await admin.get(paths.pod(NS, name))
            return (pod.get("status") or {}).get("phase") == "Running"

        await eventually(running, timeout=60, what=f"{name} runs before the pressure", agent=normal)
        stop_agent(normal)

        config = agent_config(
            testbed, tmp_path / "pressure.yaml", evictionHard={"memory.available": f"{pressure_threshold_mi()}Mi"}
        )
        first = start_agent(testbed, testbed.layout.logs / "agent-restart-first.log", config=config)
        evicted = await wait_evicted(admin, first, name, timeout=60)
        before = await wait_pressure(admin, settings, first, "MemoryPressure", timeout=30)
        [event] = await eventually(
            lambda: _evicted_events(admin, uid), timeout=30, what="the Evicted event", agent=first
        )
        stop_agent(first)

        second = start_agent(testbed, testbed.layout.logs / "agent-restart-second.log", config=config)
        # Two monitoring periods (10 s each) and a node status post (10 s) after the restart: the condition must
        # never read False, and must keep its transition time.
        seen: list[tuple[str, str]] = []
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            condition = await _memory_pressure(admin, settings)
            assert condition is not None
            seen.append((condition["status"], condition["lastTransitionTime"]))
            await asyncio.sleep(0.5)
        assert second.proc.poll() is None, second.tail()
        assert set(seen) == {("True", before["lastTransitionTime"])}, seen
        # The node status was posted by the second agent in that time (its heartbeat moved on).
        after = await _memory_pressure(admin, settings)
        assert after is not None and after["lastHeartbeatTime"] != before["lastHeartbeatTime"], (before, after)

        # Evicted once: the same single event, counted once, the pod's status as the first agent left it.
        assert [(e["metadata"]["name"], e.get("count", 1)) for e in await _evicted_events(admin, uid)] == [
            (event["metadata"]["name"], 1)
        ]
        pod = await admin.get(paths.pod(NS, name))
        assert (pod["status"]["phase"], pod["status"]["message"]) == ("Failed", evicted["status"]["message"])
        log = second.log.read_text()
        assert "eviction node conditions restored from the node conditions=MemoryPressure" in log, second.tail()
        assert EVICTING not in log, second.tail()
        assert "thresholds have been met, but no pods are active to evict" in log, second.tail()
    finally:
        for agent in (second, first, normal):
            if agent is not None:
                stop_agent(agent)
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
        await clean_up(testbed, settings)
