"""Pod configuration: the sources of pods (apiserver, static directory, static URL) merged into one stream.

As upstream's pkg/kubelet/config: each source reports its pods; `PodStorage` keeps per-source state and turns
those reports into typed, deduplicated updates (ADD, UPDATE, DELETE, REMOVE, RECONCILE) for the syncLoop.
"""

from nodeagent.podconfig.config import PodConfig
from nodeagent.podconfig.storage import (
    FAILED_VALIDATION,
    InvalidPodSink,
    Operation,
    PodStorage,
    PodUpdate,
    SourceUpdate,
    pod_full_name,
)

__all__ = [
    "FAILED_VALIDATION",
    "InvalidPodSink",
    "Operation",
    "PodConfig",
    "PodStorage",
    "PodUpdate",
    "SourceUpdate",
    "pod_full_name",
]
