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

from nodeagent.kube.client import KubeClient
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubelet_path
from tests.integration.agentproc import clean_up, start_agent, stop_agent, wait_node_ready

AGENTS = ("nodeagent", "kubelet")
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


async def start(name: str, testbed: Testbed, log_dir: Path, label: str = "") -> RunningAgent:
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
