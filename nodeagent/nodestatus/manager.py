"""`NodeStatusManager`: registers the Node, keeps posting its status, and renews its Lease.

Upstream this is kubelet_node_status.go (registerWithAPIServer, syncNodeStatus/updateNodeStatus) and the node lease
controller (component-helpers/apimachinery/lease). The pure parts (the Node to create, the conditions, when a
status is worth posting, the Lease object) live in the rest of `nodeagent.nodestatus`; this module is the I/O.

Two heartbeats, as with the NodeLease feature upstream:
- the status, computed every nodeStatusUpdateFrequency (10s) but PATCHed only when it changed (heartbeat times
  aside) or nodeStatusReportFrequency (5m) has passed since the last post;
- the Lease `kube-node-lease/NAME`, renewed every 0.25 * nodeLeaseDurationSeconds (10s for 40s), which is what
  the node lifecycle controller reads for liveness. That is `lease.NodeLease`, run here as a task beside the status
  loop; with `renew_lease=False` the caller runs it (a fleet renews all its nodes' leases on a thread of its own).

Neither loop gives up: an apiserver error is logged and the next tick tries again, as the kubelet does.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from nodeagent.clock import Clock
from nodeagent.config import KubeletConfiguration
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, ApiError, ApiUnavailable
from nodeagent.kube.request import Obj
from nodeagent.kuberuntime.runtime_handlers import RuntimeFeatures, RuntimeHandler
from nodeagent.nodestatus.conditions import DISK_PRESSURE, MEMORY_PRESSURE, PID_PRESSURE, READY, node_conditions
from nodeagent.nodestatus.facts import NodeFacts
from nodeagent.nodestatus.lease import NodeLease
from nodeagent.nodestatus.node import OWNED_ANNOTATIONS, build_node_status, initial_node
from nodeagent.nodestatus.report import conditions_differ, should_report

log = logging.getLogger(__name__)

RuntimeHealth = Callable[[], Awaitable[tuple[bool, str]]]
# The PLEG's health check: (healthy, why not); the reason follows "PLEG is not healthy: " in the Ready condition.
PLEGHealth = Callable[[], tuple[bool, str]]
RecordEvent = Callable[[str, str, str], None]
# While the runtime is down, how often the status loop asks it whether it is back.
RUNTIME_RECHECK_SECONDS = 1.0
# While the storage state has an error (the CSINode not made yet), how often the status loop looks at it again:
# upstream's fastStatusUpdateOnce checks every 100 ms until the node is ready, then posts at once.
STORAGE_RECHECK_SECONDS = 0.1
# What the runtime's last Status reported (read after the health check, which refreshes them).
RuntimeHandlers = Callable[[], Sequence[RuntimeHandler]]
NodeFeatures = Callable[[], RuntimeFeatures | None]

# Upstream's constants: nodeStatusUpdateRetry and the registration backoff (100ms doubling to 7s). The lease's are
# in `lease`.
NODE_STATUS_UPDATE_RETRY: Final = 5
BACKOFF_START: Final = 0.1
BACKOFF_CAP: Final = 7.0

_RETRYABLE = (ApiError, ApiUnavailable)

# The events the kubelet records when a condition moves to a status (setters.go); Ready only on a transition
# from an existing condition, the pressure conditions also when they first appear.
_CONDITION_EVENTS: dict[tuple[str, str], str] = {
    (READY, "True"): "NodeReady",
    (READY, "False"): "NodeNotReady",
    (MEMORY_PRESSURE, "False"): "NodeHasSufficientMemory",
    (MEMORY_PRESSURE, "True"): "NodeHasInsufficientMemory",
    (DISK_PRESSURE, "False"): "NodeHasNoDiskPressure",
    (DISK_PRESSURE, "True"): "NodeHasDiskPressure",
    (PID_PRESSURE, "False"): "NodeHasSufficientPID",
    (PID_PRESSURE, "True"): "NodeHasInsufficientPID",
}


def _conditions(obj: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def _uid(node: Mapping[str, Any] | None) -> str:
    return str(((node or {}).get("metadata") or {}).get("uid") or "")


def condition_events(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """The reasons of the Normal events the kubelet records for this change of conditions, in condition order."""
    before = {str(c.get("type")): c.get("status") for c in old}
    reasons = []
    for condition in new:
        kind, status = str(condition.get("type")), str(condition.get("status"))
        reason = _CONDITION_EVENTS.get((kind, status))
        if reason is None:
            continue
        if kind == READY and kind not in before:
            continue
        if before.get(kind) != status:
            reasons.append(reason)
    return reasons


def _status_patch(old_status: Mapping[str, Any], new_status: Mapping[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of Node.status: the whole new status, with resources that went away set to null.

    Conditions and addresses merge by type, so the status's lists need no deletion directives.
    """
    patch = copy.deepcopy(dict(new_status))
    for field in ("capacity", "allocatable"):
        gone = set(old_status.get(field) or {}) - set(new_status.get(field) or {})
        if gone:
            patch[field] = {**patch.get(field, {}), **dict.fromkeys(sorted(gone))}
    for field in ("runtimeHandlers", "features", "volumesInUse"):
        # Omitted when the runtime no longer reports them (no volume is in use): upstream's patch removes them then.
        if field in old_status and field not in new_status:
            patch[field] = None
    return {"status": patch}


