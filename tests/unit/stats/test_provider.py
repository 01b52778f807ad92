"""StatsProvider over a stand-in runtime (the CRI calls it makes) and the recorded cgroup v2 tree: which pods and
containers it reports, the rates it computes between calls, the host parts, the runtime's PodSandboxStats for a pod
whose cgroup is elsewhere and the containers' sums without it, errors. The real containerd is
tests/integration/test_stats.py's."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import pytest

from cri.errors import UnavailableError, UnimplementedError
from cri.v1 import api_pb2
from nodeagent.stats.cgroups import CgroupFS
from nodeagent.stats.errors import StatsError
from nodeagent.stats.provider import StatsProvider
from nodeagent.stats.types import summary_json

S = 1_000_000_000
T0 = 1_795_600_000 * S
DATA = Path(__file__).parent / "testdata" / "cgroupv2"


def u(value: int) -> api_pb2.UInt64Value:
    return api_pb2.UInt64Value(value=value)


class Runtime:
    """The runtime's answers, changed by the test between calls."""

    def __init__(self, snapshot: str) -> None:
        self.cpu = 10 * S
        self.t = T0
        self.sandbox_stats_implemented = True
        self.sandbox_stats_asked: list[str] = []
        self.fail: Exception | None = None
        self.snapshot = snapshot

    def sandboxes(self) -> list[api_pb2.PodSandbox]:
        def one(sid: str, name: str, uid: str) -> api_pb2.PodSandbox:
            meta = api_pb2.PodSandboxMetadata(name=name, namespace="default", uid=uid)
            return api_pb2.PodSandbox(id=sid, metadata=meta, created_at=T0 - 60 * S, state=api_pb2.SANDBOX_READY)

        return [one("ctr", "web", "v2"), one("s-idle", "pending", "u-pending")]

    async def list_pod_sandbox(
        self, filter: object = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]:
        if self.fail is not None:
            raise self.fail
        return self.sandboxes()

    async def list_containers(self, filter: object = None, *, timeout: float | None = None) -> list[api_pb2.Container]:
        def one(cid: str, name: str, state: int) -> api_pb2.Container:
            return api_pb2.Container(
                id=cid,
                pod_sandbox_id="ctr",
                metadata=api_pb2.ContainerMetadata(name=name),
                created_at=T0 - 30 * S,
                state=state,  # type: ignore[arg-type]
                image=api_pb2.ImageSpec(image="sha256:1", user_specified_image="reg/busybox:1"),
            )

        return [one("c-main", "main", api_pb2.CONTAINER_RUNNING), one("c-old", "main", api_pb2.CONTAINER_EXITED)]

    def container_stats(self) -> list[api_pb2.ContainerStats]:
        return [
            api_pb2.ContainerStats(
                attributes=api_pb2.ContainerAttributes(id=cid, metadata=api_pb2.ContainerMetadata(name="main")),
                cpu=api_pb2.CpuUsage(timestamp=self.t, usage_core_nano_seconds=u(self.cpu)),
                memory=api_pb2.MemoryUsage(timestamp=self.t, working_set_bytes=u(1000), usage_bytes=u(1200)),
                writable_layer=api_pb2.FilesystemUsage(
                    timestamp=self.t,
                    fs_id=api_pb2.FilesystemIdentifier(mountpoint=self.snapshot),
                    used_bytes=u(4096),
                    inodes_used=u(3),
                ),
            )
            for cid in ("c-main", "c-old")
        ]

    async def list_container_stats(
        self, filter: object = None, *, timeout: float | None = None
    ) -> list[api_pb2.ContainerStats]:
        return self.container_stats()

    async def pod_sandbox_stats(self, pod_sandbox_id: str, *, timeout: float | None = None) -> api_pb2.PodSandboxStats:
        self.sandbox_stats_asked.append(pod_sandbox_id)
        if not self.sandbox_stats_implemented:
            raise UnimplementedError("/runtime.v1.RuntimeService/PodSandboxStats", None, "unimplemented")
        return api_pb2.PodSandboxStats(
            attributes=api_pb2.PodSandboxAttributes(id=pod_sandbox_id),
            linux=api_pb2.LinuxPodSandboxStats(
                cpu=api_pb2.CpuUsage(timestamp=self.t, usage_core_nano_seconds=u(self.cpu + S)),
                memory=api_pb2.MemoryUsage(timestamp=self.t, working_set_bytes=u(5000)),
                network=api_pb2.NetworkUsage(
                    timestamp=self.t,
                    default_interface=api_pb2.NetworkInterfaceUsage(name="eth0", rx_bytes=u(7), tx_bytes=u(8)),
                ),
                process=api_pb2.ProcessUsage(timestamp=self.t, process_count=u(1)),
            ),
        )

    async def image_fs_info(self, *, timeout: float | None = None) -> api_pb2.ImageFsInfoResponse:
        usage = api_pb2.FilesystemUsage(
            timestamp=self.t,
            fs_id=api_pb2.FilesystemIdentifier(mountpoint=self.snapshot),
            used_bytes=u(1 << 20),
            inodes_used=u(50),
        )
        return api_pb2.ImageFsInfoResponse(image_filesystems=[usage])


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime.fromtimestamp(T0 / S, datetime.UTC)
        self.mono = 100.0

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)
        self.mono += seconds


