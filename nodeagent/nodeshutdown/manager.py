"""The node shutdown manager, as upstream's managerImpl on Linux (nodeshutdown_manager_linux.go, v1.34).

Enabled when the configuration gives any period (`shutdown_periods`: shutdownGracePeriodByPodPriority, else the
two periods turned into two groups as upstream's migrateConfig does); with none, the agent makes no manager and
nothing changes. When enabled:

- start: over logind (`LogindBus`), read InhibitDelayMaxUSec; when it is shorter than the sum of the periods, write
  the drop-in, reload logind and read it again up to 5 times (100 ms, doubling, as upstream's backoff); still short
  is an error. Then watch PrepareForShutdown and take the delay lock. (Upstream takes the lock first and subscribes
  second; here the match is in place before the lock, so a shutdown that starts in between is not missed. Nothing
  else differs.) A first start that fails is logged ("failed to start node shutdown manager") and the agent goes on
  without the feature, as upstream's kubelet; a watch that ends later (the bus went away) starts again after 1 s,
  the lock held meanwhile and let go once the new connection's lock is taken.
- PrepareForShutdown(true): the node is shutting down. A node event NodeShutdown, the node status synced at once
  (the Ready condition is False with "node is shutting down", `shutdown_status`), every new pod refused at admission
  (reason NodeShutdown, "Pod was rejected as the node is shutting down."), and the active pods killed group by
  group, lowest priority first: each pod with the group's seconds as its grace period (its own
  terminationGracePeriodSeconds when that is shorter), its status phase Failed, reason Terminated, message "Pod was
  terminated in response to imminent node shutdown." and the DisruptionTarget condition (TerminationByKubelet). A
  group waits for its pods to be stopped and torn down, at most its seconds, before the next starts. Then the lock
  is released, and logind goes on with the shutdown.
- PrepareForShutdown(false), a shutdown cancelled: a node event, the node no longer shutting down, and the lock
  taken again (the old one released after the new is held).

The state file `graceful_node_shutdown_state` (the root dir) records when the last shutdown's handling started and
ended, as upstream's, and the graceful shutdown start/end time gauges follow it (metrics.py). Not done: upstream's
SIGUSR1 trigger (older releases' test hook, gone from upstream's current manager).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.clock import Clock
from nodeagent.config.kubelet_config import KubeletConfiguration, ShutdownGracePeriodByPodPriority
from nodeagent.kuberuntime.systemd_dbus import SystemdError
from nodeagent.nodeshutdown.logind import InhibitLock, LogindBus
from nodeagent.nodeshutdown.metrics import ShutdownMetrics, timestamp

log = logging.getLogger(__name__)

Pod = dict[str, Any]

NODE_SHUTDOWN_REASON = "Terminated"
NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
NODE_SHUTDOWN_NOT_ADMITTED_REASON = "NodeShutdown"
NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE = "Pod was rejected as the node is shutting down."
NODE_SHUTTING_DOWN = "node is shutting down"  # the Ready condition's message while it is
NODE_SHUTDOWN_EVENT = "NodeShutdown"
STATE_FILE = "graceful_node_shutdown_state"
DEFAULT_PRIORITY = 0  # scheduling.DefaultPriorityWhenNoDefaultClassExists
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000  # scheduling.SystemCriticalPriority
DBUS_RECONNECT_PERIOD = 1.0
RELOAD_BACKOFF = (0.1, 2.0, 5)  # upstream's wait.Backoff after a logind reload: first delay, factor, steps
WATCH_POLL = 1.0  # seconds a read of the bus waits, so a stopped agent's thread ends soon
POD_KILL_POLL = 0.1  # how often a group's pods are looked at while they go down


def migrate_config(
    grace: datetime.timedelta, critical: datetime.timedelta
) -> tuple[ShutdownGracePeriodByPodPriority, ...]:
    """Upstream's migrateConfig: shutdownGracePeriod and shutdownGracePeriodCriticalPods as two priority groups,
    every pod below system-critical priority getting (grace - critical) whole seconds and the critical ones the rest."""
    if grace <= datetime.timedelta(0):
        return ()
    default_part = grace - critical
    if default_part < datetime.timedelta(0):
        return ()
    critical_part = grace - default_part
    return (
        ShutdownGracePeriodByPodPriority(
            priority=DEFAULT_PRIORITY, shutdown_grace_period_seconds=int(default_part.total_seconds())
        ),
        ShutdownGracePeriodByPodPriority(
            priority=SYSTEM_CRITICAL_PRIORITY, shutdown_grace_period_seconds=int(critical_part.total_seconds())
        ),
    )


def shutdown_periods(config: KubeletConfiguration) -> tuple[ShutdownGracePeriodByPodPriority, ...]:
    """The groups the manager works with, lowest priority first; empty: graceful node shutdown is off. The
    by-priority list when given (GracefulNodeShutdownBasedOnPodPriority is on in v1.34), else the two periods."""
    periods = config.shutdown_grace_period_by_pod_priority or migrate_config(
        config.shutdown_grace_period, config.shutdown_grace_period_critical_pods
    )
    return tuple(sorted(periods, key=lambda p: p.priority))


def period_requested(periods: Sequence[ShutdownGracePeriodByPodPriority]) -> int:
    """The inhibit delay the manager needs: the sum of the groups' seconds."""
    return sum(p.shutdown_grace_period_seconds for p in periods)


