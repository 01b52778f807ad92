"""The kubelet API's HTTP/1.1 server: h11 (a well-kept HTTP/1.1 state machine) over asyncio streams, with TLS.

Why not a web framework: the kubelet's streaming endpoints (exec, attach, portForward) must pass an HTTP/1.1 upgrade
to SPDY/3.1 straight through to the runtime's streaming server, and the common async frameworks only let WebSocket
upgrades through (aiohttp treats any other Upgrade as a plain request and parses the SPDY frames as HTTP). h11
switches protocols for any upgrade the handler accepts with a 101, and hands over the bytes it already buffered.

One task per connection; requests on a connection are served one after another (keep-alive). While a handler
streams a response, a watcher reads the socket: end-of-file means the client went away, and the handler is
cancelled, so a dropped `kubectl logs -f` leaks no task, file or runtime stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import urllib.parse
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import h11

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
READ_SIZE = 64 * 1024
HEADER_LIMIT = 1 << 20

Headers = Sequence[tuple[str, str]]


class ClientGone(ConnectionError):
    """The client closed the connection while a response was being written."""


@dataclass
class Request:
    method: str
    target: str
    path: str
    query: Mapping[str, list[str]]
    headers: Headers
    body: bytes = b""
    peer_cert: Mapping[str, Any] | None = None
    remote: str = ""

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers if k == wanted), None)

    def param(self, name: str) -> str | None:
        """The first value of a query parameter, as Go's URL.Query().Get (None when absent)."""
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def wants_upgrade(self) -> bool:
        connection = (self.header("connection") or "").lower()
        return "upgrade" in [t.strip() for t in connection.split(",")] and bool(self.header("upgrade"))


def parse_target(target: str) -> tuple[str, dict[str, list[str]]]:
    """The path (unescaped) and query of a request target. An origin-form target ("/path?query") is a path whatever
    follows its first slash, as Go's ParseRequestURI reads it: urlsplit would take "//host" for an authority and
    raise on "//[]/x". Any other form urlsplit cannot read is left whole as the path, which no route matches."""
    if target.startswith("/"):
        path, _, query = target.split("#", 1)[0].partition("?")
        return urllib.parse.unquote(path), urllib.parse.parse_qs(query, keep_blank_values=True)
    try:
        parts = urllib.parse.urlsplit(target)
    except ValueError:
        return target, {}
    return urllib.parse.unquote(parts.path), urllib.parse.parse_qs(parts.query, keep_blank_values=True)


@dataclass
class Upgraded:
    """The raw connection after a 101: `initial` holds bytes the client sent right behind its request."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    initial: bytes


@dataclass
class Responder:
    """How a handler answers: one whole response, a streamed one (chunked), or an upgrade to another protocol."""

    _conn: h11.Connection
    _writer: asyncio.StreamWriter
    _reader: asyncio.StreamReader
    started: bool = False
    upgraded: Upgraded | None = None
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    async def _send(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        if data:
            if self._writer.is_closing():
                raise ClientGone("client went away")
            self._writer.write(data)
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                raise ClientGone(str(exc)) from exc

    async def send(
        self, status: int, body: bytes = b"", *, content_type: str = "text/plain; charset=utf-8", headers: Headers = ()
    ) -> None:
        all_headers = [("content-type", content_type), ("content-length", str(len(body))), *headers]
        await self._send(h11.Response(status_code=status, headers=all_headers))
        self.started = True
        if body:
            await self._send(h11.Data(data=body))
        await self._send(h11.EndOfMessage())

    async def text(self, status: int, message: str, *, headers: Headers = ()) -> None:
        """A plain-text error the way Go's http.Error writes one (the message and a newline)."""
        body = message if message.endswith("\n") else message + "\n"
        await self.send(status, body.encode(), headers=[("x-content-type-options", "nosniff"), *headers])

    async def start(self, status: int, *, content_type: str, headers: Headers = ()) -> None:
        """A streamed response: chunked, written with `write` and closed with `end`."""
        all_headers = [("content-type", content_type), ("transfer-encoding", "chunked"), *headers]
        await self._send(h11.Response(status_code=status, headers=all_headers))
        self.started = True

    async def write(self, data: bytes) -> None:
        if data:
            await self._send(h11.Data(data=data))

    async def end(self) -> None:
        await self._send(h11.EndOfMessage())

    async def upgrade(self, headers: Headers) -> Upgraded:
        """Answer 101 with `headers` and take the connection over; the server forgets it afterwards."""
        await self._send(h11.InformationalResponse(status_code=101, headers=list(headers)))
        self.started = True
        trailing, _closed = self._conn.trailing_data
        self.upgraded = Upgraded(self._reader, self._writer, bytes(trailing))
        return self.upgraded


