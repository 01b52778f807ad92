"""The Node's Ready condition from registration on, watched on the real apiserver, as the upstream kubelet reports it.

Upstream's CSI plugin Init sets the storage error "CSINode is not yet initialized" before the kubelet registers, so
the Node is created NotReady with that message and turns Ready once the node's CSINode is made (within its 100 ms
fast status update). Measured on one testbed (load ~7): upstream NotReady at 1.35 s after start, Ready 0.29 s later;
nodeagent 0.26 s later. A restart of either finds its CSINode and posts no NotReady at all.

On the code before the storage state, the first test fails: nodeagent's Node was created Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed.handover import forget_node
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import Agent, clean_up, start_agent, stop_agent

pytestmark = pytest.mark.integration

Ready = tuple[str, str, str]
NOT_INITIALIZED: Ready = ("False", "KubeletNotReady", "CSINode is not yet initialized")
DEADLINE = 60.0


def _ready(node: dict[str, Any]) -> Ready | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return (str(condition["status"]), str(condition.get("reason")), str(condition.get("message")))
    return None


def _csinode(node_name: str) -> str:
    return paths.api_path("csinodes", group="storage.k8s.io", name=node_name)


class ReadyWatch:
    """Every Ready state the Node passes through, from a list's resourceVersion on (a watch misses nothing)."""

    def __init__(self, admin: KubeClient, node_name: str) -> None:
        self.admin = admin
        self.node_name = node_name
        self.seen: list[tuple[str, Ready | None]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        selector = f"metadata.name={self.node_name}"
        listing = await self.admin.list(paths.nodes(), field_selector=selector)
        self.seen.extend(("LISTED", _ready(item)) for item in listing["items"])
        self._task = asyncio.create_task(self._follow(listing["metadata"]["resourceVersion"], selector))

    async def _follow(self, resource_version: str, selector: str) -> None:
        while True:
            async for event in self.admin.watch(
                paths.nodes(), resource_version=resource_version, field_selector=selector
            ):
                resource_version = event.object["metadata"].get("resourceVersion", resource_version)
                if event.type != "BOOKMARK":
                    self.seen.append((event.type, _ready(event.object)))

    async def until_ready(self, agent: Agent) -> None:
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while not any(state is not None and state[0] == "True" for _, state in self.seen):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"node not Ready: seen={self.seen}\n--- agent log ---\n{agent.tail()}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@pytest.fixture(scope="module")
def agents(testbed: Testbed, settings: Settings) -> Iterator[list[Agent]]:
    running: list[Agent] = []
    try:
        yield running
    finally:
        for agent in running:
            stop_agent(agent)
        asyncio.run(clean_up(testbed, settings))


async def _wait_for_log(agent: Agent, text: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while text not in agent.log.read_text(errors="replace"):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{text!r} not logged\n--- agent log ---\n{agent.tail()}")
        await asyncio.sleep(0.1)


async def test_the_node_registers_not_ready_until_its_csinode_is_made(
    testbed: Testbed, settings: Settings, admin: KubeClient, agents: list[Agent], tmp_path: Path
) -> None:
    await forget_node(admin, settings.node_name)
    with contextlib.suppress(NotFound):
        await admin.delete(_csinode(settings.node_name))
    watch = ReadyWatch(admin, settings.node_name)
    await watch.start()
    try:
        agents.append(start_agent(testbed, tmp_path / "first.log"))
        await watch.until_ready(agents[-1])
    finally:
        await watch.stop()
    assert watch.seen[0] == ("ADDED", NOT_INITIALIZED), watch.seen
    ready_at = next(i for i, (_, state) in enumerate(watch.seen) if state is not None and state[0] == "True")
    # Nothing but that one reason before Ready (the runtime and the network were ready from the start).
    assert {state for _, state in watch.seen[:ready_at]} == {NOT_INITIALIZED}, watch.seen
    assert watch.seen[ready_at][1] == ("True", "KubeletReady", "kubelet is posting ready status")
    csinode = await admin.get(_csinode(settings.node_name))
    assert csinode["spec"].get("drivers") in (None, [])


async def test_a_restart_finds_its_csinode_and_posts_no_not_ready(
    testbed: Testbed, settings: Settings, admin: KubeClient, agents: list[Agent], tmp_path: Path
) -> None:
    if not agents:
        agents.append(start_agent(testbed, tmp_path / "first.log"))
    first = ReadyWatch(admin, settings.node_name)
    await first.start()
    try:
        await first.until_ready(agents[-1])
    finally:
        await first.stop()
    stop_agent(agents.pop())
    watch = ReadyWatch(admin, settings.node_name)
    await watch.start()
    try:
        agents.append(start_agent(testbed, tmp_path / "restart.log"))
        # The restarted agent's first status post, and its CSINode found: after both, nothing can change Ready.
        await _wait_for_log(agents[-1], "node status posted")
        await _wait_for_log(agents[-1], "CSINode ready")
        await asyncio.sleep(1)
    finally:
        await watch.stop()
    states = [state for _, state in watch.seen]
    assert states and all(state is not None and state[0] == "True" for state in states), watch.seen
