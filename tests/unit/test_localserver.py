"""The local endpoint (/healthz, /pods) and `nodeagent pods`' table: pure responses, then one real loopback server."""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
from typing import Any

import pytest

from nodeagent.localserver import LocalServer, LocalServerUnreachable, fetch_pods, format_pods, running_pods
from tests.unit.fakeclock import FakeClock

POD: dict[str, Any] = {
    "metadata": {"name": "web-node-1", "namespace": "default", "uid": "u1"},
    "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
    "status": {
        "phase": "Running",
        "podIP": "198.18.0.5",
        "startTime": "2026-01-01T00:00:00Z",
        "containerStatuses": [
            {"name": "a", "ready": True, "restartCount": 1, "state": {"running": {}}},
            {"name": "b", "ready": False, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
        ],
    },
}


def server(healthy: bool = True) -> LocalServer:
    return LocalServer("127.0.0.1", 0, pods=lambda: [POD], health=lambda: (healthy, "a background task failed"))


def split(response: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status, *headers = head.decode().split("\r\n")
    return status, dict(h.split(": ", 1) for h in headers), body


@pytest.mark.parametrize(
    ("request_head", "status", "body"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK", b"ok"),
        (b"GET /healthz?verbose HTTP/1.0\r\n\r\n", "HTTP/1.1 200 OK", b"ok"),
        (b"HEAD /healthz HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK", b""),
        (b"GET /nope HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found", b"404 page not found\n"),
        (b"POST /pods HTTP/1.1\r\n\r\n", "HTTP/1.1 405 Method Not Allowed", b"method not allowed\n"),
        (b"garbage\r\n\r\n", "HTTP/1.1 400 Bad Request", b"bad request\n"),
        (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 2000 + b"\r\n", "HTTP/1.1 431 Request Header Fields Too Large", b""),
    ],
)
def test_responses(request_head: bytes, status: str, body: bytes) -> None:
    got_status, headers, got_body = split(server().respond(request_head))
    assert (got_status, got_body) == (status, body)
    assert headers["Connection"] == "close"


def test_pods_is_a_pod_list_and_healthz_says_why_it_fails() -> None:
    status, headers, body = split(server().respond(b"GET /pods HTTP/1.1\r\n\r\n"))
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [POD]}
    status, _, body = split(server(healthy=False).respond(b"GET /healthz HTTP/1.1\r\n\r\n"))
    assert (status, body) == ("HTTP/1.1 500 Internal Server Error", b"a background task failed")


def test_the_table_reads_like_kubectl() -> None:
    deleting = {"metadata": {"name": "old", "namespace": "kube-system", "uid": "u2",
                             "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}}  # fmt: skip
    table = format_pods({"items": [POD, deleting]}, now=datetime.datetime(2026, 1, 1, 2, 5, tzinfo=datetime.UTC))
    header, web, old = (line.split() for line in table.splitlines())
    assert header == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "UID"]
    assert web == ["default", "web-node-1", "1/2", "CrashLoopBackOff", "3", "2h", "198.18.0.5", "u1"]
    assert old == ["kube-system", "old", "0/0", "Terminating", "0", "<unknown>", "<none>", "u2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_a_real_server_on_loopback_and_a_taken_port_is_retried() -> None:
    port = _free_port()
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", port))
    blocker.listen()
    clock = FakeClock()
    local = LocalServer("127.0.0.1", port, pods=lambda: [POD], health=lambda: (True, ""), clock=clock)
    task = asyncio.create_task(local.run())
    try:
        await asyncio.sleep(0.05)
        assert not local.bound.is_set()  # the port is taken: logged, the agent goes on
        blocker.close()
        await clock.advance(5.0)
        await asyncio.wait_for(local.bound.wait(), timeout=10)
        listed = await fetch_pods("127.0.0.1", port)
        assert [p["metadata"]["uid"] for p in listed["items"]] == ["u1"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        blocker.close()
    with pytest.raises(LocalServerUnreachable, match="is `nodeagent run` running"):
        await fetch_pods("127.0.0.1", port, timeout=2)


def test_running_pods_leaves_mirror_pods_out_and_shows_the_generated_status() -> None:
    static = {
        "metadata": {"uid": "s1", "annotations": {"kubernetes.io/config.source": "file"}},
        "status": {"phase": "Pending"},
    }
    mirror = {"metadata": {"uid": "m1", "annotations": {"kubernetes.io/config.mirror": "s1"}}}
    api = {"metadata": {"uid": "a1"}, "status": {"phase": "Running"}}
    generated = {"s1": {"phase": "Running"}}
    listed = running_pods([static, mirror, api], generated.get)
    assert [(p["metadata"]["uid"], p["status"]["phase"]) for p in listed] == [("s1", "Running"), ("a1", "Running")]
    assert static["status"] == {"phase": "Pending"}  # the caller's pods are not changed
