"""What the decisions hand back: a pod to evict, and how."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from eviction.pods import PodInfo

# As upstream: how long a pod evicted "at once" gets to stop (immediateEvictionGracePeriodSeconds).
IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS = 1

# The eviction_signal label of kubelet_evictions for these evictions (upstream's names).
SIGNAL_EMPTY_DIR_FS_LIMIT = "emptydirfs.limit"
SIGNAL_EPHEMERAL_POD_FS_LIMIT = "ephemeralpodfs.limit"
SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT = "ephemeralcontainerfs.limit"


@dataclass(frozen=True)
class Eviction:
    """One pod to evict: the status and event message, the grace period to kill it with, and what to record."""

    pod: PodInfo
    signal: str  # the threshold's signal or a local storage limit: kubelet_evictions' eviction_signal label
    message: str
    grace_period_seconds: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Node-pressure evictions add the DisruptionTarget condition (reason TerminationByKubelet); limit ones do not.
    disruption_target: bool = False
    rank: int | None = None  # the pod's place in the ranking (0: first), for pressure evictions
