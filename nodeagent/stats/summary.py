"""Building the Summary from what was measured: pure functions, so tables test them (upstream
pkg/kubelet/stats/cri_stats_provider.go, helper.go and pkg/kubelet/server/stats/summary.go).

Where upstream's default provider (CRI partially, the rest from cAdvisor) and the CRI-only one differ, the values
follow the default one's shape: a pod is listed when one of its containers runs; a container or pod memory's
`availableBytes` is left out when the cgroup has no limit (containerd writes 0 there instead); the pod's network
lists its default interface when the runtime lists none.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cri.v1 import api_pb2
from nodeagent.stats.cgroups import CgroupSample
from nodeagent.stats.host import DiskUsage, FsInfo, InterfaceCounters, Rlimit, node_interfaces
from nodeagent.stats.types import (
    ContainerStats,
    CPUStats,
    FsStats,
    InterfaceStats,
    IOStats,
    MemoryStats,
    NetworkStats,
    PodReference,
    PodStats,
    ProcessStats,
    PSIStats,
    PVCReference,
    RlimitStats,
    VolumeStats,
)

DEFAULT_INTERFACE = "eth0"


def from_ns(ns: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC)


def _value(message: api_pb2.UInt64Value, present: bool) -> int | None:
    return message.value if present else None


# --- which sandboxes and containers count --------------------------------------------------------------------


def remove_terminated_pods(sandboxes: Iterable[api_pb2.PodSandbox]) -> list[api_pb2.PodSandbox]:
    """upstream removeTerminatedPods: of the sandboxes of one pod (name, namespace), the ready ones; the newest
    when none is ready."""
    by_pod: dict[tuple[str, str], list[api_pb2.PodSandbox]] = {}
    for sandbox in sorted(sandboxes, key=lambda s: s.created_at):
        by_pod.setdefault((sandbox.metadata.name, sandbox.metadata.namespace), []).append(sandbox)
    out: list[api_pb2.PodSandbox] = []
    for group in by_pod.values():
        ready = [s for s in group if s.state == api_pb2.SANDBOX_READY]
        out.extend(group if len(group) == 1 else ready or [group[-1]])
    return out


def remove_terminated_containers(containers: Iterable[api_pb2.Container]) -> list[api_pb2.Container]:
    """upstream removeTerminatedContainers: only running containers are measured."""
    return sorted((c for c in containers if c.state == api_pb2.CONTAINER_RUNNING), key=lambda c: c.created_at)


# --- containers ----------------------------------------------------------------------------------------------


def _available(message: api_pb2.MemoryUsage) -> int | None:
    # containerd answers 0 for a cgroup without a limit; upstream's default path reads the limit and leaves the
    # field out then.
    if not message.HasField("available_bytes") or message.available_bytes.value == 0:
        return None
    return message.available_bytes.value


def cri_cpu(usage: api_pb2.CpuUsage, nano_cores: int | None) -> CPUStats:
    """CPU from a CRI CpuUsage; `nano_cores` stands in when the runtime gave no usage_nano_cores."""
    own = _value(usage.usage_nano_cores, usage.HasField("usage_nano_cores"))
    return CPUStats(
        time=from_ns(usage.timestamp),
        usage_nano_cores=own if own is not None else nano_cores,
        usage_core_nano_seconds=_value(usage.usage_core_nano_seconds, usage.HasField("usage_core_nano_seconds")),
    )


def cri_memory(usage: api_pb2.MemoryUsage) -> MemoryStats:
    return MemoryStats(
        time=from_ns(usage.timestamp),
        available_bytes=_available(usage),
        usage_bytes=_value(usage.usage_bytes, usage.HasField("usage_bytes")),
        working_set_bytes=_value(usage.working_set_bytes, usage.HasField("working_set_bytes")),
        rss_bytes=_value(usage.rss_bytes, usage.HasField("rss_bytes")),
        page_faults=_value(usage.page_faults, usage.HasField("page_faults")),
        major_page_faults=_value(usage.major_page_faults, usage.HasField("major_page_faults")),
    )


def container_cpu_memory(
    stats: api_pb2.ContainerStats, *, nano_cores: int | None, now: datetime.datetime
) -> tuple[CPUStats, MemoryStats]:
    """A container's CPU and memory; what the runtime left out is zero at `now`, as upstream makeContainerStats
    does."""
    if stats.HasField("cpu"):
        cpu = cri_cpu(stats.cpu, nano_cores)
    else:
        cpu = CPUStats(time=now, usage_nano_cores=0, usage_core_nano_seconds=0)
    if stats.HasField("memory"):
        memory = cri_memory(stats.memory)
    else:
        memory = MemoryStats(time=now, usage_bytes=0, working_set_bytes=0, rss_bytes=0)
    return cpu, memory


def fs_stats(
    info: FsInfo | None, time: datetime.datetime | None, *, used: int | None = None, inodes_used: int | None = None
) -> FsStats:
    """A filesystem's capacity and free space with what one consumer uses of it."""
    if info is None:
        return FsStats(time=time, used_bytes=used, inodes_used=inodes_used)
    return FsStats(
        time=time,
        available_bytes=info.available,
        capacity_bytes=info.capacity,
        used_bytes=used,
        inodes_free=info.inodes_free,
        inodes=info.inodes,
        inodes_used=inodes_used,
    )


