"""`DirectConnection` and `KubeClient.replace_direct` against a real socket on loopback: one write per request, the
connection kept between renewals, a kept connection the server closed retried once, and the answers read as the
apiserver sends them (Content-Length, chunked, errors)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import pytest

from nodeagent.kube.client import KubeClient
from nodeagent.kube.direct import DirectConnection
from nodeagent.kube.errors import ApiUnavailable, Conflict, NotFound
from nodeagent.kube.kubeconfig import ClusterCredentials
from tests.unit.kube.loopback import serving

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"


def _answer(status: str, body: bytes, *, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


class Server:
    """Answers each request with the next of `answers` (bytes, written as one), records every read, and closes a
    connection after `requests_per_connection` requests (None: never)."""

    def __init__(self, answers: list[bytes], *, requests_per_connection: int | None = None) -> None:
        self.answers = answers
        self.requests_per_connection = requests_per_connection
        self.reads: list[bytes] = []  # each read as it arrived: a request in one write arrives in one read here
        self.connections = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while data := await reader.read(65536):
                self.reads.append(data)
                writer.write(self.answers.pop(0))
                await writer.drain()
                served += 1
                if self.requests_per_connection is not None and served >= self.requests_per_connection:
                    break
        finally:
            writer.close()


def _connection(server: Server, *, clock: Callable[[], float] = time.monotonic) -> DirectConnection:
    return DirectConnection(
        f"http://127.0.0.1:{server.port}", None, user_agent="test/1", authorization=lambda: "tok", clock=clock
    )


async def test_a_request_is_one_write_and_the_connection_is_kept() -> None:
    async with serving(Server([_answer("200 OK", b'{"a":1}'), _answer("200 OK", b'{"a":2}')])) as server:
        connection = _connection(server)
        first = await connection.request("PUT", LEASE, b'{"x":1}', timeout=5)
        second = await connection.request("PUT", LEASE, b'{"x":2}', timeout=5)
        connection.close()
    assert (first.status, first.body, second.body) == (200, b'{"a":1}', b'{"a":2}')
    assert first.headers["content-type"] == "application/json"
    assert server.connections == 1 and connection.connects == 1
    head, _, body = server.reads[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == f"PUT {LEASE} HTTP/1.1"
    assert {"Authorization: Bearer tok", "Content-Type: application/json", "Content-Length: 7"} <= set(lines)
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert body == b'{"x":1}'  # headers and body arrived together: one write
    assert len(server.reads) == 2


async def test_a_kept_connection_the_server_closed_is_retried_once_on_a_new_one() -> None:
    answers = [_answer("200 OK", b"{}"), _answer("200 OK", b'{"b":1}')]
    async with serving(Server(answers, requests_per_connection=1)) as server:
        connection = _connection(server)
        await connection.request("PUT", LEASE, b"{}", timeout=5)
        await asyncio.sleep(0.05)  # the server has closed the connection meanwhile
        answer = await connection.request("PUT", LEASE, b"{}", timeout=5)
        connection.close()
    assert answer.body == b'{"b":1}'
    assert server.connections == 2 and connection.connects == 2


async def test_an_idle_connection_past_the_keepalive_is_not_reused() -> None:
    now = [0.0]
    async with serving(Server([_answer("200 OK", b"{}")] * 3)) as server:
        connection = _connection(server, clock=lambda: now[0])  # kept 90 s
        await connection.request("PUT", LEASE, b"{}", timeout=5)
        now[0] = 89.0
        await connection.request("PUT", LEASE, b"{}", timeout=5)
        now[0] = 180.0
        await connection.request("PUT", LEASE, b"{}", timeout=5)
        connection.close()
    assert connection.connects == 2


async def test_chunked_and_connection_close_answers() -> None:
    chunked = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n4\r\n":1}\r\n0\r\n\r\n'
    async with serving(Server([chunked, _answer("200 OK", b"{}", extra="Connection: close\r\n")])) as server:
        connection = _connection(server)
        first = await connection.request("PUT", LEASE, b"{}", timeout=5)
        assert connection.connected
        await connection.request("PUT", LEASE, b"{}", timeout=5)
        assert not connection.connected
    assert first.body == b'{"a":1}'


async def test_replace_direct_maps_answers_and_failures_as_send_does() -> None:
    conflict = json.dumps({"kind": "Status", "status": "Failure", "reason": "Conflict", "code": 409}).encode()
    answers = [_answer("200 OK", b'{"kind":"Lease"}'), _answer("409 Conflict", conflict), b"HTTP/1.1 200 OK\r\nCont"]
    async with (
        serving(Server(answers, requests_per_connection=3)) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}", token="t"), direct=True) as client,
    ):
        assert await client.replace_direct(LEASE, {"kind": "Lease"}) == {"kind": "Lease"}
        with pytest.raises(Conflict):
            await client.replace_direct(LEASE, {"kind": "Lease"})
        with pytest.raises(ApiUnavailable):  # the connection dropped half-way through the answer
            await client.replace_direct(LEASE, {"kind": "Lease"}, request_timeout=5)
    assert server.connections == 1
    assert b"Authorization: Bearer t\r\n" in server.reads[0]


async def test_close_connections_closes_the_direct_connection_too() -> None:
    """A certificate rotation closes every connection: the next renewal handshakes again with the new pair."""
    async with (
        serving(Server([_answer("200 OK", b"{}")] * 2)) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}"), direct=True) as client,
    ):
        await client.replace_direct(LEASE, {})
        await client.close_connections()
        await client.replace_direct(LEASE, {})
    assert server.connections == 2


async def test_get_and_create_go_over_the_same_connection_and_a_get_has_no_body() -> None:
    """NodeLease reads and creates its Lease through it too, so its client opens no second connection."""
    answers = [_answer("404 Not Found", b""), _answer("201 Created", b'{"kind":"Lease"}')]
    async with (
        serving(Server(answers)) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}"), direct=True) as client,
    ):
        with pytest.raises(NotFound):
            await client.get_direct(LEASE)
        assert await client.create_direct(LEASE.rsplit("/", 1)[0], {"kind": "Lease"}) == {"kind": "Lease"}
    assert server.connections == 1
    get_head = server.reads[0].decode()
    assert get_head.startswith(f"GET {LEASE} HTTP/1.1\r\n") and get_head.endswith("\r\n\r\n")
    assert "Content-Length" not in get_head and "Content-Type" not in get_head
    assert server.reads[1].startswith(b"POST /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases HTTP/1.1")


async def test_without_direct_the_lease_calls_go_through_httpx() -> None:
    """Only the fleet's heartbeat clients ask for the direct connection; a single agent's Lease goes as every other
    request does (httpx: proxy settings honoured, one HTTP client)."""
    async with (
        serving(Server([_answer("200 OK", b'{"kind":"Lease"}')])) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}")) as client,
    ):
        assert await client.replace_direct(LEASE, {"kind": "Lease"}, request_timeout=5) == {"kind": "Lease"}
    head = b"".join(server.reads).decode().lower()
    assert head.startswith(f"put {LEASE.lower()} http/1.1\r\n")
    assert "accept-encoding: gzip" in head  # httpx's own default header, which the direct connection never sends


NODE = "/api/v1/nodes/n1"


async def test_the_node_status_get_and_patch_go_over_the_direct_connection() -> None:
    """A fleet node's status loop: GET its Node from the watch cache (resourceVersion=0), then PATCH the status
    subresource with a strategic merge patch, both on the one kept connection."""
    answers = [_answer("200 OK", b'{"kind":"Node"}'), _answer("200 OK", b'{"kind":"Node","status":{}}')]
    async with (
        serving(Server(answers)) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}"), direct=True) as client,
    ):
        assert await client.get_direct(NODE, resource_version="0") == {"kind": "Node"}
        patched = await client.patch_direct(NODE, {"status": {"phase": "x"}}, subresource="status")
    assert patched == {"kind": "Node", "status": {}}
    assert server.connections == 1 and len(server.reads) == 2
    get_head = server.reads[0].decode()
    assert get_head.startswith(f"GET {NODE}?resourceVersion=0 HTTP/1.1\r\n")
    assert "Content-Type" not in get_head
    head, _, body = server.reads[1].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == f"PATCH {NODE}/status HTTP/1.1"
    assert "Content-Type: application/strategic-merge-patch+json" in lines
    assert f"Content-Length: {len(body)}" in lines
    assert json.loads(body) == {"status": {"phase": "x"}}


async def test_without_direct_the_node_status_calls_go_through_httpx() -> None:
    """The single agent's node status loop sends through httpx, its query and patch type the same."""
    answers = [_answer("200 OK", b'{"kind":"Node"}')] * 4  # one a read: httpx may write a body apart from its head
    async with (
        serving(Server(answers)) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}")) as client,
    ):
        await client.get_direct(NODE, resource_version="0", request_timeout=5)
        await client.patch_direct(NODE, {"status": {}}, subresource="status", request_timeout=5)
    sent = b"".join(server.reads).decode().lower()
    assert sent.startswith(f"get {NODE}?resourceversion=0 http/1.1\r\n")
    assert f"patch {NODE}/status http/1.1\r\n" in sent
    assert "content-type: application/strategic-merge-patch+json" in sent
    assert sent.count("accept-encoding: gzip") == 2  # httpx's own header, which the direct connection never sends


async def test_a_direct_request_closes_httpx_connections_past_their_keepalive(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpcore closes an expired connection only when a request comes to its pool; a fleet node's periodic requests
    go over the direct connection, so they close it (the connections opened at the node's start-up)."""
    answers = [_answer("200 OK", b'{"kind":"Node"}')] * 6
    async with (
        serving(Server(answers)) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}"), direct=True) as client,
    ):
        await client.get(NODE, request_timeout=5)  # through httpx: its connection stays in the pool, idle
        assert server.connections == 1
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert len(pool.connections) == 1
        now = time.monotonic()
        monkeypatch.setattr("httpcore._async.http11.time.monotonic", lambda: now + 91.0)  # past the 90 s keep-alive
        await client.get_direct(NODE)
        assert pool.connections == []
        assert server.connections == 2  # the direct connection; httpx's was closed
