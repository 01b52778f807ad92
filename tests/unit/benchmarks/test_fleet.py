"""benchmarks/fleet.py's pure parts: the NotReady flap count of its node watch, and the summary of each emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import fleet


def node(name: str, ready: str | None) -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": name}, "status": {"conditions": conditions}}


def test_a_flap_is_ready_then_not_ready() -> None:
    flaps = fleet.ReadyFlaps()
    for kind, name, ready in [
        ("ADDED", "a", "True"),
        ("ADDED", "b", None),  # not Ready when first seen: no flap
        ("MODIFIED", "b", "True"),
        ("MODIFIED", "a", "True"),  # a heartbeat
        ("MODIFIED", "a", "Unknown"),  # the lease was late
        ("MODIFIED", "a", "Unknown"),  # still the same flap
        ("MODIFIED", "a", "True"),
        ("MODIFIED", "a", "False"),  # the node said NotReady
        ("MODIFIED", "b", "False"),
    ]:
        flaps.observe(kind, node(name, ready))
    assert flaps.flaps == {"a": 2, "b": 1}


def test_a_deleted_node_starts_afresh() -> None:
    flaps = fleet.ReadyFlaps()
    flaps.observe("ADDED", node("a", "True"))
    flaps.observe("DELETED", node("a", "True"))
    flaps.observe("ADDED", node("a", "False"))
    assert flaps.flaps == {}
    assert flaps.ready == {"a": False}


def result() -> dict[str, Any]:
    return {
        "nodes": 100,
        "pods_per_node": 3,
        "steady_s": 60.0,
        "start_to_all_ready_s": 9.1,
        "cpu_s_per_node_minute": 0.14,
        "cpu_cores": 0.23,
        "nodes_per_core": 434.8,
        "rss_per_node_mib": 2.8,
        "pss_per_node_mib": 2.6,
        "lease_interval_p50_s": 10.2,
        "lease_interval_p99_s": 10.9,
        "lease_interval_max_s": 11.3,
        "lease_intervals_over_15s": 0,
        "ready_flaps": 0,
        "apiserver_cpu_cores": 0.3,
        "etcd_cpu_cores": 0.05,
        "poller_list_p50_s": 0.01,
        "poller_list_max_s": 0.2,
        "loadavg_start": [1.0, 1.0, 1.0],
        "loadavg_end": [2.0, 1.0, 1.0],
    }


def test_the_summary_names_its_emulator_and_its_flaps() -> None:
    line = fleet.summary_line(result())
    assert line.startswith("fleet: 100 nodes (3 pods each) Ready in 9.1 s;")
    assert "0 NotReady flaps; apiserver 0.3 cores, etcd 0.05;" in line
    kwok = {**result(), "cpu_cores": 0.05, "ready_flaps": 2}
    line = fleet.summary_line(kwok, "kwok")
    assert line.startswith("kwok: 100 nodes") and "(0.05 cores," in line and "2 NotReady flaps" in line
    shared = {**result(), "pod_watch": "shared", "apiserver_pod_watches": 5}
    line = fleet.summary_line(shared)
    assert line.startswith("fleet (pod watch shared): 100 nodes")
    assert "apiserver 0.3 cores, 5 pod watches, etcd 0.05;" in line
    watched = {**shared, "apiserver_service_watches": 4, "apiserver_runtimeclass_watches": 3}
    assert "apiserver 0.3 cores, 5 pod watches, 4 Service / 3 RuntimeClass watches, etcd 0.05;" in (
        fleet.summary_line(watched)
    )


def test_watches_are_the_apiservers_open_watch_requests_of_the_resource() -> None:
    metrics = "\n".join(
        [
            "# TYPE apiserver_longrunning_requests gauge",
            'apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",'
            'subresource="",verb="WATCH",version="v1"} 51',
            'apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",'
            'subresource="",verb="WATCH",version="v1"} 2',
            # Not a watch of pods: streams of logs and exec, watches of nodes.
            'apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",'
            'subresource="log",verb="CONNECT",version="v1"} 3',
            'apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",scope="cluster",'
            'subresource="",verb="WATCH",version="v1"} 7',
            'apiserver_longrunning_requests{component="apiserver",group="",resource="services",scope="cluster",'
            'subresource="",verb="WATCH",version="v1"} 4',
        ]
    )
    assert fleet._watches(metrics, "pods") == 53
    assert fleet._watches(metrics, "services") == 4
    assert fleet._watches(metrics, "runtimeclasses") is None
    assert fleet._watches("apiserver_request_total 1", "pods") is None


async def test_full_nodes_with_latency_pods_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 100 nodes of 30 pods, all taken by the Deployment: the latency pods could never schedule (a 2026-11-30 run
    # waited 140 s for them and failed after 14 minutes).
    with pytest.raises(SystemExit) as exit_:
        await fleet.main(["--nodes", "100", "--pods-per-node", "30", "--max-pods", "30", "--latency-pods", "100"])
    assert exit_.value.code == 2
    assert "leaves no room for --latency-pods 100 on 100 nodes of 30 pods" in capsys.readouterr().err


def test_the_request_mix_is_the_difference_of_the_apiservers_counters_per_second() -> None:
    before = fleet.request_counts(
        'apiserver_request_total{code="200",component="apiserver",group="coordination.k8s.io",resource="leases",'
        'scope="resource",subresource="",verb="PUT",version="v1"} 100\n'
        'apiserver_request_total{code="409",component="apiserver",group="coordination.k8s.io",resource="leases",'
        'scope="resource",subresource="",verb="PUT",version="v1"} 4\n'
        'apiserver_request_total{code="200",component="apiserver",group="",resource="nodes",scope="resource",'
        'subresource="status",verb="PATCH",version="v1"} 10\n'
        "apiserver_request_duration_seconds_count 7\n"
    )
    assert before == {"PUT leases": 104.0, "PATCH nodes/status": 10.0}
    after = {"PUT leases": 164.0, "PATCH nodes/status": 10.0, "LIST pods": 6.0}
    mix = fleet.request_mix(before, after, 30.0)
    assert mix == {"PUT leases": 2.0, "LIST pods": 0.2, "total": 2.2}
    assert next(iter(mix)) == "PUT leases"  # the busiest first
    line = fleet.summary_line({**result(), "apiserver_requests_per_s": mix})
    assert "2.2 requests/s, the most: PUT leases 2.0, LIST pods 0.2" in line


def test_processes_share_the_nodes_as_evenly_as_it_goes() -> None:
    assert fleet.split_nodes(500, 2) == [(0, 250), (250, 250)]
    assert fleet.split_nodes(7, 3) == [(0, 3), (3, 2), (5, 2)]
    assert fleet.split_nodes(5, 1) == [(0, 5)]
    with pytest.raises(ValueError, match="--processes 4 must be between 1 and --nodes 3"):
        fleet.split_nodes(3, 4)
    with pytest.raises(ValueError):
        fleet.split_nodes(3, 0)


async def test_more_processes_than_nodes_are_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        await fleet.main(["--nodes", "2", "--processes", "3", "--latency-pods", "0"])
    assert exit_.value.code == 2
    assert "--processes 3 must be between 1 and --nodes 2" in capsys.readouterr().err


def test_memory_is_summed_over_the_processes() -> None:
    class Info:
        def __init__(self, rss: int, pss: int) -> None:
            self.rss, self.pss = rss, pss

    assert fleet.memory_totals([Info(300, 200), Info(100, 50)]) == (400.0, 250.0)


def test_the_summary_says_how_many_processes_the_fleet_ran() -> None:
    assert fleet.summary_line({**result(), "processes": 2}).startswith("fleet in 2 processes: 100 nodes")
    assert fleet.summary_line({**result(), "processes": 1}).startswith("fleet: 100 nodes")
    # KWOK is one controller, whatever the fleet ran.
    assert fleet.summary_line({**result(), "processes": 2}, "kwok").startswith("kwok: 100 nodes")


def test_the_summary_gives_connections_deletion_and_stop_when_measured() -> None:
    assert "apiserver connections" not in fleet.summary_line(result())
    measured = {
        **result(),
        "apiserver_connections_steady": 212,
        "apiserver_connections_max_pods": 480,
        "apiserver_connections_max_deleting": 530,
        "pods_deleted_s": 95.5,
        "log_connect_timeouts": 3,
        "stop_s": 61.0,
        "stop_killed": True,
    }
    line = fleet.summary_line(measured)
    assert "apiserver connections 212 steady, most 480 starting pods, 530 deleting" in line
    assert "pods deleted in 95.5 s (3 ConnectTimeout lines); stopped in 61.0 s (killed)" in line
    assert "apiserver connections" not in fleet.summary_line({**measured, **result()}, "kwok")


def test_connect_timeouts_are_counted_over_every_log(tmp_path: Path) -> None:
    first, second = tmp_path / "fleet-0.log", tmp_path / "fleet-1.log"
    first.write_bytes(b"ok\nerror=ApiUnavailable: ConnectTimeout: \nConnectTimeout again\n")
    second.write_bytes(b"ReadTimeout\n")
    assert fleet.connect_timeouts([first, second, tmp_path / "missing.log"]) == 2
