"""The REST client's metrics under client-go's names: rest_client_requests_total{code,host,method} and
rest_client_request_duration_seconds{verb,host} (the kubelet's /metrics carries them for its apiserver client)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# client-go's requestLatency buckets.
_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class RestClientMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "host", "method"],
            registry=registry,
        )
        self.duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=_BUCKETS,
            registry=registry,
        )

    def observe(self, *, host: str, method: str, code: str, seconds: float) -> None:
        """`code` is the HTTP status, or "<error>" when no answer came (as client-go labels it)."""
        self.requests.labels(code=code, host=host, method=method).inc()
        self.duration.labels(verb=method, host=host).observe(seconds)
