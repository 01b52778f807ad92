"""The node shutdown manager's metrics under upstream's names (pkg/kubelet/metrics), served on /metrics:

    kubelet_graceful_shutdown_start_time_seconds  when the last shutdown's handling started (unix seconds)
    kubelet_graceful_shutdown_end_time_seconds    when it ended, as read back from the state file at start

Set as upstream sets them: both from `graceful_node_shutdown_state` when the manager starts; at a shutdown the
start time and the end time back to 0, and the end time when the handling ends. (Older upstream releases set the
start gauge there by mistake; the current manager sets the end one, as here.)
"""

from __future__ import annotations

import datetime

from prometheus_client import CollectorRegistry, Gauge


def timestamp(t: datetime.datetime) -> float:
    return t.timestamp()


class ShutdownMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.start_time = Gauge(
            "kubelet_graceful_shutdown_start_time_seconds",
            "Last graceful shutdown start time since unix epoch in seconds",
            registry=self.registry,
        )
        self.end_time = Gauge(
            "kubelet_graceful_shutdown_end_time_seconds",
            "Last graceful shutdown end time since unix epoch in seconds",
            registry=self.registry,
        )
