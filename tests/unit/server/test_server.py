"""The kubelet API over real loopback sockets: routes, errors, auth, log streaming and the upgrade proxy.

The runtime's streaming server is played by a small asyncio server that answers an upgrade with 101 and then echoes
bytes, as containerd's does after its SPDY handshake; the real one is exercised by the integration tests.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cri.errors import NotFoundError
from cri.v1 import api_pb2
from nodeagent.server.auth import Authenticator, Authorizer
from nodeagent.server.http import HTTPServer
from nodeagent.server.server import KubeletServer, LogQueryError, log_container_id, parse_log_options

NOW = datetime.datetime(2026, 11, 25, 10, 0, 0, tzinfo=datetime.UTC)


def pod(name: str = "web", uid: str = "uid-1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "main"}], "initContainers": [{"name": "init"}]},
    }


class Host:
    def __init__(self, log_path: Path) -> None:
        self.pod = pod()
        self.status: dict[str, Any] = {
            "containerStatuses": [
                {"name": "main", "containerID": "containerd://c1", "state": {"running": {}}},
            ]
        }
        self.log_path = log_path

    def pods(self) -> list[dict[str, Any]]:
        return [self.pod]

    def pod_by_name(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pod if (namespace, name) == ("default", "web") else None

    def pod_status(self, pod: dict[str, Any]) -> Mapping[str, Any] | None:
        return self.status

    async def running_pods(self) -> list[dict[str, Any]]:
        return [self.pod]

    async def running_container_id(self, pod: dict[str, Any], container: str) -> str | None:
        return "c1" if container == "main" else None

    async def running_sandbox_id(self, pod: dict[str, Any]) -> str | None:
        return "s1"

    def syncloop_healthy(self) -> tuple[bool, str]:
        return True, ""

    def configz(self) -> Mapping[str, Any]:
        return {"port": 10250}

    def metrics(self, path: str) -> bytes | None:
        return b"# HELP x y\nx 1\n" if path == "/metrics" else None


class Runtime:
    """Answers the streaming calls with a URL on the echo server; container_status with the log path."""

    def __init__(self, url: str, log_path: Path) -> None:
        self.url = url
        self.log_path = log_path
        self.running = True
        self.exec_requests: list[api_pb2.ExecRequest] = []

    async def exec(self, request: api_pb2.ExecRequest, *, timeout: float | None = None) -> api_pb2.ExecResponse:
        self.exec_requests.append(request)
        return api_pb2.ExecResponse(url=self.url)

    async def attach(self, request: api_pb2.AttachRequest, *, timeout: float | None = None) -> api_pb2.AttachResponse:
        return api_pb2.AttachResponse(url=self.url)

    async def port_forward(
        self, request: api_pb2.PortForwardRequest, *, timeout: float | None = None
    ) -> api_pb2.PortForwardResponse:
        return api_pb2.PortForwardResponse(url=self.url)

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse:
        if container_id != "c1":
            raise NotFoundError("/runtime.v1.RuntimeService/ContainerStatus", None, "no such container")
        state = api_pb2.CONTAINER_RUNNING if self.running else api_pb2.CONTAINER_EXITED
        return api_pb2.ContainerStatusResponse(
            status=api_pb2.ContainerStatus(id=container_id, log_path=str(self.log_path), state=state)
        )

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        return api_pb2.ExecSyncResponse(stdout=" ".join(cmd).encode(), stderr=b"!", exit_code=0)


async def echo_backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A streaming server: reads the request head, answers 101 SPDY/3.1, then echoes until the client closes."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"POST /exec/token HTTP/1.1\r\n"), head
    assert b"authorization" not in head.lower()
    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nhello")
    await writer.drain()
    while data := await reader.read(1024):
        writer.write(data.upper())
        await writer.drain()
    writer.close()


@pytest_asyncio.fixture(loop_scope="session")
async def served(tmp_path: Path) -> AsyncIterator[tuple[KubeletServer, HTTPServer, int, Runtime, Host]]:
    backend = await asyncio.start_server(echo_backend, "127.0.0.1", 0)
    backend_port = backend.sockets[0].getsockname()[1]
    log_path = tmp_path / "0.log"
    log_path.write_text("".join(f"2026-11-25T10:00:{i:02d}Z stdout F line{i}\n" for i in range(5)))
    host = Host(log_path)
    runtime = Runtime(f"http://127.0.0.1:{backend_port}/exec/token", log_path)
    kubelet = KubeletServer(host, runtime, node_name="node-1", log_poll=0.01)
    server = HTTPServer(kubelet.handle)
    port = await server.listen("127.0.0.1", 0)
    try:
        yield kubelet, server, port, runtime, host
    finally:
        await server.close()
        backend.close()
        await backend.wait_closed()


async def request(port: int, raw: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw.encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = _dechunk(body)
    return status, body


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def get(path: str, extra: str = "") -> str:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n"


async def test_healthz_pods_configz_metrics(served: Any) -> None:
    _, _, port, _, _ = served
    assert await request(port, get("/healthz")) == (200, b"ok\n")
    assert await request(port, get("/healthz/syncloop")) == (200, b"ok\n")
    status, body = await request(port, get("/pods"))
    assert status == 200 and b'"PodList"' in body and b'"web"' in body
    status, body = await request(port, get("/configz"))
    assert status == 200 and b'"kubeletconfig"' in body
    assert await request(port, get("/metrics")) == (200, b"# HELP x y\nx 1\n")
    assert (await request(port, get("/nothing")))[0] == 404
    assert (await request(port, "DELETE /pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))[0] == 405


async def test_container_logs_errors_are_upstreams(served: Any) -> None:
    _, _, port, _, _host = served
    assert await request(port, get("/containerLogs/default/nope/main")) == (404, b'pod "nope" does not exist\n')
    assert await request(port, get("/containerLogs/default/web/other")) == (
        404,
        b'container "other" not found in pod "web"\n',
    )
    assert await request(port, get("/containerLogs/default/web/main?tailLines=x")) == (
        400,
        b'{"message": "Unable to decode query."}\n',
    )
    assert await request(port, get("/containerLogs/default/web/main?tailLines=-1")) == (
        422,
        b'{"message": "Invalid request."}\n',
    )
    assert await request(port, get("/containerLogs/default/web/init")) == (
        400,
        b'container "init" in pod "web" is not available\n',
    )
    assert await request(port, get("/containerLogs/default/web/main?previous=true")) == (
        400,
        b'previous terminated container "main" in pod "web" not found\n',
    )


async def test_container_logs_tail(served: Any) -> None:
    _, _, port, _, _ = served
    assert await request(port, get("/containerLogs/default/web/main?tailLines=2")) == (200, b"line3\nline4\n")
    assert await request(port, get("/containerLogs/default/web/main?tail=all&limitBytes=7")) == (200, b"line0\nl")


async def test_follow_stops_when_the_client_leaves(served: Any) -> None:
    kubelet, server, port, _, _ = served
    for _ in range(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/containerLogs/default/web/main?follow=true").encode())
        await writer.drain()
        await reader.readuntil(b"line4\n")
        assert kubelet.active_streams >= 1
        writer.close()
    for _ in range(100):
        if kubelet.active_streams == 0 and server.connection_count == 0:
            break
        await asyncio.sleep(0.02)
    assert (kubelet.active_streams, server.connection_count) == (0, 0)


async def test_exec_proxies_the_upgrade(served: Any) -> None:
    kubelet, _, port, runtime, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /exec/default/web/main?command=sh&command=-c&command=true&input=1&output=1&tty=1 HTTP/1.1\r\n"
        b"Host: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nAuthorization: Bearer secret\r\n"
        b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nearly"
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    assert b"upgrade: SPDY/3.1" in head.lower().replace(b"spdy", b"SPDY")
    assert await reader.readexactly(5) == b"hello"
    assert await reader.readexactly(5) == b"EARLY"  # bytes sent right behind the request reached the runtime
    writer.write(b"abc")
    await writer.drain()
    assert await reader.readexactly(3) == b"ABC"
    (sent,) = runtime.exec_requests
    assert list(sent.cmd) == ["sh", "-c", "true"]
    assert (sent.stdin, sent.stdout, sent.stderr, sent.tty) == (True, True, False, True)
    writer.close()
    for _ in range(100):
        if kubelet.active_streams == 0:
            break
        await asyncio.sleep(0.02)
    assert kubelet.active_streams == 0


async def test_exec_errors(served: Any) -> None:
    _, _, port, _, _ = served
    assert await request(port, get("/exec/default/web/main?command=ls")) == (
        400,
        b"you must specify at least 1 of stdin, stdout, stderr\n",
    )
    assert await request(port, get("/exec/default/nope/main?command=ls&output=1")) == (
        404,
        b"pod does not exist\n",
    )
    assert await request(port, get("/exec/default/web/other?command=ls&output=1")) == (
        500,
        b'container not found ("other")\n',
    )
    assert await request(port, get("/exec/default/web/main?command=ls&output=1")) == (
        400,
        b"Upgrade request required\n",
    )


async def test_run(served: Any) -> None:
    _, _, port, _, _ = served
    raw = (
        "POST /run/default/web/main?cmd=echo%20hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    assert await request(port, raw) == (200, b"echo hi!")


async def test_auth_filter(tmp_path: Path) -> None:
    async def review(token: str) -> Mapping[str, Any]:
        return {"authenticated": token == "t", "user": {"username": "bob"}}

    async def access(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"allowed": spec["resourceAttributes"]["subresource"] == "stats"}

    host = Host(tmp_path / "0.log")
    kubelet = KubeletServer(
        host,
        Runtime("http://127.0.0.1:1/", tmp_path / "0.log"),
        node_name="node-1",
        authenticator=Authenticator(token_review=review),
        authorizer=Authorizer(access_review=access),
    )
    server = HTTPServer(kubelet.handle)
    port = await server.listen("127.0.0.1", 0)
    try:
        assert await request(port, get("/pods")) == (401, b"Unauthorized")
        assert await request(port, get("/pods", "Authorization: Bearer wrong\r\n")) == (401, b"Unauthorized")
        assert await request(port, get("/pods", "Authorization: Bearer t\r\n")) == (
            403,
            b"Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
        )
        # /stats is allowed for bob: the filter lets the request through to its handler.
        assert (await request(port, get("/stats/summary", "Authorization: Bearer t\r\n")))[0] not in (401, 403)
    finally:
        await server.close()


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ({"sinceSeconds": ["0"]}, 422),
        ({"sinceSeconds": ["5"], "sinceTime": ["2026-11-25T10:00:00Z"]}, 422),
        ({"limitBytes": ["0"]}, 422),
        ({"follow": ["maybe"]}, 400),
        ({"sinceTime": ["yesterday"]}, 400),
    ],
)
def test_log_options_invalid(query: dict[str, list[str]], error: int) -> None:
    with pytest.raises(LogQueryError) as caught:
        parse_log_options(query, now=NOW)
    assert caught.value.status == error


def test_log_options() -> None:
    options, previous = parse_log_options(
        {"follow": ["true"], "tailLines": ["3"], "sinceSeconds": ["60"], "timestamps": ["1"], "previous": ["false"]},
        now=NOW,
    )
    assert (options.follow, options.tail, options.timestamps, previous) == (True, 3, True, False)
    assert options.since == NOW - datetime.timedelta(seconds=60)


@pytest.mark.parametrize(
    ("status", "previous", "expected"),
    [
        ({"state": {"running": {}}, "containerID": "containerd://a"}, False, "a"),
        ({"state": {"terminated": {"containerID": "containerd://b"}}}, False, "b"),
        (
            {
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"containerID": "c://c"}},
            },
            False,
            "c",
        ),
        ({"state": {"running": {}}, "lastState": {"terminated": {"containerID": "c://d"}}}, True, "d"),
    ],
)
def test_log_container_id(status: dict[str, Any], previous: bool, expected: str) -> None:
    assert log_container_id({"containerStatuses": [{"name": "m", **status}]}, "p", "m", previous=previous) == expected


@pytest.mark.parametrize(
    ("waiting", "message"),
    [
        ("ErrImagePull", 'container "m" in pod "p" is waiting to start: image can\'t be pulled'),
        ("ImagePullBackOff", 'container "m" in pod "p" is waiting to start: trying and failing to pull image'),
        ("ContainerCreating", 'container "m" in pod "p" is waiting to start: ContainerCreating'),
    ],
)
def test_log_container_id_waiting(waiting: str, message: str) -> None:
    status = {"containerStatuses": [{"name": "m", "state": {"waiting": {"reason": waiting}}}]}
    with pytest.raises(ValueError, match=None) as caught:
        log_container_id(status, "p", "m", previous=False)
    assert str(caught.value) == message
