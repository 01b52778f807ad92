"""The fleet's lease heartbeats under an apiserver that throttles (429 with Retry-After: 1, as API priority and
fairness answers): each request is sent again after the Retry-After by the client (kube/retry.py, client-go's 10
retries), the lease controller backs off as upstream's between requests, nothing crashes, and once the apiserver
answers again every node renews its existing Lease without re-creating it (no storm of creates).

The apiserver is a small HTTP/1.1 server on loopback (a real socket, reached by the heartbeat clients' direct
connections from the heartbeat thread). The clocks sleep a hundredth of what they are asked and record what was
asked (one for the lease controller, one for the clients' Retry-After waits), so the backoff is read from the sleeps
the code asked for, not from timing."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeagent.clock import SystemClock
from nodeagent.config import KubeletConfiguration
from nodeagent.fleet.heartbeat import THREAD_NAME, LeaseHeartbeats
from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.kube.retry import MAX_RETRIES
from nodeagent.nodestatus.lease import BACKOFF_CAP, LEASE_UPDATE_RETRIES
from tests.unit.kube.loopback import serving

CONFIG = KubeletConfiguration()  # a 40 s lease, renewed every 10 s (0.1 s here)
SENDS = 1 + MAX_RETRIES  # the HTTP requests of one throttled client call
TOO_MANY = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "Too many requests, please try again later.",
    "reason": "TooManyRequests",
    "details": {"retryAfterSeconds": 1},
    "code": 429,
}


class LeaseServer:
    """Leases by name over HTTP/1.1 with keep-alive; while `throttled`, every request is answered 429 with
    Retry-After, as the apiserver's priority-and-fairness filter rejects. Every request recorded as (method, name,
    status)."""

    def __init__(self) -> None:
        self.port = 0
        self.throttled = False
        self.leases: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str, int]] = []
        self.open = 0  # connections not yet closed
        self._rv = 0

    def _answer(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if self.throttled:
            return 429, TOO_MANY
        doc = json.loads(body) if body else {}
        name = doc["metadata"]["name"] if method == "POST" else path.rsplit("/", 1)[-1]
        if method == "GET":
            if name not in self.leases:
                return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
            return 200, self.leases[name]
        self._rv += 1
        doc["metadata"]["resourceVersion"] = str(self._rv)
        self.leases[name] = doc
        return (201 if method == "POST" else 200), doc

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ")
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                code, doc = self._answer(method, path.split("?")[0], body)
                name = doc.get("metadata", {}).get("name") or path.rsplit("/", 1)[-1].split("?")[0]
                self.log.append((method, name, code))
                payload = json.dumps(doc).encode()
                extra = "Retry-After: 1\r\n" if code == 429 else ""
                writer.write(
                    f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                    f"{extra}\r\n".encode()
                    + payload
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


class ScaledClock(SystemClock):
    """Sleeps a hundredth of each sleep asked for, and records what was asked (per thread: the heartbeats')."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.lock = threading.Lock()

    async def sleep(self, seconds: float) -> None:
        with self.lock:
            self.asked.append(seconds)
        await asyncio.sleep(seconds / 100)


def _factory(server: LeaseServer, clock: ScaledClock) -> Callable[[Path, float], KubeClient]:
    def make(kubeconfig: Path, timeout: float) -> KubeClient:
        credentials = ClusterCredentials(server=f"http://127.0.0.1:{server.port}", token=kubeconfig.name)
        return KubeClient(credentials, timeout=timeout, direct=True, clock=clock)

    return make


async def _until(check: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.01)


def _count(server: LeaseServer, method: str, name: str, code: int) -> int:
    return sum(1 for m, n, c in server.log if (m, n, c) == (method, name, code))


async def test_throttled_renewals_back_off_and_recover_without_recreating() -> None:
    clock, waits = ScaledClock(), ScaledClock()
    async with serving(LeaseServer()) as server:
        with LeaseHeartbeats(CONFIG, client_factory=_factory(server, waits), clock=clock) as heartbeats:
            await _throttled_and_back(server, clock, waits, heartbeats)
        await _until(lambda: server.open == 0)  # stopped: every client's connection closed


async def _throttled_and_back(
    server: LeaseServer, clock: ScaledClock, waits: ScaledClock, heartbeats: LeaseHeartbeats
) -> None:
    renewal = asyncio.ensure_future(heartbeats.renew("n1", Path("n1.conf"), lambda: "uid-n1"))
    try:
        await _until(lambda: _count(server, "PUT", "n1", 200) >= 1)
        assert _count(server, "POST", "n1", 201) == 1
        before = len(server.log)
        server.throttled = True
        # Throttled long enough for the backoff to reach its cap twice.
        await _until(lambda: [round(s, 1) for s in clock.asked].count(BACKOFF_CAP) >= 2)
        throttled = server.log[before:]
        with clock.lock, waits.lock:
            asked, waited = list(clock.asked), list(waits.asked)
        # No crash: the thread and the node's renewal go on.
        assert not renewal.done()
        assert any(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate())
        # One sync's PUT retries (the lease controller's maxUpdateRetries), each sent 1 + 10 times by the client,
        # then GETs with a doubling backoff.
        puts = LEASE_UPDATE_RETRIES * SENDS
        assert [m for m, _, _ in throttled[:puts]] == ["PUT"] * puts
        assert {m for m, _, _ in throttled[puts:]} == {"GET"}
        assert {c for _, _, c in throttled} == {429}
        # The client waited the Retry-After (1 s) before each of its retries, and only that: no busy loop, and no
        # back-off of its own on top of the controller's.
        assert set(waited) == {1.0}
        assert len(waited) >= len(throttled) * MAX_RETRIES // SENDS - MAX_RETRIES
        backoff = [s for s in asked if s < 9.0]  # not the renew interval (10 to 10.4 s)
        assert backoff[:7] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4])
        assert backoff[7:] == [BACKOFF_CAP] * len(backoff[7:])
        # Every failed GET call waited its backoff before the next: as many GET calls as backoff sleeps, give or
        # take the one under way.
        gets = (len(throttled) - puts) / SENDS
        assert len(backoff) - 1 <= gets <= len(backoff) + 1

        server.throttled = False
        after = len(server.log)
        await _until(lambda: ("PUT", "n1", 200) in server.log[after:])
        # Recovered from the Lease it reads, not by making a new one.
        assert _count(server, "POST", "n1", 201) == 1
        assert [m for m, _, _ in server.log[after:]][:2] == ["GET", "PUT"]
    finally:
        renewal.cancel()
        await asyncio.gather(renewal, return_exceptions=True)


