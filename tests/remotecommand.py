"""A remotecommand client over SPDY/3.1 (what kubectl and the apiserver speak to a streaming server), for tests.

It opens a CRI streaming URL (containerd's or the fake's) as client-go's `remotecommand` does: an HTTP/1.1 upgrade
offering the protocol versions, then one stream per channel with its `streamType` header, stdin sent and finished,
and everything the server writes read until the server has finished its streams or closed the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import h11

from cri.fake import spdy

PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")


@dataclass
class ExecResult:
    status_code: int  # the upgrade's answer: 101, or the refusal's status
    protocol: str = ""
    stdout: bytes = b""
    stderr: bytes = b""
    error: bytes = b""  # the error stream's bytes (v4: a JSON Status)
    refusal: str = ""  # the body of a refused upgrade
    headers: dict[str, str] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.error)) if self.error else {}


async def exec_stream(
    url: str,
    *,
    stdin: bytes | None = None,
    stdout: bool = True,
    stderr: bool = False,
    tty: bool = False,
    protocols: tuple[str, ...] = PROTOCOLS,
    timeout: float = 30.0,
) -> ExecResult:
    target = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(target.hostname, target.port or 80)
    try:
        async with asyncio.timeout(timeout):
            return await _exec(reader, writer, target, stdin, stdout, stderr, tty, protocols)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _exec(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: urllib.parse.SplitResult,
    stdin: bytes | None,
    stdout: bool,
    stderr: bool,
    tty: bool,
    protocols: tuple[str, ...],
) -> ExecResult:
    conn = h11.Connection(h11.CLIENT)
    path = target.path + ("?" + target.query if target.query else "")
    headers = [("Host", target.netloc), ("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]
    headers += [("X-Stream-Protocol-Version", p) for p in protocols]
    writer.write(conn.send(h11.Request(method="POST", target=path, headers=headers)) or b"")
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
            continue
        break
    if isinstance(event, h11.Response):
        body = bytearray()
        while isinstance(part := conn.next_event(), h11.Data) or part is h11.NEED_DATA:
            if part is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data:
                    break
                conn.receive_data(data)
            elif isinstance(part, h11.Data):
                body += part.data
        return ExecResult(event.status_code, refusal=body.decode(), headers=_headers(event.headers))
    assert isinstance(event, h11.InformationalResponse) and event.status_code == 101, event
    answer = _headers(event.headers)
    result = ExecResult(101, protocol=answer.get("x-stream-protocol-version", ""), headers=answer)
    initial, _ = conn.trailing_data
    framer = spdy.Framer(reader, writer, bytes(initial))
    kinds = ["error"]
    kinds += [k for k, on in (("stdin", stdin is not None), ("stdout", stdout), ("stderr", stderr)) if on]
    if tty:
        kinds.append("resize")
    ids = {kind: 1 + 2 * n for n, kind in enumerate(kinds)}
    for kind, stream_id in ids.items():
        framer.syn_stream(stream_id, {"streamType": [kind]})
    await framer.drain()
    replied: set[int] = set()
    finished: set[int] = set()
    sent_stdin = False
    readable = {ids[k] for k in ("error", "stdout", "stderr") if k in ids}
    while not readable <= finished:
        frame = await framer.read()
        if frame is None or isinstance(frame, spdy.GoAway):
            break
        if isinstance(frame, spdy.SynReply):
            replied.add(frame.stream_id)
        elif isinstance(frame, spdy.Data):
            if frame.stream_id == ids.get("stdout"):
                result.stdout += frame.data
            elif frame.stream_id == ids.get("stderr"):
                result.stderr += frame.data
            elif frame.stream_id == ids["error"]:
                result.error += frame.data
            if frame.fin:
                finished.add(frame.stream_id)
        elif isinstance(frame, spdy.RstStream):
            finished.add(frame.stream_id)
        if not sent_stdin and stdin is not None and ids["stdin"] in replied:
            framer.data(ids["stdin"], stdin, fin=True)
            await framer.drain()
            sent_stdin = True
    return result


def _headers(pairs: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lowercased names; a repeated header's values joined by ", " in their order."""
    out: dict[str, str] = {}
    for name, value in pairs:
        key = name.decode().lower()
        out[key] = f"{out[key]}, {value.decode()}" if key in out else value.decode()
    return out
