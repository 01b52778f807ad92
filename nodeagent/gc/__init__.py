"""Node-level garbage collection: unused images (`images`) and dead containers and sandboxes (`containers`), on
their own schedules and on the eviction manager's demand, with the image GC metric (`metrics`). The decisions are
`eviction.imagegc` and `eviction.containergc`; these managers make the CRI calls."""

from nodeagent.gc.containers import ContainerGCManager
from nodeagent.gc.errors import ContainerGCError, GCError, ImageGCError
from nodeagent.gc.images import ImageGCManager, image_policy, summary_image_fs
from nodeagent.gc.metrics import ImageGCMetrics
from nodeagent.gc.periods import gc_periods
from nodeagent.gc.podstate import pod_gc_state

__all__ = [
    "ContainerGCError",
    "ContainerGCManager",
    "GCError",
    "ImageGCError",
    "ImageGCManager",
    "ImageGCMetrics",
    "gc_periods",
    "image_policy",
    "pod_gc_state",
    "summary_image_fs",
]
