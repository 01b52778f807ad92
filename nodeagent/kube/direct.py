"""`DirectConnection`: one kept-alive HTTP/1.1 connection for a small, frequent JSON request (the Lease renewal),
written straight on an asyncio stream, not through httpx.

Measured with `benchmarks/lease_renewal.py` against a testbed apiserver (docs/fleet.md): a Lease PUT through httpx
costs about 1.2-1.4 ms of CPU and 8 turns of the event loop. The CPU goes to httpx's request and URL building,
cookies, auth and response models (about 30 %), to httpcore's and anyio's layers (their cancellation checkpoints
each yield to the loop), and to headers and body sent as two TLS records in two system calls. A fleet renews 30
Leases a second on one thread, and every loop turn there gives up the GIL and waits to take it back from the nodes'
busy loop, so turns cost more than CPU. Here a request is one write of headers and body together and one read of
the answer: about 2 turns.

What it keeps of `KubeClient`'s transport: the same TLS context (the client certificate a rotation loads), the
same bearer token, idle connections kept 90 s (`transport.KEEPALIVE_EXPIRY`) and all of them closed on demand
(`close`, at a certificate rotation). A kept connection the server closed while idle is retried once on a new one,
as Go's transport retries a request that nothing was read for. One request at a time; a request cut short
(cancelled, timed out, failed) closes the connection, since its state is then unknown.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from nodeagent.kube.transport import KEEPALIVE_EXPIRY

_HEAD_END = b"\r\n\r\n"


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 as this connection reads it."""


@dataclass(frozen=True)
class DirectResponse:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head[: -len(_HEAD_END)].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    if parts[0] == "HTTP/1.0":
        headers.setdefault("connection", "close")
    return int(parts[1]), headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, if any
                pass
            return bytes(body)
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("chunk not followed by CRLF")


class DirectConnection:
    """Requests to `server` (an http or https URL, as in a kubeconfig) over one connection kept between them."""

    def __init__(
        self,
        server: str,
        tls: ssl.SSLContext | None,
        *,
        server_hostname: str | None = None,
        user_agent: str,
        authorization: Callable[[], str | None] = lambda: None,
        keepalive: float = KEEPALIVE_EXPIRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) server URL: {server!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._tls = tls if url.scheme == "https" else None
        self._server_hostname = server_hostname or self._host
        self._prefix = url.path.rstrip("/")
        self._fixed = (
            f"Host: {url.netloc}\r\nUser-Agent: {user_agent}\r\nAccept: application/json\r\n"
            "Content-Type: application/json\r\n"
        )
        self._authorization = authorization
        self._keepalive = keepalive
        self._clock = clock
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._idle_since = 0.0
        self.connects = 0  # for tests and benchmarks

    async def request(self, method: str, path: str, body: bytes, *, timeout: float) -> DirectResponse:
        """Send one request with a JSON body and read the whole answer. Raises OSError (ssl.SSLError included),
        TimeoutError, asyncio.IncompleteReadError or ProtocolError; the caller maps them."""
        token = self._authorization()
        head = (
            f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._fixed}Content-Length: {len(body)}\r\n"
            + (f"Authorization: Bearer {token}\r\n" if token else "")
            + "\r\n"
        ).encode("latin-1")
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    return await self._exchange(head + body)
            except BaseException:
                self.close()
                raise

    async def _exchange(self, message: bytes) -> DirectResponse:
        if self._writer is not None and self._clock() - self._idle_since > self._keepalive:
            self.close()
        reused = self._writer is not None
        while True:
            if self._reader is None or self._writer is None:
                await self._connect()
            reader, writer = self._reader, self._writer
            assert reader is not None and writer is not None
            try:
                writer.write(message)
                head = await reader.readuntil(_HEAD_END)
                break
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                self.close()
                nothing_read = not isinstance(exc, asyncio.IncompleteReadError) or not exc.partial
                if reused and nothing_read:
                    reused = False  # the server closed the kept connection while it was idle: once on a new one
                    continue
                raise
        status, headers = _parse_head(head)
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        else:
            body = await reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        else:
            self._idle_since = self._clock()
        return DirectResponse(status, headers, body)

    async def _connect(self) -> None:
        if self._tls is not None:
            self._reader, self._writer = await asyncio.open_connection(
                self._host, self._port, ssl=self._tls, server_hostname=self._server_hostname
            )
        else:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        self.connects += 1

    @property
    def connected(self) -> bool:
        return self._writer is not None

    def close(self) -> None:
        """Close the connection, if any, now (a request under way fails, as if the connection had dropped)."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.transport.abort()


__all__ = ["DirectConnection", "DirectResponse", "ProtocolError"]
