"""The fake runtime's exec: CRI Exec's URL and the SPDY/3.1 session at it, spoken to as client-go's remotecommand
does (`tests/remotecommand.py`). The same scenario runs on containerd in tests/integration/test_fake_cri_contract.py;
here the fake's transcript is pinned alone, and the framing's edges are checked."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cri.errors import UnimplementedError
from cri.fake import FakeCRI, StreamingServer, spdy
from cri.fake.streaming import ExecCall, _internal_error
from cri.v1 import api_pb2
from tests import remotecommand
from tests.cricontract import container_config, run_exec_scenario, sandbox_config

IMAGE = "registry.test/busybox:1.35"


@pytest.fixture
async def streaming() -> AsyncIterator[StreamingServer]:
    server = StreamingServer()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def test_exec_scenario_on_the_fake(streaming: StreamingServer, tmp_path: Path) -> None:
    fake = FakeCRI("n1", streaming=streaming)
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    async with asyncio.timeout(20):
        transcript = await run_exec_scenario(fake.runtime, IMAGE, str(tmp_path))
    execs = {entry[1]: entry[2:] for entry in transcript if entry[0] == "exec"}
    v4 = "v4.channel.k8s.io"
    assert execs["echo"] == (101, v4, b"hello exec\n", b"", {"metadata": {}, "status": "Success"}, "", None)
    code, protocol, out, err, status, _, _ = execs["exit_3"]
    assert (code, protocol, out, err) == (101, v4, b"", b"")
    assert status == {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    assert execs["false"][4]["details"] == {"causes": [{"reason": "ExitCode", "message": "1"}]}
    assert execs["cat_stdin"][2] == b"line one\nline two\n"
    assert execs["tty"][2] == b"on a tty\r\n"
    assert execs["v3_exit_2"][:2] == (101, "v3.channel.k8s.io")
    assert (
        execs["v3_exit_2"][4]
        == b"command terminated with non-zero exit code: error executing command [sh -c exit 2], exit code 2"
    )
    assert execs["v3_echo"][2:5] == (b"v3\n", b"", b"")
    assert execs["v2_exit_4"][:2] == (101, "v2.channel.k8s.io")
    assert execs["v2_exit_4"][4].endswith(b"exit code 4")
    assert execs["v1_echo"][:3] == (101, "channel.k8s.io", b"v1\n")
    refusal = execs["no_protocol_in_common"]
    assert refusal[0] == 403
    message = (
        "unable to upgrade: unable to negotiate protocol: client supports [v9.channel.k8s.io], server accepts"
        " [v4.channel.k8s.io v3.channel.k8s.io v2.channel.k8s.io channel.k8s.io]\n"
    )
    assert refusal[5:] == (message * 2, "v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io, channel.k8s.io")
    assert ("exec_url_twice", 101, 404) in transcript
    refused = {entry[1]: entry[2:] for entry in transcript if entry[0] == "exec_refused"}
    assert refused == {
        "no_command": ("ok",),
        "tty_and_stderr": ("UnknownCRIError", "INVALID_ARGUMENT"),
        "no_stream": ("UnknownCRIError", "INVALID_ARGUMENT"),
        "exited_container": ("UnknownCRIError", "UNKNOWN"),
        "unknown_container": ("NotFoundError", "NOT_FOUND"),
    }


async def test_exec_without_a_streaming_server_is_unimplemented(tmp_path: Path) -> None:
    fake = FakeCRI("n1")
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    config = sandbox_config("p", str(tmp_path))
    sandbox = await fake.runtime.run_pod_sandbox(config)
    container = await fake.runtime.create_container(sandbox, container_config("c", IMAGE, ["sleep", "9"]), config)
    await fake.runtime.start_container(container)
    with pytest.raises(UnimplementedError):
        await fake.runtime.exec(api_pb2.ExecRequest(container_id=container, cmd=["true"], stdout=True))


async def test_a_url_expires_after_a_minute() -> None:
    now = [100.0]
    server = StreamingServer(monotonic=lambda: now[0])
    await server.start()
    try:
        call = ExecCall("c", ("true",), stdin=False, stdout=True, stderr=False, tty=False, running=lambda: True)
        url = server.exec_url(call)
        now[0] += 60.5
        result = await remotecommand.exec_stream(url)
        assert result.status_code == 404
    finally:
        await server.close()


async def _upgraded(url: str) -> tuple[spdy.Framer, asyncio.StreamWriter]:
    """A raw v4 upgrade to `url`, answered 101: the framer on it, and its writer (to close it)."""
    host, port = url.split("/")[2].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    path = "/" + url.split("/", 3)[3]
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n".encode()
    )
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
    return spdy.Framer(reader, writer), writer


async def test_the_command_does_not_start_until_every_stream_is_open(streaming: StreamingServer) -> None:
    """A client that opens only some of its streams gets no output and no status: the session waits for the rest
    (upstream waits up to its stream creation timeout), and ends when the client leaves."""
    url = streaming.exec_url(
        ExecCall("c", ("echo", "x"), stdin=False, stdout=True, stderr=False, tty=False, running=lambda: True)
    )
    framer, writer = await _upgraded(url)
    framer.syn_stream(1, {"streamtype": ["error"]})  # stdout never opened
    await framer.drain()
    first = await asyncio.wait_for(framer.read(), 5)
    assert isinstance(first, spdy.SynReply) and first.stream_id == 1
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(framer.read(), 0.5)
    writer.close()


def test_the_dictionary_is_spdy3s() -> None:
    """1,423 bytes whose Adler-32 is the dictionary id a Go client's zlib header carries (containerd's and the
    apiserver's spdystream; the contract test talks to containerd with it)."""
    assert len(spdy.DICTIONARY) == 1423
    assert zlib.adler32(spdy.DICTIONARY) == 0xE3C6A7C2
    assert spdy.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdy.DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")


