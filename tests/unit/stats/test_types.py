"""The Summary's JSON: upstream's names in upstream's order, omitempty, metav1.Time, the inline parts."""

from __future__ import annotations

import datetime

from nodeagent.stats.types import (
    ContainerStats,
    CPUStats,
    FsStats,
    InterfaceStats,
    MemoryStats,
    NetworkStats,
    NodeStats,
    PodReference,
    PodStats,
    ProcessStats,
    PVCReference,
    RlimitStats,
    RuntimeStats,
    Summary,
    VolumeStats,
    go_time,
    network_json,
    summary_json,
    volume_json,
)

T = datetime.datetime(2026, 11, 25, 10, 0, 5, 987654, tzinfo=datetime.UTC)
TS = "2026-11-25T10:00:05Z"


def test_go_time_whole_seconds_utc_and_null() -> None:
    assert go_time(T) == TS
    plus_one = datetime.timezone(datetime.timedelta(hours=1))
    assert go_time(datetime.datetime(2026, 11, 25, 11, 0, 5, tzinfo=plus_one)) == TS
    assert go_time(None) is None


def test_summary_names_order_and_omitempty() -> None:
    fs = FsStats(time=T, available_bytes=1, capacity_bytes=2, used_bytes=3, inodes_free=4, inodes=5, inodes_used=6)
    summary = Summary(
        node=NodeStats(
            node_name="n1",
            start_time=T,
            system_containers=(ContainerStats(name="pods", start_time=T, cpu=CPUStats(time=T, usage_nano_cores=0)),),
            cpu=CPUStats(time=T, usage_nano_cores=10, usage_core_nano_seconds=20),
            memory=MemoryStats(time=T, usage_bytes=7, working_set_bytes=0),
            fs=fs,
            runtime=RuntimeStats(image_fs=fs, container_fs=fs),
            rlimit=RlimitStats(time=T, max_pid=32768, num_of_running_processes=300),
        ),
        pods=(
            PodStats(
                pod_ref=PodReference("web", "default", "uid-1"),
                start_time=T,
                containers=(ContainerStats(name="main", start_time=T, rootfs=FsStats(time=None), logs=fs),),
                volume_stats=(VolumeStats(name="data", fs=fs),),
                ephemeral_storage=fs,
                process_stats=ProcessStats(process_count=None),
            ),
            PodStats(pod_ref=PodReference("bare", "default", "uid-2"), start_time=None),
        ),
    )
    out = summary_json(summary)
    node = out["node"]
    assert list(node) == ["nodeName", "systemContainers", "startTime", "cpu", "memory", "fs", "runtime", "rlimit"]
    assert node["systemContainers"] == [
        {"name": "pods", "startTime": TS, "cpu": {"time": TS, "usageNanoCores": 0}}  # 0 is set, not empty
    ]
    assert node["cpu"] == {"time": TS, "usageNanoCores": 10, "usageCoreNanoSeconds": 20}
    assert node["memory"] == {"time": TS, "usageBytes": 7, "workingSetBytes": 0}
    assert list(node["fs"]) == [
        "time",
        "availableBytes",
        "capacityBytes",
        "usedBytes",
        "inodesFree",
        "inodes",
        "inodesUsed",
    ]
    assert list(node["runtime"]) == ["imageFs", "containerFs"]
    assert node["rlimit"] == {"time": TS, "maxpid": 32768, "curproc": 300}
    web, bare = out["pods"]
    assert list(web) == ["podRef", "startTime", "containers", "volume", "ephemeral-storage", "process_stats"]
    assert web["podRef"] == {"name": "web", "namespace": "default", "uid": "uid-1"}
    assert web["containers"] == [{"name": "main", "startTime": TS, "rootfs": {"time": None}, "logs": node["fs"]}]
    assert web["process_stats"] == {}
    # containers is not omitempty upstream: a pod without any is null; startTime likewise
    assert bare == {
        "podRef": {"name": "bare", "namespace": "default", "uid": "uid-2"},
        "startTime": None,
        "containers": None,
    }
    assert summary_json(Summary(node=NodeStats(node_name="n", start_time=None)))["pods"] == []


def test_network_inlines_the_default_interface() -> None:
    eth0 = InterfaceStats("eth0", rx_bytes=1, rx_errors=0, tx_bytes=2, tx_errors=0)
    assert network_json(NetworkStats(time=T, default=eth0, interfaces=(eth0,))) == {
        "time": TS,
        "name": "eth0",
        "rxBytes": 1,
        "rxErrors": 0,
        "txBytes": 2,
        "txErrors": 0,
        "interfaces": [{"name": "eth0", "rxBytes": 1, "rxErrors": 0, "txBytes": 2, "txErrors": 0}],
    }
    # no default interface: upstream's inline Name has no omitempty
    assert network_json(NetworkStats(time=T)) == {"time": TS, "name": ""}


def test_volume_inlines_its_fs_stats() -> None:
    fs = FsStats(time=T, used_bytes=0, inodes=0)
    assert volume_json(VolumeStats(name="v", fs=fs, pvc_ref=PVCReference("claim", "ns"))) == {
        "time": TS,
        "usedBytes": 0,
        "inodes": 0,
        "name": "v",
        "pvcRef": {"name": "claim", "namespace": "ns"},
    }
