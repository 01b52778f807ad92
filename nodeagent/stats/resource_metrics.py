"""/metrics/resource: what metrics-server reads (upstream pkg/kubelet/metrics/collectors/resource_metrics.go).

Built from the CPU-and-memory summary at each scrape: node, pod and container CPU seconds (counters) and working
sets (gauges) with the sample's own timestamp, each container's start time, and `resource_scrape_error` (1 when the
summary could not be made; then nothing else). Help texts carry the stability level as component-base writes it.
The deprecated `scrape_error` is left out (component-base hides it since 1.30).
"""

from __future__ import annotations

from nodeagent.stats.exposition import Family, Sample, render
from nodeagent.stats.types import Summary

NANOS = 1e9


def resource_metrics(summary: Summary | None) -> str:
    """The exposition for one scrape; `summary` None means getting it failed."""
    node_cpu: list[Sample] = []
    node_memory: list[Sample] = []
    node_swap: list[Sample] = []
    container_start: list[Sample] = []
    container_cpu: list[Sample] = []
    container_memory: list[Sample] = []
    container_swap: list[Sample] = []
    pod_cpu: list[Sample] = []
    pod_memory: list[Sample] = []
    if summary is not None:
        node = summary.node
        if node.cpu is not None and node.cpu.usage_core_nano_seconds is not None:
            node_cpu.append(Sample.of(node.cpu.usage_core_nano_seconds / NANOS, node.cpu.time))
        if node.memory is not None and node.memory.working_set_bytes is not None:
            node_memory.append(Sample.of(node.memory.working_set_bytes, node.memory.time))
        if node.swap is not None and node.swap.swap_usage_bytes is not None and node.memory is not None:
            node_swap.append(Sample.of(node.swap.swap_usage_bytes, node.memory.time))
        for pod in summary.pods:
            ref = pod.pod_ref
            for c in pod.containers:
                labels = {"container": c.name, "pod": ref.name, "namespace": ref.namespace}
                if c.start_time is not None and c.start_time.timestamp() > 0:
                    container_start.append(Sample.of(c.start_time.timestamp(), **labels))
                if c.cpu is not None and c.cpu.usage_core_nano_seconds is not None:
                    container_cpu.append(Sample.of(c.cpu.usage_core_nano_seconds / NANOS, c.cpu.time, **labels))
                if c.memory is not None and c.memory.working_set_bytes is not None:
                    container_memory.append(Sample.of(c.memory.working_set_bytes, c.memory.time, **labels))
                if c.swap is not None and c.swap.swap_usage_bytes is not None:
                    container_swap.append(Sample.of(c.swap.swap_usage_bytes, c.swap.time, **labels))
            if pod.cpu is not None and pod.cpu.usage_core_nano_seconds is not None:
                pod_cpu.append(
                    Sample.of(
                        pod.cpu.usage_core_nano_seconds / NANOS, pod.cpu.time, pod=ref.name, namespace=ref.namespace
                    )
                )
            if pod.memory is not None and pod.memory.working_set_bytes is not None:
                pod_memory.append(
                    Sample.of(pod.memory.working_set_bytes, pod.memory.time, pod=ref.name, namespace=ref.namespace)
                )
    error = [Sample.of(0.0 if summary is not None else 1.0)]
    return render(
        [
            Family(
                "node_cpu_usage_seconds_total",
                "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
                "counter",
                node_cpu,
            ),
            Family(
                "node_memory_working_set_bytes",
                "[STABLE] Current working set of the node in bytes",
                "gauge",
                node_memory,
            ),
            Family(
                "node_swap_usage_bytes",
                "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
                "gauge",
                node_swap,
            ),
            Family(
                "container_start_time_seconds",
                "[STABLE] Start time of the container since unix epoch in seconds",
                "gauge",
                container_start,
            ),
            Family(
                "container_cpu_usage_seconds_total",
                "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
                "counter",
                container_cpu,
            ),
            Family(
                "container_memory_working_set_bytes",
                "[STABLE] Current working set of the container in bytes",
                "gauge",
                container_memory,
            ),
            Family(
                "container_swap_usage_bytes",
                "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
                "gauge",
                container_swap,
            ),
            Family(
                "pod_cpu_usage_seconds_total",
                "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
                "counter",
                pod_cpu,
            ),
            Family(
                "pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", "gauge", pod_memory
            ),
            Family(
                "resource_scrape_error",
                "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
                "gauge",
                error,
            ),
        ]
    )