async def test_frames_round_trip_through_a_connection() -> None:
    """Both ends' frames over a real socket pair: header blocks compressed in one zlib stream per direction (the
    second block reuses the first's context), multi-valued headers, data with FIN, RST, PING, GOAWAY, and a frame
    type this module does not act on read whole."""
    server_sock_ready: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future()
    )

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server_sock_ready.set_result((reader, writer))

    listener = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    c_reader, c_writer = await asyncio.open_connection("127.0.0.1", port)
    s_reader, s_writer = await server_sock_ready
    client, server = spdy.Framer(c_reader, c_writer), spdy.Framer(s_reader, s_writer)
    client.syn_stream(1, {"streamType": ["stdout"], "X-Multi": ["a", "b"]})
    client.syn_stream(3, {"streamType": ["error"]}, fin=True)
    client.data(1, b"payload", fin=True)
    client.rst_stream(3, spdy.RST_CANCEL)
    client.ping(7)
    client.writer.write(b"\x80\x03\x00\x09\x00\x00\x00\x08" + b"\x00\x00\x00\x01\x00\x01\x00\x00")  # WINDOW_UPDATE
    client.goaway(3)
    await client.drain()
    frames = [await server.read() for _ in range(7)]
    assert frames[:6] == [
        spdy.SynStream(1, {"streamtype": ["stdout"], "x-multi": ["a", "b"]}),
        spdy.SynStream(3, {"streamtype": ["error"]}, fin=True),
        spdy.Data(1, b"payload", fin=True),
        spdy.RstStream(3, spdy.RST_CANCEL),
        spdy.Ping(7),
        spdy.Unknown(spdy.WINDOW_UPDATE, 0, b"\x00\x00\x00\x01\x00\x01\x00\x00"),
    ]
    assert frames[6] == spdy.GoAway(3)
    server.syn_reply(1, {"a": ["1"]})
    await server.drain()
    assert await client.read() == spdy.SynReply(1, {"a": ["1"]})
    c_writer.close()
    assert await server.read() is None
    s_writer.close()
    listener.close()
    await listener.wait_closed()


async def test_a_truncated_frame_and_a_foreign_version_are_errors() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(b"\x00\x00\x00\x01\x01\x00\x00\x09abc")
    reader.feed_eof()
    with pytest.raises(spdy.SpdyError, match="inside a frame"):
        await spdy.Framer(reader, None, b"").read()  # type: ignore[arg-type]
    reader = asyncio.StreamReader()
    reader.feed_data(b"\x80\x02\x00\x06\x00\x00\x00\x04\x00\x00\x00\x01")
    reader.feed_eof()
    with pytest.raises(spdy.SpdyError, match="version 2"):
        await spdy.Framer(reader, None).read()  # type: ignore[arg-type]


def test_status_json_is_gos_field_order() -> None:
    """kubectl decodes the error stream's Status; the order is Go's (metadata, status, message, reason, details)."""
    assert list(_internal_error("x")) == ["metadata", "status", "message", "reason", "details", "code"]
    assert json.loads(json.dumps(_internal_error("x")))["code"] == 500


async def test_a_command_ends_when_the_client_leaves(streaming: StreamingServer) -> None:
    """An interrupted `kubectl exec -- sleep 3600`: once the client's connection is gone, the session and its
    command end at once, not when the sleep would have."""
    url = streaming.exec_url(
        ExecCall("c", ("sleep", "3600"), stdin=False, stdout=True, stderr=False, tty=False, running=lambda: True)
    )
    framer, writer = await _upgraded(url)
    framer.syn_stream(1, {"streamtype": ["error"]})
    framer.syn_stream(3, {"streamtype": ["stdout"]})
    await framer.drain()
    for _ in range(2):
        assert isinstance(await asyncio.wait_for(framer.read(), 5), spdy.SynReply)
    sessions = set(streaming._sessions)
    assert len(sessions) == 1
    writer.close()
    _, running = await asyncio.wait(sessions, timeout=5)
    assert not running, "the session still runs its command after the client left"
