"""The syncLoop: one dispatcher over config updates, PLEG events, probe results and two ticks. It only dispatches.

As upstream's syncLoopIteration, each wake-up handles exactly one thing and hands it to a SyncHandler. When several
are ready at once, one is chosen at random, as Go's select chooses among its ready cases (upstream's comment: the
cases are not evaluated in order), so that a flood on one channel (the apiserver echoing every status update of a
100-pod churn) cannot starve the others (the PLEG's channel filling up, the node NotReady):

- a PodUpdate from PodConfig → handle_pod_additions / _updates / _removes / _reconcile (DELETE is an update:
  the pod carries its deletionTimestamp, and the worker goes terminating);
- a PLEG event → handle_pod_syncs for that pod (ContainerRemoved alone needs no sync);
- a probe result that changed → handle_pod_syncs;
- the sync tick (1 s) → handle_pod_syncs for the pods whose work is due (`pods_due`);
- the housekeeping tick (2 s) → handle_pod_cleanups, once every source has reported (`sources_ready`), in a task
  beside the loop (one at a time), so that its runtime calls do not hold up the PLEG's events.

The handler is passed in, so tests replace it; time comes from an injected Clock.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nodeagent.clock import Clock, SystemClock
from nodeagent.podconfig import Operation, PodUpdate
from pleg.events import PodLifecycleEvent, PodLifecycleEventType

log = logging.getLogger(__name__)

Pod = dict[str, Any]

SYNC_PERIOD = 1.0
HOUSEKEEPING_PERIOD = 2.0
# Upstream's housekeepingWarningDuration: a housekeeping pass longer than this is logged, since the loop serves
# nothing else meanwhile (PLEG events queue up).
HOUSEKEEPING_WARNING = 1.0
# A dispatch of anything else that holds the loop this long is logged too: the PLEG's channel fills behind it.
SLOW_DISPATCH = 1.0


class SyncHandler(Protocol):
    async def handle_pod_additions(self, pods: Sequence[Pod]) -> None: ...

    async def handle_pod_updates(self, pods: Sequence[Pod]) -> None: ...

    async def handle_pod_removes(self, pods: Sequence[Pod]) -> None: ...

    async def handle_pod_reconcile(self, pods: Sequence[Pod]) -> None: ...

    async def handle_pod_syncs(self, pods: Sequence[Pod]) -> None: ...

    async def handle_pod_cleanups(self) -> None: ...


@dataclass(frozen=True)
class ProbeResult:
    """A probe result that changed (the prober sends only changes)."""

    pod_uid: str
    container_id: str
    kind: str  # liveness | readiness | startup
    success: bool


@dataclass(frozen=True)
class SyncLoopChannels:
    config: asyncio.Queue[PodUpdate]
    pleg: asyncio.Queue[PodLifecycleEvent]
    probes: asyncio.Queue[ProbeResult]


class SyncLoop:
    def __init__(
        self,
        channels: SyncLoopChannels,
        handler: SyncHandler,
        *,
        pod_by_uid: Callable[[str], Pod | None],
        pods_due: Callable[[], Sequence[Pod]],
        sources_ready: Callable[[], bool],
        clock: Clock | None = None,
        sync_period: float = SYNC_PERIOD,
        housekeeping_period: float = HOUSEKEEPING_PERIOD,
        choose: Callable[[Sequence[str]], str] = random.choice,
    ) -> None:
        self._channels = channels
        self._handler = handler
        self._pod_by_uid = pod_by_uid
        self._pods_due = pods_due
        self._sources_ready = sources_ready
        self._clock = clock or SystemClock()
        self._choose = choose
        self._sync_period = sync_period
        self._housekeeping_period = housekeeping_period
        self.iterations = 0
        # The sources whose updates have been handled (upstream's sourcesReady.AddSource, after the handler): the
        # device manager keeps running containers' devices until every source's first pods were admitted.
        self.handled_sources: set[str] = set()

    async def run(self) -> None:
        next_sync = self._clock.monotonic() + self._sync_period
        next_housekeeping = self._clock.monotonic() + self._housekeeping_period
        getters: dict[str, asyncio.Task[Any]] = {}
        housekeeping: asyncio.Task[None] | None = None
        try:
            while True:
                for name, queue in (
                    ("config", self._channels.config),
                    ("pleg", self._channels.pleg),
                    ("probe", self._channels.probes),
                ):
                    if name not in getters:
                        getters[name] = asyncio.create_task(queue.get(), name=f"syncloop-{name}")
                now = self._clock.monotonic()
                wait = max(0.0, min(next_sync, next_housekeeping) - now)
                ticker = asyncio.create_task(self._clock.sleep(wait), name="syncloop-tick")
                done, _ = await asyncio.wait([*getters.values(), ticker], return_when=asyncio.FIRST_COMPLETED)
                if ticker not in done:
                    ticker.cancel()
                # One thing per iteration, chosen at random among those ready (Go's select).
                now = self._clock.monotonic()
                ready = [name for name in ("config", "pleg", "probe") if getters.get(name) in done]
                if now >= min(next_sync, next_housekeeping):
                    ready.append("tick")
                chosen = None if not ready else ready[0] if len(ready) == 1 else self._choose(ready)
                started = self._clock.monotonic()
                if chosen in ("config", "pleg", "probe"):
                    await self._dispatch(chosen, getters.pop(chosen).result())
                    took = self._clock.monotonic() - started
                    if took >= SLOW_DISPATCH:
                        log.warning("syncloop dispatch took longer than expected channel=%s actual=%.3fs", chosen, took)
                elif chosen == "tick":
                    if now >= next_sync:
                        next_sync = now + self._sync_period
                        await self._handler.handle_pod_syncs(self._pods_due())
                    if now >= next_housekeeping:
                        next_housekeeping = now + self._housekeeping_period
                        if not self._sources_ready():
                            log.debug("syncloop housekeeping skipped reason=sources-not-ready")
                        elif housekeeping is not None and not housekeeping.done():
                            log.debug("syncloop housekeeping skipped reason=still-running")
                        else:
                            housekeeping = asyncio.create_task(self._housekeep(), name="syncloop-housekeeping")
                self.iterations += 1
        finally:
            for task in getters.values():
                task.cancel()
            if housekeeping is not None:
                housekeeping.cancel()

    async def _housekeep(self) -> None:
        """One housekeeping pass, beside the loop rather than in it: its runtime calls (listing every sandbox and
        container, removing what no pod wants) took 1 to 3.5 s under a 100-pod churn, every 2 s, and the PLEG's
        events queued behind them until the channel was full. One pass at a time; a tick that finds one running
        skips. Upstream runs HandlePodCleanups in the loop, but from its runtime cache and with kills handed to the
        pod workers, so it is short there."""
        started = self._clock.monotonic()
        try:
            await self._handler.handle_pod_cleanups()
        except Exception:
            log.exception("housekeeping failed")
            return
        took = self._clock.monotonic() - started
        if took > HOUSEKEEPING_WARNING:
            log.warning("housekeeping took longer than expected expected=%gs actual=%.3fs", HOUSEKEEPING_WARNING, took)

    async def _dispatch(self, name: str, item: Any) -> None:
        if name == "config":
            await self._dispatch_config(item)
        elif name == "pleg":
            event: PodLifecycleEvent = item
            if event.type is PodLifecycleEventType.CONTAINER_REMOVED:
                return
            pod = self._pod_by_uid(event.pod_uid)
            if pod is not None:
                await self._handler.handle_pod_syncs([pod])
        else:
            result: ProbeResult = item
            pod = self._pod_by_uid(result.pod_uid)
            if pod is not None:
                await self._handler.handle_pod_syncs([pod])

    async def _dispatch_config(self, update: PodUpdate) -> None:
        log.debug("syncloop config update source=%s op=%s pods=%d", update.source, update.op.value, len(update.pods))
        if update.op is Operation.ADD:
            if update.pods:
                await self._handler.handle_pod_additions(update.pods)
        elif update.op in (Operation.UPDATE, Operation.DELETE):
            await self._handler.handle_pod_updates(update.pods)
        elif update.op is Operation.REMOVE:
            await self._handler.handle_pod_removes(update.pods)
        elif update.op is Operation.RECONCILE:
            await self._handler.handle_pod_reconcile(update.pods)
        else:
            log.error("syncloop unexpected config operation op=%s", update.op.value)
        self.handled_sources.add(update.source)
