"""`kubectl logs -f` keeps streaming while the agent rotates the container's log (containerLogMaxSize 64Ki, checked
every 3 s): the numbered lines a chatty container writes arrive in order, across at least one rotation."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

NAME = "follow-rotation"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    config = agent_config(
        testbed,
        Path(tmp_path_factory.mktemp("rot")) / "agent.yaml",
        containerLogMaxSize="64Ki",
        containerLogMaxFiles=3,
        containerLogMonitorInterval="3s",
    )
    running = start_agent(testbed, testbed.layout.logs / "agent-follow-rotation.log", config=config)
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def test_kubectl_logs_follow_across_rotation(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    # About 40 KB/s of numbered lines: a rotation every couple of seconds at 64Ki.
    script = "i=0; while true; do i=$((i+1)); echo line-$i-0123456789abcdefghijklmnopqrstuvwxyz; usleep 1000; done"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": configs.busybox_image(settings), "command": ["sh", "-c", script]}],
        },
    }
    await admin.create(paths.pods(NS), body)

    async def running() -> bool:
        pod = await admin.get(paths.pod(NS, NAME))
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and "running" in (statuses[0].get("state") or {})

    await eventually(running, timeout=90, what="the chatty pod running", agent=agent)
    kubectl = [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(testbed.layout.admin_kubeconfig)]
    follower = await asyncio.create_subprocess_exec(
        *kubectl, "logs", "-f", NAME, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    numbers: list[int] = []
    try:
        assert follower.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while loop.time() < deadline:
            line = await asyncio.wait_for(follower.stdout.readline(), 10)
            assert line, "the stream ended"
            numbers.append(int(line.split(b"-")[1]))
    finally:
        follower.kill()
        await follower.wait()
    pod = await admin.get(paths.pod(NS, NAME))
    log_dir = Path("/var/log/pods") / f"{NS}_{NAME}_{pod['metadata']['uid']}" / "main"
    rotated = [p.name for p in log_dir.iterdir() if p.name != "0.log"]
    assert rotated, "no rotation happened while following"
    # In order and without a gap from the first line followed to the last.
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), (numbers[:5], len(numbers))
    assert len(numbers) > 2000
