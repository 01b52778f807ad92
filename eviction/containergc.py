"""Container and sandbox garbage collection as pure decisions: upstream's containerGC (kuberuntime_gc.go) without
the I/O.

Containers (`containers_to_remove`): only those not running and created at least MinAge ago are evictable (upstream's
policy: MinAge 0, MaxPerPodContainer 1, MaxContainers -1). They are grouped per (pod UID, container name), upstream's
evict unit.

- Once every pod source is ready, the units of a pod whose content may go (deleted, evicted, or unknown) go whole;
  so do those of a pod that has stopped running when the caller is the eviction manager (`evict_non_deleted`,
  upstream's DeleteAllUnusedContainers).
- Every other unit keeps its MaxPerPodContainer most recent dead instances (newest by creation, then attempt): the
  last exit stays readable (status, logs), the older ones go.
- With MaxContainers set, the units are cut to an equal share each (at least one), and then the oldest go first.

Sandboxes (`sandboxes_to_remove`, decided on the containers left afterwards): a sandbox that is ready or still holds
a container is active and never removed. A pod whose content may go (or that has stopped, for the eviction manager)
loses every inactive sandbox; any other pod keeps its newest sandbox, whatever its state, and loses the older
inactive ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

# As upstream's kubelet: ContainerGCPeriod.
CONTAINER_GC_PERIOD = timedelta(minutes=1)
# The event when a periodic pass fails (upstream's events.ContainerGCFailed).
CONTAINER_GC_FAILED = "ContainerGCFailed"


class PodState(StrEnum):
    """What the kubelet knows of a pod, as upstream's podStateProvider answers for GC."""

    # Still to run or running: its newest dead instances and sandbox stay.
    ACTIVE = "active"
    # Stopped for good but not deleted (a finished Job's pod): its runtime may go when the node must reclaim
    # (ShouldPodRuntimeBeRemoved).
    TERMINATED = "terminated"
    # Deleted and stopped, evicted, or unknown once the sources are ready: everything may go
    # (ShouldPodContentBeRemoved).
    REMOVED = "removed"


@dataclass(frozen=True)
class ContainerGCPolicy:
    min_age: timedelta = timedelta(0)
    max_per_pod_container: int = 1  # < 0: no limit
    max_containers: int = -1  # < 0: no limit


@dataclass(frozen=True)
class ContainerRecord:
    id: str
    pod_uid: str
    name: str
    created: datetime
    running: bool = False
    unknown: bool = False  # the runtime cannot tell its state: stopped before it is removed, as upstream
    attempt: int = 0
    sandbox_id: str = ""


@dataclass(frozen=True)
class SandboxRecord:
    id: str
    pod_uid: str
    created: datetime
    ready: bool = False
    attempt: int = 0


PodStates = Callable[[str], PodState]


def _newest_first(record: ContainerRecord) -> tuple[datetime, int]:
    return (record.created, record.attempt)


def _whole_pod_goes(state: PodState, evict_non_deleted: bool) -> bool:
    return state is PodState.REMOVED or (evict_non_deleted and state is PodState.TERMINATED)


def _oldest(unit: Sequence[ContainerRecord], count: int) -> list[ContainerRecord]:
    """The `count` oldest of a unit (all of it when count >= its size), oldest first."""
    if count <= 0:
        return []
    return sorted(unit, key=_newest_first)[:count]


def _cut(unit: Sequence[ContainerRecord], keep: int) -> tuple[list[ContainerRecord], list[ContainerRecord]]:
    """(the newest `keep`, the rest to remove, oldest first)."""
    extra = _oldest(unit, len(unit) - keep)
    gone = {c.id for c in extra}
    return [c for c in unit if c.id not in gone], extra


def containers_to_remove(
    containers: Iterable[ContainerRecord],
    pod_state: PodStates,
    *,
    policy: ContainerGCPolicy,
    now: datetime,
    all_sources_ready: bool,
    evict_non_deleted: bool,
) -> list[ContainerRecord]:
    """The dead containers to remove (upstream's evictContainers), oldest of each unit first."""
    newest_allowed = now - policy.min_age
    units: dict[tuple[str, str], list[ContainerRecord]] = {}
    for c in containers:
        if c.running or c.created > newest_allowed:
            continue
        units.setdefault((c.pod_uid, c.name), []).append(c)
    removed: list[ContainerRecord] = []
    if all_sources_ready:
        for key in [k for k in units if _whole_pod_goes(pod_state(k[0]), evict_non_deleted)]:
            unit = units.pop(key)
            removed.extend(_oldest(unit, len(unit)))
    if policy.max_per_pod_container >= 0:
        for key, unit in units.items():
            units[key], extra = _cut(unit, policy.max_per_pod_container)
            removed.extend(extra)
    remaining = sum(len(u) for u in units.values())
    if policy.max_containers >= 0 and remaining > policy.max_containers:
        # An equal share per unit first (at least one each), then the oldest anywhere.
        share = max(1, policy.max_containers // max(1, len(units)))
        for key, unit in units.items():
            units[key], extra = _cut(unit, share)
            removed.extend(extra)
        left = [c for unit in units.values() for c in unit]
        if len(left) > policy.max_containers:
            removed.extend(_oldest(left, len(left) - policy.max_containers))
    return removed


def sandboxes_to_remove(
    sandboxes: Iterable[SandboxRecord],
    containers: Iterable[ContainerRecord],
    pod_state: PodStates,
    *,
    evict_non_deleted: bool,
) -> list[SandboxRecord]:
    """The sandboxes to remove (upstream's evictSandboxes), given the containers that exist now."""
    holding = {c.sandbox_id for c in containers}
    by_pod: dict[str, list[SandboxRecord]] = {}
    for s in sandboxes:
        by_pod.setdefault(s.pod_uid, []).append(s)
    removed: list[SandboxRecord] = []
    for uid, group in by_pod.items():
        ordered = sorted(group, key=lambda s: (s.created, s.attempt), reverse=True)
        # As upstream: the newest is kept only while the pod may still need it, even when it is dead.
        keep = 0 if _whole_pod_goes(pod_state(uid), evict_non_deleted) else 1
        removed.extend(s for s in reversed(ordered[keep:]) if not s.ready and s.id not in holding)
    return removed


__all__ = [
    "CONTAINER_GC_FAILED",
    "CONTAINER_GC_PERIOD",
    "ContainerGCPolicy",
    "ContainerRecord",
    "PodState",
    "PodStates",
    "SandboxRecord",
    "containers_to_remove",
    "sandboxes_to_remove",
]