@pytest.fixture
def world(tmp_path: Path) -> tuple[StatsProvider, Runtime, Clock, Path]:
    root_dir = tmp_path / "kubelet"
    snapshot = tmp_path / "snapshots"
    snapshot.mkdir()
    logs = tmp_path / "pods"
    (logs / "default_web_v2" / "main").mkdir(parents=True)
    (logs / "default_web_v2" / "main" / "0.log").write_bytes(b"x" * 5000)
    volume = root_dir / "pods" / "v2" / "volumes" / "kubernetes.io~empty-dir" / "cache"
    volume.mkdir(parents=True)
    (volume / "data").write_bytes(b"d" * 20000)
    secret = root_dir / "pods" / "v2" / "volumes" / "kubernetes.io~secret" / "token"
    secret.mkdir(parents=True)
    (secret / "t").write_bytes(b"t" * 10)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/kubepods/burstable/podv2/ctr\n")
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "pid_max").write_text("4194304\n")
    (proc / "sys" / "kernel" / "threads-max").write_text("95000\n")
    (proc / "loadavg").write_text("0.10 0.20 0.30 2/345 6789\n")
    cgroups = tmp_path / "cgroup"
    shutil.copytree(DATA, cgroups)
    pod_cgroup = cgroups / "kubepods" / "burstable" / "podv2"
    (pod_cgroup / "ctr" / "cgroup.procs").write_text("4242\n")  # the pause container: the sandbox's ID
    (pod_cgroup / "c-main").mkdir()
    (pod_cgroup / "c-main" / "cgroup.procs").write_text("4243\n4244\n")
    (proc / "4242" / "net").mkdir(parents=True)
    shutil.copy(DATA.parent / "net-dev", proc / "4242" / "net" / "dev")
    runtime, clock = Runtime(str(snapshot)), Clock()
    provider = StatsProvider(
        runtime,
        runtime,
        node_name="node-1",
        root_dir=str(root_dir),
        pod_log_dir_root=str(logs),
        cgroupfs=CgroupFS(cgroups),
        proc=proc,
        wall=lambda: clock.now,
        monotonic=lambda: clock.mono,
    )
    return provider, runtime, clock, tmp_path


async def test_full_summary(world: tuple[StatsProvider, Runtime, Clock, Path]) -> None:
    provider, runtime, clock, tmp = world
    first = await provider.summary()
    # the pod without a running container is not listed; of two containers named main only the running one
    [pod] = first.pods
    assert pod.pod_ref.uid == "v2" and [c.name for c in pod.containers] == ["main"]
    [main] = pod.containers
    assert main.cpu is not None and main.cpu.usage_nano_cores is None  # one sample: no rate yet
    assert pod.cpu is not None and pod.cpu.usage_nano_cores == 0  # a cgroup's, as cAdvisor's: 0 until two samples
    runtime.cpu += S // 2
    runtime.t += 2 * S
    clock.advance(2)
    pod_cpu = tmp / "cgroup" / "kubepods" / "burstable" / "podv2" / "cpu.stat"
    pod_cpu.write_text(pod_cpu.read_text().replace("usage_usec 1500000", "usage_usec 2500000"))
    second = await provider.summary()
    [pod] = second.pods
    [main] = pod.containers
    assert main.cpu is not None and main.cpu.usage_nano_cores == S // 4  # half a core-second over two seconds
    # the pod from its cgroup: one more core-second in two seconds
    assert pod.cpu is not None and pod.cpu.usage_nano_cores == S // 2
    assert pod.cpu.usage_core_nano_seconds == 2_500_000_000
    assert pod.memory is not None and pod.memory.working_set_bytes == 80000000 - 8388608
    assert main.logs is not None and main.logs.used_bytes is not None and main.logs.used_bytes >= 5000
    assert main.rootfs is not None and main.rootfs.used_bytes == 4096 and main.rootfs.capacity_bytes
    assert [v.name for v in pod.volume_stats] == ["cache", "token"]
    assert pod.ephemeral_storage is not None and pod.ephemeral_storage.used_bytes is not None
    assert pod.ephemeral_storage.used_bytes >= 4096 + 5000 + 20000
    # the pause container's network namespace (lo left out), the containers' processes
    assert pod.network is not None and pod.network.default is not None and pod.network.default.rx_bytes == 2372
    assert [i.name for i in pod.network.interfaces] == ["eth0"]
    assert pod.process_stats is not None and pod.process_stats.process_count == 2
    assert runtime.sandbox_stats_asked == []

    node = second.node
    assert node.node_name == "node-1"
    assert node.cpu is not None and node.cpu.usage_core_nano_seconds == 98765432101 * 1000
    assert node.cpu.usage_nano_cores == 0  # the recorded root did not move in two seconds
    assert node.memory is not None and node.memory.working_set_bytes == 2147483648
    assert node.memory.available_bytes is not None  # the machine's memory as the root's limit
    assert {c.name for c in node.system_containers} == {"pods", "kubelet"}
    kubelet = next(c for c in node.system_containers if c.name == "kubelet")
    assert kubelet.start_time == clock.now - datetime.timedelta(seconds=2)  # when the provider was made
    assert kubelet.memory is not None and kubelet.memory.available_bytes == 134217728 - (73400320 - 8388608)
    assert node.rlimit is not None and (node.rlimit.max_pid, node.rlimit.num_of_running_processes) == (95000, 345)
    assert node.fs is not None and node.fs.capacity_bytes
    assert node.runtime is not None and node.runtime.image_fs == node.runtime.container_fs
    assert node.runtime.image_fs is not None and node.runtime.image_fs.used_bytes == 1 << 20
    body = summary_json(second)
    assert body["pods"][0]["containers"][0]["cpu"]["usageNanoCores"] == S // 4


