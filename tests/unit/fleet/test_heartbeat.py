"""The fleet's lease heartbeats: every node's Lease renewed on the heartbeat thread, with a client of its own made
from the node's own kubeconfig, however busy the fleet's loop is; a cancelled renewal ends there, stop ends all.

The apiserver is a fake behind httpx's transport seam (a Lease store per token). The thread and its loop are real,
and so is the clock: the renew interval is a quarter of a 1 s lease, and the point is that renewals go on while the
caller's loop is blocked."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeagent.config import KubeletConfiguration
from nodeagent.fleet.heartbeat import THREAD_NAME, HeartbeatStats, LeaseHeartbeats, heartbeat_timeout
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from tests.unit.kube.scripted import SERVER, status

CONFIG = KubeletConfiguration(node_lease_duration_seconds=1)  # renewed every 0.25 s
LEASES = paths.leases("kube-node-lease")


class LeaseApi:
    """Leases by name; each request recorded with the token that made it and the thread it was served on."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, str, str]] = []  # (token, method, path, thread)
        self.lock = threading.Lock()
        self._rv = 0

    def renewals(self, name: str) -> int:
        with self.lock:
            return sum(1 for _, m, p, _ in self.requests if m == "PUT" and p == paths.lease("kube-node-lease", name))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        with self.lock:
            self.requests.append((token, request.method, request.url.path, threading.current_thread().name))
            body: Any = json.loads(request.content) if request.content else None
            name = request.url.path.rsplit("/", 1)[-1] if request.method != "POST" else body["metadata"]["name"]
            if request.method == "GET":
                if name not in self.leases:
                    return status(404, "NotFound")
                return httpx.Response(200, json=self.leases[name])
            self._rv += 1
            body["metadata"]["resourceVersion"] = str(self._rv)
            self.leases[name] = body
            return httpx.Response(200 if request.method == "PUT" else 201, json=body)


class RecordedClient(KubeClient):
    closed = False

    async def aclose(self) -> None:
        self.closed = True
        await super().aclose()


class Clients:
    """The heartbeat's client factory: a client per call, its token the kubeconfig's file name."""

    def __init__(self, api: LeaseApi) -> None:
        self.api = api
        self.made: list[tuple[Path, float, str, RecordedClient]] = []

    def __call__(self, kubeconfig: Path, timeout: float) -> KubeClient:
        client = RecordedClient(
            ClusterCredentials(server=SERVER, token=kubeconfig.name),
            transport=httpx.MockTransport(self.api),
            timeout=timeout,
        )
        self.made.append((kubeconfig, timeout, threading.current_thread().name, client))
        return client

    def client(self, kubeconfig: Path) -> RecordedClient:
        return next(c for k, _, _, c in self.made if k == kubeconfig)


@pytest.fixture
def api() -> LeaseApi:
    return LeaseApi()


@pytest.fixture
def clients(api: LeaseApi) -> Clients:
    return Clients(api)


@pytest.fixture
def heartbeats(clients: Clients) -> Iterator[LeaseHeartbeats]:
    with LeaseHeartbeats(CONFIG, client_factory=clients) as running:
        yield running


async def _until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.01)


def _uid(name: str) -> Callable[[], str]:
    return lambda: f"uid-{name}"


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def _renewing(heartbeats: LeaseHeartbeats, name: str, kubeconfig: Path) -> asyncio.Task[None]:
    renewal: Awaitable[None] = heartbeats.renew(name, kubeconfig, _uid(name))
    return asyncio.ensure_future(renewal)


async def test_each_node_renews_its_own_lease_with_its_own_client_on_the_thread(
    api: LeaseApi, clients: Clients, heartbeats: LeaseHeartbeats
) -> None:
    tasks = [_renewing(heartbeats, name, Path(f"/nodes/{name}/kubelet.conf-{name}")) for name in ("a", "b")]
    try:
        await _until(lambda: api.renewals("a") >= 2 and api.renewals("b") >= 2)
        # A client per node, made on the thread from its own kubeconfig, with the heartbeat timeout.
        assert sorted((str(k), t, thread) for k, t, thread, _ in clients.made) == [
            ("/nodes/a/kubelet.conf-a", 1.0, THREAD_NAME),
            ("/nodes/b/kubelet.conf-b", 1.0, THREAD_NAME),
        ]
        with api.lock:
            requests = list(api.requests)
        # Each node's requests carry its own credential and touch its own Lease only; all are made on the thread.
        for token, _, path, thread in requests:
            assert thread == THREAD_NAME
            assert path == LEASES or path == paths.lease("kube-node-lease", token.rsplit("-", 1)[-1])
        assert {t for t, m, _, _ in requests if m == "POST"} == {"kubelet.conf-a", "kubelet.conf-b"}
        assert api.leases["a"]["spec"]["holderIdentity"] == "a"
        assert api.leases["a"]["metadata"]["ownerReferences"][0]["uid"] == "uid-a"
        assert set(heartbeats.leases) == {"a", "b"}
    finally:
        for task in tasks:
            await _cancel(task)