def writable_layer_stats(usage: api_pb2.FilesystemUsage, info: FsInfo | None) -> FsStats:
    """A container's rootfs: the runtime's writable layer usage on its filesystem."""
    return fs_stats(
        info,
        from_ns(usage.timestamp),
        used=_value(usage.used_bytes, usage.HasField("used_bytes")),
        inodes_used=_value(usage.inodes_used, usage.HasField("inodes_used")),
    )


def make_container_stats(
    stats: api_pb2.ContainerStats,
    container: api_pb2.Container,
    *,
    nano_cores: int | None,
    now: datetime.datetime,
    rootfs_info: FsInfo | None = None,
    logs: FsStats | None = None,
    cpu_and_memory_only: bool = False,
    psi: tuple[PSIStats | None, PSIStats | None] = (None, None),
) -> ContainerStats:
    """`psi`, the cpu and memory PSI of the container's own cgroup (v2): upstream takes a container's cpu and memory
    from cAdvisor when it has them, their PSI with them."""
    cpu, memory = container_cpu_memory(stats, nano_cores=nano_cores, now=now)
    cpu = dataclasses.replace(cpu, psi=psi[0])
    memory = dataclasses.replace(memory, psi=psi[1])
    name = stats.attributes.metadata.name or container.metadata.name
    start = from_ns(container.created_at)
    if cpu_and_memory_only:
        return ContainerStats(name=name, start_time=start, cpu=cpu, memory=memory)
    rootfs = writable_layer_stats(stats.writable_layer, rootfs_info) if stats.HasField("writable_layer") else None
    if rootfs is None:
        rootfs = FsStats(time=None)  # upstream always sets an (empty) rootfs
    return ContainerStats(name=name, start_time=start, cpu=cpu, memory=memory, rootfs=rootfs, logs=logs)


def logs_stats(usage: DiskUsage | None, root_fs: FsInfo | None, time: datetime.datetime) -> FsStats | None:
    """A container's log files on the node's filesystem (upstream getPodContainerLogStats)."""
    if usage is None:
        return None
    return fs_stats(root_fs, time, used=usage.used_bytes, inodes_used=usage.inodes_used)


# --- pods ----------------------------------------------------------------------------------------------------


def pod_reference(sandbox: api_pb2.PodSandbox) -> PodReference:
    return PodReference(name=sandbox.metadata.name, namespace=sandbox.metadata.namespace, uid=sandbox.metadata.uid)


