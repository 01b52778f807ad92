"""`LeaseHeartbeats`: the Leases of every node of a fleet, renewed on an event loop of their own, in one thread.

Upstream's kubelet renews its Lease through a heartbeat client of its own (server.go: its own clientset, a timeout of
min(nodeStatusUpdateFrequency, nodeLeaseDuration), no client-side rate limit), in a goroutine a busy kubelet does not
starve. A fleet runs every node's pod work in one event loop; during a burst of pod starts that loop lags by seconds,
and a renewal awaiting it is late (docs/fleet.md). Here the renewals do not share that loop: each node hands its
Lease to this thread (`renew`, awaited in the node's loop until cancelled), which renews it with a client of its own,
made from the node's own kubeconfig, so each node still renews only its own Lease under the Node authorizer and
NodeRestriction. A node's renewals start when it hands its Lease over, just after its (staggered) registration, so
the renewals stay spread as the starts are.

The thread's loop runs `NodeLease` (the agent's own lease controller) and nothing else. The only thing read across
threads is the Node's UID (`node_uid`, a read of one attribute).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.clock import Clock, SystemClock
from nodeagent.config import KubeletConfiguration
from nodeagent.kube.client import KubeClient
from nodeagent.nodestatus.lease import NodeLease, heartbeat_timeout

log = logging.getLogger(__name__)

ClientFactory = Callable[[Path, float], KubeClient]  # (kubeconfig, request timeout) -> a client of its own
THREAD_NAME = "fleet-leases"
REPORT_SECONDS = 60.0  # how often the thread logs what it measured


def _nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class HeartbeatStats:
    """What the thread measured since its last report: how long each renewal took (the apiserver's answer
    included; the next interval is that much longer, as upstream's sliding period) and how late the thread woke for
    it (its loop, the GIL or the machine busy). Touched only in the thread's loop."""

    syncs: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)

    def report(self, nodes: int, cpu_seconds: float = 0.0) -> str | None:
        """One key=value line, and a fresh window; None when nothing was renewed. `cpu_seconds`: the thread's own
        CPU time over the window (`time.thread_time`), given per renewal."""
        if not self.syncs:
            return None
        lags = self.lags or [0.0]
        line = (
            f"renewals={len(self.syncs)} nodes={nodes} sync_p50={_nearest_rank(self.syncs, 0.5):.3f}s "
            f"sync_p99={_nearest_rank(self.syncs, 0.99):.3f}s sync_max={max(self.syncs):.3f}s "
            f"wake_lag_p99={_nearest_rank(lags, 0.99):.3f}s wake_lag_max={max(lags):.3f}s "
            f"cpu_per_renewal={cpu_seconds / len(self.syncs) * 1e6:.0f}us"
        )
        self.syncs, self.lags = [], []
        return line


def _kube_client(kubeconfig: Path, timeout: float) -> KubeClient:
    return KubeClient.from_kubeconfig(kubeconfig, timeout=timeout, direct=True)


class LeaseHeartbeats:
    """One thread with one event loop renewing the Leases handed to it. `start()`, then `renew(...)` from any loop
    (one call per node, awaited until cancelled), then `stop()`; or use as a context manager."""

    def __init__(
        self,
        config: KubeletConfiguration,
        *,
        client_factory: ClientFactory = _kube_client,
        clock: Clock | None = None,
    ) -> None:
        self._config = config
        self._client_factory = client_factory
        self._clock = clock if clock is not None else SystemClock()
        self._timeout = heartbeat_timeout(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Touched only in the thread's loop; read by tests and reports (a dict read is atomic).
        self.leases: dict[str, NodeLease] = {}
        self.stats = HeartbeatStats()

    def __enter__(self) -> LeaseHeartbeats:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The thread's event loop while it runs."""
        return self._loop

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("lease heartbeats already started")
        started = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._serve, args=(loop, started), name=THREAD_NAME, daemon=True)
        self._thread.start()
        started.wait()
        log.info("fleet lease heartbeats started thread=%s timeout=%.1fs", THREAD_NAME, self._timeout)

    def _serve(self, loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.create_task(self._report(), name="fleet-lease-report")
        try:
            loop.run_forever()
            # Stopped: end every renewal still running (their clients close), then the loop.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def stop(self) -> None:
        """End every renewal and the thread; blocks until its clients are closed. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._loop = None
        log.info("fleet lease heartbeats stopped")

    async def renew(self, node_name: str, kubeconfig: Path, node_uid: Callable[[], str]) -> None:
        """Renew node_name's Lease in the heartbeat thread, with a client of its own made from kubeconfig, until this
        coroutine is cancelled (then that renewal ends too). Awaited in the node's own loop (`LeaseRenewer`)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError("lease heartbeats not running")
        future: concurrent.futures.Future[None] = asyncio.run_coroutine_threadsafe(
            self._renew(node_name, kubeconfig, node_uid), loop
        )
        try:
            await asyncio.wrap_future(future)
        finally:
            future.cancel()  # cancelled here: the renewal's task in the thread is cancelled too

    async def _renew(self, node_name: str, kubeconfig: Path, node_uid: Callable[[], str]) -> None:
        if node_name in self.leases:
            raise RuntimeError(f"node {node_name}: its lease is already renewed here")
        client = self._client_factory(kubeconfig, self._timeout)
        lease = NodeLease(client, node_name=node_name, config=self._config, clock=self._clock, node_uid=node_uid)
        self.leases[node_name] = lease
        log.debug("fleet lease heartbeat added node=%s interval=%.1fs", node_name, lease.renew_interval)
        try:
            while True:  # `NodeLease.run`, timed
                began = self._clock.monotonic()
                await lease.sync()
                self.stats.syncs.append(self._clock.monotonic() - began)
                interval = lease.next_interval()
                due = self._clock.monotonic() + interval
                await self._clock.sleep(interval)
                self.stats.lags.append(max(0.0, self._clock.monotonic() - due))
        finally:
            del self.leases[node_name]
            await client.aclose()
            log.debug("fleet lease heartbeat removed node=%s renewals=%d", node_name, lease.renewals)

    async def _report(self) -> None:
        cpu = time.thread_time()  # this thread's CPU: what its renewals cost
        while True:
            await self._clock.sleep(REPORT_SECONDS)
            now = time.thread_time()
            line = self.stats.report(len(self.leases), now - cpu)
            cpu = now
            if line is not None:
                log.info("fleet lease heartbeats %s", line)


__all__ = ["LeaseHeartbeats", "heartbeat_timeout"]
