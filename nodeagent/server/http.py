"""The kubelet API's HTTP/1.1 server: h11 (a well-kept HTTP/1.1 state machine) over asyncio streams, with TLS.

Why not a web framework: the kubelet's streaming endpoints (exec, attach, portForward) must pass an HTTP/1.1 upgrade
to SPDY/3.1 straight through to the runtime's streaming server, and the common async frameworks only let WebSocket
upgrades through (aiohttp treats any other Upgrade as a plain request and parses the SPDY frames as HTTP). h11
switches protocols for any upgrade the handler accepts with a 101, and hands over the bytes it already buffered.

One task per connection; requests on a connection are served one after another (keep-alive). While a handler
streams a response, a watcher reads the socket: end-of-file means the client went away, and the handler is
cancelled, so a dropped `kubectl logs -f` leaks no task, file or runtime stream.

Hostile clients are treated as upstream's `http.Server` (pkg/kubelet/server/server.go) treats them:
- a request head over MaxHeaderBytes (1 MiB, plus Go's 4 KiB of slack) gets Go's bare 431, a malformed one Go's
  bare 400, and the connection is closed;
- no handler reads a request body: the handler runs as soon as the head is in, and the body is discarded after it,
  at most 256 KiB of it (Go's maxPostHandlerReadBytes); a longer body closes the connection after the answer, so
  an oversized or endless body costs neither memory nor a 413 that upstream never sends;
- reading a request (head and body) has upstream's ReadTimeout, 4 h, and a kept-alive connection waits at most
  IdleTimeout, 90 s, for its next request. A slow client holds only its own connection task: others are served
  meanwhile, as Go serves each connection on its own goroutine.
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

READ_SIZE = 64 * 1024
# Go's http.Server reads at most MaxHeaderBytes (upstream: 1 << 20) plus 4096 bytes of slack for a request head.
HEADER_LIMIT = (1 << 20) + 4096
# Go's maxPostHandlerReadBytes: how much of an unread body the server discards to keep the connection alive.
DISCARD_LIMIT = 256 << 10
# Bytes a client may send ahead (pipelined) while a handler runs, before the watcher stops reading them.
PIPELINE_LIMIT = 64 << 10
READ_TIMEOUT = 4 * 60 * 60.0  # upstream's ReadTimeout: 4 * 60 * time.Minute
IDLE_TIMEOUT = 90.0  # upstream's IdleTimeout
# Go's rstAvoidanceDelay: before closing a connection whose client may still be sending, the server waits this
# long (here: reading and dropping) so that the unread bytes do not turn the close into a reset that loses the answer.
LINGER = 0.5
LINGER_MAX = 5.0

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
    # The address the connection came in on (no port): the emulated node it is for, on a fleet's shared port.
    local: str = ""

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

    def __init__(
        self,
        handler: Handler,
        *,
        ssl_context: ssl.SSLContext | None = None,
        read_timeout: float = READ_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self._read_timeout = read_timeout
        self._idle_timeout = idle_timeout
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._closing = False

    async def listen(self, host: str | Sequence[str], port: int) -> int:
        """Bind and start accepting, on one address or on each of several (one port); returns the bound port
        (useful with port 0)."""
        self._server = await asyncio.start_server(
            self._on_connection, host or None, port, ssl=self._ssl, ssl_handshake_timeout=10 if self._ssl else None
        )
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def close(self) -> None:
        """Stop listening and end every connection at once, as Go's Server.Close: a TLS connection is not shut down
        gracefully, which would wait for the client's close_notify (asyncio's SSL shutdown, up to 30 s); an
        apiserver keeps idle connections open and a fleet stopping would wait on each."""
        self._closing = True
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
        except asyncio.CancelledError:
            # close() ends the connection; the task is the root of its own tree, so it ends quietly (asyncio's
            # stream callback would log a cancelled connection task as an error)
            pass
        except TimeoutError:
            log.debug("kubelet server connection timed out")
        except (ConnectionError, OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            log.debug("kubelet server connection ended error=%r", exc)
        finally:
            self._connections.discard(task)
            if self._closing:
                writer.transport.abort()
            else:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEADER_LIMIT)
        peer_cert = writer.get_extra_info("peercert")
        peer = writer.get_extra_info("peername")
        remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        sockname = writer.get_extra_info("sockname")
        local = str(sockname[0]) if isinstance(sockname, tuple) else ""
        loop = asyncio.get_running_loop()
        first = True
        while True:
            if not first and not conn.trailing_data[0]:
                # As Go: a kept-alive connection waits IdleTimeout for the first byte of its next request.
                async with asyncio.timeout(self._idle_timeout):
                    data = await reader.read(READ_SIZE)
                if not data:
                    return
                conn.receive_data(data)
            first = False
            deadline = loop.time() + self._read_timeout
            try:
                async with asyncio.timeout_at(deadline):
                    event = await _next_head(conn, reader)
            except h11.RemoteProtocolError as exc:
                if not reader.at_eof():  # as Go: a client gone mid-head gets no answer
                    await _go_error(writer, exc.error_status_hint)
                    await _linger(reader)
                return
            if not isinstance(event, h11.Request):
                return  # closed between requests (or a protocol switch h11 paused on)
            target = event.target.decode("latin-1")
            path, query = parse_target(target)
            request = Request(
                method=event.method.decode("ascii"),
                target=target,
                path=path,
                query=query,
                headers=_decode_headers(event.headers),
                peer_cert=peer_cert,
                remote=remote,
                local=local,
            )
            responder = Responder(conn, writer, reader)
            body = _BodyState()
            await self._run_handler(request, responder, body, deadline)
            if responder.upgraded is not None:
                return  # the handler owned the raw connection and has finished with it
            if body.overflowed:
                # As Go: more body than it discards; the answer is out, the connection closes
                await _linger(reader)
                return
            if conn.their_state is h11.SEND_BODY:
                try:
                    async with asyncio.timeout_at(deadline):
                        complete = await _discard_body(conn, reader, body)
                except h11.RemoteProtocolError:
                    return
                if not complete:
                    return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _run_handler(self, request: Request, responder: Responder, body: _BodyState, deadline: float) -> None:
        handler = asyncio.create_task(self._handler(request, responder))
        # While the handler runs, a closed socket means the client is gone: cancel the handler. An upgrade's
        # handler reads the socket itself (and sees the end there), so it gets no watcher.
        watcher = asyncio.create_task(
            asyncio.Event().wait() if request.wants_upgrade else _watch_eof(responder, body, deadline)
        )
        try:
            done, _ = await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if watcher in done and not handler.done():
                responder.gone.set()
                handler.cancel()
            try:
                await handler
            except (asyncio.CancelledError, ClientGone):
                _raise_if_cancelled()
        except Exception:
            log.exception("kubelet server handler failed path=%s", request.path)
            if not responder.started:
                with contextlib.suppress(Exception):
                    await responder.text(500, "Internal Server Error")
        finally:
            watcher.cancel()
            if not handler.done():
                handler.cancel()
            # asyncio.wait raises neither task's end, only this task's own cancellation (close() ending the
            # connection), which must go on: swallowing it left close() waiting on the connection's next idle read.
            await asyncio.wait({watcher, handler})
            for task in (watcher, handler):
                if not task.cancelled():
                    task.exception()  # retrieved: an end already handled above, or a watcher's, not worth a log


def _raise_if_cancelled() -> None:
    """Awaiting a sub-task that was cancelled raises CancelledError too; only that one may be swallowed. When the
    current task itself is being cancelled, its cancellation goes on."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


