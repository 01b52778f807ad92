"""`DirectConnection`: one kept-alive HTTP/1.1 connection for small, frequent JSON requests (a fleet node's Lease
renewal, its Node GET and status PATCH), written straight on an asyncio stream, not through httpx.

Measured with `benchmarks/lease_renewal.py` against a testbed apiserver (docs/fleet.md): a Lease PUT through httpx
costs about 1.2-1.4 ms of CPU and 8 turns of the event loop. The CPU goes to httpx's request and URL building,
cookies, auth and response models (about 30 %), to httpcore's and anyio's layers (their cancellation checkpoints
each yield to the loop), and to headers and body sent as two TLS records in two system calls. A fleet renews 30
Leases a second on one thread, and every loop turn there gives up the GIL and waits to take it back from the nodes'
busy loop, so turns cost more than CPU. Here a request is one write of headers and body together and one read of
the answer. TLS runs on memory buffers over a plain asyncio protocol (`_Channel`): asyncio's own SSL transport keeps
a 256 KiB read buffer per connection, 316 KiB a connection in all against 59 KiB here (httpx's: 98 KiB).

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
_HEAD_LIMIT = 64 * 1024  # a status line and headers longer than this are not an apiserver's
_READ_SIZE = 64 * 1024


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 as this connection reads it."""


@dataclass(frozen=True)
class DirectResponse:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


class _Socket(asyncio.Protocol):
    """The TCP connection: what arrives is kept until read; the end of the stream wakes the reader too."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._received = bytearray()
        self._eof = False
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._received += data
        self._wake()

    def eof_received(self) -> bool | None:
        self._eof = True
        self._wake()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def receive(self) -> bytes:
        """What has arrived (waiting for something); b"" once the stream has ended."""
        while not self._received and not self._eof:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = bytes(self._received)
        self._received.clear()
        return data


class _Channel:
    """Plain bytes over the socket, through TLS when `tls` is given. TLS runs on memory buffers (`ssl.MemoryBIO`),
    as anyio's stream does, not on asyncio's SSL transport: that one keeps a 256 KiB read buffer per connection
    (asyncio.sslproto, Python 3.11), which a fleet of hundreds of nodes pays once per node."""

    def __init__(
        self, sock: _Socket, transport: asyncio.Transport, tls: ssl.SSLContext | None, server_hostname: str
    ) -> None:
        self._sock = sock
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = (
            tls.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname) if tls is not None else None
        )

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            self.transport.write(data)

    async def _feed(self) -> None:
        raw = await self._sock.receive()
        if raw:
            self._incoming.write(raw)
        else:
            self._incoming.write_eof()

    async def handshake(self) -> None:
        assert self._tls is not None
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                if self._incoming.eof:
                    raise ConnectionResetError("the connection closed during the TLS handshake") from None
                await self._feed()
                continue
            self._flush()
            return

    def send(self, data: bytes) -> None:
        if self._tls is None:
            self.transport.write(data)
            return
        self._tls.write(data)
        self._flush()

    async def receive(self) -> bytes:
        """Some plain bytes; b"" at the end of the stream."""
        if self._tls is None:
            return await self._sock.receive()
        while True:
            try:
                return self._tls.read(_READ_SIZE)
            except ssl.SSLWantReadError:
                self._flush()  # anything TLS itself has to say meanwhile
                if self._incoming.eof:
                    return b""
                await self._feed()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""


class _Reader:
    """HTTP/1.1 framing over a channel: up to a separator, an exact length, or the end."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._buffer = bytearray()

    async def _more(self) -> None:
        data = await self._channel.receive()
        if not data:
            raise asyncio.IncompleteReadError(bytes(self._buffer), None)
        self._buffer += data

    def _take(self, n: int) -> bytes:
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    async def until(self, separator: bytes) -> bytes:
        while (at := self._buffer.find(separator)) < 0:
            if len(self._buffer) > _HEAD_LIMIT:
                raise ProtocolError("no end of line in 64 KiB")
            await self._more()
        return self._take(at + len(separator))

    async def exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            await self._more()
        return self._take(n)

    async def rest(self) -> bytes:
        while data := await self._channel.receive():
            self._buffer += data
        return self._take(len(self._buffer))


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


async def _read_chunked(reader: _Reader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.until(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.until(b"\r\n")) != b"\r\n":  # trailers, if any
                pass
            return bytes(body)
        body += await reader.exactly(size)
        if await reader.exactly(2) != b"\r\n":
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
        self._fixed = f"Host: {url.netloc}\r\nUser-Agent: {user_agent}\r\nAccept: application/json\r\n"
        self._authorization = authorization
        self._keepalive = keepalive
        self._clock = clock
        self._lock = asyncio.Lock()
        self._channel: _Channel | None = None
        self._reader: _Reader | None = None
        self._idle_since = 0.0
        self.connects = 0  # for tests and benchmarks

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        *,
        timeout: float,
        content_type: str = "application/json",
    ) -> DirectResponse:
        """Send one request, with a body of `content_type` or none, and read the whole answer. `path` may carry a
        query, already encoded. Raises OSError (ssl.SSLError included), TimeoutError, asyncio.IncompleteReadError or
        ProtocolError; the caller maps them."""
        token = self._authorization()
        head = (
            f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._fixed}"
            + (f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n" if body is not None else "")
            + (f"Authorization: Bearer {token}\r\n" if token else "")
            + "\r\n"
        ).encode("latin-1")
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    return await self._exchange(head + body if body is not None else head)
            except BaseException:
                self.close()
                raise

    async def _exchange(self, message: bytes) -> DirectResponse:
        if self._channel is not None and self._clock() - self._idle_since > self._keepalive:
            self.close()
        reused = self._channel is not None
        while True:
            if self._channel is None or self._reader is None:
                await self._connect()
            channel, reader = self._channel, self._reader
            assert channel is not None and reader is not None
            try:
                channel.send(message)
                head = await reader.until(_HEAD_END)
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
            body = await reader.exactly(int(headers["content-length"]))
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        else:
            body = await reader.rest()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        else:
            self._idle_since = self._clock()
        return DirectResponse(status, headers, body)

    async def _connect(self) -> None:
        transport, sock = await asyncio.get_running_loop().create_connection(_Socket, self._host, self._port)
        channel = _Channel(sock, transport, self._tls, self._server_hostname)
        try:
            if self._tls is not None:
                await channel.handshake()
        except BaseException:
            transport.abort()
            raise
        self._channel, self._reader = channel, _Reader(channel)
        self.connects += 1

    @property
    def connected(self) -> bool:
        return self._channel is not None

    def close(self) -> None:
        """Close the connection, if any, now (a request under way fails, as if the connection had dropped)."""
        channel, self._channel, self._reader = self._channel, None, None
        if channel is not None:
            channel.transport.abort()


__all__ = ["DirectConnection", "DirectResponse", "ProtocolError"]