def pod_network(stats: api_pb2.PodSandboxStats) -> NetworkStats | None:
    """The pod's network from the sandbox's stats. containerd 1.7 leaves the network's timestamp at 0: the pod
    CPU's time (same collection) stands in for it."""
    if not stats.linux.HasField("network"):
        return None
    network = stats.linux.network
    timestamp = network.timestamp or stats.linux.cpu.timestamp or stats.linux.memory.timestamp

    def interface(usage: api_pb2.NetworkInterfaceUsage) -> InterfaceStats:
        return InterfaceStats(
            name=usage.name,
            rx_bytes=_value(usage.rx_bytes, usage.HasField("rx_bytes")),
            rx_errors=_value(usage.rx_errors, usage.HasField("rx_errors")),
            tx_bytes=_value(usage.tx_bytes, usage.HasField("tx_bytes")),
            tx_errors=_value(usage.tx_errors, usage.HasField("tx_errors")),
        )

    default = interface(network.default_interface) if network.HasField("default_interface") else None
    interfaces = tuple(interface(i) for i in network.interfaces)
    if not interfaces and default is not None:
        interfaces = (default,)
    return NetworkStats(time=from_ns(timestamp), default=default, interfaces=interfaces)


def pod_process(stats: api_pb2.PodSandboxStats) -> ProcessStats | None:
    if not stats.linux.HasField("process"):
        return None
    process = stats.linux.process
    return ProcessStats(process_count=_value(process.process_count, process.HasField("process_count")))


def summed_cpu(containers: Sequence[ContainerStats]) -> CPUStats | None:
    """A pod's CPU as the sum of its containers' (upstream addPodCPUMemoryStats without a pod cgroup)."""
    cpus = [c.cpu for c in containers if c.cpu is not None]
    if not cpus:
        return None
    return CPUStats(
        time=cpus[-1].time,
        usage_nano_cores=sum(c.usage_nano_cores or 0 for c in cpus),
        usage_core_nano_seconds=sum(c.usage_core_nano_seconds or 0 for c in cpus),
    )


def summed_memory(containers: Sequence[ContainerStats]) -> MemoryStats | None:
    memories = [c.memory for c in containers if c.memory is not None]
    if not memories:
        return None
    return MemoryStats(
        time=memories[-1].time,
        available_bytes=sum(m.available_bytes or 0 for m in memories),
        usage_bytes=sum(m.usage_bytes or 0 for m in memories),
        working_set_bytes=sum(m.working_set_bytes or 0 for m in memories),
        rss_bytes=sum(m.rss_bytes or 0 for m in memories),
        page_faults=sum(m.page_faults or 0 for m in memories),
        major_page_faults=sum(m.major_page_faults or 0 for m in memories),
    )


def _add(first: int | None, second: int | None) -> int | None:
    if first is None:
        return second
    if second is None:
        return first
    return first + second


def _later(first: datetime.datetime | None, second: datetime.datetime | None) -> datetime.datetime | None:
    if first is None:
        return second
    if second is None:
        return first
    return max(first, second)


def ephemeral_storage(
    containers: Sequence[ContainerStats],
    volumes: Sequence[VolumeStats],
    root_fs: FsInfo | None,
    time: datetime.datetime,
    *,
    pod_logs: FsStats | None = None,
    etc_hosts: FsStats | None = None,
) -> FsStats:
    """upstream calcEphemeralStorage (CRI provider): the containers' writable layers and logs (a container's logs
    count only with its rootfs), the pod's local ephemeral volumes, its own log files and etc-hosts."""
    used: int | None = None
    inodes: int | None = None
    latest: datetime.datetime | None = time
    for container in containers:
        if container.rootfs is None:
            continue
        latest = _later(latest, container.rootfs.time)
        used = _add(used, container.rootfs.used_bytes)
        inodes = _add(inodes, container.rootfs.inodes_used)
        if container.logs is not None:
            used = _add(used, container.logs.used_bytes)
            inodes = _add(inodes, container.logs.inodes_used)
            latest = _later(latest, container.logs.time)
    for extra in [v.fs for v in volumes] + [s for s in (pod_logs, etc_hosts) if s is not None]:
        used = _add(used, extra.used_bytes)
        inodes = _add(inodes, extra.inodes_used)
        latest = _later(latest, extra.time)
    return fs_stats(root_fs, latest, used=used, inodes_used=inodes)


