"""The HTTP layer's answers to hostile clients, over real loopback sockets, with the timeouts made short: Go's bare
431 and 400, bodies discarded up to 256 KiB after the answer, the read and idle timeouts, and a slow client that
holds only its own connection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest_asyncio

from nodeagent.server.http import DISCARD_LIMIT, HTTPServer, Request, Responder


async def hello(request: Request, responder: Responder) -> None:
    await responder.send(200, f"{request.method} {request.path}".encode())


@pytest_asyncio.fixture(loop_scope="session")
async def port() -> AsyncIterator[int]:
    server = HTTPServer(hello, read_timeout=1.0, idle_timeout=0.5)
    bound = await server.listen("127.0.0.1", 0)
    try:
        yield bound
    finally:
        await server.close()


async def exchange(port: int, raw: bytes, *, wait: float = 5) -> bytes:
    """Everything the server sends until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    async with asyncio.timeout(wait):
        data = await reader.read(-1)
    writer.close()
    return data


GO_431 = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\n431 Request Header Fields Too Large"
)
GO_400 = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
)


async def test_oversized_head_is_gos_431(port: int) -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * ((1 << 20) + 5000) + b"\r\n\r\n"
    assert await exchange(port, head) == GO_431


async def test_head_within_the_limit_is_served(port: int) -> None:
    head = b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    assert (await exchange(port, head)).endswith(b"GET /ok")


async def test_malformed_head_is_gos_400(port: int) -> None:
    assert await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n") == GO_400


async def test_a_client_gone_mid_head_gets_nothing(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Half")
    writer.write_eof()
    async with asyncio.timeout(5):
        assert await reader.read(-1) == b""
    writer.close()


async def test_a_small_body_is_discarded_and_the_connection_kept(port: int) -> None:
    body = b"b" * DISCARD_LIMIT
    raw = b"POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    raw += b"GET /two HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    data = await exchange(port, raw)
    assert data.count(b"HTTP/1.1 200") == 2
    assert data.endswith(b"GET /two")


async def test_a_large_body_is_answered_then_the_connection_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
    writer.write(b"b" * (DISCARD_LIMIT + 1))
    writer.write(b"GET /never HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(5):
        data = await reader.read(-1)
    writer.close()
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"POST /big")


async def test_the_answer_does_not_wait_for_a_slow_body(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
    await writer.drain()
    async with asyncio.timeout(0.5):
        head = await reader.readuntil(b"POST /slow")
    assert head.startswith(b"HTTP/1.1 200")
    # the rest of the body never comes: the read timeout (1 s here, 4 h upstream) closes the connection
    started = time.monotonic()
    async with asyncio.timeout(5):
        assert await reader.read(-1) == b""
    assert 0.3 < time.monotonic() - started < 3
    writer.close()


async def test_read_timeout_ends_a_slow_head_and_others_are_served_meanwhile(port: int) -> None:
    slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
    slow_writer.write(b"GET / HTTP/1.1\r\n")
    await slow_writer.drain()
    started = time.monotonic()
    for _ in range(5):
        answer = await exchange(port, b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", wait=0.5)
        assert answer.endswith(b"GET /fast")
    async with asyncio.timeout(5):
        assert await slow_reader.read(-1) == b""  # no answer, as Go on a read timeout
    assert 0.8 < time.monotonic() - started < 3
    slow_writer.close()


async def test_idle_timeout_closes_a_kept_alive_connection(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    await reader.readuntil(b"GET /a")
    started = time.monotonic()
    async with asyncio.timeout(5):
        assert await reader.read(-1) == b""
    assert 0.3 < time.monotonic() - started < 2
    writer.close()
