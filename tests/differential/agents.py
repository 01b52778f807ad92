"""The two agents under comparison, started and stopped on one testbed, one at a time.

nodeagent runs as `nodeagent run` (tests/integration/agentproc.py); the upstream kubelet through
nodeagent/testbed/upstreamkubelet.py. After each, everything it left (pods, sandboxes, the Node and its Lease) is
removed, so the next one starts on an empty node.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubelet_path
from tests.integration.agentproc import clean_up, start_agent, stop_agent, wait_node_ready

AGENTS = ("nodeagent", "kubelet")
# The node lifecycle controller's taints on a new node; it lifts them a few seconds after the node is Ready, and a
# pod created before that waits Unschedulable for one agent and not the other.
STARTUP_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
INSTALL_KUBELET = "python3 -m nodeagent testbed install --with-kubelet"


class AgentUnavailable(RuntimeError):
    """An agent that cannot run here (the kubelet not built, or its testbed module missing)."""


@dataclass
class RunningAgent:
    name: str
    log: Path
    stop: Callable[[], Awaitable[None]]


def kubelet_module() -> Any:
    try:
        return importlib.import_module("nodeagent.testbed.upstreamkubelet")
    except ImportError as exc:
        raise AgentUnavailable(f"nodeagent.testbed.upstreamkubelet is missing: {exc}") from exc


def check_kubelet() -> None:
    """Fails, with the install command, where the upstream kubelet cannot run."""
    kubelet_module()
    binary = kubelet_path()
    if not binary.exists():
        raise AgentUnavailable(f"the upstream kubelet is not built ({binary}): run `{INSTALL_KUBELET}`")


async def wait_untainted(testbed: Testbed, timeout: float = 60) -> None:
    """Until the Node carries none of STARTUP_TAINTS (the scenarios then start from the same schedulable node)."""
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            node = await admin.get(paths.node(testbed.settings.node_name))
            taints = {str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or ()}
            if not taints & STARTUP_TAINTS:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"node still tainted after {timeout:.0f}s: {sorted(taints)}")
            await asyncio.sleep(0.2)


async def start(name: str, testbed: Testbed, log_dir: Path, label: str = "") -> RunningAgent:
    running = await _start(name, testbed, log_dir, label)
    try:
        await wait_untainted(testbed)
    except BaseException:
        await running.stop()
        raise
    return running


async def _start(name: str, testbed: Testbed, log_dir: Path, label: str) -> RunningAgent:
    log = log_dir / f"agent-{label or name}.log"
    if name == "nodeagent":
        agent = start_agent(testbed, log)
        try:
            async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
                await wait_node_ready(admin, agent, testbed.settings.node_name, timeout=60)
        except BaseException:
            stop_agent(agent)
            raise
        return RunningAgent(name, log, lambda: asyncio.to_thread(stop_agent, agent))
    if name == "kubelet":
        check_kubelet()
        module = kubelet_module()
        proc = await module.start_kubelet(testbed, log)
        return RunningAgent(name, log, lambda: module.stop_kubelet(proc))
    raise AgentUnavailable(f"unknown agent {name!r} (one of {', '.join(AGENTS)})")


async def stop(agent: RunningAgent, testbed: Testbed) -> None:
    await agent.stop()
    await clean_up(testbed, testbed.settings)
