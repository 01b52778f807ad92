"""Building pods, containers and the node from the runtime's answers and the host's readings (tables)."""

from __future__ import annotations

import pytest

from cri.v1 import api_pb2
from nodeagent.stats import summary as sm
from nodeagent.stats.cgroups import CgroupSample, MemorySample
from nodeagent.stats.host import DiskUsage, FsInfo, InterfaceCounters
from nodeagent.stats.types import ContainerStats, CPUStats, FsStats, MemoryStats, VolumeStats

S = 1_000_000_000
T0 = 1_795_600_000 * S
NOW = sm.from_ns(T0 + 5 * S)
ROOT_FS = FsInfo(capacity=1000, available=400, usage=600, inodes=100, inodes_free=40)


def u(value: int) -> api_pb2.UInt64Value:
    return api_pb2.UInt64Value(value=value)


def sandbox(sid: str, name: str, created: int, ready: bool = True, ns: str = "default") -> api_pb2.PodSandbox:
    return api_pb2.PodSandbox(
        id=sid,
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace=ns, uid=f"uid-{name}"),
        created_at=created,
        state=api_pb2.SANDBOX_READY if ready else api_pb2.SANDBOX_NOTREADY,
    )


def container(cid: str, name: str, sid: str, created: int, running: bool = True) -> api_pb2.Container:
    return api_pb2.Container(
        id=cid,
        pod_sandbox_id=sid,
        metadata=api_pb2.ContainerMetadata(name=name),
        created_at=created,
        state=api_pb2.CONTAINER_RUNNING if running else api_pb2.CONTAINER_EXITED,
        image=api_pb2.ImageSpec(image="sha256:abc", user_specified_image="reg/busybox:1"),
    )


def cstats(cid: str, name: str, *, cpu: int = 2 * S, nano: int | None = None, ws: int = 100) -> api_pb2.ContainerStats:
    return api_pb2.ContainerStats(
        attributes=api_pb2.ContainerAttributes(id=cid, metadata=api_pb2.ContainerMetadata(name=name)),
        cpu=api_pb2.CpuUsage(
            timestamp=T0, usage_core_nano_seconds=u(cpu), usage_nano_cores=u(nano) if nano is not None else None
        ),
        memory=api_pb2.MemoryUsage(
            timestamp=T0,
            working_set_bytes=u(ws),
            available_bytes=u(0),
            usage_bytes=u(ws + 10),
            rss_bytes=u(50),
            page_faults=u(7),
            major_page_faults=u(0),
        ),
        writable_layer=api_pb2.FilesystemUsage(
            timestamp=T0,
            fs_id=api_pb2.FilesystemIdentifier(mountpoint="/var/lib/containerd/snap"),
            used_bytes=u(20),
            inodes_used=u(2),
        ),
    )


def test_remove_terminated_pods_keeps_ready_or_newest() -> None:
    listed = [
        sandbox("a1", "a", 1, ready=False),
        sandbox("a2", "a", 2, ready=True),
        sandbox("b1", "b", 1, ready=False),
        sandbox("b2", "b", 3, ready=False),
        sandbox("c1", "c", 1, ready=False),
        sandbox("d1", "d", 1, ready=True, ns="other"),
        sandbox("d2", "d", 2, ready=True),
    ]
    assert sorted(s.id for s in sm.remove_terminated_pods(listed)) == ["a2", "b2", "c1", "d1", "d2"]


def test_remove_terminated_containers_keeps_running() -> None:
    listed = [container("x", "m", "s", 2), container("y", "m", "s", 1, running=False), container("z", "n", "s", 3)]
    assert [c.id for c in sm.remove_terminated_containers(listed)] == ["x", "z"]


@pytest.mark.parametrize(
    ("nano", "fallback", "expected"),
    [(555, 7, 555), (None, 7, 7), (None, None, None)],
    ids=["runtime-rate-wins", "cache-rate-when-runtime-has-none", "no-rate-yet"],
)
def test_container_cpu_rate(nano: int | None, fallback: int | None, expected: int | None) -> None:
    cpu, memory = sm.container_cpu_memory(cstats("c", "main", nano=nano), nano_cores=fallback, now=NOW)
    assert cpu == CPUStats(time=sm.from_ns(T0), usage_nano_cores=expected, usage_core_nano_seconds=2 * S)
    # containerd's available_bytes 0 (no limit) is left out; the rest as the runtime gave it
    assert memory == MemoryStats(
        time=sm.from_ns(T0), usage_bytes=110, working_set_bytes=100, rss_bytes=50, page_faults=7, major_page_faults=0
    )


def test_container_without_runtime_numbers_is_zero_now() -> None:
    bare = api_pb2.ContainerStats(attributes=api_pb2.ContainerAttributes(id="c"))
    cpu, memory = sm.container_cpu_memory(bare, nano_cores=None, now=NOW)
    assert cpu == CPUStats(time=NOW, usage_nano_cores=0, usage_core_nano_seconds=0)
    assert memory == MemoryStats(time=NOW, usage_bytes=0, working_set_bytes=0, rss_bytes=0)