async def test_cpu_and_memory_only(world: tuple[StatsProvider, Runtime, Clock, Path]) -> None:
    provider, _, _, _ = world
    found = await provider.summary(only_cpu_and_memory=True)
    node = found.node
    assert node.fs is None and node.runtime is None and node.network is None and node.rlimit is None
    assert node.cpu is not None and node.memory is not None
    [pod] = found.pods
    assert pod.network is None and pod.ephemeral_storage is None and pod.volume_stats == ()
    [main] = pod.containers
    assert main.rootfs is None and main.logs is None and main.memory is not None


async def test_pod_outside_the_cgroupfs_layout(world: tuple[StatsProvider, Runtime, Clock, Path]) -> None:
    provider, runtime, _, tmp = world
    kubepods = tmp / "cgroup" / "kubepods"
    (kubepods / "burstable" / "podv2").rename(kubepods / "elsewhere")
    [pod] = (await provider.summary()).pods
    # no pod cgroup: the runtime's PodSandboxStats for that pod
    assert runtime.sandbox_stats_asked == ["ctr"]
    assert pod.memory is not None and pod.memory.working_set_bytes == 5000
    assert pod.network is not None and pod.network.default is not None and pod.network.default.rx_bytes == 7
    assert pod.process_stats is not None and pod.process_stats.process_count == 1
    runtime.sandbox_stats_implemented = False
    [pod] = (await provider.summary()).pods
    # neither: the containers' sum, as upstream without a pod cgroup
    assert pod.memory is not None and pod.memory.working_set_bytes == 1000
    assert pod.cpu is not None and pod.cpu.usage_core_nano_seconds == 10 * S
    assert pod.network is None


async def test_runtime_failure_is_a_stats_error(world: tuple[StatsProvider, Runtime, Clock, Path]) -> None:
    provider, runtime, _, _ = world
    runtime.fail = UnavailableError("/runtime.v1.RuntimeService/ListPodSandbox", None, "connection refused")
    with pytest.raises(StatsError, match="failed to list pod stats"):
        await provider.summary()
    with pytest.raises(StatsError):
        await provider.cadvisor_containers()


async def test_cadvisor_rows(world: tuple[StatsProvider, Runtime, Clock, Path]) -> None:
    provider, _, _, _ = world
    rows = {r.id: r for r in await provider.cadvisor_containers()}
    assert set(rows) == {
        "/",
        "/kubepods",
        "/kubepods/burstable/podv2",
        "/kubepods/burstable/podv2/ctr",  # the pause container: the sandbox's ID under the pod cgroup
        "/kubepods/burstable/podv2/c-main",
    }
    pause = rows["/kubepods/burstable/podv2/ctr"]
    assert (pause.pod, pause.name, pause.container) == ("web", "ctr", "")
    assert [(n.interface, n.rx_bytes, n.tx_bytes) for n in pause.network] == [("eth0", 2372, 936)]
    main = rows["/kubepods/burstable/podv2/c-main"]
    assert (main.container, main.image, main.name, main.cpu_usage_ns) == ("main", "reg/busybox:1", "c-main", 10 * S)
    assert rows["/"].cpu_usage_ns == 98765432101 * 1000
