"""GenericPLEG: find out what changed in the runtime by listing it periodically (upstream: pkg/kubelet/pleg/generic.go).

Every period (1 s) a relist lists sandboxes and containers (two calls), compares each pod's objects with the
previous relist, and only for pods that changed inspects the runtime (status of each object), writes the pod status
cache and sends the events upstream derives from the state change of each object:

    new state   old state            events
    running     anything else        ContainerStarted
    exited      anything else        ContainerDied
    unknown     anything else        ContainerChanged (never sent: upstream filters it; the cache is still updated)
    gone        exited               ContainerRemoved
    gone        anything else        ContainerDied, ContainerRemoved

Sandboxes count as containers (ready is running, not ready is exited); a created container counts as unknown.

- A pod whose inspection fails keeps its old record, so the change is seen again, and is inspected again at the next
  relist even without a new change (then with a PodSync event); the error is stored in the cache so no worker acts
  on the old status meanwhile.
- Inspections of the changed pods run concurrently (bounded), each call with a timeout, and each pod's events go out
  as soon as its own inspection is done: one slow pod does not hold back the others.
- When the whole relist is done, the cache's global timestamp moves to the relist's start (`update_time`).
- `request_relist(uid)` asks for one pod to be relisted now (upstream's on-demand relist): a worker that just
  started or killed something gets a status newer than its sync without waiting for the next period. Requests
  that queue up meanwhile are served together, by one pair of list calls.
- Health is the age of the last successful relist against the threshold (`pleg.health`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cri.errors import CRIError
from cri.service import RuntimeService
from cri.v1 import api_pb2
from pleg.cache import PodStatusCache
from pleg.clock import Clock, wall_seconds
from pleg.events import PodLifecycleEvent, PodLifecycleEventType, send
from pleg.health import GENERIC_RELIST, RelistDuration, relist_health
from pleg.inspect import RuntimePod, inspect_pod, list_pod, list_pods
from pleg.metrics import PLEGMetrics
from pleg.status import preserve_ips

log = logging.getLogger(__name__)

T = PodLifecycleEventType

# Every relist call is bounded: a runtime that does not answer fails the relist (and, past the threshold, the
# health check) instead of hanging it.
DEFAULT_CALL_TIMEOUT = 10.0
# How many changed pods are inspected at once.
MAX_CONCURRENT_INSPECTIONS = 16
# Upstream's relistRequests capacity: a full queue drops the request (the periodic relist still comes).
RELIST_REQUEST_CAPACITY = 200

RUNNING, EXITED, UNKNOWN, NON_EXISTENT = "running", "exited", "unknown", "non-existent"

_CONTAINER_STATES: dict[int, str] = {
    api_pb2.CONTAINER_CREATED: UNKNOWN,  # as upstream: the kubelet does not use "created" yet
    api_pb2.CONTAINER_RUNNING: RUNNING,
    api_pb2.CONTAINER_EXITED: EXITED,
    api_pb2.CONTAINER_UNKNOWN: UNKNOWN,
}
_SANDBOX_STATES: dict[int, str] = {api_pb2.SANDBOX_READY: RUNNING, api_pb2.SANDBOX_NOTREADY: EXITED}


def object_states(pod: RuntimePod | None) -> dict[str, str]:
    """The PLEG state of each container and sandbox of a listed pod, by ID (containers first, as upstream)."""
    if pod is None:
        return {}
    states = {c.id: _CONTAINER_STATES.get(c.state, UNKNOWN) for c in pod.containers}
    for s in pod.sandboxes:
        states.setdefault(s.id, _SANDBOX_STATES.get(s.state, EXITED))
    return states


def generate_events(uid: str, object_id: str, old: str, new: str) -> list[PodLifecycleEvent]:
    """Upstream's generateEvents: the events for one object's change of state (pure)."""
    if old == new:
        return []
    if new == RUNNING:
        return [PodLifecycleEvent(uid, T.CONTAINER_STARTED, object_id)]
    if new == EXITED:
        return [PodLifecycleEvent(uid, T.CONTAINER_DIED, object_id)]
    if new == UNKNOWN:
        return [PodLifecycleEvent(uid, T.CONTAINER_CHANGED, object_id)]
    if old == EXITED:  # gone, and its death was reported before
        return [PodLifecycleEvent(uid, T.CONTAINER_REMOVED, object_id)]
    return [PodLifecycleEvent(uid, T.CONTAINER_DIED, object_id), PodLifecycleEvent(uid, T.CONTAINER_REMOVED, object_id)]


def compute_pod_events(uid: str, old: RuntimePod | None, new: RuntimePod | None) -> list[PodLifecycleEvent]:
    """All events for one pod between two relists (pure)."""
    if old == new:
        return []
    before, after = object_states(old), object_states(new)
    events: list[PodLifecycleEvent] = []
    for object_id in [*before, *(i for i in after if i not in before)]:
        old_state, new_state = before.get(object_id, NON_EXISTENT), after.get(object_id, NON_EXISTENT)
        events += generate_events(uid, object_id, old_state, new_state)
    return events


@dataclass
class _Record:
    """Upstream's podRecord: the pod as last reported (old) and as the latest list shows it (current)."""

    old: RuntimePod | None = None
    current: RuntimePod | None = None


