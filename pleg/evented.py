"""EventedPLEG: follow the runtime's container events instead of polling (KEP-3386, upstream pleg/evented.go).

It subscribes to CRI GetContainerEvents. Each event carries the status of its sandbox and of every container in it;
that status goes into the pod status cache at the event's own time, and the event becomes a PLEG event:

    CONTAINER_STARTED_EVENT  → ContainerStarted        CONTAINER_STOPPED_EVENT → ContainerDied
    CONTAINER_CREATED_EVENT  → (cache only)            CONTAINER_DELETED_EVENT → ContainerDied, ContainerRemoved

The GenericPLEG keeps running underneath with upstream's evented settings (relist every 5 min, unhealthy after 10)
as a safety net, and does the relists the stream needs. Every 2 s the cache's global timestamp moves to the time of
the last event received (only while a stream is open: without one, the worker waits for a relist). Not to "now", as
upstream's evented PLEG does: the runtime sends events in the order it makes them, so an event received proves that
every earlier one has arrived, while "now" does not. A StartContainer's event still in flight when the tick said
"fresh as of now" let the pod's next sync read the container as created, never started, and remove it while it ran
(the soak's churn: 139 of 2,271 pods; docs/reliability.md). A worker whose pod had no event since its last sync
asks for a relist of its pod (nodeagent/podworkers.py), which stamps the time before it lists.

When the stream fails it is opened again after a back-off (0.5 s doubling), each failure forcing a relist. That
relist usually fails too (the runtime is away), and containerd drops the events of a death while nobody listens, so a
relist is owed from a failure until one succeeds after a stream has opened again: the new stream's watcher retries it
every second, and the cache tick holds still meanwhile (otherwise a container that died during a short outage would
be reported running until the 5-minute safety relist; upstream has that gap). After 5 failures in a row the PLEG
falls back: the relist runs every second with the generic threshold (3 min), and the
stream is tried again every 30 s; once a stream has proved itself (it delivered an event, or stayed open 10 s),
the evented settings come back. A runtime that does not implement the call makes the `auto` mode stay generic.

Two facts of containerd 1.7 shape the details:

- it drops events while nobody subscribes and buffers some, so a new subscriber gets stale events first: an event
  older than the last successful relist carries nothing the relist did not see, and is dropped;
- it serves one subscriber and gives the next event to a handler whose client has already gone (a stream closed by
  this or an earlier agent) before that handler notices: events can be lost right after subscribing. The first
  event a new stream receives therefore triggers a relist, which brings back whatever the lost ones said.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cri.errors import CRIError, UnimplementedError
from cri.service import RuntimeService
from cri.v1 import api_pb2
from pleg.cache import PodStatusCache
from pleg.clock import Clock, wall_seconds
from pleg.events import PodLifecycleEvent, PodLifecycleEventType, send
from pleg.generic import GenericPLEG
from pleg.health import EVENTED_RELIST, GENERIC_RELIST, RelistDuration, channel_health
from pleg.metrics import PLEGMetrics
from pleg.status import from_event, pod_uid, without_sandbox

log = logging.getLogger(__name__)

T = PodLifecycleEventType

# Upstream's eventedPlegMaxStreamRetries.
MAX_STREAM_RETRIES = 5
# Upstream's globalCacheUpdatePeriod is 5 s (1 s in its first release); 2 s, the housekeeping period, bounds how long
# a worker waiting on a pod whose containers sent no event is held.
GLOBAL_CACHE_UPDATE_PERIOD = 2.0
# How often an owed relist (see the module docstring) is retried while a stream is open.
OWED_RELIST_RETRY = 1.0
RETRY_BACKOFF_START = 0.5
RETRY_BACKOFF_CAP = 5.0
# After falling back: how often to try the stream again, and when a stream counts as working without an event.
RETRY_EVENTED_AFTER = 30.0
HEALTHY_STREAM_AFTER = 10.0

_EVENT_NAMES = {v: k for k, v in api_pb2.ContainerEventType.items()}


def pleg_events(event: api_pb2.ContainerEventResponse, uid: str) -> list[PodLifecycleEvent]:
    """The PLEG events for one container event (pure)."""
    kind = event.container_event_type
    if kind == api_pb2.CONTAINER_STARTED_EVENT:
        return [PodLifecycleEvent(uid, T.CONTAINER_STARTED, event.container_id)]
    if kind == api_pb2.CONTAINER_STOPPED_EVENT:
        return [PodLifecycleEvent(uid, T.CONTAINER_DIED, event.container_id)]
    if kind == api_pb2.CONTAINER_DELETED_EVENT:
        # As upstream (and the generic PLEG for a container that vanished): both, the pod syncs once.
        return [
            PodLifecycleEvent(uid, T.CONTAINER_DIED, event.container_id),
            PodLifecycleEvent(uid, T.CONTAINER_REMOVED, event.container_id),
        ]
    return []  # CONTAINER_CREATED_EVENT: the cache is updated, no PLEG event (the generic PLEG sends none either)


def retry_backoff(failures: int) -> float:
    """Seconds before opening the stream again after `failures` failures in a row: 0.5, 1, 2, 4, capped at 5."""
    return min(RETRY_BACKOFF_START * 2.0 ** max(failures - 1, 0), RETRY_BACKOFF_CAP)


@dataclass(frozen=True)
class _Attempt:
    proved: bool  # delivered an event or stayed open long enough
    unimplemented: bool
    error: CRIError | None


class EventedPLEG:
    def __init__(
        self,
        runtime: RuntimeService,
        generic: GenericPLEG,
        cache: PodStatusCache,
        *,
        clock: Clock,
        metrics: PLEGMetrics,
        generic_duration: RelistDuration = GENERIC_RELIST,
        evented_duration: RelistDuration = EVENTED_RELIST,
        stay_generic_if_unimplemented: bool = True,
        max_stream_retries: int = MAX_STREAM_RETRIES,
        retry_evented_after: float = RETRY_EVENTED_AFTER,
        healthy_stream_after: float = HEALTHY_STREAM_AFTER,
        global_cache_update_period: float = GLOBAL_CACHE_UPDATE_PERIOD,
    ) -> None:
        self._runtime = runtime
        self._generic = generic
        self._cache = cache
        self._clock = clock
        self._metrics = metrics
        self._generic_duration = generic_duration
        self._evented_duration = evented_duration
        self._stay_generic_if_unimplemented = stay_generic_if_unimplemented
        self._max_retries = max_stream_retries
        self._retry_evented_after = retry_evented_after
        self._healthy_after = healthy_stream_after
        self._cache_period = global_cache_update_period
        self.in_use = False
        self.streaming = False  # a stream is open right now
        # A relist that must succeed while a stream is open before the cache is as fresh as the stream: true at start
        # (events between the agent's first relist and the subscription are lost) and after every stream failure.
        self.relist_owed = True
        self.events_received = 0
        self.fallbacks = 0
        self._last_event_time: float | None = None  # created_at of the newest event received (wall seconds)

    # --- the PodLifecycleEventGenerator interface --------------------------------------------------------------

    def watch(self) -> asyncio.Queue[PodLifecycleEvent]:
        return self._generic.watch()

    def update(self, duration: RelistDuration) -> None:
        self._generic.update(duration)

    def healthy(self) -> tuple[bool, str]:
        ok, message = self._generic.healthy()
        if not ok:
            return ok, message
        channel = self.watch()
        return channel_health(channel.qsize(), channel.maxsize)

    async def relist(self) -> bool:
        return await self._generic.relist()

    def request_relist(self, uid: str) -> None:
        self._generic.request_relist(uid)

    def request_reinspect(self, uid: str) -> None:
        self._generic.request_reinspect(uid)

    async def run(self) -> None:
        self._use_evented()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._generic.run(), name="pleg-relist")
            tasks.create_task(self._tick_cache(), name="pleg-cache-tick")
            await self._watch_loop()

    # --- the stream --------------------------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        failures = 0
        while True:
            attempt = await self._watch_once()
            if attempt.proved:
                failures = 0
            if attempt.unimplemented and self._stay_generic_if_unimplemented:
                log.warning("runtime does not implement GetContainerEvents, generic pleg only error=%s", attempt.error)
                self._fall_back(failures)
                return
            failures += 1
            self.relist_owed = True
            self._metrics.connection_error.inc()
            log.warning("evented pleg stream failed failures=%d error=%s", failures, attempt.error or "stream ended")
            await self._generic.relist()  # as upstream: whatever the stream missed
            if self.in_use and failures >= self._max_retries:
                self._fall_back(failures)
            await self._clock.sleep(retry_backoff(failures) if self.in_use else self._retry_evented_after)

    async def _watch_once(self) -> _Attempt:
        proved = asyncio.Event()
        timer = asyncio.create_task(self._prove_after(proved), name="pleg-stream-proof")
        first = True
        error: CRIError | None = None
        stream = self._runtime.get_container_events()
        self.streaming = True
        # Started before the first read of the stream, so the subscription is on its way before the relist lists.
        owed = asyncio.create_task(self._pay_owed_relist(), name="pleg-owed-relist") if self.relist_owed else None
        try:
            async for event in stream:
                self._proved(proved)
                self.events_received += 1
                self.process(event)
                if first:
                    first = False
                    # Events may have gone to stale handlers of closed streams (see the module docstring).
                    await self._generic.relist()
        except CRIError as exc:
            error = exc
        finally:
            self.streaming = False
            timer.cancel()
            if owed is not None:
                owed.cancel()
            close = getattr(stream, "aclose", None)  # ends the call at once, also when this task is cancelled
            if close is not None:
                await close()
        return _Attempt(proved.is_set(), isinstance(error, UnimplementedError), error)

    async def _pay_owed_relist(self) -> None:
        """Relist until one succeeds, while this stream is open; then the cache tick may move again."""
        while not await self._generic.relist():
            await self._clock.sleep(OWED_RELIST_RETRY)
        self.relist_owed = False

    async def _prove_after(self, proved: asyncio.Event) -> None:
        await self._clock.sleep(self._healthy_after)
        self._proved(proved)

    def _proved(self, proved: asyncio.Event) -> None:
        if proved.is_set():
            return
        proved.set()
        self._metrics.connection_success.inc()
        if not self.in_use:
            self._use_evented()

    def _use_evented(self) -> None:
        self.in_use = True
        log.info("evented pleg in use relist_period=%gs", self._evented_duration.period)
        self._generic.update(self._evented_duration)

    def _fall_back(self, failures: int) -> None:
        self.in_use = False
        self.fallbacks += 1
        log.warning(
            "evented pleg not working, falling back to generic relisting failures=%d relist_period=%gs",
            failures,
            self._generic_duration.period,
        )
        self._generic.update(self._generic_duration)

    async def _tick_cache(self) -> None:
        while True:
            await self._clock.sleep(self._cache_period)
            # Only while events can arrive: with the stream down, a waiting worker waits for a relist instead.
            seen = self._last_event_time
            if self.in_use and self.streaming and not self.relist_owed and seen is not None:
                self._cache.update_time(seen)

    # --- one event ---------------------------------------------------------------------------------------------

    def process(self, event: api_pb2.ContainerEventResponse) -> None:
        """Turn one container event into a cache update and PLEG events. Never waits."""
        created = event.created_at / 1e9
        last_relist = self._generic.last_relist_wall
        if last_relist is not None and created < last_relist:
            log.debug("evented pleg event older than the last relist dropped container=%s", event.container_id[:12])
            return
        if self._last_event_time is None or created > self._last_event_time:
            self._last_event_time = created
        self._metrics.connection_latency.observe(max(wall_seconds(self._clock) - created, 0.0))
        deleted = event.container_event_type == api_pb2.CONTAINER_DELETED_EVENT
        if not event.HasField("pod_sandbox_status") or not event.pod_sandbox_status.HasField("metadata"):
            if deleted:
                self._sandbox_deleted(event.container_id, created)
            else:
                # As upstream: the sandbox went away before the runtime built the event; a relist sees the rest.
                log.warning(
                    "evented pleg event without sandbox status ignored container=%s type=%s",
                    event.container_id[:12],
                    _EVENT_NAMES.get(event.container_event_type, event.container_event_type),
                )
            return
        uid = pod_uid(event.pod_sandbox_status.labels)
        if not uid:
            return  # not a kubelet pod
        status = from_event(event, self._cache.get(uid))
        if status is None:
            return
        if deleted:
            if status.empty:
                self._cache.delete(uid)
            else:
                self._cache.set(uid, status, None, created)
        elif not self._cache.set(uid, status, None, created):
            return  # the cache already holds a newer status
        for pleg_event in pleg_events(event, uid):
            send(self.watch(), pleg_event, self._metrics.discard_events.inc)

    def _sandbox_deleted(self, sandbox_id: str, created: float) -> None:
        """A removed sandbox: the runtime no longer has its status, so find its pod in the cache."""
        owner = next((s for s in self._cache.get_all() if any(sb.id == sandbox_id for sb in s.sandboxes)), None)
        if owner is None:
            return
        rest = without_sandbox(owner, sandbox_id)
        if rest.empty:
            self._cache.delete(owner.uid)
        else:
            self._cache.set(owner.uid, rest, None, created)
        for pleg_event in (
            PodLifecycleEvent(owner.uid, T.CONTAINER_DIED, sandbox_id),
            PodLifecycleEvent(owner.uid, T.CONTAINER_REMOVED, sandbox_id),
        ):
            send(self.watch(), pleg_event, self._metrics.discard_events.inc)
