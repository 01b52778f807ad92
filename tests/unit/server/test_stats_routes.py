"""/stats/summary, the rest of /stats/, /metrics/resource and /metrics/cadvisor through the server on real loopback
sockets; and AgentHost's side of them over a stand-in for the stats provider."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.server.host import AgentHost
from nodeagent.server.http import HTTPServer
from nodeagent.server.server import KubeletServer
from nodeagent.stats.cadvisor import CadvisorContainer
from nodeagent.stats.errors import StatsError
from nodeagent.stats.types import CPUStats, MemoryStats, NodeStats, Summary
from tests.unit.server.test_server import Host, Runtime, get, request

T = datetime.datetime(2026, 11, 25, 10, 0, 0, tzinfo=datetime.UTC)


class StatsHost(Host):
    """The server test's host with the stats side: summaries it was asked for, and a switch to fail."""

    def __init__(self, log_path: Path) -> None:
        super().__init__(log_path)
        self.asked: list[bool] = []
        self.fail = False

    async def summary(self, only_cpu_and_memory: bool) -> Mapping[str, Any]:
        self.asked.append(only_cpu_and_memory)
        if self.fail:
            raise StatsError("failed to list pod stats: runtime down")
        return {"node": {"nodeName": "node-1"}, "pods": []}

    async def resource_metrics(self) -> bytes:
        return b"resource_scrape_error 0\n"

    async def cadvisor_metrics(self) -> bytes:
        return b"container_scrape_error 0\n"


@pytest_asyncio.fixture(loop_scope="session")
async def served(tmp_path: Path) -> AsyncIterator[tuple[int, StatsHost]]:
    host = StatsHost(tmp_path / "0.log")
    kubelet = KubeletServer(host, Runtime("http://127.0.0.1:1/x", tmp_path / "0.log"), node_name="node-1")
    server = HTTPServer(kubelet.handle)
    port = await server.listen("127.0.0.1", 0)
    try:
        yield port, host
    finally:
        await server.close()


def head_of(port: int) -> str:
    return f"HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"


async def test_summary_is_pretty_json_and_reads_only_cpu_and_memory(served: tuple[int, StatsHost]) -> None:
    port, host = served
    status, body = await request(port, get("/stats/summary"))
    assert status == 200
    # go-restful's MarshalIndent with one space, no newline at the end
    assert body == b'{\n "node": {\n  "nodeName": "node-1"\n },\n "pods": []\n}'
    assert json.loads(body)["node"]["nodeName"] == "node-1"
    for query, only in [
        ("?only_cpu_and_memory=true", True),
        ("?only_cpu_and_memory=True", False),  # upstream compares with "true" exactly
        ("?only_cpu_and_memory=true&only_cpu_and_memory=true", False),  # and wants one value
        ("?only_cpu_and_memory=false", False),
        ("/", False),
    ]:
        host.asked.clear()
        assert (await request(port, get("/stats/summary" + query)))[0] == 200
        assert host.asked == [only], query
    post = "POST /stats/summary " + head_of(port) + "Content-Length: 0\r\n\r\n"
    assert (await request(port, post))[0] == 200


async def test_summary_errors_and_the_rest_of_stats(served: tuple[int, StatsHost]) -> None:
    port, host = served
    host.fail = True
    assert await request(port, get("/stats/summary")) == (
        500,
        b"Internal Error: failed to list pod stats: runtime down",
    )
    host.fail = False
    # upstream's /stats/ web service has only /summary: go-restful's 404 for the rest
    assert await request(port, get("/stats/")) == (404, b"404: Page Not Found")
    assert await request(port, get("/stats/container")) == (404, b"404: Page Not Found")
    assert await request(port, get("/stats/default/web/uid/main")) == (404, b"404: Page Not Found")
    status, body = await request(port, get("/stats"))
    assert status == 301 and body == b'<a href="/stats/">Moved Permanently</a>.\n\n'
    delete = "DELETE /stats/summary " + head_of(port) + "\r\n"
    assert await request(port, delete) == (405, b"405: Method Not Allowed")


async def test_metrics_resource_and_cadvisor(served: tuple[int, StatsHost]) -> None:
    port, _ = served
    assert await request(port, get("/metrics/resource")) == (200, b"resource_scrape_error 0\n")
    assert await request(port, get("/metrics/cadvisor")) == (200, b"container_scrape_error 0\n")
    assert (await request(port, get("/metrics/nothing")))[0] == 404