@dataclass
class _BodyState:
    """How much of the request's body has been discarded, and whether it went over Go's discard limit."""

    discarded: int = 0
    overflowed: bool = False


async def _discard_body(conn: h11.Connection, reader: asyncio.StreamReader, body: _BodyState) -> bool:
    """Reads and drops the request body; True when it ended, False when the client closed or it passed
    DISCARD_LIMIT (then `body.overflowed`)."""
    while conn.their_state is h11.SEND_BODY:
        event = await _next_event(conn, reader)
        if isinstance(event, h11.Data):
            body.discarded += len(event.data)
            if body.discarded > DISCARD_LIMIT:
                body.overflowed = True
                return False
        elif not isinstance(event, h11.EndOfMessage):
            return False
    return True


async def _watch_eof(responder: Responder, body: _BodyState, deadline: float) -> None:
    """Returns when the client closes its side while the handler runs (upgraded connections are the handler's).
    The request's body is discarded first, within the read deadline."""
    conn, reader = responder._conn, responder._reader
    try:
        async with asyncio.timeout_at(deadline):
            complete = await _discard_body(conn, reader, body)
    except (h11.RemoteProtocolError, TimeoutError):
        return
    except (ConnectionError, OSError, ssl.SSLError):
        return
    if not complete and not body.overflowed:
        return  # the client closed in the middle of its body
    buffered = 0
    while True:
        try:
            data = await reader.read(READ_SIZE)
        except (ConnectionError, OSError, ssl.SSLError):
            return
        if not data:
            return
        if body.overflowed:
            continue  # the connection closes after this answer: what follows the body is dropped
        # Bytes after a complete request: a pipelined request; kept for h11, served after this one. Past a bound,
        # stop reading and let TCP push back (Go's background read takes one byte).
        buffered += len(data)
        responder._conn.receive_data(data)
        if buffered >= PIPELINE_LIMIT:
            await asyncio.Event().wait()