class GenericPLEG:
    def __init__(
        self,
        runtime: RuntimeService,
        channel: asyncio.Queue[PodLifecycleEvent],
        cache: PodStatusCache,
        *,
        clock: Clock,
        metrics: PLEGMetrics,
        duration: RelistDuration = GENERIC_RELIST,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        max_inspections: int = MAX_CONCURRENT_INSPECTIONS,
    ) -> None:
        self._runtime = runtime
        self._channel = channel
        self._cache = cache
        self._clock = clock
        self._metrics = metrics
        self._duration = duration
        self._timeout = call_timeout
        self._max_inspections = max_inspections
        self._records: dict[str, _Record] = {}
        self._reinspect: set[str] = set()
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._requests: asyncio.Queue[tuple[str, float]] = asyncio.Queue(maxsize=RELIST_REQUEST_CAPACITY)
        self._last_relist: float | None = None  # monotonic start of the last successful relist
        self._last_relist_wall: float | None = None
        self.relists = 0

    # --- the PodLifecycleEventGenerator interface --------------------------------------------------------------

    def watch(self) -> asyncio.Queue[PodLifecycleEvent]:
        return self._channel

    @property
    def duration(self) -> RelistDuration:
        return self._duration

    def update(self, duration: RelistDuration) -> None:
        """New period and threshold; a sleeping relist loop relists at once and then keeps the new period."""
        if duration != self._duration:
            log.info("pleg relist period changed period=%gs threshold=%gs", duration.period, duration.threshold)
        self._duration = duration
        self._wake.set()

    def healthy(self) -> tuple[bool, str]:
        if self._last_relist_wall is not None:
            self._metrics.last_seen.set(self._last_relist_wall)
        return relist_health(self._last_relist, self._clock.monotonic(), self._duration.threshold)

    @property
    def last_relist_wall(self) -> float | None:
        """Wall time at which the last successful relist started: every change before it is in the cache."""
        return self._last_relist_wall

    def request_reinspect(self, uid: str) -> None:
        """Relist this pod soon and inspect it even if no container changed state (upstream's SetPodWatchCondition
        after an in-place resize: what the runtime reports of a container's resources changed, and no event says
        so)."""
        self._reinspect.add(uid)
        self.request_relist(uid)

    def request_relist(self, uid: str) -> None:
        try:
            self._requests.put_nowait((uid, wall_seconds(self._clock)))
        except asyncio.QueueFull:
            log.warning("pleg relist request dropped, queue full pod_uid=%s", uid)

    async def run(self) -> None:
        """Relist now and then every period; serve per-pod relist requests in between. Runs until cancelled."""
        next_relist = self._clock.monotonic()
        while True:
            now = self._clock.monotonic()
            if now >= next_relist or self._wake.is_set():
                self._wake.clear()
                await self.relist()
                next_relist = self._clock.monotonic() + self._duration.period
                continue
            request = await self._wait(next_relist - now)
            if request is not None:
                # Every request queued by now is served by the same lists (pods often start in bursts).
                requests = [request]
                while not self._requests.empty():
                    requests.append(self._requests.get_nowait())
                done = self._last_relist_wall
                uids = list(dict.fromkeys(uid for uid, asked_at in requests if done is None or asked_at > done))
                if uids:
                    await self.relist_pods(uids)

    # --- relisting -------------------------------------------------------------------------------------------

    async def relist(self) -> bool:
        """One relist. False when the runtime could not be listed (nothing changes then, health ages)."""
        async with self._lock:
            started = self._clock.monotonic()
            timestamp = wall_seconds(self._clock)
            if self._last_relist is not None:
                self._metrics.relist_interval.observe(started - self._last_relist)
            try:
                try:
                    pods = await list_pods(self._runtime, timeout=self._timeout)
                except CRIError as exc:
                    log.warning("pleg relist failed error=%s", exc)
                    return False
                self._last_relist = started
                self._last_relist_wall = timestamp
                self.relists += 1
                for record in self._records.values():
                    record.current = None
                for uid, pod in pods.items():
                    self._records.setdefault(uid, _Record()).current = pod
                for uid in [u for u, r in self._records.items() if r.old is None and r.current is None]:
                    del self._records[uid]
                await self._reconcile_changed(list(self._records))
                # After every pod's own update: the cache as a whole is now as fresh as this relist.
                self._cache.update_time(timestamp)
                return True
            finally:
                self._metrics.relist_duration.observe(self._clock.monotonic() - started)

    async def relist_pods(self, uids: list[str]) -> None:
        """Relist these pods now (the two list calls, only these pods compared and inspected) and mark them
        observed even when nothing changed (upstream's relistPod + SetObservedTime)."""
        async with self._lock:
            timestamp = wall_seconds(self._clock)
            try:
                if len(uids) == 1:
                    # One pod (a pod worker's sync asks for its own): its objects by label, not every pod's. Listing
                    # them all made the periodic resyncs quadratic in the pods of a node (py-spy, 2026-11-30).
                    one = await list_pod(self._runtime, uids[0], timeout=self._timeout)
                    pods = {} if one is None else {uids[0]: one}
                else:
                    pods = await list_pods(self._runtime, timeout=self._timeout)
            except CRIError as exc:
                log.warning("pleg pod relist failed pods=%d error=%s", len(uids), exc)
                return
            for uid in uids:
                self._records.setdefault(uid, _Record()).current = pods.get(uid)
            await self._reconcile_changed(uids)
            for uid in uids:
                record = self._records.get(uid)
                if record is not None and record.old is None and record.current is None:
                    del self._records[uid]
                self._cache.set_observed_time(uid, timestamp)

    async def _reconcile_changed(self, uids: list[str]) -> None:
        work: list[tuple[str, list[PodLifecycleEvent]]] = []
        for uid in uids:
            record = self._records[uid]
            events = compute_pod_events(uid, record.old, record.current)
            if events or uid in self._reinspect:
                work.append((uid, events))
        if not work:
            return
        limit = asyncio.Semaphore(self._max_inspections)

        async def bounded(uid: str, events: list[PodLifecycleEvent]) -> None:
            async with limit:
                await self._reconcile(uid, events)

        await asyncio.gather(*(bounded(uid, events) for uid, events in work))

    async def _reconcile(self, uid: str, events: list[PodLifecycleEvent]) -> None:
        """Inspect one changed pod, write the cache, then advance its record and send its events (upstream's
        reconcilePodRecord)."""
        record = self._records[uid]
        pod = record.current
        self._reinspect.discard(uid)
        if pod is None:
            # Nothing of the pod is left in the runtime.
            self._cache.delete(uid)
        else:
            timestamp = wall_seconds(self._clock)
            try:
                status = await inspect_pod(self._runtime, pod, timeout=self._timeout)
            except CRIError as exc:
                log.warning("pleg pod inspection failed, will retry pod=%s/%s error=%s", pod.namespace, pod.name, exc)
                self._cache.set(uid, None, exc, timestamp)
                self._reinspect.add(uid)
                return
            if not self._cache.set(uid, preserve_ips(status, self._cache.get(uid)), None, timestamp):
                return  # the cache holds a newer status (a container event): these events are old news
        if not events:
            events = [PodLifecycleEvent(uid, T.POD_SYNC)]  # a reinspection after a failure: sync the pod
        if pod is None:
            del self._records[uid]
        else:
            record.old, record.current = pod, None
        for event in events:
            if event.type is not T.CONTAINER_CHANGED:
                send(self._channel, event, self._metrics.discard_events.inc)

    async def _wait(self, delay: float) -> tuple[str, float] | None:
        """Until the period ends, `update` wakes the loop, or a relist request comes (which is returned)."""
        sleeper = asyncio.ensure_future(self._clock.sleep(delay))
        waker = asyncio.ensure_future(self._wake.wait())
        getter = asyncio.ensure_future(self._requests.get())
        try:
            await asyncio.wait([sleeper, waker, getter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker, getter):
                task.cancel()  # a no-op for the one that finished; Queue.get loses nothing when cancelled
        if getter.done() and not getter.cancelled():
            return getter.result()
        return None