def agent_host(summary: Any = None, rows: Any = None) -> AgentHost:
    return AgentHost(
        pods_fn=list,
        status_of=lambda uid: None,
        static_pods_of=lambda pod: [],
        list_runtime_pods=dict,
        runtime_pod=dict,
        config={},
        registries={},
        stats_summary=summary,
        cadvisor_containers=rows,
    )


async def test_agent_host_over_the_provider() -> None:
    asked: list[bool] = []

    async def summary(only: bool) -> Summary:
        asked.append(only)
        node = NodeStats(node_name="n", start_time=T, cpu=CPUStats(T, 1, 2_000_000_000), memory=MemoryStats(T))
        return Summary(node=node)

    async def rows() -> list[CadvisorContainer]:
        return [CadvisorContainer(id="/", time=T, cpu_usage_ns=1_000_000_000)]

    host = agent_host(summary, rows)
    assert (await host.summary(False))["node"]["cpu"] == {
        "time": "2026-11-25T10:00:00Z",
        "usageNanoCores": 1,
        "usageCoreNanoSeconds": 2_000_000_000,
    }
    resource = {f.name: f for f in text_string_to_metric_families((await host.resource_metrics()).decode())}
    assert asked == [False, True]  # /metrics/resource reads the CPU-and-memory summary, as upstream
    assert resource["node_cpu_usage_seconds"].samples[0].value == 2.0
    assert resource["resource_scrape_error"].samples[0].value == 0
    cadvisor = {f.name: f for f in text_string_to_metric_families((await host.cadvisor_metrics()).decode())}
    assert cadvisor["container_cpu_usage_seconds"].samples[0].labels["id"] == "/"


async def test_agent_host_without_or_with_a_failing_provider() -> None:
    async def failing(only: bool) -> Summary:
        raise StatsError("failed to list pod stats: down")

    async def failing_rows() -> list[CadvisorContainer]:
        raise StatsError("failed to list containers: down")

    for host in (agent_host(), agent_host(failing, failing_rows)):
        with pytest.raises(StatsError):
            await host.summary(False)
        resource = {f.name: f for f in text_string_to_metric_families((await host.resource_metrics()).decode())}
        assert list(resource) == ["resource_scrape_error"]
        assert resource["resource_scrape_error"].samples[0].value == 1
        cadvisor = {f.name: f for f in text_string_to_metric_families((await host.cadvisor_metrics()).decode())}
        assert cadvisor["container_scrape_error"].samples[0].value == 1


async def test_concurrent_summaries_share_one_computation(tmp_path: Path) -> None:
    """Requests that arrive while a summary is being computed get that answer; the next one computes again."""
    release, both_started = asyncio.Event(), asyncio.Event()

    class SlowHost(StatsHost):
        async def summary(self, only_cpu_and_memory: bool) -> Mapping[str, Any]:
            self.asked.append(only_cpu_and_memory)
            if len(self.asked) == 2:
                both_started.set()
            await release.wait()
            return {"node": {"nodeName": f"node-{len(self.asked)}"}, "pods": []}

    host = SlowHost(tmp_path / "0.log")
    kubelet = KubeletServer(host, Runtime("http://127.0.0.1:1/x", tmp_path / "0.log"), node_name="node-1")
    server = HTTPServer(kubelet.handle)
    port = await server.listen("127.0.0.1", 0)
    try:
        waiting = [asyncio.create_task(request(port, get("/stats/summary"))) for _ in range(5)]
        other = asyncio.create_task(request(port, get("/stats/summary?only_cpu_and_memory=true")))
        await asyncio.wait_for(both_started.wait(), 5)
        await asyncio.sleep(0.5)  # the other four plain requests reach the server and wait on the first
        release.set()
        answers = await asyncio.gather(*waiting, other)
        assert sorted(host.asked) == [False, True]
        # the five plain requests got one and the same computation's answer
        assert len({body for _, body in answers[:5]}) == 1
        assert (await request(port, get("/stats/summary")))[0] == 200
        assert len(host.asked) == 3
    finally:
        await server.close()