async def test_many_nodes_throttled_together_all_come_back() -> None:
    async with serving(LeaseServer()) as server:
        factory = _factory(server, ScaledClock())
        with LeaseHeartbeats(CONFIG, client_factory=factory, clock=ScaledClock()) as heartbeats:
            await _many_throttled_and_back(server, heartbeats)
        await _until(lambda: server.open == 0)


async def _many_throttled_and_back(server: LeaseServer, heartbeats: LeaseHeartbeats) -> None:
    names = [f"n{i}" for i in range(20)]
    renewals = [asyncio.ensure_future(heartbeats.renew(n, Path(f"{n}.conf"), lambda: "uid")) for n in names]
    try:
        await _until(lambda: all(_count(server, "PUT", n, 200) >= 1 for n in names))
        server.throttled = True
        await _until(lambda: all(_count(server, "GET", n, 429) >= 3 * SENDS for n in names))
        assert not any(r.done() for r in renewals)
        server.throttled = False
        after = len(server.log)
        await _until(lambda: all(("PUT", n, 200) in server.log[after:] for n in names))
        assert all(_count(server, "POST", n, 201) == 1 for n in names)
        assert len(heartbeats.leases) == len(names)
    finally:
        for renewal in renewals:
            renewal.cancel()
        await asyncio.gather(*renewals, return_exceptions=True)
