"""`NodeLease`: the node lease controller, renewing `kube-node-lease/NAME` every 0.25 * nodeLeaseDurationSeconds.

Upstream this is component-helpers/apimachinery/lease/controller.go. It is its own object so that it can run apart
from the node status: `NodeStatusManager` runs it beside the status loop in the agent's event loop, and a fleet runs
the leases of all its nodes on an event loop of their own (`nodeagent.fleet.heartbeat`), each with the node's own
client, as upstream's kubelet renews through a heartbeat client of its own.

The only thing the lease needs from the node is the Node's UID (its owner reference), read through `node_uid`; that
callable may be called from another thread than the one that updates the Node, so it must only read.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Final

from nodeagent.clock import Clock
from nodeagent.config import KubeletConfiguration
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError, ApiUnavailable, Conflict, NotFound
from nodeagent.kube.request import Obj
from nodeagent.nodestatus._quantity import format_micro_time
from nodeagent.nodestatus.report import NODE_LEASE_NAMESPACE, lease_object

log = logging.getLogger(__name__)

# Upstream's constants: the lease controller's maxUpdateRetries, its ensure-lease backoff (100ms doubling to 7s),
# and the renew interval as a fraction of the lease duration (the kubelet's renewIntervalFraction).
LEASE_UPDATE_RETRIES: Final = 5
BACKOFF_START: Final = 0.1
BACKOFF_CAP: Final = 7.0
LEASE_RENEW_FRACTION: Final = 0.25
# The jitter of the renew period: the controller runs `wait.JitterUntil(sync, renewInterval, 0.04, true, ...)`, a
# sliding period (counted from the end of a sync) of renewInterval * (1 + 0.04 * rand).
LEASE_RENEW_JITTER: Final = 0.04

_RETRYABLE = (ApiError, ApiUnavailable)


def heartbeat_timeout(config: KubeletConfiguration) -> float:
    """The timeout of each lease request, as upstream's heartbeat client's (cmd/kubelet/app/server.go):
    nodeStatusUpdateFrequency, at most the lease's duration. It bounds the whole request, a Retry-After's retries
    included (kube/retry.py), so a throttled renewal gives way to the controller's next try in time."""
    return min(config.node_status_update_frequency.total_seconds(), float(config.node_lease_duration_seconds))


def renew_interval(config: KubeletConfiguration) -> float:
    return config.node_lease_duration_seconds * LEASE_RENEW_FRACTION


def jittered(period: float, rand: float) -> float:
    """wait.Jitter(period, LEASE_RENEW_JITTER) for rand in [0, 1): period up to 4 % longer, never shorter."""
    return period * (1.0 + LEASE_RENEW_JITTER * rand)


class NodeLease:
    """Renews one node's Lease through `client`: `sync()` once, or `run()` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        *,
        node_name: str,
        config: KubeletConfiguration,
        clock: Clock,
        node_uid: Callable[[], str],
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self._rand = rand
        self._name = node_name
        self._duration = config.node_lease_duration_seconds
        self._clock = clock
        self._node_uid = node_uid
        self._lease: Obj | None = None
        self.renew_interval = renew_interval(config)
        self._timeout = heartbeat_timeout(config)
        self.renewals = 0  # for tests and metrics

    @property
    def lease(self) -> Obj | None:
        """The last Lease the apiserver returned; None before the first renewal. Do not mutate."""
        return self._lease

    def next_interval(self) -> float:
        """How long to wait after a sync before the next: the renew interval with upstream's 4 % jitter."""
        return jittered(self.renew_interval, self._rand())

    def _renewed(self, base: Obj) -> Obj:
        """The PUT body: `base` with this renewal's spec, as upstream's newLease makes it from a deep copy of the
        last Lease. Built new at the top two levels instead, without copying what it leaves alone (nothing below is
        mutated), and without metadata.managedFields: an update that leaves them out keeps the stored ones (the
        apiserver's field manager), and they are most of the Lease's bytes."""
        metadata = {k: v for k, v in (base.get("metadata") or {}).items() if k != "managedFields"}
        lease = {**base, "metadata": metadata}
        lease["spec"] = {
            **(base.get("spec") or {}),
            "holderIdentity": self._name,
            "leaseDurationSeconds": self._duration,
            "renewTime": format_micro_time(self._clock.wall()),
        }
        uid = self._node_uid()
        if not metadata.get("ownerReferences") and uid:
            # As setNodeOwnerFunc: a lease made before the Node was known gets its owner on the next renewal.
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self._name, "uid": uid}]
        return lease

    async def _ensure_lease(self) -> tuple[Obj, bool]:
        """GET the Lease, or create it; True when created (already fresh)."""
        path = paths.lease(NODE_LEASE_NAMESPACE, self._name)
        try:
            return await self._client.get_direct(path, request_timeout=self._timeout), False
        except NotFound:
            pass
        uid = self._node_uid()
        body = lease_object(self._name, uid, duration_seconds=self._duration, now=self._clock.wall())
        if not uid:
            del body["metadata"]["ownerReferences"]
        created = await self._client.create_direct(
            paths.leases(NODE_LEASE_NAMESPACE), body, request_timeout=self._timeout
        )
        log.info("node lease created node=%s namespace=%s", self._name, NODE_LEASE_NAMESPACE)
        return created, True

    async def _backoff_ensure_lease(self) -> tuple[Obj, bool]:
        delay = BACKOFF_START
        while True:
            try:
                return await self._ensure_lease()
            except _RETRYABLE as exc:
                log.warning("failed to ensure node lease node=%s retry_in=%.1f error=%s", self._name, delay, exc)
            await self._clock.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP)

    async def _retry_update_lease(self, base: Obj) -> bool:
        path = paths.lease(NODE_LEASE_NAMESPACE, self._name)
        for attempt in range(LEASE_UPDATE_RETRIES):
            try:
                self._lease = await self._client.replace_direct(
                    path, self._renewed(base), request_timeout=self._timeout
                )
                self.renewals += 1
                log.debug("node lease renewed node=%s renewals=%d", self._name, self.renewals)
                return True
            except Conflict as exc:
                # Someone else wrote the Lease (or our resourceVersion is stale): read it again and retry.
                log.info("node lease conflict, re-reading node=%s attempt=%d error=%s", self._name, attempt, exc)
                base, created = await self._backoff_ensure_lease()
                if created:
                    self._lease = base
                    return True
            except _RETRYABLE as exc:
                log.warning("failed to update node lease node=%s attempt=%d error=%s", self._name, attempt, exc)
        return False

    async def sync(self) -> bool:
        """One renewal (the lease controller's sync): PUT from the last Lease seen; else GET-or-create, then PUT."""
        if self._lease is not None:
            if await self._retry_update_lease(self._lease):
                return True
            log.info("failed to update lease using latest lease, falling back to ensure lease node=%s", self._name)
        lease, created = await self._backoff_ensure_lease()
        self._lease = lease
        if created:
            return True
        if await self._retry_update_lease(lease):
            return True
        log.error("will retry updating node lease node=%s interval=%.1fs", self._name, self.renew_interval)
        return False

    async def run(self) -> None:
        """Renew now, then every jittered renew interval after the last sync ended (upstream's sliding JitterUntil),
        until cancelled (an apiserver error waits for the next tick)."""
        while True:
            await self.sync()
            await self._clock.sleep(self.next_interval())


__all__ = ["LEASE_RENEW_FRACTION", "LEASE_RENEW_JITTER", "NodeLease", "heartbeat_timeout", "jittered", "renew_interval"]
