"""The REST client's metrics under client-go's names (the kubelet's /metrics carries them for its apiserver client):
rest_client_requests_total{code,host,method}, every attempt; rest_client_request_retries_total{code,verb,host}, every
attempt after a request's first (a Retry-After retry, `retry`); rest_client_request_duration_seconds{verb,host}, once
a request, its retries and their waits included (client-go observes it around the whole `Request.request`)."""

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

        self.retries = Counter(
            "rest_client_request_retries",
            "Number of request retries, partitioned by status code, verb, and host.",
            ["code", "verb", "host"],
            registry=registry,
        )

    def count(self, *, host: str, method: str, code: str, retry: bool = False) -> None:
        """One attempt; `code` is the HTTP status, or "<error>" when no answer came (as client-go labels it);
        `retry` when it is not the request's first attempt."""
        self.requests.labels(code=code, host=host, method=method).inc()
        if retry:
            self.retries.labels(code=code, verb=method, host=host).inc()

    def observe_duration(self, *, host: str, verb: str, seconds: float) -> None:
        """One request's time, from its first attempt to its last answer."""
        self.duration.labels(verb=verb, host=host).observe(seconds)

    def observe(self, *, host: str, method: str, code: str, seconds: float) -> None:
        """A request of one attempt: counted and timed."""
        self.count(host=host, method=method, code=code)
        self.observe_duration(host=host, verb=method, seconds=seconds)