Handler = Callable[[Request, Responder], Coroutine[Any, Any, None]]


def _decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw]


class HTTPServer:
    """Serves `handler` on host:port (TLS when `ssl_context` is given) until `close()`."""

    def __init__(self, handler: Handler, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def listen(self, host: str, port: int) -> int:
        """Bind and start accepting; returns the bound port (useful with port 0)."""
        self._server = await asyncio.start_server(
            self._on_connection, host or None, port, ssl=self._ssl, ssl_handshake_timeout=10 if self._ssl else None
        )
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            log.debug("kubelet server connection ended error=%r", exc)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEADER_LIMIT)
        peer_cert = writer.get_extra_info("peercert")
        peer = writer.get_extra_info("peername")
        remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        while True:
            event = await _next_event(conn, reader)
            if isinstance(event, h11.ConnectionClosed) or event is None:
                return
            if not isinstance(event, h11.Request):
                return
            body = bytearray()
            while True:
                part = await _next_event(conn, reader)
                if isinstance(part, h11.Data):
                    body += part.data
                    if len(body) > MAX_BODY:
                        await _plain(conn, writer, 413, "request body too large")
                        return
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            target = event.target.decode("latin-1")
            path, query = parse_target(target)
            request = Request(
                method=event.method.decode("ascii"),
                target=target,
                path=path,
                query=query,
                headers=_decode_headers(event.headers),
                body=bytes(body),
                peer_cert=peer_cert,
                remote=remote,
            )
            responder = Responder(conn, writer, reader)
            await self._run_handler(request, responder)
            if responder.upgraded is not None:
                return  # the handler owned the raw connection and has finished with it
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _run_handler(self, request: Request, responder: Responder) -> None:
        handler = asyncio.create_task(self._handler(request, responder))
        # While the handler runs, a closed socket means the client is gone: cancel the handler. An upgrade's
        # handler reads the socket itself (and sees the end there), so it gets no watcher.
        watcher = asyncio.create_task(asyncio.Event().wait() if request.wants_upgrade else _watch_eof(responder))
        try:
            done, _ = await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if watcher in done and not handler.done():
                responder.gone.set()
                handler.cancel()
            with contextlib.suppress(asyncio.CancelledError, ClientGone):
                await handler
        except Exception:
            log.exception("kubelet server handler failed path=%s", request.path)
            if not responder.started:
                with contextlib.suppress(Exception):
                    await responder.text(500, "Internal Server Error")
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            if not handler.done():
                handler.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await handler


async def _watch_eof(responder: Responder) -> None:
    """Returns when the client closes its side while the handler runs (upgraded connections are the handler's)."""
    while True:
        try:
            data = await responder._reader.read(READ_SIZE)
        except (ConnectionError, OSError, ssl.SSLError):
            return
        if not data:
            return
        # Bytes after a complete request: a pipelined request; kept for h11, served after this one.
        responder._conn.receive_data(data)


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Event | None:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            return None
        if event is h11.NEED_DATA:
            data = await reader.read(READ_SIZE)
            conn.receive_data(data)
            continue
        if event is h11.PAUSED:
            return None
        assert not isinstance(event, type)
        return event


async def _plain(conn: h11.Connection, writer: asyncio.StreamWriter, status: int, message: str) -> None:
    body = (message + "\n").encode()
    with contextlib.suppress(h11.LocalProtocolError):
        writer.write(conn.send(h11.Response(status_code=status, headers=[("content-length", str(len(body)))])) or b"")
        writer.write(conn.send(h11.Data(data=body)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
