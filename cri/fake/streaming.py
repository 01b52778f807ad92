"""The fake runtime's streaming server: exec over SPDY/3.1, as containerd's CRI streaming server serves it.

CRI Exec gives the kubelet a one-time URL (`http://127.0.0.1:<port>/exec/<token>`, the token good for one minute,
as upstream's streaming server); the kubelet proxies the client's upgrade request to it (`nodeagent.server.streaming`).
This server answers it as the kubelet's streaming library does (k8s.io/kubelet/pkg/cri/streaming/remotecommand):
- the protocol is the first of the client's `X-Stream-Protocol-Version`s it supports (v4.channel.k8s.io, v3, v2, and
  channel.k8s.io, served as v2), or 403 naming both sides' lists; an upgrade to anything but SPDY/3.1 is 400;
- after the 101, the client opens one stream per channel (the `streamType` header: error, stdin, stdout, stderr, and
  resize with a tty from v3 on), each answered with SYN_REPLY; the command runs once all are open (30 s at most);
- the command's output goes to stdout, then the error stream carries the outcome: nothing but a FIN on success
  before v4; from v4 a JSON `Status`, `Success`, or `Failure` with reason `NonZeroExitCode` and the code as the cause
  `ExitCode` (what kubectl exits with), with containerd's message; then every stream is finished and the connection
  closed.
A container runs no process, so exec "runs" what the fake knows (`cri.fake.behaviour`): `echo` prints, `true`,
`false` and `sh -c "exit N"` exit so, `sleep N` waits, `cat` copies stdin to stdout until stdin ends; any other
command exits 0 without output, as ExecSync answers it (a probe's command passes). One server serves every fake
runtime of a process (a fleet's nodes); its URLs are on loopback. Attach and port-forward are not served.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import h11

from cri.fake import behaviour as behaviours
from cri.fake import spdy

log = logging.getLogger(__name__)

PROTOCOL_V4 = "v4.channel.k8s.io"
PROTOCOL_V3 = "v3.channel.k8s.io"
PROTOCOL_V2 = "v2.channel.k8s.io"
PROTOCOL_V1 = "channel.k8s.io"
SUPPORTED_PROTOCOLS = (PROTOCOL_V4, PROTOCOL_V3, PROTOCOL_V2, PROTOCOL_V1)
TOKEN_TTL = 60.0  # upstream streaming server's CacheTTL
MAX_TOKENS = 1000  # upstream's maxInFlight
STREAM_CREATION_TIMEOUT = 30.0  # upstream's DefaultStreamCreationTimeout
READ_SIZE = 64 * 1024
MAX_REQUEST_HEAD = 64 * 1024


@dataclass(frozen=True)
class ExecCall:
    """One granted exec: the container and command, which channels, and how to tell the container still runs."""

    container_id: str
    cmd: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    running: Callable[[], bool]


class StreamingServer:
    """Serves the exec URLs it hands out. `start` before the first; `close` ends the listener and any session."""

    def __init__(self, host: str = "127.0.0.1", *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._host = host
        self._monotonic = monotonic
        self._server: asyncio.Server | None = None
        self._port = 0
        self._tokens: dict[str, tuple[float, ExecCall]] = {}
        self._sessions: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake streaming server is not started")
        return f"{self._host}:{self._port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._connection, self._host, 0)
        self._port = self._server.sockets[0].getsockname()[1]
        log.info("fake streaming server listening address=%s", self.address)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._sessions):
            task.cancel()
        for task in list(self._sessions):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if server is not None:
            await server.wait_closed()

    def exec_url(self, call: ExecCall) -> str:
        """A one-time URL for `call`: upstream's token cache (a full cache refuses, as its "maximum in-flight
        requests exceeded")."""
        now = self._monotonic()
        for token, (expires, _) in list(self._tokens.items()):
            if expires <= now:
                del self._tokens[token]
        if len(self._tokens) >= MAX_TOKENS:
            raise StreamingError("maximum number of in-flight requests exceeded")
        token = base64.urlsafe_b64encode(os.urandom(6)).decode()
        self._tokens[token] = (now + TOKEN_TTL, call)
        return f"http://{self.address}/exec/{token}"

    def _consume(self, token: str) -> ExecCall | None:
        entry = self._tokens.pop(token, None)
        if entry is None or entry[0] <= self._monotonic():
            return None
        return entry[1]

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, spdy.SpdyError, h11.ProtocolError) as exc:
            log.info("fake streaming session ended error=%s", exc)
        finally:
            self._sessions.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
        request = await _read_request(conn, reader)
        if request is None:
            return
        target = request.target.decode("latin-1").split("?", 1)[0]
        parts = target.strip("/").split("/")
        call = self._consume(parts[1]) if len(parts) == 2 and parts[0] == "exec" else None
        if call is None or request.method not in (b"GET", b"POST"):
            await _answer(conn, writer, 404, "404 page not found\n")
            return
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in request.headers]
        offered = [p.strip() for k, v in headers if k == "x-stream-protocol-version" for p in v.split(",") if p.strip()]
        if not offered:
            await _answer(conn, writer, 400, "unable to upgrade: X-Stream-Protocol-Version is required\n")
            return
        protocol = next((p for p in offered if p in SUPPORTED_PROTOCOLS), None)
        if protocol is None:
            # Upstream's Handshake answers 403 with the message, and its caller writes the message again.
            message = (
                f"unable to upgrade: unable to negotiate protocol: client supports {_go_list(offered)}, "
                f"server accepts {_go_list(SUPPORTED_PROTOCOLS)}\n"
            )
            accepted = [("X-Accepted-Stream-Protocol-Versions", p) for p in SUPPORTED_PROTOCOLS]
            await _answer(conn, writer, 403, message * 2, accepted)
            return
        connection = ",".join(v for k, v in headers if k == "connection").lower()
        upgrade = next((v for k, v in headers if k == "upgrade"), "")
        if "upgrade" not in connection or upgrade.lower() != "spdy/3.1":
            await _answer(conn, writer, 400, "unable to upgrade: missing upgrade headers in request\n")
            return
        response = h11.InformationalResponse(
            status_code=101,
            headers=[("X-Stream-Protocol-Version", protocol), ("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")],
        )
        writer.write(conn.send(response) or b"")
        await writer.drain()
        initial, _ = conn.trailing_data
        framer = spdy.Framer(reader, writer, bytes(initial))
        await ExecSession(framer, protocol, call).run()