async def test_renewals_go_on_while_the_fleets_loop_is_blocked(api: LeaseApi, heartbeats: LeaseHeartbeats) -> None:
    task = _renewing(heartbeats, "a", Path("/k/a"))
    try:
        await _until(lambda: api.renewals("a") >= 1)
        before = api.renewals("a")
        time.sleep(1.0)  # noqa: ASYNC251 - the fleet's loop busy with pod work for a second: four renew intervals
        assert api.renewals("a") - before >= 3
        # What the thread measured meanwhile: each renewal timed, and how late the thread woke for it.
        line = heartbeats.stats.report(nodes=1)
        assert line is not None and " nodes=1 sync_p50=" in line and " wake_lag_max=" in line, line
    finally:
        await _cancel(task)


async def test_a_cancelled_renewal_ends_on_the_thread_and_closes_its_client(
    api: LeaseApi, clients: Clients, heartbeats: LeaseHeartbeats
) -> None:
    a = _renewing(heartbeats, "a", Path("/k/a"))
    b = _renewing(heartbeats, "b", Path("/k/b"))
    try:
        await _until(lambda: api.renewals("a") >= 1 and api.renewals("b") >= 1)
        await _cancel(a)
        await _until(lambda: "a" not in heartbeats.leases)
        assert clients.client(Path("/k/a")).closed
        stopped_at = api.renewals("a")
        going = api.renewals("b")
        await _until(lambda: api.renewals("b") >= going + 2)
        assert api.renewals("a") == stopped_at
        assert not clients.client(Path("/k/b")).closed
    finally:
        await _cancel(b)


async def test_stop_ends_the_renewals_left_and_closes_their_clients(api: LeaseApi, clients: Clients) -> None:
    heartbeats = LeaseHeartbeats(CONFIG, client_factory=clients)
    heartbeats.start()
    task = _renewing(heartbeats, "a", Path("/k/a"))
    await _until(lambda: api.renewals("a") >= 1)
    await asyncio.to_thread(heartbeats.stop)
    assert clients.client(Path("/k/a")).closed
    assert heartbeats.leases == {}
    with pytest.raises(asyncio.CancelledError):  # its renewal was ended under it
        await task
    with pytest.raises(RuntimeError, match="not running"):
        await heartbeats.renew("b", Path("/k/b"), _uid("b"))
    heartbeats.stop()  # idempotent


async def test_one_node_is_renewed_once(api: LeaseApi, heartbeats: LeaseHeartbeats) -> None:
    first = _renewing(heartbeats, "a", Path("/k/a"))
    try:
        await _until(lambda: "a" in heartbeats.leases)
        with pytest.raises(RuntimeError, match="already renewed"):
            await heartbeats.renew("a", Path("/k/a"), _uid("a"))
        assert not first.done()
    finally:
        await _cancel(first)


def test_stats_report_nothing_without_renewals_and_nearest_ranks_with() -> None:
    stats = HeartbeatStats()
    assert stats.report(nodes=3) is None
    stats.syncs = [0.01 * i for i in range(1, 101)]
    stats.lags = [0.0] * 99 + [2.5]
    assert stats.report(nodes=3, cpu_seconds=0.05) == (
        "renewals=100 nodes=3 sync_p50=0.510s sync_p99=0.990s sync_max=1.000s wake_lag_p99=0.000s wake_lag_max=2.500s"
        " cpu_per_renewal=500us"
    )
    assert (stats.syncs, stats.lags) == ([], [])


@pytest.mark.parametrize(
    ("status_every", "lease_seconds", "timeout"),
    [(10, 40, 10.0), (60, 40, 40.0), (1, 1, 1.0)],
)
def test_the_heartbeat_timeout_is_the_status_frequency_at_most_the_lease(
    status_every: int, lease_seconds: int, timeout: float
) -> None:
    config = KubeletConfiguration(
        node_status_update_frequency=timedelta(seconds=status_every), node_lease_duration_seconds=lease_seconds
    )
    assert heartbeat_timeout(config) == timeout
