"""PLEG metrics under upstream's names (pkg/kubelet/metrics), so a kubelet dashboard reads a nodeagent node:

    kubelet_pleg_relist_duration_seconds                 histogram: how long one relist took
    kubelet_pleg_relist_interval_seconds                 histogram: time between the starts of two relists
    kubelet_pleg_discard_events_total                    events dropped because the syncLoop's channel was full
    kubelet_pleg_last_seen_seconds                       wall time of the last successful relist (set on health check)
    kubelet_evented_pleg_connection_success_count_total  GetContainerEvents streams opened
    kubelet_evented_pleg_connection_error_count_total    GetContainerEvents streams that failed
    kubelet_evented_pleg_connection_latency_seconds      histogram: a container event's age when it reached the cache

prometheus_client's text exposition always names a counter `<name>_total` (and adds `<name>_created`), where
upstream's Go client exposes these three counters without a suffix; the kubelet server's /metrics will have to
rename them. Histograms use upstream's buckets (the Go client's DefBuckets). The metrics live on an injected
`CollectorRegistry`, as `cri.instrumented` does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# The Go client's prometheus.DefBuckets, which upstream's PLEG histograms use.
DEF_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class PLEGMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.relist_duration = Histogram(
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG.",
            buckets=DEF_BUCKETS,
            registry=registry,
        )
        self.relist_interval = Histogram(
            "kubelet_pleg_relist_interval_seconds",
            "Interval in seconds between relisting in PLEG.",
            buckets=DEF_BUCKETS,
            registry=registry,
        )
        self.discard_events = Counter(
            "kubelet_pleg_discard_events",
            "The number of discard events in PLEG.",
            registry=registry,
        )
        self.last_seen = Gauge(
            "kubelet_pleg_last_seen_seconds",
            "Timestamp in seconds when PLEG was last seen active.",
            registry=registry,
        )
        self.connection_success = Counter(
            "kubelet_evented_pleg_connection_success_count",
            "The number of times a streaming client was obtained to receive CRI Events.",
            registry=registry,
        )
        self.connection_error = Counter(
            "kubelet_evented_pleg_connection_error_count",
            "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
            registry=registry,
        )
        self.connection_latency = Histogram(
            "kubelet_evented_pleg_connection_latency_seconds",
            "The latency of streaming connection with the CRI runtime, measured in seconds.",
            buckets=DEF_BUCKETS,
            registry=registry,
        )
