"""The memory threshold notifier on the real testbed: a real memory hog crosses a real evictionHard memory.available
threshold and is evicted well before the next 10 s monitoring tick.

The agent starts with memory.available = what the root memory cgroup leaves available now - 320Mi (the agent, the
pod and the young testbed take part of that; when the hog would not fit, the agent restarts with a threshold 176Mi
below what the node has with the agent running), and enforceNodeAllocatable none. A BestEffort busybox pod then
waits for its size, handed in over ExecSync once it runs: what takes the node 48Mi below the threshold (at most
300Mi), which `dd | tail` allocates and holds. A thread reads the root memory cgroup every 2 ms and takes the
crossing time; the hog's container exit (containerd's finished_at) is the kill. The shared pieces are
benchmarks/eviction.py's, which measures the same with and without the notifier.

Asserted: the agent logs the notification (upstream's "hard memory eviction threshold crossed") before it evicts the
hog; the hog ends Failed/Evicted with upstream's message; crossing to kill is under 3 s, where polling alone takes up
to the 10 s period (plus the cycle). The hog never exceeds 300Mi and is deleted at the end, even on failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest_asyncio

from benchmarks.eviction import (
    AGENT_ALLOWANCE_MI,
    MI,
    RUNNING_ALLOWANCE_MI,
    Trial,
    memory_available_now,
    run_trial,
)
from cri.client import CRIClient
from eviction.quantity import format_binary
from nodeagent.evictionmanager import MONITORING_PERIOD_SECONDS
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import Agent, agent_config, clean_up, eventually, node_ready, start_agent, stop_agent

LATENCY_LIMIT_S = 3.0
NOTIFIED = "eviction manager memory notification message=eviction manager: hard memory eviction threshold crossed"


@dataclass
class Notified:
    agent: Agent
    threshold: int
    trial: Trial


@pytest_asyncio.fixture(loop_scope="session")
async def notified(
    testbed: Testbed, settings: Settings, admin: KubeClient, cri_client: CRIClient
) -> AsyncIterator[Notified]:
    """A trial under an agent with the notifier on; the agent is restarted with a new threshold when the node's
    memory moved so that no hog within bounds crosses it (other testbeds share the machine)."""
    log = testbed.layout.logs / "agent-memory-notifier.log"
    agent: Agent | None = None
    try:
        for attempt in range(3):
            available, _ = memory_available_now()
            threshold_mi = available // MI - (AGENT_ALLOWANCE_MI if agent is None else RUNNING_ALLOWANCE_MI)
            if agent is not None:
                stop_agent(agent)
            config = agent_config(
                testbed,
                testbed.layout.root / f"memory-notifier-{attempt}.yaml",
                evictionHard={"memory.available": f"{threshold_mi}Mi"},
                # no allocatableMemory.available threshold: the testbed node's allocatable memory is far below what
                # the machine has, so the same value would be met there from the start
                enforceNodeAllocatable=["none"],
                kernelMemcgNotification=True,
            )
            agent = start_agent(testbed, log, config=config)
            running = agent
            await eventually(
                lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=running
            )
            try:
                trial = await run_trial(
                    admin,
                    cri_client,
                    image=configs.busybox_image(settings),
                    node_name=settings.node_name,
                    threshold=threshold_mi * MI,
                    notifier=True,
                    delay=3.0,  # the young testbed and the agent settle
                )
            except RuntimeError:
                continue
            yield Notified(agent, threshold_mi * MI, trial)
            return
        raise AssertionError(f"no hog within bounds crossed the threshold in 3 tries\n{log.read_text()[-4000:]}")
    finally:
        if agent is not None:
            stop_agent(agent)
        await clean_up(testbed, settings)


async def test_a_crossing_evicts_the_hog_before_the_next_tick(notified: Notified) -> None:
    trial = notified.trial
    log = notified.agent.log.read_text()
    assert (trial.phase, trial.reason) == ("Failed", "Evicted"), (trial, log[-4000:])
    threshold = format_binary(notified.threshold)
    prefix = f"The node was low on resource: memory. Threshold quantity: {threshold}, available: "
    assert trial.message.startswith(prefix), trial.message
    assert ", request is 0, has larger consumption of memory." in trial.message, trial.message
    assert trial.error == "", (trial, log[-4000:])
    assert trial.latency_s is not None
    assert trial.latency_s < LATENCY_LIMIT_S < MONITORING_PERIOD_SECONDS, (trial, log[-4000:])
    assert "eviction manager created memory threshold notifier notifier=hard memory eviction threshold" in log
    notified_at = log.find(NOTIFIED)
    evicting_at = log.find("eviction manager evicting pod pod=default/hog-")
    assert 0 <= notified_at < evicting_at, log[-4000:]
    assert "signal=memory.available" in log[evicting_at:].splitlines()[0]


async def test_the_agent_goes_on_after_the_notified_eviction(notified: Notified) -> None:
    """No failed update of the memory.available notifier, no failed cycle; the agent still runs. (Not "no
    traceback": an agent stopped by a retry above logs asyncio's CancelledError of an open kubelet API
    connection, which is the HTTP server's, not the notifier's.)"""
    log = notified.agent.log.read_text()
    problems = (
        "eviction manager failed to update notifier notifier=hard memory eviction threshold ",
        "eviction manager synchronize failed",
    )
    for problem in problems:
        assert problem not in log, log[-4000:]
    assert notified.agent.proc.poll() is None, log[-4000:]