def test_limited_container_memory_keeps_available() -> None:
    usage = api_pb2.MemoryUsage(timestamp=T0, working_set_bytes=u(10), available_bytes=u(90))
    assert sm.cri_memory(usage).available_bytes == 90


def test_make_container_stats_full_and_cpu_memory_only() -> None:
    logs = sm.logs_stats(DiskUsage(4096, 1), ROOT_FS, NOW)
    full = sm.make_container_stats(
        cstats("c", "main"), container("c", "main", "s", T0 - S), nano_cores=3, now=NOW, rootfs_info=ROOT_FS, logs=logs
    )
    assert full.name == "main" and full.start_time == sm.from_ns(T0 - S)
    assert full.rootfs == FsStats(
        time=sm.from_ns(T0),
        available_bytes=400,
        capacity_bytes=1000,
        used_bytes=20,
        inodes_free=40,
        inodes=100,
        inodes_used=2,
    )
    assert full.logs == FsStats(
        time=NOW, available_bytes=400, capacity_bytes=1000, used_bytes=4096, inodes_free=40, inodes=100, inodes_used=1
    )
    small = sm.make_container_stats(
        cstats("c", "main"), container("c", "main", "s", T0), nano_cores=3, now=NOW, cpu_and_memory_only=True
    )
    assert small.rootfs is None and small.logs is None and small.cpu is not None and small.memory is not None


def pod_sandbox_stats(sid: str, *, interfaces: bool = False) -> api_pb2.PodSandboxStats:
    eth0 = api_pb2.NetworkInterfaceUsage(name="eth0", rx_bytes=u(1), rx_errors=u(0), tx_bytes=u(2), tx_errors=u(0))
    net1 = api_pb2.NetworkInterfaceUsage(name="net1", rx_bytes=u(3), rx_errors=u(0), tx_bytes=u(4), tx_errors=u(0))
    return api_pb2.PodSandboxStats(
        attributes=api_pb2.PodSandboxAttributes(id=sid),
        linux=api_pb2.LinuxPodSandboxStats(
            cpu=api_pb2.CpuUsage(timestamp=T0 + S, usage_core_nano_seconds=u(9 * S)),
            memory=api_pb2.MemoryUsage(timestamp=T0 + S, working_set_bytes=u(300), available_bytes=u(0)),
            network=api_pb2.NetworkUsage(default_interface=eth0, interfaces=[eth0, net1] if interfaces else []),
            process=api_pb2.ProcessUsage(timestamp=T0, process_count=u(2)),
        ),
    )


def test_measures_from_sandbox_stats() -> None:
    measures = sm.measures_from_sandbox_stats(pod_sandbox_stats("s"), 42)
    assert measures.cpu == CPUStats(time=sm.from_ns(T0 + S), usage_nano_cores=42, usage_core_nano_seconds=9 * S)
    assert measures.memory == MemoryStats(time=sm.from_ns(T0 + S), working_set_bytes=300)
    assert measures.network is not None and measures.network.default is not None
    assert measures.network.time == sm.from_ns(T0 + S)  # containerd leaves the network's timestamp 0
    assert [i.name for i in measures.network.interfaces] == ["eth0"]  # the default when the runtime lists none
    assert measures.process is not None and measures.process.process_count == 2
    with_list = sm.pod_network(pod_sandbox_stats("s", interfaces=True))
    assert with_list is not None and [i.name for i in with_list.interfaces] == ["eth0", "net1"]
    assert sm.measures_from_sandbox_stats(api_pb2.PodSandboxStats(), None) == sm.PodMeasures()


def test_measures_from_cgroup() -> None:
    sample = CgroupSample(
        path="/kubepods/podu",
        time=NOW,
        cpu_usage_ns=5 * S,
        memory=MemorySample(100, 80, 60, 3, 0, None),
        start_time=None,
    )
    interfaces = [InterfaceCounters("lo", 9, 0, 9, 0), InterfaceCounters("eth0", 1, 0, 2, 0)]
    measures = sm.measures_from_cgroup(sample, 7, interfaces=interfaces, process_count=3)
    assert measures.cpu == CPUStats(NOW, 7, 5 * S)
    assert measures.memory == MemoryStats(NOW, None, 100, 80, 60, 3, 0)  # no limit: no availableBytes
    assert measures.network is not None and [i.name for i in measures.network.interfaces] == ["eth0"]  # lo ignored
    assert measures.network.default is not None and measures.network.default.tx_bytes == 2
    assert measures.process is not None and measures.process.process_count == 3
    bare = sm.measures_from_cgroup(sample, None)
    assert bare.network is None and bare.process is None


