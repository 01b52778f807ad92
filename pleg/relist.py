"""A minimal relist: the runtime-status seam until the PLEG issue brings GenericPLEG and EventedPLEG.

Every period it lists sandboxes and containers (two CRI calls, whatever the number of pods), diffs each object's
state with the previous relist and emits PodLifecycleEvents per pod UID (from the kubelet's labels). Events go to
the syncLoop's queue without blocking: when the queue is full the event is dropped and counted, and the next
periodic sync of that pod catches up. `last_relist` is the health signal the node's Ready condition will read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from cri.errors import CRIError
from cri.service import RuntimeService
from cri.v1 import api_pb2
from pleg.events import PodLifecycleEvent, PodLifecycleEventType

log = logging.getLogger(__name__)

POD_UID_LABEL = "io.kubernetes.pod.uid"

_Key = tuple[str, str]  # (kind, id): kind is "container" or "sandbox"


class SimpleRelist:
    def __init__(
        self,
        runtime: RuntimeService,
        events: asyncio.Queue[PodLifecycleEvent],
        *,
        period: float = 1.0,
        monotonic: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._runtime = runtime
        self._events = events
        self._period = period
        self._monotonic = monotonic
        self._sleep = sleep
        self._states: dict[_Key, tuple[str, int]] = {}  # -> (pod uid, CRI state)
        self.dropped = 0
        self.last_relist: float | None = None

    def _now(self) -> float:
        return self._monotonic() if self._monotonic else asyncio.get_running_loop().time()

    async def relist_once(self) -> list[PodLifecycleEvent]:
        sandboxes = await self._runtime.list_pod_sandbox()
        containers = await self._runtime.list_containers()
        current: dict[_Key, tuple[str, int]] = {}
        for s in sandboxes:
            if POD_UID_LABEL in s.labels:
                current[("sandbox", s.id)] = (s.labels[POD_UID_LABEL], s.state)
        for c in containers:
            if POD_UID_LABEL in c.labels:
                current[("container", c.id)] = (c.labels[POD_UID_LABEL], c.state)
        events = diff(self._states, current)
        self._states = current
        self.last_relist = self._now()
        for event in events:
            try:
                self._events.put_nowait(event)
            except asyncio.QueueFull:
                self.dropped += 1
                log.warning(
                    "pleg event dropped pod=%s type=%s dropped_total=%d", event.pod_uid, event.type.value, self.dropped
                )
        return events

    async def run(self) -> None:
        while True:
            try:
                await self.relist_once()
            except CRIError as exc:
                log.warning("relist failed error=%s", exc)
            await self._sleep(self._period)


def diff(old: dict[_Key, tuple[str, int]], new: dict[_Key, tuple[str, int]]) -> list[PodLifecycleEvent]:
    """Events for what changed between two relists (pure)."""
    events: list[PodLifecycleEvent] = []
    for key, (uid, state) in new.items():
        kind, object_id = key
        before = old.get(key)
        if before is not None and before[1] == state:
            continue
        if kind == "sandbox":
            events.append(PodLifecycleEvent(uid, PodLifecycleEventType.POD_SYNC, object_id))
        elif state == api_pb2.CONTAINER_RUNNING:
            events.append(PodLifecycleEvent(uid, PodLifecycleEventType.CONTAINER_STARTED, object_id))
        elif state == api_pb2.CONTAINER_EXITED:
            events.append(PodLifecycleEvent(uid, PodLifecycleEventType.CONTAINER_DIED, object_id))
        elif before is not None:
            events.append(PodLifecycleEvent(uid, PodLifecycleEventType.CONTAINER_CHANGED, object_id))
    for key, (uid, _) in old.items():
        if key not in new:
            kind, object_id = key
            event_type = (
                PodLifecycleEventType.POD_SYNC if kind == "sandbox" else PodLifecycleEventType.CONTAINER_REMOVED
            )
            events.append(PodLifecycleEvent(uid, event_type, object_id))
    return events
