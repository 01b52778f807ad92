"""Pod lifecycle events: what the PLEG tells the syncLoop (shared value types live with their producer)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class PodLifecycleEventType(enum.Enum):
    CONTAINER_STARTED = "ContainerStarted"
    CONTAINER_DIED = "ContainerDied"
    CONTAINER_REMOVED = "ContainerRemoved"
    CONTAINER_CHANGED = "ContainerChanged"
    # Not a container change: the pod as a whole needs a sync (e.g. its status could not be read).
    POD_SYNC = "PodSync"


@dataclass(frozen=True)
class PodLifecycleEvent:
    pod_uid: str
    type: PodLifecycleEventType
    # The container ID for container events, empty for POD_SYNC.
    data: str = ""
