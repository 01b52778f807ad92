"""The eviction manager's metrics under upstream's names (pkg/kubelet/metrics), served on /metrics:

    kubelet_evictions{eviction_signal}                   pods evicted, by the signal (or local storage limit)
    kubelet_eviction_stats_age_seconds{eviction_signal}  histogram: how old the stats were when a pod was evicted
                                                          on them, one observation per threshold acted on

As with the PLEG's counters (pleg/metrics.py), prometheus_client exposes the counter as `kubelet_evictions_total`
where upstream's Go client writes `kubelet_evictions`.
"""

from __future__ import annotations

from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from pleg.metrics import DEF_BUCKETS


class EvictionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.evictions = Counter(
            "kubelet_evictions",
            "Cumulative number of pod evictions by eviction signal",
            ["eviction_signal"],
            registry=self.registry,
        )
        self.stats_age = Histogram(
            "kubelet_eviction_stats_age_seconds",
            "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal",
            ["eviction_signal"],
            buckets=DEF_BUCKETS,
            registry=self.registry,
        )

    def serve_on(self, registry: CollectorRegistry) -> None:
        """Also expose these series on `registry` (the agent's /metrics one, made after the manager)."""
        registry.register(self.evictions)
        registry.register(self.stats_age)

    def evicted(self, signal: str) -> None:
        self.evictions.labels(eviction_signal=signal).inc()

    def stats_observed(self, signal: str, observed_at: datetime | None, now: datetime) -> None:
        """As upstream: only observations that carry a time count."""
        if observed_at is not None:
            self.stats_age.labels(eviction_signal=signal).observe(max(0.0, (now - observed_at).total_seconds()))