class NodeStatusManager:
    """Registers the Node and keeps its status and Lease fresh. `register()` first, then `run()` as a task."""

    def __init__(
        self,
        client: KubeClient,
        *,
        node_name: str,
        config: KubeletConfiguration,
        facts: NodeFacts,
        runtime_health: RuntimeHealth,
        clock: Clock,
        record_event: RecordEvent | None = None,
        pleg_health: PLEGHealth | None = None,
        runtime_handlers: RuntimeHandlers = tuple,
        node_features: NodeFeatures = lambda: None,
        pressure: Callable[[], frozenset[str]] = frozenset,
        volumes_in_use: Callable[[], Sequence[str]] = tuple,
        node_labels: Mapping[str, str] | None = None,
        device_capacity: Callable[[], tuple[Mapping[str, int], Mapping[str, int]]] | None = None,
        shutdown_status: Callable[[], str | None] = lambda: None,
        storage_status: Callable[[], str | None] = lambda: None,
        renew_lease: bool = True,
        lease_jitter: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self._name = node_name
        self._config = config
        self._facts = facts
        self._runtime_health = runtime_health
        self._clock = clock
        self._record_event = record_event
        self._pleg_health = pleg_health
        self._runtime_handlers = runtime_handlers
        self._node_features = node_features
        # The eviction manager's conditions under pressure (MemoryPressure, DiskPressure, PIDPressure).
        self._pressure = pressure
        # The volume manager's attachable volumes in use (upstream's VolumesInUse setter): the attach-detach
        # controller detaches none of them.
        self._volumes_in_use = volumes_in_use
        # The kubelet's --node-labels: on the Node it creates (upstream initialNode).
        self._node_labels = dict(node_labels or {})
        # The device plugins' extended resources (capacity, allocatable); None without a device manager.
        self._device_capacity = device_capacity
        # The node shutdown manager's ShutdownStatus: "node is shutting down" makes the node NotReady.
        self._shutdown_status = shutdown_status
        # The storage state's error (upstream's runtimeState.storageErrors): "CSINode is not yet initialized" from
        # start until the plugin manager has made the node's CSINode; the node is NotReady until then.
        self._storage_status = storage_status
        self._storage_pending = False  # what the last computed status said of the storage state
        self._node: Obj | None = None
        # The lease controller: renewed here beside the status loop, or (renew_lease=False) by the caller on a loop
        # of its own (a fleet's heartbeat thread); either way it reads the registered Node's UID for its owner.
        self._renew_lease = renew_lease
        self._node_lease = NodeLease(
            client, node_name=node_name, config=config, clock=clock, node_uid=self.node_uid, rand=lease_jitter
        )
        self._runtime_down = False  # what the last computed status said of the runtime
        self._last_reported: dict[str, Any] | None = None
        self._last_report_time: datetime | None = None
        # For tests and metrics.
        self.status_patches = 0

    # What other parts read.

    def node(self) -> Obj | None:
        """The last Node object the apiserver returned (for admission); None before registration. Do not mutate."""
        return self._node

    def node_uid(self) -> str:
        """The registered Node's UID ("" before registration); only reads, so any thread may call it."""
        return _uid(self._node)

    @property
    def last_report_time(self) -> datetime | None:
        """Wall time of the last status post that the apiserver accepted."""
        return self._last_report_time

    @property
    def lease(self) -> Obj | None:
        return self._node_lease.lease

    @property
    def lease_renewals(self) -> int:
        return self._node_lease.renewals

    @property
    def renew_interval(self) -> float:
        return self._node_lease.renew_interval

    # Registration.

    async def register(self) -> None:
        """Create the Node (or reconcile the existing one), retrying with capped backoff until it works."""
        delay = BACKOFF_START
        while not await self._try_register():
            await self._clock.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP)

    async def _try_register(self) -> bool:
        old: list[dict[str, Any]] = []
        conditions = await self._compute_conditions(old)
        wanted = initial_node(
            self._name,
            self._facts,
            self._config,
            conditions=conditions,
            runtime_handlers=self._runtime_handlers(),
            runtime_features=self._node_features(),
            extra_labels=self._node_labels,
        )
        try:
            self._node = await self._client.create(paths.nodes(), wanted)
        except AlreadyExists:
            return await self._reconcile_existing(wanted)
        except _RETRYABLE as exc:
            log.warning("unable to register node node=%s error=%s", self._name, exc)
            return False
        log.info("node registered node=%s uid=%s", self._name, _uid(self._node))
        self._record_transitions(old, conditions)
        return True

    async def _reconcile_existing(self, wanted: Obj) -> bool:
        """As tryRegisterWithAPIServer on AlreadyExists: put back the default labels and the annotations we own
        (attach/detach, our version); the status loop brings the rest of the status up to date."""
        try:
            existing = await self._client.get(paths.node(self._name))
        except _RETRYABLE as exc:
            log.warning("unable to get existing node node=%s error=%s", self._name, exc)
            return False
        metadata: dict[str, Any] = {}
        for field in ("labels", "annotations"):
            have = existing.get("metadata", {}).get(field) or {}
            want = wanted["metadata"].get(field) or {}
            if field == "annotations":
                want = {k: v for k, v in want.items() if k in OWNED_ANNOTATIONS}
            changed = {k: v for k, v in want.items() if have.get(k) != v}
            if changed:
                metadata[field] = changed
        if metadata:
            try:
                existing = await self._client.patch(paths.node(self._name), {"metadata": metadata})
            except _RETRYABLE as exc:
                log.warning("unable to reconcile existing node node=%s error=%s", self._name, exc)
                return False
        self._node = existing
        log.info(
            "node already registered node=%s uid=%s reconciled=%s",
            self._name,
            _uid(existing),
            ",".join(sorted(k for f in metadata.values() for k in f)) or "-",
        )
        return True

    # The status.

    async def _compute_conditions(self, old: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            ready, message = await self._runtime_health()
        except Exception as exc:  # the runtime's own failure is a reason to be NotReady, not to stop reporting
            ready, message = False, f"container runtime status check failed: {exc}"
        self._runtime_down = not ready
        pleg_message = None
        if self._pleg_health is not None:
            pleg_ok, why = self._pleg_health()
            pleg_message = None if pleg_ok else why
        pressure = self._pressure()
        storage_message = self._storage_status()
        self._storage_pending = storage_message is not None
        return node_conditions(
            old,
            now=self._clock.wall(),
            runtime_ready=ready,
            runtime_message=message,
            pleg_healthy_message=pleg_message,
            storage_message=storage_message,
            shutdown_message=self._shutdown_status(),
            memory_pressure=MEMORY_PRESSURE in pressure,
            disk_pressure=DISK_PRESSURE in pressure,
            pid_pressure=PID_PRESSURE in pressure,
        )

    def _record_transitions(self, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
        if self._record_event is None:
            return
        for reason in condition_events(old, new):
            self._record_event("Normal", reason, f"Node {self._name} status is now: {reason}")

    async def sync_node_status(self) -> bool:
        """One updateNodeStatus: up to 5 tries, the later ones from a fresh GET of the Node. True when done
        (posted, or nothing worth posting)."""
        for attempt in range(NODE_STATUS_UPDATE_RETRY):
            try:
                # As upstream's tryUpdateNodeStatus: the Node as the apiserver has it now (the first try from its
                # watch cache), so what others wrote since the last post is seen and corrected at this tick.
                # Over the client's direct connection when it has one (a fleet node: 30 such GETs a second at 300
                # nodes), else through httpx as every other request.
                self._node = await self._client.get_direct(
                    paths.node(self._name), resource_version="0" if attempt == 0 else None
                )
                await self._try_update_node_status()
                return True
            except _RETRYABLE as exc:
                log.warning(
                    "error updating node status, will retry node=%s attempt=%d error=%s", self._name, attempt, exc
                )
        log.error("unable to update node status node=%s attempts=%d", self._name, NODE_STATUS_UPDATE_RETRY)
        return False

    async def _try_update_node_status(self) -> None:
        old_status: dict[str, Any] = dict((self._node or {}).get("status") or {})
        old_conditions = _conditions(self._node)
        conditions = await self._compute_conditions(old_conditions)
        new_status = build_node_status(
            self._facts,
            self._config,
            conditions,
            runtime_handlers=self._runtime_handlers(),
            runtime_features=self._node_features(),
            device_capacity=self._device_capacity() if self._device_capacity is not None else None,
        )
        in_use = sorted(self._volumes_in_use())
        if in_use:
            new_status["volumesInUse"] = in_use
        now = self._clock.wall()
        # Unchanged since the last post, and the Node's conditions still what the agent says: nothing to post
        # before the report frequency. Upstream compares its new status with the fetched Node's; the conditions
        # are compared here (quantities come back from the apiserver in canonical form, not as posted).
        if not conditions_differ(old_status, new_status) and not should_report(
            self._last_reported,
            new_status,
            now=now,
            last_report_time=self._last_report_time,
            report_frequency=self._config.node_status_report_frequency,
        ):
            return
        self._node = await self._client.patch_direct(
            paths.node(self._name), _status_patch(old_status, new_status), subresource="status"
        )
        self.status_patches += 1
        self._last_reported = new_status
        self._last_report_time = now
        ready = next((c for c in conditions if c.get("type") == READY), {})
        log.info(
            "node status posted node=%s ready=%s reason=%s patches=%d",
            self._name,
            ready.get("status"),
            ready.get("reason"),
            self.status_patches,
        )
        self._record_transitions(old_conditions, conditions)

    # The Lease.

    async def sync_lease(self) -> bool:
        """One renewal of the Lease (`NodeLease.sync`)."""
        return await self._node_lease.sync()

    # The loops.

    async def _status_loop(self) -> None:
        period = self._config.node_status_update_frequency.total_seconds()
        while True:
            await self.sync_node_status()
            await self._until_next_status(period)

    async def _until_next_status(self, period: float) -> None:
        """Wait for the next status tick. While the last status said the runtime is down, ask the runtime every
        second too, and end the wait as soon as it answers: the node is Ready within about a second of the
        runtime's return, not up to a whole period later (upstream waits for its next tick; issue 34 asks for
        Ready within 10 s of containerd's return, and the default period alone can exceed that). While it said
        the storage state has an error, look at it every 100 ms and end the wait when it clears, as upstream's
        fastStatusUpdateOnce posts the first Ready status as soon as the node is ready."""
        if not self._runtime_down and not self._storage_pending:
            await self._clock.sleep(period)
            return
        waited = 0.0
        next_runtime_check = RUNTIME_RECHECK_SECONDS
        while waited < period:
            step = STORAGE_RECHECK_SECONDS if self._storage_pending else RUNTIME_RECHECK_SECONDS
            if self._runtime_down:
                step = min(step, next_runtime_check - waited)
            step = min(step, period - waited)
            await self._clock.sleep(step)
            waited += step
            if self._storage_pending and self._storage_status() is None:
                log.info("storage is ready, updating node status now node=%s", self._name)
                return
            if not self._runtime_down or waited < next_runtime_check - 1e-9:
                continue
            next_runtime_check += RUNTIME_RECHECK_SECONDS
            try:
                ready, _ = await self._runtime_health()
            except Exception:  # still down; the next tick reports why
                continue
            if ready:
                log.info("container runtime is back, updating node status now node=%s", self._name)
                return

    async def run(self) -> None:
        """Both heartbeats until cancelled. Registers first if `register()` has not run. A bug (an exception
        other than the apiserver's) ends both loops and propagates to the supervisor."""
        if self._node is None:
            await self.register()
        log.info(
            "node status manager started node=%s update_frequency=%s report_frequency=%s lease_renew=%.1fs",
            self._name,
            self._config.node_status_update_frequency,
            self._config.node_status_report_frequency,
            self.renew_interval,
        )
        async with asyncio.TaskGroup() as group:
            group.create_task(self._status_loop(), name=f"node-status:{self._name}")
            if self._renew_lease:
                group.create_task(self._node_lease.run(), name=f"node-lease:{self._name}")


__all__ = ["NodeStatusManager", "condition_events"]
