"""The node is Ready again soon after containerd returns from a long outage (issue 34).

containerd is SIGKILLed by its PID with pods running and kept down for OUTAGE seconds. gRPC's default reconnect
back-off (1 s growing by 1.6 up to 120 s) made the agent's CRI channel try again only every minute or two by then:
the node reported "container runtime is down" for 104.6 s after containerd was serving again (200 s outage; the
upstream kubelet v1.34.4 on the same testbed: 5.9 s). The channel now backs off as upstream's CRI client does (100 ms
up to 3 s).

How long the old back-off kept the agent away depends on where its jittered schedule stood when containerd came back.
To make the test decide every time, containerd returns right after one of the agent's reconnect attempts: once
OUTAGE has passed, the test listens on containerd's socket itself, accepts the agent's next connection attempt and
closes it (to the agent, a runtime still down), then starts containerd. With the old back-off the next attempt came
no sooner than 34 s later (0.8 x 42.9 s, the eighth back-off step); with upstream's it comes within 3.6 s.

The node status is computed every nodeStatusUpdateFrequency (10 s by default, as upstream); the agent here runs with
2 s, so the bound measures the CRI reconnection rather than where the status tick stood. The pods survive the outage:
the same containers, no restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, processes
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    cstatus,
    eventually,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

OUTAGE = 60.0  # seconds containerd stays down at least
ATTEMPT_WAIT = 75.0  # how long after OUTAGE the agent's next connection attempt may take (old back-off: up to ~55 s)
READY_WITHIN = 10.0  # the bound, from containerd answering again
PODS = 3
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    asyncio.run(clean_up(testbed, settings))
    config = agent_config(testbed, tmp_path_factory.mktemp("outage") / "nodeagent.yaml", nodeStatusUpdateFrequency="2s")
    running = start_agent(testbed, testbed.layout.logs / "agent-runtime-outage.log", config=config)
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def containerd_pid(testbed: Testbed) -> int:
    proc = processes.load(testbed.layout.pids, "containerd")
    assert proc is not None and proc.alive(), "the testbed's containerd is not running"
    return proc.pid


def containerd_alive(testbed: Testbed) -> bool:
    proc = processes.load(testbed.layout.pids, "containerd")
    return proc is not None and proc.alive()


def sigkill_containerd(testbed: Testbed) -> None:
    pid = containerd_pid(testbed)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while containerd_alive(testbed) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not containerd_alive(testbed), f"containerd {pid} survived SIGKILL"
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # the testbed started it from this process: collect it


async def next_connection_attempt(path: Path, timeout: float) -> float:
    """Listen on the runtime's socket (containerd is down) until the agent's CRI channel tries to connect; the attempt
    is accepted and closed at once, so the agent still finds no runtime. Returns how long it took."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # containerd's socket, left behind by the SIGKILL
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        listener.listen(16)
        listener.setblocking(False)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        conn, _ = await asyncio.wait_for(loop.sock_accept(listener), timeout)
        conn.close()
        return time.monotonic() - started
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


async def ready_condition(admin: KubeClient, name: str) -> dict[str, Any]:
    try:
        node = await admin.get(paths.node(name))
    except NotFound:
        return {}
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition["type"] == "Ready":
            found: dict[str, Any] = condition
            return found
    return {}


async def test_the_node_is_ready_soon_after_containerd_returns_from_an_outage(
    testbed: Testbed, settings: Settings, admin: KubeClient, agent: Agent
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    tag = uuid.uuid4().hex[:5]
    names = [f"outage-{tag}-{i}" for i in range(PODS)]
    for name in names:
        body = {
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 2,
                "automountServiceAccountToken": False,
                "containers": [{"name": "main", "image": configs.busybox_image(settings), "command": COMMAND}],
            },
        }
        await admin.create(paths.pods(NS), body)
    before = {name: cstatus(await wait_running(admin, agent, name, "main"), "main")["containerID"] for name in names}

    await asyncio.to_thread(sigkill_containerd, testbed)
    killed = time.monotonic()
    try:

        async def runtime_down() -> str:
            condition = await ready_condition(admin, settings.node_name)
            return str(condition.get("message", "")) if condition.get("status") == "False" else ""

        message = await eventually(runtime_down, timeout=30, what="node NotReady", agent=agent)
        assert "container runtime is down" in message, message
        await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - killed)))
        waited = await next_connection_attempt(testbed.layout.containerd_socket, ATTEMPT_WAIT)
        down_for = time.monotonic() - killed
        await testbed.start_containerd()  # returns once containerd's CRI answers Status with RuntimeReady
    finally:
        if not containerd_alive(testbed):
            await testbed.start_containerd()  # the shared testbed gets its containerd back whatever happened
    answering = time.monotonic()

    async def ready() -> float | None:
        condition = await ready_condition(admin, settings.node_name)
        return time.monotonic() - answering if condition.get("status") == "True" else None

    took = await eventually(ready, timeout=180, what="node Ready after containerd's return", agent=agent)
    print(
        f"containerd down {down_for:.1f}s (agent's reconnect attempt {waited:.1f}s after the outage's minimum), "
        f"node Ready {took:.1f}s after containerd answered"
    )
    assert took <= READY_WITHIN, (
        f"node Ready {took:.1f}s after containerd answered (bound {READY_WITHIN:.0f}s)\n--- agent log ---\n"
        f"{agent.tail()}"
    )
    for name in names:  # the pods lived through it: the same containers, no restart

        async def same(name: str = name) -> bool:
            status = cstatus(await admin.get(paths.pod(NS, name)), "main")
            return bool(status.get("ready")) and "running" in (status.get("state") or {})

        await eventually(same, timeout=60, what=f"{name} running and ready", agent=agent)
        status = cstatus(await admin.get(paths.pod(NS, name)), "main")
        assert status["containerID"] == before[name] and status["restartCount"] == 0, (name, status)
