"""The loopback forwarder that lets the node e2e suite's `localhost:10255/metrics` reach the node's address."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from nodeagent.conformance import nodeadapter
from nodeagent.conformance.loopbackforward import forward


async def _serve(answer: bytes) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        writer.write(answer + b" " + request.split(b" ")[1])
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


def test_a_connection_reaches_the_target_both_ways() -> None:
    async def scenario() -> None:
        upstream = await _serve(b"metrics from the node for")
        target = upstream.sockets[0].getsockname()[:2]
        async with forward(("127.0.0.1", 0), target) as server:
            port = server.sockets[0].getsockname()[1]
            assert await _get(port, "/metrics") == b"metrics from the node for /metrics"
            assert await _get(port, "/stats/summary") == b"metrics from the node for /stats/summary"
        upstream.close()
        await upstream.wait_closed()

    asyncio.run(scenario())


def test_a_node_that_is_down_closes_the_connection() -> None:
    async def scenario() -> None:
        closed = await _serve(b"")
        target = closed.sockets[0].getsockname()[:2]
        closed.close()
        await closed.wait_closed()  # nothing listens there now: the suite stops the node between config changes
        async with forward(("127.0.0.1", 0), target) as server:
            port = server.sockets[0].getsockname()[1]
            assert await asyncio.wait_for(_get(port, "/metrics"), 5) == b""

    asyncio.run(scenario())


def test_read_only_target_only_when_loopback_does_not_reach_the_node(tmp_path: Path) -> None:
    d = nodeadapter.suite_dir(tmp_path)
    d.config.write_text(yaml.safe_dump({"address": "198.18.30.1", "readOnlyPort": 10255}))
    assert nodeadapter.read_only_target(d) == ("198.18.30.1", 10255)
    d.config.write_text(yaml.safe_dump({"address": "0.0.0.0", "readOnlyPort": 10255}))
    assert nodeadapter.read_only_target(d) is None
    d.config.write_text(yaml.safe_dump({"readOnlyPort": 10255}))  # upstream's default address is 0.0.0.0
    assert nodeadapter.read_only_target(d) is None
