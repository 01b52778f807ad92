"""The Prometheus text of /metrics/resource and /metrics/cadvisor: Go's number formatting, ordering, and what the
families carry; each output is parsed back with prometheus_client's parser."""

from __future__ import annotations

import datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.stats.cadvisor import CadvisorContainer, NetworkCounters, cadvisor_metrics
from nodeagent.stats.exposition import Family, Sample, go_float, render
from nodeagent.stats.resource_metrics import resource_metrics
from nodeagent.stats.types import (
    ContainerStats,
    CPUStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    Summary,
    SwapStats,
)

T = datetime.datetime(2026, 11, 25, 10, 0, 5, 250000, tzinfo=datetime.UTC)
T_MS = int(T.timestamp() * 1000)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # strconv.FormatFloat(v, 'g', -1, 64)
        (0.0, "0"),
        (1.0, "1"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (67489792.0, "6.7489792e+07"),
        (12.345, "12.345"),
        (321.813274792, "321.813274792"),
        (0.0001, "0.0001"),
        (0.00001234, "1.234e-05"),
        (1795601325.930236, "1.795601325930236e+09"),
        (1e21, "1e+21"),
        (-2.5, "-2.5"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
    ],
)
def test_go_float(value: float, expected: str) -> None:
    assert go_float(value) == expected


def test_render_orders_and_escapes() -> None:
    text = render(
        [
            Family("b_total", "second", "counter", [Sample.of(2, None, x="2"), Sample.of(1, T, x="1")]),
            Family("a", "help with \\ and\nnewline", "gauge", [Sample.of(1.5, None, z='q"uote', a="back\\slash")]),
            Family("empty", "no samples", "gauge", []),
        ]
    )
    assert text == (
        "# HELP a help with \\\\ and\\nnewline\n"
        "# TYPE a gauge\n"
        'a{a="back\\\\slash",z="q\\"uote"} 1.5\n'
        "# HELP b_total second\n"
        "# TYPE b_total counter\n"
        f'b_total{{x="1"}} 1 {T_MS}\n'
        'b_total{x="2"} 2\n'
    )
    assert render([]) == ""


def summary() -> Summary:
    return Summary(
        node=NodeStats(
            node_name="n",
            start_time=T,
            cpu=CPUStats(T, 5, 2_500_000_000),
            memory=MemoryStats(T, working_set_bytes=1 << 30),
            swap=SwapStats(T, 0, 0),
        ),
        pods=(
            PodStats(
                pod_ref=PodReference("web", "default", "u"),
                start_time=T,
                containers=(
                    ContainerStats("main", T, cpu=CPUStats(T, 1, 1_500_000_000), memory=MemoryStats(T, None, 2, 1)),
                    ContainerStats("side", None, cpu=CPUStats(T, None, None), memory=None),
                ),
                cpu=CPUStats(T, 1, 1_600_000_000),
                memory=MemoryStats(T, working_set_bytes=3),
            ),
        ),
    )


def families(text: str) -> dict[str, list[tuple[str, dict[str, str], float, float | None]]]:
    out: dict[str, list[tuple[str, dict[str, str], float, float | None]]] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = [(s.name, dict(s.labels), s.value, s.timestamp) for s in family.samples]
    return out


def test_resource_metrics() -> None:
    text = resource_metrics(summary())
    assert "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in " in text
    assert "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total 2.5 " in text
    found = families(text)
    ts = T.timestamp()
    labels = {"container": "main", "namespace": "default", "pod": "web"}
    # prometheus_client strips _total from a counter family's name
    assert found["node_cpu_usage_seconds"] == [("node_cpu_usage_seconds_total", {}, 2.5, ts)]
    assert found["node_memory_working_set_bytes"] == [("node_memory_working_set_bytes", {}, 1 << 30, ts)]
    assert found["node_swap_usage_bytes"] == [("node_swap_usage_bytes", {}, 0, ts)]
    assert found["container_cpu_usage_seconds"] == [("container_cpu_usage_seconds_total", labels, 1.5, ts)]
    assert found["container_memory_working_set_bytes"] == [("container_memory_working_set_bytes", labels, 1, ts)]
    assert found["container_start_time_seconds"] == [("container_start_time_seconds", labels, ts, None)]
    pod = {"namespace": "default", "pod": "web"}
    assert found["pod_cpu_usage_seconds"] == [("pod_cpu_usage_seconds_total", pod, 1.6, ts)]
    assert found["pod_memory_working_set_bytes"] == [("pod_memory_working_set_bytes", pod, 3, ts)]
    assert found["resource_scrape_error"] == [("resource_scrape_error", {}, 0, None)]


def test_resource_metrics_on_failure_is_only_the_error() -> None:
    assert families(resource_metrics(None)) == {"resource_scrape_error": [("resource_scrape_error", {}, 1, None)]}


def test_cadvisor_metrics() -> None:
    rows = [
        CadvisorContainer(
            id="/",
            time=T,
            start_time=T,
            cpu_usage_ns=3_000_000_000,
            working_set_bytes=100,
            fs=(("/dev/vda", 1000),),
            network=(NetworkCounters("eth0", 10, 20),),
        ),
        CadvisorContainer(
            id="/kubepods/pod1/abc",
            name="abc",
            image="reg/busybox:1",
            pod="web",
            namespace="default",
            container="main",
            time=T,
            cpu_usage_ns=0,
            working_set_bytes=5,
        ),
    ]
    found = families(cadvisor_metrics(rows))
    empty = {"container": "", "name": "", "image": "", "pod": "", "namespace": ""}
    ts = T.timestamp()
    # no CPU series for a cgroup that used none yet, as cAdvisor
    assert found["container_cpu_usage_seconds"] == [
        ("container_cpu_usage_seconds_total", {**empty, "id": "/", "cpu": "total"}, 3.0, ts)
    ]
    main = {
        "container": "main",
        "name": "abc",
        "image": "reg/busybox:1",
        "pod": "web",
        "namespace": "default",
        "id": "/kubepods/pod1/abc",
    }
    assert found["container_memory_working_set_bytes"] == [
        ("container_memory_working_set_bytes", {**empty, "id": "/"}, 100, ts),
        ("container_memory_working_set_bytes", main, 5, ts),
    ]
    assert found["container_fs_usage_bytes"] == [
        ("container_fs_usage_bytes", {**empty, "id": "/", "device": "/dev/vda"}, 1000, ts)
    ]
    assert found["container_network_receive_bytes"] == [
        ("container_network_receive_bytes_total", {**empty, "id": "/", "interface": "eth0"}, 10, ts)
    ]
    assert found["container_network_transmit_bytes"] == [
        ("container_network_transmit_bytes_total", {**empty, "id": "/", "interface": "eth0"}, 20, ts)
    ]
    assert found["container_scrape_error"] == [("container_scrape_error", {}, 0, None)]
    assert families(cadvisor_metrics(None)) == {"container_scrape_error": [("container_scrape_error", {}, 1, None)]}