def _priority(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0


def group_by_priority(
    periods: Sequence[ShutdownGracePeriodByPodPriority], pods: Sequence[Pod]
) -> list[tuple[ShutdownGracePeriodByPodPriority, list[Pod]]]:
    """Upstream's groupByPriority over `periods` sorted low to high: a pod goes to the highest group whose priority
    is at most its own; below the lowest, to the lowest."""
    groups: list[tuple[ShutdownGracePeriodByPodPriority, list[Pod]]] = [(p, []) for p in periods]
    if not groups:
        return groups
    for pod in pods:
        priority = _priority(pod)
        index = 0
        for i, (period, _) in enumerate(groups):
            if period.priority <= priority:
                index = i
        groups[index][1].append(pod)
    return groups


def grace_period_for(pod: Mapping[str, Any], group_seconds: int) -> int:
    """The group's seconds, or the pod's own terminationGracePeriodSeconds when it is not longer."""
    own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return own if isinstance(own, int) and own <= group_seconds else group_seconds


@dataclass(frozen=True)
class ShutdownInputs:
    """What the manager needs of the kubelet, bound once the kubelet exists (as the eviction manager's inputs)."""

    active_pods: Callable[[], Sequence[Pod]]
    # Upstream's killPodFunc with the shutdown's status: the pod's worker kills it with this grace period and its
    # status becomes Failed / Terminated with the DisruptionTarget condition.
    kill_pod: Callable[[Pod, int], None]
    # The pod's worker has stopped it and torn its volumes down (upstream waits for the kill, then the unmounts).
    pod_killed: Callable[[Pod], bool]
    # One node status update, now (upstream's `go m.syncNodeStatus()`); None without an apiserver.
    sync_node_status: Callable[[], Awaitable[object]] | None = None


def _no_event(type_: str, reason: str, message: str) -> None:
    return None


def _ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass
class NodeShutdownManager:
    periods: tuple[ShutdownGracePeriodByPodPriority, ...]
    logind: Callable[[], LogindBus]  # a new connection per watch, as upstream's systemDbus()
    clock: Clock
    record_node_event: Callable[[str, str, str], None] = _no_event
    state_dir: Path | None = None  # where graceful_node_shutdown_state goes; None: not written
    metrics: ShutdownMetrics | None = None
    _shutting_down: bool = field(default=False, init=False)
    _bus: LogindBus | None = field(default=None, init=False)
    _lock: InhibitLock | None = field(default=None, init=False)
    _lock_bus: LogindBus | None = field(default=None, init=False)  # the connection the lock came from
    _inputs: ShutdownInputs | None = field(default=None, init=False)
    _status_sync: asyncio.Task[object] | None = field(default=None, init=False)

    # What the kubelet reads.

    def admit(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        """Upstream's Admit: every pod refused while the node shuts down; None admits."""
        if self._shutting_down:
            return NODE_SHUTDOWN_NOT_ADMITTED_REASON, NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE
        return None

    def shutdown_status(self) -> str | None:
        """Upstream's ShutdownStatus for the Ready condition: "node is shutting down", or None."""
        return NODE_SHUTTING_DOWN if self._shutting_down else None

    # Start and watch.

    async def start(self, inputs: ShutdownInputs) -> bool:
        """The first connection. False, after logging why, when it fails: the agent goes on without the feature."""
        self._inputs = inputs
        log.info(
            "creating node shutdown manager periods=%s requested=%ds",
            ",".join(f"{p.priority}:{p.shutdown_grace_period_seconds}s" for p in self.periods),
            period_requested(self.periods),
        )
        try:
            await self._connect()
        except SystemdError as exc:
            log.error("failed to start node shutdown manager error=%s", exc)
            return False
        log.info("node shutdown manager started inhibit_delay_requested=%ds", period_requested(self.periods))
        self._load_metrics()
        return True

    async def run(self) -> None:
        """Watch the bus `start` connected; when the watch ends, connect again after 1 s, for ever."""
        try:
            while True:
                if self._bus is not None:
                    await self._watch(self._bus)
                    self._disconnect()
                await self.clock.sleep(DBUS_RECONNECT_PERIOD)
                log.info("restarting watch for node shutdown events")
                try:
                    await self._connect()
                except SystemdError as exc:
                    log.error("unable to watch the node for shutdown events error=%s", exc)
        finally:
            self._release()
            self._disconnect()

    async def _connect(self) -> None:
        bus = await asyncio.to_thread(self.logind)
        self._bus = bus
        try:
            await self._ensure_inhibit_delay(bus)
            await asyncio.to_thread(bus.monitor_shutdown)
            await self._acquire_lock(bus)
        except SystemdError:
            self._disconnect()
            raise

    async def _ensure_inhibit_delay(self, bus: LogindBus) -> None:
        requested = period_requested(self.periods)
        current = await asyncio.to_thread(bus.current_inhibit_delay)
        if requested <= current:
            return
        log.info("raising logind inhibit delay current=%gs requested=%ds", current, requested)
        await asyncio.to_thread(bus.override_inhibit_delay, float(requested))
        await asyncio.to_thread(bus.reload_logind_conf)
        delay, factor, steps = RELOAD_BACKOFF
        updated = current
        for attempt in range(1, steps + 1):
            updated = await asyncio.to_thread(bus.current_inhibit_delay)
            if requested <= updated:
                return
            if attempt < steps:
                await self.clock.sleep(delay)
                delay *= factor
        raise SystemdError(
            f"node shutdown manager was timed out after {steps} attempts waiting for logind InhibitDelayMaxSec to "
            f"update to {requested}s (ShutdownGracePeriod), current value is {updated:g}s"
        )

    async def _acquire_lock(self, bus: LogindBus) -> None:
        """Upstream's acquireInhibitLock: the new lock first, then the old one let go."""
        lock = await asyncio.to_thread(bus.inhibit_shutdown)
        self._release()
        self._lock, self._lock_bus = lock, bus
        log.info("node shutdown inhibitor lock taken fd=%d", lock)

    def _release(self) -> None:
        if self._lock is None or self._lock_bus is None:
            return
        lock, self._lock = self._lock, None
        try:
            self._lock_bus.release_inhibit_lock(lock)
        except SystemdError as exc:
            log.error("failed to release the node shutdown inhibitor lock error=%s", exc)

    def _disconnect(self) -> None:
        """Close the connection; a lock taken stays held (its descriptor is the agent's) until the next connection's
        lock replaces it, as upstream keeps m.inhibitLock across reconnections."""
        if self._bus is not None:
            bus, self._bus = self._bus, None
            bus.close()

    async def _watch(self, bus: LogindBus) -> None:
        while True:
            try:
                event = await asyncio.to_thread(bus.next_shutdown_event, WATCH_POLL)
            except SystemdError as exc:
                log.error("ended watching the node for shutdown events error=%s", exc)
                return
            if event is not None:
                await self.handle_event(bus, event)

    async def handle_event(self, bus: LogindBus, shutting_down: bool) -> None:
        """One PrepareForShutdown: true starts the shutdown's handling, false (cancelled) takes the lock again."""
        kind = "shutdown" if shutting_down else "cancelled"
        log.info("shutdown manager detected new shutdown event event=%s", kind)
        self.record_node_event(
            "Normal",
            NODE_SHUTDOWN_EVENT,
            "Shutdown manager detected shutdown event"
            if shutting_down
            else "Shutdown manager detected shutdown cancellation",
        )
        self._shutting_down = shutting_down
        if not shutting_down:
            try:
                await self._acquire_lock(bus)
            except SystemdError as exc:  # as upstream, ignored: the next watch takes one
                log.error("failed to take the node shutdown inhibitor lock again error=%s", exc)
            return
        inputs = self._inputs
        if inputs is not None and inputs.sync_node_status is not None:
            self._status_sync = asyncio.ensure_future(inputs.sync_node_status())
        await self.process_shutdown_event()

    async def process_shutdown_event(self) -> None:
        """Kill the active pods group by group, then release the lock (also when the killing failed)."""
        log.info("shutdown manager processing shutdown event")
        started = self.clock.wall()
        self._store_state(started, None)
        if self.metrics is not None:
            self.metrics.start_time.set(timestamp(started))
            self.metrics.end_time.set(0)
        try:
            if self._inputs is not None:
                await self._kill_pods(self._inputs)
        finally:
            ended = self.clock.wall()
            self._store_state(started, ended)
            if self.metrics is not None:
                self.metrics.end_time.set(timestamp(ended))
            self._release()
            log.info("shutdown manager completed processing shutdown event, node will shutdown shortly")

    async def _kill_pods(self, inputs: ShutdownInputs) -> None:
        for period, pods in group_by_priority(self.periods, inputs.active_pods()):
            if not pods:  # no pod in this range: no wait for it either
                continue
            seconds = period.shutdown_grace_period_seconds
            for pod in pods:
                grace = grace_period_for(pod, seconds)
                log.info("shutdown manager killing pod pod=%s grace_period=%d", _ref(pod), grace)
                try:
                    inputs.kill_pod(pod, grace)
                except Exception as exc:  # one pod's failure does not keep the others running
                    log.error("shutdown manager failed killing pod pod=%s error=%s", _ref(pod), exc)
            deadline = self.clock.monotonic() + seconds
            while not all(inputs.pod_killed(p) for p in pods):
                if self.clock.monotonic() >= deadline:
                    log.info(
                        "shutdown manager pod killing time out grace_period=%d priority=%d", seconds, period.priority
                    )
                    break
                await self.clock.sleep(POD_KILL_POLL)
            else:
                log.info(
                    "done waiting for all pods in group to terminate grace_period=%d priority=%d",
                    seconds,
                    period.priority,
                )

    def _load_metrics(self) -> None:
        """Upstream's setMetrics: the gauges from the state file a previous run left (a zero time left unset)."""
        if self.metrics is None or self.state_dir is None:
            return
        path = self.state_dir / STATE_FILE
        try:
            state = json.loads(path.read_text()) if path.exists() else {}
            for key, gauge in (("startTime", self.metrics.start_time), ("endTime", self.metrics.end_time)):
                value = state.get(key)
                if isinstance(value, str) and not value.startswith("0001-01-01"):
                    gauge.set(timestamp(datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))))
        except (OSError, ValueError) as exc:
            log.error("failed to load graceful shutdown state path=%s error=%s", path, exc)

    def _store_state(self, start: datetime.datetime, end: datetime.datetime | None) -> None:
        """Upstream's localStorage: {"startTime", "endTime"} as RFC 3339, written whole (temp file, rename)."""
        if self.state_dir is None:
            return
        zero = "0001-01-01T00:00:00Z"

        def stamp(t: datetime.datetime | None) -> str:
            return zero if t is None else t.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")

        path = self.state_dir / STATE_FILE
        temp = path.with_name(path.name + ".tmp")
        try:
            temp.write_text(json.dumps({"startTime": stamp(start), "endTime": stamp(end)}))
            os.replace(temp, path)
        except OSError as exc:
            log.error("failed to store graceful shutdown state path=%s error=%s", path, exc)
