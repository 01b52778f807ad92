"""The tcpSocket probe against real sockets on loopback."""

from __future__ import annotations

import asyncio
import socket

from nodeagent.prober.probe import Outcome, ProbeOutcome
from nodeagent.prober.tcpprobe import probe_tcp


async def test_listening_port_succeeds_and_is_closed_with_a_reset() -> None:
    accepted: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            accepted.append(await reader.read())
        except ConnectionResetError:
            accepted.append(b"reset")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await probe_tcp("127.0.0.1", port, 1) == ProbeOutcome(Outcome.SUCCESS)
        for _ in range(100):
            if accepted:
                break
            await asyncio.sleep(0.01)
        # SO_LINGER 0: the probe's close is a reset, so no TIME_WAIT socket stays behind on the node.
        assert accepted == [b"reset"]
    finally:
        server.close()
        await server.wait_closed()


async def test_closed_port_fails_with_gos_message() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        outcome = await probe_tcp("127.0.0.1", port, 1)
    assert outcome == ProbeOutcome(Outcome.FAILURE, f"dial tcp 127.0.0.1:{port}: connect: connection refused")
