"""metricstext.render: generate_latest's text without the `_created` gauges, with every value current."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, Summary, generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from cri.instrumented import RuntimeMetrics
from nodeagent.kube.metrics import RestClientMetrics
from nodeagent.server.metricstext import go_value, render
from pleg.metrics import PLEGMetrics


class _Timestamped:
    """A custom collector: samples with timestamps, a gauge histogram (its _gsum/_gcount moved after it)."""

    def collect(self) -> list[Metric]:
        gauge = GaugeMetricFamily("custom_gauge", "with a\\backslash and\na newline", labels=["path"])
        gauge.add_metric(['C:\\dir "quoted"\nnext'], 3.5, timestamp=1700000000.25)
        gauge.add_metric(['only "quotes"'], 1)
        hist = GaugeHistogramMetricFamily(
            "custom_gauge_histogram", "gh", buckets=[("1.0", 2), ("+Inf", 5)], gsum_value=7
        )
        return [gauge, hist]

    def describe(self) -> list[Metric]:
        return []


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    runtime = RuntimeMetrics(registry)
    for operation in ("list_containers", "run_podsandbox", "create_container"):
        runtime.observe(operation, 0.003)
        runtime.observe(operation, 42.0)
    runtime.observe_error("run_podsandbox", TimeoutError())
    rest = RestClientMetrics(registry)
    rest.observe(host="198.18.0.1:6443", method="PATCH", code="200", seconds=0.02)
    rest.observe(host="198.18.0.1:6443", method="GET", code="<error>", seconds=61.0)
    PLEGMetrics(registry).relist_duration.observe(0.0125)
    Gauge("big_bytes", "large values go to exponents", registry=registry).set(123456789.0)
    Gauge("negative", "negatives stay as repr", ["k"], registry=registry).labels("x").set(-1e-7)
    Gauge("special", "special values", ["v"], registry=registry).labels("inf").set(math.inf)
    Info("build", "build information", registry=registry).info({"version": "v1.34.4", "go": "none"})
    Summary("request_seconds", "a summary", registry=registry).observe(0.5)
    Histogram("unlabelled_seconds", "no labels", registry=registry)
    registry.register(_Timestamped())
    return registry


def _without_created(text: str) -> list[str]:
    """generate_latest's lines less its `_created` gauges (their HELP, TYPE and samples)."""
    kept = []
    for line in text.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("#") else line.split("{", 1)[0].split(" ", 1)[0]
        if not name.endswith("_created"):
            kept.append(line)
    return kept


def test_the_text_is_generate_latest_without_created_gauges() -> None:
    registry = _registry()
    expected = generate_latest(registry).decode()
    assert "_created" in expected  # what upstream's Go client never writes
    got = render(registry).decode()
    assert "_created" not in got
    assert got.splitlines() == _without_created(expected)
    assert got.endswith("\n")


def test_label_values_and_help_are_escaped_and_timestamps_kept() -> None:
    got = render(_registry()).decode().splitlines()
    assert "# HELP custom_gauge with a\\\\backslash and\\na newline" in got
    assert 'custom_gauge{path="C:\\\\dir \\"quoted\\"\\nnext"} 3.5 1700000000250' in got
    assert 'custom_gauge{path="only \\"quotes\\""} 1.0' in got
    # a gauge histogram's gsum and gcount follow it as gauges of their own, as generate_latest writes them
    tail = got[got.index("# TYPE custom_gauge_histogram histogram") :]
    assert tail[3:] == [
        "# HELP custom_gauge_histogram_gcount gh",
        "# TYPE custom_gauge_histogram_gcount gauge",
        "custom_gauge_histogram_gcount 5.0",
        "# HELP custom_gauge_histogram_gsum gh",
        "# TYPE custom_gauge_histogram_gsum gauge",
        "custom_gauge_histogram_gsum 7.0",
    ]


def test_every_scrape_reads_the_current_values() -> None:
    registry = CollectorRegistry()
    counter = Counter("kubelet_things", "things", ["kind"], registry=registry)
    counter.labels("a").inc()
    assert 'kubelet_things_total{kind="a"} 1.0' in render(registry).decode().splitlines()
    counter.labels("a").inc(2)
    counter.labels("b").inc()
    lines = render(registry).decode().splitlines()
    assert 'kubelet_things_total{kind="a"} 3.0' in lines
    assert 'kubelet_things_total{kind="b"} 1.0' in lines


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.0, 3.0, 0.1, 1e-9, -1e-7, 123456.0, 1234567.0, 123456789.5, 1e22, -5e10, math.inf, -math.inf,
     math.nan, 2.5**13 * 0.005, 4.0e-3],
)  # fmt: skip
def test_values_are_formatted_as_prometheus_client_does(value: float) -> None:
    assert go_value(value) == floatToGoString(value)
