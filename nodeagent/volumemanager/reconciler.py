"""The reconciler's decisions (upstream volumemanager/reconciler), as a pure function of both states: what to
set up, set up again (content updates), or tear down, in that loop's order (unmounts first).

- set up: a desired volume that is not in the actual state;
- set up again: a desired volume in the actual state marked for a remount (each pod sync marks the API data
  volumes, and reconstructed volumes once);
- tear down: a volume in the actual state whose pod was let go (its containers are gone, or housekeeping found it
  unknown). A reconstructed volume of a pod not yet synced after a restart is left alone until then.

An operation already running for a volume, or one failing in its back-off (upstream's exponential back-off per
operation: 0.5 s doubling up to 2m2s), is not started again.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Set
from dataclasses import dataclass

from nodeagent.volumemanager.actual import ActualStateOfWorld
from nodeagent.volumemanager.desired import DesiredStateOfWorld, VolumeKey

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 122.0


class OpKind(enum.Enum):
    MOUNT = "mount"
    REMOUNT = "remount"
    UNMOUNT = "unmount"


@dataclass(frozen=True)
class Operation:
    kind: OpKind
    key: VolumeKey
    plugin: str


def plan(
    desired: DesiredStateOfWorld,
    actual: ActualStateOfWorld,
    *,
    released: Set[str],
    in_flight: Set[VolumeKey],
    not_before: Mapping[VolumeKey, float],
    now: float,
) -> list[Operation]:
    def ready(key: VolumeKey) -> bool:
        return key not in in_flight and not_before.get(key, 0.0) <= now

    ops: list[Operation] = []
    desired_uids = desired.uids()
    for volume in actual:
        if not ready(volume.key) or desired.wants(volume.key):
            continue
        if volume.pod_uid in released or volume.pod_uid in desired_uids:
            ops.append(Operation(OpKind.UNMOUNT, volume.key, volume.plugin))
    for wanted in desired.volumes_to_mount():
        if not ready(wanted.key):
            continue
        if wanted.key not in actual:
            ops.append(Operation(OpKind.MOUNT, wanted.key, wanted.plugin))
        elif desired.needs_remount(wanted.key):
            ops.append(Operation(OpKind.REMOUNT, wanted.key, wanted.plugin))
    return ops


class Backoff:
    """Per-operation exponential back-off (upstream exponentialbackoff: 500 ms doubling, at most 2m2s)."""

    def __init__(self, initial: float = INITIAL_BACKOFF, maximum: float = MAX_BACKOFF) -> None:
        self._initial = initial
        self._max = maximum
        self._delay: dict[VolumeKey, float] = {}
        self.not_before: dict[VolumeKey, float] = {}

    def failed(self, key: VolumeKey, now: float) -> float:
        delay = min(self._delay.get(key, self._initial / 2) * 2, self._max)
        self._delay[key] = delay
        self.not_before[key] = now + delay
        return delay

    def succeeded(self, key: VolumeKey) -> None:
        self._delay.pop(key, None)
        self.not_before.pop(key, None)

    def forget_pod(self, uid: str) -> None:
        for key in [k for k in self._delay if k[0] == uid]:
            self._delay.pop(key, None)
            self.not_before.pop(key, None)
