"""Prober metrics under upstream's names and labels (pkg/kubelet/prober/prober_manager.go), on an injected registry
that the kubelet server's /metrics/probes endpoint will expose:

    prober_probe_total{probe_type, result, container, pod, namespace, pod_uid}     counter; result is
                                                         successful | failed | unknown; probe_type Liveness | ...
    prober_probe_duration_seconds{probe_type, container, pod, namespace}          histogram of successful and
                                                                                  unknown probes, as upstream

A pod's series are deleted when the pod's probes are removed, so a node that runs many short-lived pods does not
accumulate dead series; counters survive container restarts of the same pod.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from nodeagent.prober.results import Result
from nodeagent.prober.spec import ProbeType

RESULT_LABELS = {Result.SUCCESS: "successful", Result.FAILURE: "failed", Result.UNKNOWN: "unknown"}
# Upstream's metrics.DefBuckets.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class ProbeLabels:
    kind: ProbeType
    container: str
    pod: str
    namespace: str
    pod_uid: str


class ProberMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.probes = Counter(
            "prober_probe_total",
            "Cumulative number of a liveness, readiness or startup probe for a container by result.",
            ["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "prober_probe_duration_seconds",
            "Duration in seconds for a probe response.",
            ["probe_type", "container", "pod", "namespace"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )

    def observe(self, labels: ProbeLabels, result: Result, seconds: float) -> None:
        self.probes.labels(
            labels.kind.title, RESULT_LABELS[result], labels.container, labels.pod, labels.namespace, labels.pod_uid
        ).inc()
        if result is not Result.FAILURE:  # as upstream, failed probes are counted but not timed
            self.duration.labels(labels.kind.title, labels.container, labels.pod, labels.namespace).observe(seconds)

    def remove(self, labels: ProbeLabels) -> None:
        for result in RESULT_LABELS.values():
            with contextlib.suppress(KeyError):  # a series that never got a sample
                self.probes.remove(
                    labels.kind.title, result, labels.container, labels.pod, labels.namespace, labels.pod_uid
                )
        with contextlib.suppress(KeyError):
            self.duration.remove(labels.kind.title, labels.container, labels.pod, labels.namespace)

    def count(self, labels: ProbeLabels, result: Result) -> float:
        """The counter's value for one series (0 when it does not exist): for tests and the kubelet server."""
        value = self.registry.get_sample_value(
            "prober_probe_total",
            {
                "probe_type": labels.kind.title,
                "result": RESULT_LABELS[result],
                "container": labels.container,
                "pod": labels.pod,
                "namespace": labels.namespace,
                "pod_uid": labels.pod_uid,
            },
        )
        return value or 0.0