async def _next_head(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Event | None:
    """The next request head. Bytes are fed to h11 no further than HEADER_LIMIT, so that a head longer than that is
    refused exactly as Go refuses it (h11 checks its limit only while an event is incomplete)."""
    fed = len(conn.trailing_data[0])
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            room = HEADER_LIMIT - fed
            if room <= 0:
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            data = await reader.read(min(READ_SIZE, room))
            fed += len(data)
            conn.receive_data(data)
            continue
        if event is h11.PAUSED:
            return None
        assert not isinstance(event, type)
        return event


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Event | None:
    """The next event, reading as needed; None when h11 pauses (a protocol switch). Raises h11's
    RemoteProtocolError for a malformed or oversized request."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(READ_SIZE)
            conn.receive_data(data)
            continue
        if event is h11.PAUSED:
            return None
        assert not isinstance(event, type)
        return event


async def _linger(reader: asyncio.StreamReader) -> None:
    """Read and drop what the client still sends until it pauses for LINGER (Go waits a fixed 0.5 s; a client whose
    bytes are still arriving on a loaded machine gets up to LINGER_MAX), so the close is not a reset."""
    loop = asyncio.get_running_loop()
    until = loop.time() + LINGER_MAX
    with contextlib.suppress(TimeoutError, ConnectionError, OSError, ssl.SSLError):
        while loop.time() < until:
            async with asyncio.timeout(min(LINGER, until - loop.time())):
                if not await reader.read(READ_SIZE):
                    return


_STATUS_TEXT = {400: "Bad Request", 431: "Request Header Fields Too Large", 501: "Not Implemented"}


async def _go_error(writer: asyncio.StreamWriter, status: int) -> None:
    """Go's answer to a request it cannot read (net/http's conn.serve): a bare status line, its text as the body, and
    the connection closed."""
    text = f"{status} {_STATUS_TEXT.get(status, 'Bad Request')}"
    head = f"HTTP/1.1 {text}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(ConnectionError, OSError, ssl.SSLError, RuntimeError):
        writer.write(head.encode() + text.encode())
        await writer.drain()
