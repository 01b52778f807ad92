"""What the container GC needs to know of a pod (upstream's podStateProvider for GC), from the pod workers and the
pod sources:

- content removable (`PodState.REMOVED`, upstream's ShouldPodContentBeRemoved): evicted (its worker was told so by
  the kill, upstream's podSyncStatus.evicted: an evicted pod whose containers all exited 0 ends Succeeded without
  reason Evicted; or the apiserver says reason Evicted, e.g. after a restart), or deleted and stopped,
  or unknown to the workers and to every source once they have all reported (before that, an unknown pod may be one
  not seen yet; a pod a source has but no worker yet is one being admitted);
- runtime removable only (`PodState.TERMINATED`, ShouldPodRuntimeBeRemoved): stopped for good, not deleted;
- otherwise `PodState.ACTIVE`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from eviction.containergc import PodState
from eviction.messages import REASON as EVICTED
from nodeagent.podworkers import WorkState

Pod = Mapping[str, Any]


def pod_gc_state(
    uid: str,
    *,
    worker_state: Callable[[str], WorkState | None],
    pod_by_uid: Callable[[str], Pod | None],
    sources_ready: Callable[[], bool],
    evicted_by_kill: Callable[[str], bool] = lambda uid: False,
) -> PodState:
    state = worker_state(uid)
    pod = pod_by_uid(uid)
    if state is None:
        if pod is not None:
            # In a source but no worker yet (admission pending right after a restart): what it left stays.
            return PodState.ACTIVE
        return PodState.REMOVED if sources_ready() else PodState.ACTIVE
    evicted = evicted_by_kill(uid) or (pod is not None and (pod.get("status") or {}).get("reason") == EVICTED)
    if evicted:
        return PodState.REMOVED
    if state is not WorkState.TERMINATED:
        return PodState.ACTIVE
    deleted = pod is None or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return PodState.REMOVED if deleted else PodState.TERMINATED
