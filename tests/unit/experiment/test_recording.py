"""The pure parts of a run: pod bodies and their QoS, reading signals from /stats/summary's JSON, the agent's log
lines, Failed pods told apart, settings compared, and the report (outcomes, pressure intervals, expectations)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from eviction.signals import Observation, Signal
from nodeagent.experiment.report import check_expectations, pod_outcomes, pressure_intervals, summary_table
from nodeagent.experiment.runner import (
    classify_failed,
    eviction_differences,
    parse_agent_log_line,
    signals_of_interest,
    thresholds_in_force,
)
from nodeagent.experiment.scenario import PodPlan, Workload, WorkloadType, parse_scenario
from nodeagent.experiment.timeline import Timeline, observations_from_summary_json, read_jsonl, write_csv, write_jsonl
from nodeagent.experiment.workloads import pod_body, script
from nodeagent.kuberuntime.qos import QOSClass, pod_qos

MI = 1 << 20
T0 = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("requests", "limits", "qos"),
    [
        ({}, {}, QOSClass.BEST_EFFORT),
        ({"memory": "32Mi"}, {}, QOSClass.BURSTABLE),
        ({"cpu": "50m", "memory": "64Mi"}, {"cpu": "50m", "memory": "64Mi"}, QOSClass.GUARANTEED),
    ],
)
def test_pod_bodies_get_their_qos_from_requests_and_limits(
    requests: dict[str, str], limits: dict[str, str], qos: QOSClass
) -> None:
    body = pod_body(PodPlan("p", requests=requests, limits=limits), namespace="ns", node_name="n", image="i",
                    run_id="r")  # fmt: skip
    assert pod_qos(body) == qos
    assert body["spec"]["nodeName"] == "n"


def test_a_memory_hog_writes_to_a_memory_backed_empty_dir_and_a_priority_names_its_class() -> None:
    plan = PodPlan("hog", workload=Workload(WorkloadType.MEMORY_HOG, 4 * MI, 10 * MI), priority=-5)
    body = pod_body(plan, namespace="ns", node_name="n", image="i", run_id="abc")
    assert body["spec"]["volumes"] == [{"name": "work", "emptyDir": {"medium": "Memory"}}]
    assert body["spec"]["priorityClassName"] == "eviction-experiment-abc-m5"
    command = body["spec"]["containers"][0]["command"][2]
    assert "bs=1024 count=4096" in command and "-lt 3 ]" in command  # 4Mi a second, 3 seconds for 10Mi


@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        (WorkloadType.SLEEPER, "exec sleep"),
        (WorkloadType.DISK_FILLER, "of=/work/chunk-$i"),
        (WorkloadType.PROCESS_SPAWNER, "sleep 1000000 &"),
    ],
)
def test_workload_scripts(kind: WorkloadType, fragment: str) -> None:
    assert fragment in script(Workload(kind, 2 if kind == WorkloadType.PROCESS_SPAWNER else 1024, 4096))


def test_signals_from_the_summary_json() -> None:
    summary: dict[str, Any] = {
        "node": {
            "memory": {"time": "2026-11-25T10:00:00Z", "availableBytes": 700 * MI, "workingSetBytes": 300 * MI},
            "fs": {"availableBytes": 5, "capacityBytes": 10, "inodesFree": 7, "inodes": 9},
            "runtime": {"imageFs": {"availableBytes": 4, "capacityBytes": 10}},
            "rlimit": {"time": "2026-11-25T10:00:00Z", "maxpid": 32768, "curproc": 300},
            "systemContainers": [{"name": "pods", "memory": {"workingSetBytes": 100 * MI}}],
        }
    }
    found = observations_from_summary_json(summary, allocatable_memory=500 * MI)
    assert found[Signal.MEMORY_AVAILABLE] == Observation(700 * MI, 1000 * MI, T0)
    assert found[Signal.ALLOCATABLE_MEMORY_AVAILABLE].available == 400 * MI
    assert found[Signal.NODEFS_AVAILABLE].available == 5 and found[Signal.NODEFS_INODES_FREE].capacity == 9
    assert found[Signal.IMAGEFS_AVAILABLE].available == 4 and Signal.IMAGEFS_INODES_FREE not in found
    assert found[Signal.PID_AVAILABLE] == Observation(32468, 32768, T0)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "2026-11-25 15:25:44,521 INFO nodeagent.evictionmanager eviction manager evicting pod pod=ns/hog "
            "uid=1 signal=memory.available grace=1 message=The node was low",
            ("evicting", {"pod": "hog", "signal": "memory.available", "rank": None}),
        ),
        (
            "2026-11-25 15:25:44,521 INFO nodeagent.evictionmanager eviction manager evicting pod pod=ns/hog "
            "uid=1 signal=nodefs.available rank=2 grace=1 message=x",
            ("evicting", {"pod": "hog", "signal": "nodefs.available", "rank": 2}),
        ),
        (
            "2026-11-25 15:25:44,509 WARNING nodeagent.evictionmanager eviction manager attempting to reclaim "
            "resource=memory threshold=t",
            ("reclaim", {"message": "eviction manager attempting to reclaim resource=memory threshold=t"}),
        ),
        (
            "2026-11-25 15:28:12,371 INFO nodeagent.gc.containers container gc removed sandbox id=fdb5 pod_uid=7",
            ("gc", {"message": "container gc removed sandbox id=fdb5 pod_uid=7"}),
        ),
        ("2026-11-25 15:25:44,509 INFO nodeagent.kubelet pod started pod=ns/hog", None),
    ],
)
def test_agent_log_lines(line: str, expected: Any) -> None:
    assert parse_agent_log_line(line) == expected


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ({"phase": "Failed", "reason": "Evicted", "message": "The node had condition: [MemoryPressure]. "}, "refused"),
        ({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}, "evicted"),
        ({"phase": "Failed", "reason": "Evicted", "message": 'Usage of EmptyDir volume "v" exceeds'}, "evicted"),
        ({"phase": "Failed", "reason": "OutOfmemory", "message": "Node didn't have enough resource"}, "failed"),
    ],
)
def test_failed_pods_told_apart(status: dict[str, str], outcome: str) -> None:
    assert classify_failed({"status": status}) == outcome


def test_eviction_differences() -> None:
    scenario = {"evictionHard": {"memory.available": "100Mi"}, "evictionMaxPodGracePeriod": 5}
    node = {"evictionHard": {"memory.available": "200Mi", "nodefs.available": "10%"}, "evictionMaxPodGracePeriod": 5}
    assert eviction_differences(scenario, node) == [
        "evictionHard.memory.available: the scenario says 100Mi, the node has 200Mi"
    ]


def test_thresholds_and_signals_of_interest() -> None:
    scenario = parse_scenario(
        {"name": "s", "duration": 10, "pods": [{"name": "a"}], "inject": {"pid.available": [[0, "100"]]}}
    )
    fields = {"evictionHard": {"memory.available": "100Mi"}}
    assert [t.signal for t in thresholds_in_force(fields)] == [Signal.MEMORY_AVAILABLE]
    assert signals_of_interest(scenario, fields) == (Signal.MEMORY_AVAILABLE, Signal.PID_AVAILABLE)
    # Without evictionHard the agent has upstream's defaults.
    assert Signal.NODEFS_AVAILABLE in signals_of_interest(scenario, {})


def _timeline() -> Timeline:
    timeline = Timeline(T0)
    add = timeline.add
    add(T0 + timedelta(seconds=1), "pod", pod="hog", phase="Running", qos="BestEffort", priority=0)
    add(T0 + timedelta(seconds=2), "pod", pod="g", phase="Running", qos="Guaranteed", priority=0)
    add(T0 + timedelta(seconds=3), "pod", pod="late", phase="Pending", qos="BestEffort", priority=0)
    timeline.set_start(T0 + timedelta(seconds=5))
    add(T0 + timedelta(seconds=20), "condition", condition="MemoryPressure", status="True")
    add(T0 + timedelta(seconds=25), "eviction", pod="hog", rank=0, message="The node was low on resource: memory.")
    add(T0 + timedelta(seconds=26), "admission-refused", pod="late", message="The node had condition: [X]. ")
    add(T0 + timedelta(seconds=40), "condition", condition="MemoryPressure", status="False")
    add(T0 + timedelta(seconds=41), "condition", condition="DiskPressure", status="True")
    return timeline


def _scenario(expect: dict[str, list[str]]) -> Any:
    return parse_scenario(
        {"name": "s", "duration": 60, "pods": [{"name": "hog"}, {"name": "g"}, {"name": "late"}], "expect": expect}
    )


def test_set_start_moves_earlier_records_before_second_zero() -> None:
    assert [r["t"] for r in _timeline().records[:3]] == [-4.0, -3.0, -2.0]


def test_report() -> None:
    records = _timeline().records
    scenario = _scenario({"evicted": ["hog"], "notEvicted": ["g"], "refused": ["late"]})
    outcomes = {o.name: o for o in pod_outcomes(scenario, records)}
    assert (outcomes["hog"].outcome, outcomes["hog"].t, outcomes["hog"].rank) == ("evicted", 20.0, 0)
    assert outcomes["late"].outcome == "refused" and outcomes["g"].outcome == "running"
    intervals = pressure_intervals(records)
    assert [(i.condition, i.start, i.end) for i in intervals] == [
        ("MemoryPressure", 15.0, 35.0),
        ("DiskPressure", 36.0, None),
    ]
    assert all(c.ok for c in check_expectations(scenario, list(outcomes.values())))
    table = summary_table(scenario, records)
    assert "expectations: PASS" in table and "evicted" in table
    assert "rank" not in table  # plain words: the order of the evictions is their times


@pytest.mark.parametrize(
    ("expect", "failed"),
    [
        ({"evicted": ["g"]}, "g evicted (it was: running)"),
        ({"notEvicted": ["hog"]}, "hog not evicted (it was evicted)"),
        ({"refused": ["hog"]}, "hog refused at admission (it was evicted)"),
    ],
)
def test_expectations_not_met(expect: dict[str, list[str]], failed: str) -> None:
    scenario = _scenario(expect)
    checks = check_expectations(scenario, pod_outcomes(scenario, _timeline().records))
    assert [c.text for c in checks if not c.ok] == [failed]
    assert "expectations: FAIL" in summary_table(scenario, _timeline().records)


def test_timeline_files(tmp_path: Path) -> None:
    records = _timeline().records
    write_jsonl(records, tmp_path / "t.jsonl")
    write_csv(records, tmp_path / "t.csv")
    assert read_jsonl(tmp_path / "t.jsonl") == records
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert len(lines) == len(records) + 1 and lines[0].startswith("t,time,kind,signal")


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    from nodeagent.experiment.plot import render  # noqa: PLC0415

    timeline = _timeline()
    for second in range(0, 60, 2):
        timeline.add(T0 + timedelta(seconds=5 + second), "signal", signal="memory.available", available=60 * MI,
                     observed=20000 * MI, capacity=24000 * MI, injected=True, threshold=100 * MI)  # fmt: skip
    path = render(timeline.records, tmp_path / "p.png", title="t", duration=60)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
