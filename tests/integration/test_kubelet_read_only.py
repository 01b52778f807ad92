"""The kubelet's read-only port (readOnlyPort): plain HTTP without authentication, health, pods, stats and metrics
only; the debugging handlers answer 405 "Debug endpoints are disabled." as upstream's read-only server does."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.kube.client import KubeClient
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import Agent, agent_config, clean_up, eventually, node_ready, start_agent, stop_agent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def read_only_port() -> int:
    return _free_port()


@pytest.fixture(scope="module")
def agent(
    testbed: Testbed, settings: Settings, read_only_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Agent]:
    config = agent_config(testbed, Path(tmp_path_factory.mktemp("ro")) / "agent.yaml", readOnlyPort=read_only_port)
    running = start_agent(testbed, testbed.layout.logs / "agent-read-only.log", config=config)
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def test_read_only_port(agent: Agent, admin: KubeClient, settings: Settings, read_only_port: int) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    base = f"http://{settings.node_ip}:{read_only_port}"
    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:

        async def up() -> bool:
            try:
                return (await client.get(f"{base}/healthz")).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(up, timeout=30, what="read-only port answers", agent=agent)
        pods = await client.get(f"{base}/pods")
        assert pods.status_code == 200 and pods.json()["kind"] == "PodList"
        summary = await client.get(f"{base}/stats/summary")
        assert summary.status_code == 200 and summary.json()["node"]["nodeName"] == settings.node_name
        metrics = await client.get(f"{base}/metrics")
        names = {family.name for family in text_string_to_metric_families(metrics.text)}
        assert "process_resident_memory_bytes" in names
        assert "python_gc_objects_collected" in names
        assert "kubelet_runtime_operations" in names  # every CRI call, counted under upstream's name
        assert "kubelet_runtime_operations_duration_seconds" in names
        assert "kubelet_pleg_relist_duration_seconds" in names
        assert "rest_client_requests" in names  # the agent's apiserver client
        assert "rest_client_request_duration_seconds" in names
        for path in ("/exec/default/x/c?command=true&output=1", "/containerLogs/default/x/c", "/runningpods/"):
            denied = await client.get(f"{base}{path}")
            assert (denied.status_code, denied.text) == (405, "Debug endpoints are disabled.\n"), path
        assert (await client.get(f"{base}/configz")).status_code == 404
