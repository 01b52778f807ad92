"""exec, attach and portForward: the runtime's streaming URL, proxied (upstream's UpgradeAwareHandler).

The kubelet asks the runtime for a one-time URL on its streaming server (CRI Exec / Attach / PortForward) and proxies
the client's upgrade request to it: the request goes to the URL with the client's headers (Connection, Upgrade,
X-Stream-Protocol-Version ...), the runtime's 101 and its headers go back to the client, and then bytes flow both
ways until either side closes. The client is never redirected, and whatever the protocol (SPDY/3.1 or WebSocket),
it passes through unchanged. A runtime that does not upgrade has its answer passed to the client as it came.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

import h11

from nodeagent.prober.probe import go_quote
from nodeagent.server.http import READ_SIZE, Request, Responder

log = logging.getLogger(__name__)

# Hop-by-hop headers a proxy drops (RFC 9110 7.6.1); Connection and Upgrade stay, the upgrade needs them.
_DROPPED = {"host", "proxy-connection", "keep-alive", "te", "trailer", "transfer-encoding", "authorization"}


class StreamOptionsError(ValueError):
    """Bad stream options: 400 with the message, as upstream."""


@dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def stream_options(query: Mapping[str, list[str]]) -> StreamOptions:
    """Upstream remotecommand.NewOptions: the kubelet-side names (input, output, error, tty; what the apiserver
    sends), "1" means yes; stderr is dropped with a tty; at least one stream."""

    def flag(name: str) -> bool:
        values = query.get(name) or []
        return bool(values) and values[0] == "1"

    tty, stdin, stdout, stderr = flag("tty"), flag("input"), flag("output"), flag("error")
    if tty and stderr:
        stderr = False  # as upstream: a tty merges stderr into stdout
    if not (stdin or stdout or stderr):
        raise StreamOptionsError("you must specify at least 1 of stdin, stdout, stderr")
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)


def port_forward_ports(request: Request) -> list[int]:
    """Upstream portforward.NewV4Options: only a WebSocket request names its ports in the query."""
    if (request.header("upgrade") or "").lower() != "websocket":
        return []
    values = request.query.get("port") or []
    if not values:
        raise StreamOptionsError('query parameter "port" is required')
    ports = []
    for value in values:
        if not value:
            raise StreamOptionsError('query parameter "port" cannot be empty')
        for part in value.split(","):
            port = _parse_port(part, value)
            if port < 1:
                raise StreamOptionsError(f"port {go_quote(value)} must be > 0")
            ports.append(port)
    return ports


def _parse_port(part: str, value: str) -> int:
    """Go's strconv.ParseUint(part, 10, 16), failing with upstream's text (it names the whole value, then the part)."""
    if not part or not all("0" <= c <= "9" for c in part):
        why = f"strconv.ParseUint: parsing {go_quote(part)}: invalid syntax"
    elif int(part) > 0xFFFF:
        why = f"strconv.ParseUint: parsing {go_quote(part)}: value out of range"
    else:
        return int(part)
    raise StreamOptionsError(f"unable to parse {go_quote(value)} as a port: {why}")


async def proxy_upgrade(request: Request, responder: Responder, url: str) -> None:
    """Send the client's upgrade request to the runtime's `url` and splice the two connections."""
    target = urllib.parse.urlsplit(url)
    host = target.hostname or "127.0.0.1"
    port = target.port or (443 if target.scheme == "https" else 80)
    ssl_context = True if target.scheme == "https" else None
    try:
        backend_reader, backend_writer = await asyncio.open_connection(host, port, ssl=ssl_context)
    except OSError as exc:
        log.warning("streaming proxy could not reach the runtime url=%s error=%s", url, exc)
        await responder.text(500, f"error dialing backend: {exc}")
        return
    try:
        await _handshake_and_splice(request, responder, target, backend_reader, backend_writer)
    finally:
        backend_writer.close()
        with contextlib.suppress(Exception):
            await backend_writer.wait_closed()


async def _handshake_and_splice(
    request: Request,
    responder: Responder,
    target: urllib.parse.SplitResult,
    backend_reader: asyncio.StreamReader,
    backend_writer: asyncio.StreamWriter,
) -> None:
    client = h11.Connection(h11.CLIENT)
    path = target.path or "/"
    if target.query:
        path += "?" + target.query
    headers = [("host", target.netloc)] + [(k, v) for k, v in request.headers if k not in _DROPPED]
    backend_writer.write(client.send(h11.Request(method=request.method, target=path, headers=headers)) or b"")
    backend_writer.write(client.send(h11.EndOfMessage()) or b"")
    await backend_writer.drain()
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            data = await backend_reader.read(READ_SIZE)
            client.receive_data(data)
            if not data and client.their_state is not h11.SWITCHED_PROTOCOL:
                await responder.text(500, "the runtime's streaming server closed the connection")
                return
            continue
        break
    if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
        answer = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers]
        upgraded = await responder.upgrade(answer)
        backend_initial, _ = client.trailing_data
        await _splice(
            (upgraded.reader, upgraded.writer, upgraded.initial),
            (backend_reader, backend_writer, bytes(backend_initial)),
        )
        return
    if isinstance(event, h11.Response):
        body = bytearray()
        while True:
            part = client.next_event()
            if part is h11.NEED_DATA:
                data = await backend_reader.read(READ_SIZE)
                client.receive_data(data)
                if not data:
                    break
                continue
            if isinstance(part, h11.Data):
                body += part.data
                continue
            break
        content_type = next((v.decode("latin-1") for k, v in event.headers if k == b"content-type"), "text/plain")
        await responder.send(event.status_code, bytes(body), content_type=content_type)
        return
    await responder.text(500, "the runtime's streaming server gave no answer")


Side = tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]


async def _splice(client: Side, backend: Side) -> None:
    """Copy both ways; `initial` bytes were read already (h11's buffer) and go first."""
    client_reader, client_writer, client_initial = client
    backend_reader, backend_writer, backend_initial = backend

    async def copy(initial: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if initial:
            writer.write(initial)
            await writer.drain()
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                return
            writer.write(data)
            await writer.drain()

    up = asyncio.create_task(copy(client_initial, client_reader, backend_writer))
    down = asyncio.create_task(copy(backend_initial, backend_reader, client_writer))
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        # The runtime ended the session (the command exited): let its last bytes reach the client, then close.
        if down.done() and not up.done():
            up.cancel()
        elif up.done() and not down.done():
            # The client closed its side: the session is over for the runtime too.
            down.cancel()
    finally:
        for task in (up, down):
            task.cancel()
        for task in (up, down):
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await task
        client_writer.close()