def test_make_pod_stats() -> None:
    main = sm.make_container_stats(
        cstats("c", "main"),
        container("c", "main", "s", T0),
        nano_cores=1,
        now=NOW,
        logs=sm.logs_stats(DiskUsage(100, 1), ROOT_FS, NOW),
        rootfs_info=ROOT_FS,
    )
    volume = sm.VolumeUsage(name="cache", usage=DiskUsage(1000, 10), fs=ROOT_FS, time=NOW, local_ephemeral=True)
    secret = sm.VolumeUsage(name="token", usage=DiskUsage(8, 3), fs=None, time=NOW, local_ephemeral=False)
    measures = sm.measures_from_sandbox_stats(pod_sandbox_stats("s"), 42)
    pod = sm.make_pod_stats(
        sandbox("s", "web", T0 - 2 * S),
        [main],
        measures,
        volumes=[secret, volume],
        root_fs=ROOT_FS,
        now=NOW,
        etc_hosts=sm.logs_stats(DiskUsage(4096, 1), ROOT_FS, NOW),
    )
    assert pod.pod_ref.uid == "uid-web" and pod.start_time == sm.from_ns(T0 - 2 * S)
    assert (pod.cpu, pod.memory, pod.network, pod.process_stats) == (
        measures.cpu,
        measures.memory,
        measures.network,
        measures.process,
    )
    assert [v.name for v in pod.volume_stats] == ["cache", "token"]  # ephemeral first
    assert pod.volume_stats[1].fs.capacity_bytes == 0 and pod.volume_stats[1].fs.inodes == 0  # all fields set
    # writable layer 20 + logs 100 + the ephemeral volume 1000 + etc-hosts 4096; the secret's tmpfs is not counted
    assert pod.ephemeral_storage is not None
    assert (pod.ephemeral_storage.used_bytes, pod.ephemeral_storage.inodes_used) == (20 + 100 + 1000 + 4096, 14)
    assert pod.ephemeral_storage.capacity_bytes == 1000


def test_make_pod_stats_without_measures_sums_containers() -> None:
    a = ContainerStats("a", NOW, cpu=CPUStats(NOW, 10, 100), memory=MemoryStats(NOW, None, 5, 4, 3, 2, 1))
    b = ContainerStats("b", NOW, cpu=CPUStats(NOW, None, 50), memory=MemoryStats(NOW, 8, 5, 4, 3, 2, 1))
    pod = sm.make_pod_stats(sandbox("s", "web", T0), [a, b], None, cpu_and_memory_only=True)
    assert pod.cpu == CPUStats(NOW, 10, 150)
    assert pod.memory == MemoryStats(NOW, 8, 10, 8, 6, 4, 2)
    assert pod.network is None and pod.ephemeral_storage is None


@pytest.mark.parametrize(
    ("containers", "volumes", "expected_used", "expected_inodes"),
    [
        ([], [], None, None),
        ([ContainerStats("a", NOW, logs=FsStats(NOW, used_bytes=5))], [], None, None),  # logs count with a rootfs
        (
            [
                ContainerStats(
                    "a",
                    NOW,
                    rootfs=FsStats(NOW, used_bytes=1, inodes_used=1),
                    logs=FsStats(NOW, used_bytes=5, inodes_used=2),
                )
            ],
            [],
            6,
            3,
        ),
        ([], [VolumeStats("v", FsStats(NOW, used_bytes=7, inodes_used=1))], 7, 1),
    ],
)
def test_ephemeral_storage(
    containers: list[ContainerStats], volumes: list[VolumeStats], expected_used: int | None, expected_inodes: int | None
) -> None:
    found = sm.ephemeral_storage(containers, volumes, ROOT_FS, NOW)
    assert (found.used_bytes, found.inodes_used) == (expected_used, expected_inodes)
    assert (found.available_bytes, found.capacity_bytes, found.inodes, found.inodes_free) == (400, 1000, 100, 40)


def test_cgroup_cpu_memory_and_system_container() -> None:
    sample = CgroupSample(
        path="/kubepods",
        time=NOW,
        cpu_usage_ns=77,
        memory=MemorySample(100, 60, 30, 5, 1, 1000),
        start_time=sm.from_ns(T0),
    )
    stats = sm.system_container("pods", sample, None)
    assert stats.cpu == CPUStats(NOW, usage_nano_cores=0, usage_core_nano_seconds=77)
    assert stats.memory == MemoryStats(NOW, 940, 100, 60, 30, 5, 1)
    assert stats.start_time == sm.from_ns(T0)
    empty = CgroupSample(path="/x", time=NOW, cpu_usage_ns=None, memory=None, start_time=None)
    cpu, memory = sm.cgroup_cpu_memory(empty, 5)
    assert cpu == CPUStats(NOW, 5, 0) and memory == MemoryStats(NOW, working_set_bytes=0)


def test_node_network_and_fs() -> None:
    counters = [InterfaceCounters("br0", 1, 0, 2, 0), InterfaceCounters("eth0", 3, 1, 4, 0)]
    network = sm.network_stats(counters, NOW)
    assert network is not None and network.default is not None and network.default.rx_bytes == 3
    assert sm.network_stats([], NOW) is None
    no_eth0 = sm.network_stats(counters[:1], NOW)
    assert no_eth0 is not None and no_eth0.default is None and len(no_eth0.interfaces) == 1
    fs = sm.node_fs(ROOT_FS, NOW)
    assert (fs.used_bytes, fs.inodes_used) == (600, 60)