@dataclass(frozen=True, slots=True)
class VolumeUsage:
    """One mounted volume of a pod: walked on disk, or measured by its plugin (stats/volumes.py)."""

    name: str
    usage: DiskUsage
    fs: FsInfo | None
    time: datetime.datetime
    local_ephemeral: bool
    pvc_ref: PVCReference | None = None  # the claim the pod spec names for it
    abnormal: bool | None = None  # the plugin's health report (CSI volume condition), None without one


def volume_stats(volumes: Sequence[VolumeUsage]) -> tuple[tuple[VolumeStats, ...], tuple[VolumeStats, ...]]:
    """(ephemeral, persistent) as upstream's volume stat calculator splits them; every field is set, zeros
    included."""
    ephemeral: list[VolumeStats] = []
    persistent: list[VolumeStats] = []
    for v in sorted(volumes, key=lambda v: v.name):
        info = v.fs or FsInfo(0, 0, 0, 0, 0)
        stats = VolumeStats(
            name=v.name,
            pvc_ref=v.pvc_ref,
            abnormal=v.abnormal,
            fs=FsStats(
                time=v.time,
                available_bytes=info.available,
                capacity_bytes=info.capacity,
                used_bytes=v.usage.used_bytes,
                inodes_free=info.inodes_free or 0,
                inodes=info.inodes or 0,
                inodes_used=v.usage.inodes_used,
            ),
        )
        (ephemeral if v.local_ephemeral else persistent).append(stats)
    return tuple(ephemeral), tuple(persistent)


@dataclass(frozen=True, slots=True)
class PodMeasures:
    """A pod's own numbers: its cgroup's CPU and memory, its network namespace's interfaces, its process count."""

    cpu: CPUStats | None = None
    memory: MemoryStats | None = None
    network: NetworkStats | None = None
    process: ProcessStats | None = None
    io: IOStats | None = None


def measures_from_cgroup(
    sample: CgroupSample,
    nano_cores: int | None,
    *,
    interfaces: Sequence[InterfaceCounters] | None = None,
    process_count: int | None = None,
) -> PodMeasures:
    """From the pod cgroup and the pause container's network namespace, as upstream's default provider takes
    them from cAdvisor (the pod cgroup; the infra container's interfaces, without the ignored ones)."""
    cpu, memory = cgroup_cpu_memory(sample, nano_cores)
    network = network_stats(node_interfaces_of(interfaces), sample.time) if interfaces is not None else None
    process = ProcessStats(process_count=process_count) if process_count is not None else None
    return PodMeasures(cpu=cpu, memory=memory, network=network, process=process, io=cgroup_io(sample))


def measures_from_sandbox_stats(stats: api_pb2.PodSandboxStats, nano_cores: int | None) -> PodMeasures:
    """From the runtime's PodSandboxStats (a pod whose cgroup is not where the cgroupfs driver puts it)."""
    if not stats.HasField("linux"):
        return PodMeasures()
    linux = stats.linux
    return PodMeasures(
        cpu=cri_cpu(linux.cpu, nano_cores) if linux.HasField("cpu") else None,
        memory=cri_memory(linux.memory) if linux.HasField("memory") else None,
        network=pod_network(stats),
        process=pod_process(stats),
    )


def make_pod_stats(
    sandbox: api_pb2.PodSandbox,
    containers: Sequence[ContainerStats],
    measures: PodMeasures | None,
    *,
    cpu_and_memory_only: bool = False,
    volumes: Sequence[VolumeUsage] = (),
    root_fs: FsInfo | None = None,
    now: datetime.datetime | None = None,
    pod_logs: FsStats | None = None,
    etc_hosts: FsStats | None = None,
) -> PodStats:
    """A pod from its sandbox, its measured containers and its own measures; without those, the containers'
    sums (upstream addPodCPUMemoryStats when there is no pod cgroup to read)."""
    measures = measures or PodMeasures()
    cpu = measures.cpu or summed_cpu(containers)
    memory = measures.memory or summed_memory(containers)
    ref, start = pod_reference(sandbox), from_ns(sandbox.created_at)
    if cpu_and_memory_only:
        return PodStats(pod_ref=ref, start_time=start, containers=tuple(containers), cpu=cpu, memory=memory)
    ephemeral, persistent = volume_stats(volumes)
    return PodStats(
        pod_ref=ref,
        start_time=start,
        containers=tuple(containers),
        cpu=cpu,
        memory=memory,
        io=measures.io,
        network=measures.network,
        volume_stats=ephemeral + persistent,
        ephemeral_storage=ephemeral_storage(
            containers, ephemeral, root_fs, now or start, pod_logs=pod_logs, etc_hosts=etc_hosts
        ),
        process_stats=measures.process,
    )


