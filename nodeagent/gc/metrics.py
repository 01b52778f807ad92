"""Image GC metrics under upstream's name (pkg/kubelet/metrics), on the registry the agent serves as /metrics:

kubelet_image_garbage_collected_total{reason}   counter; reason is "age" (imageMaximumGCAge) or "space"
                                                (the high threshold, or the eviction manager's reclaim)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from eviction.imagegc import REASON_AGE, REASON_SPACE


class ImageGCMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # prometheus_client adds the `_total` suffix to a counter's name itself.
        self.collected = Counter(
            "kubelet_image_garbage_collected",
            "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
            ["reason"],
            registry=self.registry,
        )
        for reason in (REASON_AGE, REASON_SPACE):
            self.collected.labels(reason)  # both series from the start, at 0

    def image_collected(self, reason: str) -> None:
        self.collected.labels(reason).inc()
