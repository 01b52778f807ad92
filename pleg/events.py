"""Pod lifecycle events: what the PLEG tells the syncLoop (shared value types live with their producer).

The channel to the syncLoop is a bounded asyncio.Queue that the PLEG never waits on: `send` drops an event that does
not fit and counts it, as upstream does, and the pod's next periodic sync catches up.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


class PodLifecycleEventType(enum.Enum):
    CONTAINER_STARTED = "ContainerStarted"
    CONTAINER_DIED = "ContainerDied"
    CONTAINER_REMOVED = "ContainerRemoved"
    CONTAINER_CHANGED = "ContainerChanged"
    # Not a container change: the pod as a whole needs a sync (e.g. it was inspected again after a failure).
    POD_SYNC = "PodSync"


@dataclass(frozen=True)
class PodLifecycleEvent:
    pod_uid: str
    type: PodLifecycleEventType
    # The container (or sandbox) ID for container events, empty for POD_SYNC.
    data: str = ""


def send(channel: asyncio.Queue[PodLifecycleEvent], event: PodLifecycleEvent, on_drop: Callable[[], None]) -> bool:
    """Put without waiting; when the channel is full, drop the event, count it (`on_drop`) and log."""
    try:
        channel.put_nowait(event)
    except asyncio.QueueFull:
        on_drop()
        log.error(
            "pleg event channel is full, event discarded pod=%s type=%s data=%s",
            event.pod_uid,
            event.type.value,
            event.data[:12],
        )
        return False
    return True