# --- node ----------------------------------------------------------------------------------------------------


def cgroup_cpu_memory(sample: CgroupSample, nano_cores: int | None) -> tuple[CPUStats, MemoryStats]:
    """A cgroup read from cgroupfs, as cadvisorInfoToCPUandMemoryStats makes it."""
    cpu = CPUStats(
        time=sample.time,
        usage_nano_cores=nano_cores if nano_cores is not None else 0,
        usage_core_nano_seconds=sample.cpu_usage_ns if sample.cpu_usage_ns is not None else 0,
        psi=sample.cpu_psi,
    )
    m = sample.memory
    if m is None:
        return cpu, MemoryStats(time=sample.time, working_set_bytes=0, psi=sample.memory_psi)
    memory = MemoryStats(
        time=sample.time,
        available_bytes=m.available_bytes,
        usage_bytes=m.usage_bytes,
        working_set_bytes=m.working_set_bytes,
        rss_bytes=m.rss_bytes,
        page_faults=m.page_faults if m.page_faults is not None else 0,
        major_page_faults=m.major_page_faults if m.major_page_faults is not None else 0,
        psi=sample.memory_psi,
    )
    return cpu, memory


def cgroup_io(sample: CgroupSample) -> IOStats | None:
    """The cgroup's io with its PSI (upstream cadvisorInfoToIOStats); None without an io.pressure (v1)."""
    if sample.io_psi is None:
        return None
    return IOStats(time=sample.time, psi=sample.io_psi)


def system_container(
    name: str, sample: CgroupSample, nano_cores: int | None, *, start_time: datetime.datetime | None = None
) -> ContainerStats:
    """A system container (kubelet, runtime, pods): the cgroup's CPU and memory under upstream's name."""
    cpu, memory = cgroup_cpu_memory(sample, nano_cores)
    return ContainerStats(name=name, start_time=start_time or sample.start_time, cpu=cpu, memory=memory)


def node_interfaces_of(interfaces: Sequence[InterfaceCounters]) -> list[InterfaceCounters]:
    return node_interfaces({i.name: i for i in interfaces})


def network_stats(interfaces: Sequence[InterfaceCounters], time: datetime.datetime) -> NetworkStats | None:
    """Interfaces as NetworkStats, eth0 inlined as the default (upstream cadvisorInfoToNetworkStats)."""
    if not interfaces:
        return None
    stats = tuple(InterfaceStats(i.name, i.rx_bytes, i.rx_errors, i.tx_bytes, i.tx_errors) for i in interfaces)
    default = next((s for s in stats if s.name == DEFAULT_INTERFACE), None)
    return NetworkStats(time=time, default=default, interfaces=stats)


def node_fs(info: FsInfo, time: datetime.datetime) -> FsStats:
    """upstream RootFsStats: the root dir's filesystem, its usage the whole filesystem's."""
    return fs_stats(info, time, used=info.usage, inodes_used=info.inodes_used)


def image_fs(usage: api_pb2.FilesystemUsage, info: FsInfo | None) -> FsStats:
    """upstream ImageFsStats: the runtime's image usage on the filesystem it names."""
    return writable_layer_stats(usage, info)


def rlimit_stats(rlimit: Rlimit, time: datetime.datetime) -> RlimitStats:
    return RlimitStats(time=time, max_pid=rlimit.max_pid, num_of_running_processes=rlimit.running_processes)