class StreamingError(Exception):
    """The server cannot grant a URL now."""


class ExecSession:
    """One upgraded exec connection: wait for the client's streams, run the command, report, close."""

    def __init__(self, framer: spdy.Framer, protocol: str, call: ExecCall) -> None:
        self.framer = framer
        self.protocol = protocol
        self.call = call
        self.streams: dict[str, int] = {}
        self.stdin: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.closed = asyncio.Event()
        self.expected = {"error"}
        self.expected |= {name for name, on in (("stdin", call.stdin), ("stdout", call.stdout)) if on}
        if call.stderr:
            self.expected.add("stderr")
        if call.tty and protocol in (PROTOCOL_V4, PROTOCOL_V3):
            self.expected.add("resize")

    async def run(self) -> None:
        reading = asyncio.create_task(self._read_frames())
        try:
            try:
                async with asyncio.timeout(STREAM_CREATION_TIMEOUT):
                    await self.ready.wait()
            except TimeoutError:
                log.info(
                    "fake exec: timed out waiting for the client's streams container=%s", self.call.container_id[:12]
                )
                return
            if not self.expected <= self.streams.keys():
                return  # the client left before opening its streams
            status = await self._execute()
            if status is None:
                log.info("fake exec: the client left, command ended container=%s", self.call.container_id[:12])
                return
            self._report(status)
            for name in ("stdout", "stderr", "error"):
                if name in self.streams:
                    self.framer.data(self.streams[name], b"", fin=True)
            last = max(self.streams.values(), default=0)
            self.framer.goaway(last)
            await self.framer.drain()
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, spdy.SpdyError):
                await reading

    async def _read_frames(self) -> None:
        try:
            while True:
                frame = await self.framer.read()
                if frame is None or isinstance(frame, spdy.GoAway):
                    return
                if isinstance(frame, spdy.SynStream):
                    self._open(frame)
                elif isinstance(frame, spdy.Data):
                    if frame.stream_id == self.streams.get("stdin"):
                        if frame.data:
                            self.stdin.put_nowait(frame.data)
                        if frame.fin:
                            self.stdin.put_nowait(None)
                elif isinstance(frame, spdy.RstStream):
                    if frame.stream_id == self.streams.get("stdin"):
                        self.stdin.put_nowait(None)
                elif isinstance(frame, spdy.Ping):
                    self.framer.ping(frame.ping_id)
                    await self.framer.drain()
        finally:
            self.closed.set()
            self.stdin.put_nowait(None)
            self.ready.set()

    def _open(self, frame: spdy.SynStream) -> None:
        kind = (frame.headers.get("streamtype") or [""])[0]
        if kind not in self.expected or kind in self.streams:
            log.info("fake exec: unexpected stream type=%s", kind or "<none>")
            self.framer.rst_stream(frame.stream_id, spdy.RST_PROTOCOL_ERROR)
            return
        self.streams[kind] = frame.stream_id
        self.framer.syn_reply(frame.stream_id)
        if self.expected <= self.streams.keys():
            self.ready.set()

    async def _execute(self) -> dict[str, object] | None:
        """The command's outcome as the error stream's Status; None when the client left before it ended."""
        call = self.call
        if not call.running():
            return _internal_error(f"container {call.container_id} is not running")
        out_stream = self.streams.get("stdout")

        async def write(data: bytes) -> None:
            if call.tty:
                data = data.replace(b"\n", b"\r\n")  # a terminal's output post-processing (onlcr)
            if out_stream is not None and data:
                self.framer.data(out_stream, data)
                await self.framer.drain()

        command = asyncio.create_task(run_command(call.cmd, self.stdin if "stdin" in self.streams else None, write))
        gone = asyncio.create_task(self.closed.wait())
        try:
            await asyncio.wait({command, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not command.done():
                # The client left (an interrupted `kubectl exec -- sleep 3600`): the command ends with it.
                command.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await command
        if command.cancelled():
            return None
        exit_code = command.result()
        if exit_code == 0:
            return {"metadata": {}, "status": "Success"}
        message = f"error executing command {_go_list(call.cmd)}, exit code {exit_code}"
        return {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: {message}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
        }

    def _report(self, status: dict[str, object]) -> None:
        error_stream = self.streams["error"]
        if self.protocol == PROTOCOL_V4:
            self.framer.data(error_stream, json.dumps(status, separators=(",", ":")).encode())
        elif status["status"] != "Success":
            self.framer.data(error_stream, str(status["message"]).encode())


async def run_command(
    argv: Sequence[str], stdin: asyncio.Queue[bytes | None] | None, write: Callable[[bytes], object]
) -> int:
    """What the fake does for an exec of `argv` (see the module's docstring); returns the exit code."""
    name = argv[0].rsplit("/", 1)[-1] if argv else ""
    if name == "cat" and len(argv) == 1:
        while stdin is not None and (chunk := await stdin.get()) is not None:
            await _maybe_await(write(chunk))
        return 0
    fate = behaviours.command_fate(argv)
    if fate is None:
        return 0
    if fate.after:
        await asyncio.sleep(fate.after)
    await _maybe_await(write((behaviours.echo_output(argv) or "").encode()))
    return fate.exit_code


async def _maybe_await(value: object) -> None:
    if asyncio.iscoroutine(value):
        await value


def _internal_error(message: str) -> dict[str, object]:
    """apierrors.NewInternalError's Status, as upstream writes any error of the exec itself."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


def _go_list(items: Sequence[str]) -> str:
    """Go's %v of a []string."""
    return "[" + " ".join(items) + "]"


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The request's head (a body, which exec has none of, is skipped); None when the client left before it."""
    request: h11.Request | None = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(READ_SIZE))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            continue
        elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
            return request
        else:
            return None


async def _answer(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    status: int,
    text: str,
    extra: Sequence[tuple[str, str]] = (),
) -> None:
    body = text.encode()
    headers = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("X-Content-Type-Options", "nosniff"),
        ("Content-Length", str(len(body))),
        *extra,
        ("Connection", "close"),
    ]
    writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
    writer.write(conn.send(h11.Data(data=body)) or b"")
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()
