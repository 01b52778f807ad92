"""Pod configuration: the sources of pods (apiserver, static directory, static URL) merged into one stream.

As upstream's pkg/kubelet/config: each source reports its pods; `PodStorage` keeps per-source state and turns
those reports into typed, deduplicated updates (ADD, UPDATE, DELETE, REMOVE, RECONCILE) for the syncLoop.
"""

from nodeagent.podconfig.config import PodConfig
from nodeagent.podconfig.storage import Operation, PodStorage, PodUpdate, SourceUpdate

__all__ = ["Operation", "PodConfig", "PodStorage", "PodUpdate", "SourceUpdate"]
