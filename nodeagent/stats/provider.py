"""The stats provider: one place that measures the node, its pods and containers, for the kubelet API
(/stats/summary, /metrics/resource, /metrics/cadvisor) and later the eviction manager, so nothing measures twice.

Where each number comes from, as upstream's default CRI stats provider takes them (the runtime for containers,
cAdvisor for the rest; here cgroupfs and /proc stand in for cAdvisor):

- containers: CRI ListPodSandbox, ListContainers and ListContainerStats (CPU with containerd's own usageNanoCores,
  memory, the writable layer), running containers only;
- pods: the pod cgroup (cgroupfs driver: <cgroupRoot>/kubepods[/<qos>]/pod<uid>; systemd:
  kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid>.slice) for CPU and memory, the pause container's
  /proc/<pid>/net/dev for the network, the containers' cgroup.procs for the process count. A pod whose cgroup is not
  there (a runtime that placed it elsewhere) gets the runtime's PodSandboxStats.
  (containerd's ListPodSandboxStats would answer all of it, but it enters every pod's network namespace: 1.4 s for
  100 pods here, against 0.2 s for ListContainerStats);
- PSI (cgroup v2): each cgroup's cpu, memory and io .pressure files (pods, the node's root, system containers),
  and each container's cpu and memory ones from its own cgroup (`<id>`, or the runtime's systemd scope);
- usageNanoCores where the runtime gives none (pods, the node, system containers): `CpuUsageCache`, two samples;
- the node: the root cgroup (memory limit = the machine's memory, as cAdvisor's raw handler sets it), the root dir's
  filesystem (statvfs), CRI ImageFsInfo plus statvfs of its mountpoint (imageFs; containerFs the same, as upstream
  for one filesystem), pid_max/threads-max and /proc/loadavg, psutil's interface counters and swap;
- system containers: `pods` (the kubepods cgroup), `kubelet` (this process's cgroup when its cpu and memory cgroups
  are one, as upstream's getContainer requires), `runtime` when its cgroup is given;
- logs (the container's log files), etc-hosts, the pod's volumes under <root-dir>/pods/<uid>/volumes (their `du` at
  most once a period per pod, as upstream's volume stat calculator); a CSI volume is asked of its driver instead
  (NodeGetVolumeStats through the plugin, stats/volumes.py), in the same period, and a claim's volume carries its
  pvcRef from the pod spec.

Blocking reads run in one worker thread per call; the CRI calls run together. The emulated nodes of one process
(`nodeagent fleet`) share the host-wide reads (`SharedHostReads`): every one of them is the same machine's root
cgroup, swap, pid limits and interfaces, so they are read at most once a second for all, and a summary of a node
with no pod to measure runs without a worker thread when they are fresh.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
import posixpath
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

import psutil

from cri.errors import CRIError, UnimplementedError
from cri.v1 import api_pb2
from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.sandbox_config import pod_cgroup_parent
from nodeagent.kuberuntime.systemd_cgroup_names import driver_cgroup
from nodeagent.stats import host, summary
from nodeagent.stats.cadvisor import CadvisorContainer, NetworkCounters
from nodeagent.stats.cgroups import CgroupFS, CgroupSample, parse_proc_cgroup, process_cgroup
from nodeagent.stats.cpu import CpuSample, CpuUsageCache
from nodeagent.stats.errors import StatsError
from nodeagent.stats.types import (
    SYSTEM_CONTAINER_KUBELET,
    SYSTEM_CONTAINER_PODS,
    SYSTEM_CONTAINER_RUNTIME,
    ContainerStats,
    NodeStats,
    PodStats,
    PSIStats,
    RuntimeStats,
    Summary,
    SwapStats,
    VolumeStats,
)
from nodeagent.stats.volumes import (
    MEASURED_PLUGIN_DIRS,
    PluginVolumeStats,
    PodSpecGetter,
    VolumeMetrics,
    claim_ref,
    measured_volume,
)

log = logging.getLogger(__name__)

VOLUME_STATS_PERIOD = 60.0  # upstream volumeStatsAggPeriod default
LOCAL_EPHEMERAL_PLUGINS = ("kubernetes.io~empty-dir", "kubernetes.io~configmap", "kubernetes.io~git-repo")
CRI_TIMEOUT = 10.0
# How old the shared host-wide reads may be (`SharedHostReads`): far under the eviction manager's 10 s period and
# cAdvisor's own housekeeping interval, which upstream's summary reads from its cache.
SHARED_HOST_READS_MAX_AGE = 1.0
# The systemd scopes runtimes put containers in under the systemd cgroup driver: containerd, CRI-O.
SYSTEMD_SCOPE_PREFIXES = ("cri-containerd", "crio")
# How long a summary waits for a plugin's volume stats. Upstream measures in the background (csiTimeout, 2 min), so a
# hung driver never holds the summary; here the summary (and the eviction manager reading it) waits at most this.
VOLUME_STATS_TIMEOUT = 10.0


class StatsRuntime(Protocol):
    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]: ...

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]: ...

    async def list_container_stats(
        self, filter: api_pb2.ContainerStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.ContainerStats]: ...

    async def pod_sandbox_stats(
        self, pod_sandbox_id: str, *, timeout: float | None = None
    ) -> api_pb2.PodSandboxStats: ...


class ImageFsService(Protocol):
    async def image_fs_info(self, *, timeout: float | None = None) -> api_pb2.ImageFsInfoResponse: ...


def _ns(when: datetime.datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def kubepods_cgroup(cgroup_root: str, cgroup_driver: str = "cgroupfs") -> str:
    """The kubepods cgroup in the driver's form: `/kubepods` (cgroupfs), `/kubepods.slice` (systemd)."""
    return driver_cgroup(posixpath.dirname(pod_cgroup_parent("", QOSClass.GUARANTEED, cgroup_root)), cgroup_driver)


def pod_cgroup_candidates(uid: str, cgroup_root: str, cgroup_driver: str = "cgroupfs") -> list[str]:
    """Where the driver puts a pod, by QoS class (a sandbox does not say which one it has)."""
    return [driver_cgroup(pod_cgroup_parent(uid, qos, cgroup_root), cgroup_driver) for qos in QOSClass]


@dataclass(frozen=True, slots=True)
class _RuntimeView:
    sandboxes: dict[str, api_pb2.PodSandbox]  # by ID, the ones that count (upstream removeTerminatedPods)
    containers: dict[str, api_pb2.Container]  # by ID, running ones
    stats: dict[str, list[api_pb2.ContainerStats]]  # by sandbox ID
    order: list[str]  # sandbox IDs with a running container, oldest first: the pods to list


class ContainerPressure(NamedTuple):
    """A container cgroup's cpu.pressure, memory.pressure and io.pressure (None where absent: v1, no PSI)."""

    cpu: PSIStats | None
    memory: PSIStats | None
    io: PSIStats | None


NO_PRESSURE = ContainerPressure(None, None, None)


@dataclass(frozen=True, slots=True)
class _PodCgroup:
    path: str
    sample: CgroupSample
    pause: CgroupSample | None
    interfaces: list[host.InterfaceCounters] | None
    process_count: int
    # by container ID: the PSI of the container's cgroup (v2 only)
    psi: dict[str, ContainerPressure] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _PodDisk:
    logs: dict[str, host.DiskUsage | None]  # by container name
    pod_logs: host.DiskUsage | None
    etc_hosts: host.DiskUsage | None
    volumes: list[summary.VolumeUsage]


@dataclass
class _HostView:
    """What one call read from the host (in the worker thread)."""

    root: CgroupSample | None = None
    system: dict[str, CgroupSample] = field(default_factory=dict)
    swap: tuple[int, int] | None = None  # (total, used)
    root_fs: host.FsInfo | None = None
    fs_by_path: dict[str, host.FsInfo | None] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)  # path -> device
    rlimit: host.Rlimit | None = None
    interfaces: list[host.InterfaceCounters] = field(default_factory=list)
    pods: dict[str, _PodCgroup] = field(default_factory=dict)  # by sandbox ID
    disks: dict[str, _PodDisk] = field(default_factory=dict)  # by sandbox ID


@dataclass(frozen=True)
class _NodeReads:
    """The host-wide part of a `_HostView`: the same for every emulated node of a process."""

    root: CgroupSample | None
    system: dict[str, CgroupSample]
    swap: tuple[int, int] | None
    rlimit: host.Rlimit | None
    interfaces: list[host.InterfaceCounters]


class SharedHostReads:
    """The host-wide reads of a summary (the root cgroup, the system containers, swap, pid limits, the network
    interfaces), shared by the providers of one process's emulated nodes: each read is reused for `max_age` seconds
    by every provider with the same cgroups, instead of 1,000 nodes reading the same files every 10 s each. A real
    node has none (its one provider reads the host each call, as before). Thread-safe enough: two threads finding it
    stale at once both read, and the later one is kept."""

    def __init__(
        self, *, max_age: float = SHARED_HOST_READS_MAX_AGE, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._max_age = max_age
        self._monotonic = monotonic
        self._reads: dict[tuple[str | None, ...], tuple[float, _NodeReads]] = {}
        self.reads = 0  # how many times the host was read (tests and benchmarks)

    def fresh(self, key: tuple[str | None, ...]) -> bool:
        found = self._reads.get(key)
        return found is not None and self._monotonic() < found[0]

    def get(self, key: tuple[str | None, ...], read: Callable[[], _NodeReads]) -> _NodeReads:
        found = self._reads.get(key)
        if found is not None and self._monotonic() < found[0]:
            return found[1]
        reads = read()
        self.reads += 1
        self._reads[key] = (self._monotonic() + self._max_age, reads)
        return reads


class StatsProvider:
    def __init__(
        self,
        runtime: StatsRuntime,
        images: ImageFsService,
        *,
        node_name: str,
        root_dir: str,
        pod_log_dir_root: str = "/var/log/pods",
        cgroup_root: str = "/",
        cgroup_driver: str = "cgroupfs",
        runtime_cgroups: str | None = None,
        cgroupfs: CgroupFS | None = None,
        proc: Path = Path("/proc"),
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        monotonic: Callable[[], float] = time.monotonic,
        volume_stats_period: float = VOLUME_STATS_PERIOD,
        cpu_cache: CpuUsageCache | None = None,
        plugin_volumes: PluginVolumeStats | None = None,
        pod_spec: PodSpecGetter | None = None,
        volume_health: bool = False,
        volume_stats_timeout: float = VOLUME_STATS_TIMEOUT,
        shared_host_reads: SharedHostReads | None = None,
    ) -> None:
        self._runtime = runtime
        self._images = images
        self.node_name = node_name
        self._root_dir = root_dir
        self._pod_log_dir_root = pod_log_dir_root
        self._cgroup_root = cgroup_root
        self._cgroup_driver = cgroup_driver
        self._kubepods = kubepods_cgroup(cgroup_root, cgroup_driver)
        self._runtime_cgroups = runtime_cgroups
        self._cgroupfs = cgroupfs or CgroupFS()
        self._proc = proc
        self._wall = wall
        self._monotonic = monotonic
        self._volume_period = volume_stats_period
        self.cpu = cpu_cache or CpuUsageCache()
        self._created = wall()  # upstream: the kubelet system container starts when the provider is made
        self._boot = datetime.datetime.fromtimestamp(psutil.boot_time(), datetime.UTC)
        self._memory_capacity = psutil.virtual_memory().total
        self._volume_cache: dict[str, tuple[float, list[summary.VolumeUsage]]] = {}
        self._volume_lock = asyncio.Lock()  # concurrent summaries measure a pod's volumes once
        self._plugin_volumes = plugin_volumes
        self._pod_spec = pod_spec or (lambda uid: None)
        self._volume_health = volume_health  # the CSIVolumeHealth feature gate
        self._volume_stats_timeout = volume_stats_timeout
        self._pod_cgroups: dict[str, str] = {}  # pod UID -> where its cgroup was found
        own = proc / "self" / "cgroup"
        text = own.read_text() if own.exists() else ""
        self._kubelet_cgroup = process_cgroup(parse_proc_cgroup(text), unified=self._cgroupfs.unified)
        self._shared = shared_host_reads
        # what makes two providers' host-wide reads the same (the cgroups read; swap and the rest are the host's)
        self._shared_key = (self._cgroupfs.root, self._kubepods, self._kubelet_cgroup, self._runtime_cgroups)

    # --- the runtime's view --------------------------------------------------------------------------------

    async def _runtime_view(self) -> _RuntimeView:
        sandboxes, containers, stats = await asyncio.gather(
            self._runtime.list_pod_sandbox(timeout=CRI_TIMEOUT),
            self._runtime.list_containers(timeout=CRI_TIMEOUT),
            self._runtime.list_container_stats(timeout=CRI_TIMEOUT),
        )
        sandbox_map = {s.id: s for s in summary.remove_terminated_pods(sandboxes)}
        container_map = {c.id: c for c in summary.remove_terminated_containers(containers)}
        by_sandbox: dict[str, list[api_pb2.ContainerStats]] = {}
        for s in stats:
            found = container_map.get(s.attributes.id)
            if found is not None and found.pod_sandbox_id in sandbox_map:
                by_sandbox.setdefault(found.pod_sandbox_id, []).append(s)
        order = sorted(by_sandbox, key=lambda sid: sandbox_map[sid].created_at)
        return _RuntimeView(sandbox_map, container_map, by_sandbox, order)

    async def _sandbox_stats(self, sandbox_ids: Sequence[str]) -> dict[str, api_pb2.PodSandboxStats]:
        """PodSandboxStats of the pods whose cgroup was not found; a runtime without it leaves them out."""

        async def one(sid: str) -> api_pb2.PodSandboxStats | None:
            try:
                return await self._runtime.pod_sandbox_stats(sid, timeout=CRI_TIMEOUT)
            except UnimplementedError:
                return None
            except CRIError as exc:
                log.warning("stats pod sandbox stats failed sandbox=%s error=%s", sid, exc)
                return None

        found = await asyncio.gather(*(one(sid) for sid in sandbox_ids))
        return {sid: stats for sid, stats in zip(sandbox_ids, found, strict=True) if stats is not None}

    # --- host reads (worker thread) ------------------------------------------------------------------------

    def _fs(self, view: _HostView, path: str) -> host.FsInfo | None:
        if path and path not in view.fs_by_path:
            try:
                view.fs_by_path[path] = host.statvfs(path)
            except OSError as exc:
                log.debug("stats statvfs failed path=%s error=%s", path, exc)
                view.fs_by_path[path] = None
        return view.fs_by_path.get(path)

    def _read_node(self, view: _HostView, *, full: bool) -> None:
        if self._shared is not None:
            reads = self._shared.get(self._shared_key, lambda: self._read_node_reads(full=True))
        else:
            reads = self._read_node_reads(full=full)
        view.root, view.system, view.swap = reads.root, dict(reads.system), reads.swap
        if full:
            view.root_fs = self._fs(view, self._root_dir)
            view.rlimit, view.interfaces = reads.rlimit, list(reads.interfaces)

    def _read_node_reads(self, *, full: bool) -> _NodeReads:
        now = self._wall()
        root = self._cgroupfs.read("/", now=now, memory_limit=self._memory_capacity)
        wanted = {SYSTEM_CONTAINER_PODS: self._kubepods}
        if self._kubelet_cgroup is not None:
            wanted[SYSTEM_CONTAINER_KUBELET] = self._kubelet_cgroup
        if self._runtime_cgroups:
            wanted[SYSTEM_CONTAINER_RUNTIME] = self._runtime_cgroups
        system = {}
        for name, path in wanted.items():
            sample = self._cgroupfs.read(path, now=now)
            if sample is not None:
                system[name] = sample
        swap = psutil.swap_memory()
        if not full:
            return _NodeReads(root, system, (swap.total, swap.used), None, [])
        return _NodeReads(
            root,
            system,
            (swap.total, swap.used),
            host.read_rlimit(self._proc),
            host.node_interfaces(host.read_interfaces()),
        )

    def _pod_cgroup(self, uid: str, now: datetime.datetime) -> CgroupSample | None:
        known = self._pod_cgroups.get(uid)
        candidates = [known] if known else pod_cgroup_candidates(uid, self._cgroup_root, self._cgroup_driver)
        for path in candidates:
            sample = self._cgroupfs.read(path, now=now)
            if sample is not None:
                self._pod_cgroups[uid] = path
                return sample
        self._pod_cgroups.pop(uid, None)
        return None

    def _read_pod(
        self, view: _HostView, sandbox: api_pb2.PodSandbox, container_ids: Sequence[str], *, full: bool
    ) -> None:
        now = self._wall()
        sample = self._pod_cgroup(sandbox.metadata.uid, now)
        if sample is None:
            return
        psi = {}
        if self._cgroupfs.unified:
            for cid in container_ids:
                path = self._container_cgroup(sample.path, cid)
                psi[cid] = ContainerPressure(*(self._cgroupfs.pressure(path, r) for r in ("cpu", "memory", "io")))
        if not full:  # CPU and memory are the pod cgroup's alone
            view.pods[sandbox.id] = _PodCgroup(sample.path, sample, None, None, 0, psi)
            return
        pause = self._cgroupfs.read(self._container_cgroup(sample.path, sandbox.id), now=now)
        interfaces = None
        for pid in self._cgroupfs.procs(pause.path) if pause is not None else []:
            try:
                interfaces = list(host.parse_net_dev((self._proc / str(pid) / "net" / "dev").read_text()).values())
                break
            except OSError:
                continue
        processes = sum(len(self._cgroupfs.procs(self._container_cgroup(sample.path, cid))) for cid in container_ids)
        view.pods[sandbox.id] = _PodCgroup(sample.path, sample, pause, interfaces, processes, psi)

    def _container_cgroup(self, pod: str, container_id: str) -> str:
        """A container's cgroup below its pod's: `<id>` (runc's cgroupfs path under the cgroupfs driver), or the
        systemd scope the runtime made under the systemd driver (containerd's cri-containerd-<id>.scope, CRI-O's
        crio-<id>.scope); the first that exists, else `<id>`."""
        plain = posixpath.join(pod, container_id)
        if self._cgroup_driver != "systemd":
            return plain
        for prefix in SYSTEMD_SCOPE_PREFIXES:
            scope = posixpath.join(pod, f"{prefix}-{container_id}.scope")
            if self._cgroupfs.exists(scope):
                return scope
        return plain

    def _disk_volumes(self, uid: str) -> list[summary.VolumeUsage]:
        """The pod's volumes walked on disk (upstream metricsDu), the plugins that measure their own left out."""
        found: list[summary.VolumeUsage] = []
        volumes_dir = os.path.join(self._root_dir, "pods", uid, "volumes")
        try:
            pod_dev = os.stat(volumes_dir).st_dev
            plugins = sorted(os.listdir(volumes_dir))
        except OSError:
            plugins, pod_dev = [], -1
        for plugin in plugins:
            if plugin in MEASURED_PLUGIN_DIRS:
                continue
            try:
                names = sorted(os.listdir(os.path.join(volumes_dir, plugin)))
            except OSError:
                continue
            for name in names:
                path = os.path.join(volumes_dir, plugin, name)
                try:
                    on_pod_fs = os.stat(path).st_dev == pod_dev
                    info: host.FsInfo | None = host.statvfs(path)
                except OSError:
                    continue
                found.append(
                    summary.VolumeUsage(
                        name=name,
                        usage=host.disk_usage(path),
                        fs=info,
                        time=self._wall(),
                        # a Memory emptyDir is a tmpfs of its own: not the node's local ephemeral storage
                        local_ephemeral=plugin in LOCAL_EPHEMERAL_PLUGINS and on_pod_fs,
                    )
                )
        return found

    async def _measured_volumes(self, uid: str) -> list[summary.VolumeUsage]:
        """The pod's volumes their plugin measures (CSI: NodeGetVolumeStats), the ones it cannot left out."""
        plugin = self._plugin_volumes
        if plugin is None:
            return []
        names = plugin.measured_volumes(uid)

        async def one(name: str) -> VolumeMetrics | None:
            try:
                return await asyncio.wait_for(
                    plugin.volume_stats(uid, name, volume_health=self._volume_health), self._volume_stats_timeout
                )
            except TimeoutError:
                log.warning("stats volume stats timed out pod_uid=%s volume=%s", uid, name)
                return None

        found = await asyncio.gather(*(one(name) for name in names))
        now = self._wall()  # upstream stamps the metrics when the call starts; one time for the pod here
        return [measured_volume(name, m, now, None) for name, m in zip(names, found, strict=True) if m is not None]

    async def _refresh_volumes(self, uids: Sequence[str]) -> None:
        """The volume stats of the pods whose last ones are older than the period (upstream volumeStatsAggPeriod,
        per pod), each volume with the claim its pod spec names."""
        async with self._volume_lock:
            now = self._monotonic()
            stale = [uid for uid in uids if (c := self._volume_cache.get(uid)) is None or now >= c[0]]
            if not stale:
                return
            walked = await asyncio.to_thread(lambda: {uid: self._disk_volumes(uid) for uid in stale})
            measured = await asyncio.gather(*(self._measured_volumes(uid) for uid in stale))
            for uid, plugin_volumes in zip(stale, measured, strict=True):
                pod = self._pod_spec(uid)
                volumes = [dataclasses.replace(v, pvc_ref=claim_ref(pod, v.name)) for v in walked[uid] + plugin_volumes]
                self._volume_cache[uid] = (self._monotonic() + self._volume_period, volumes)

    def latest_volume_stats(self) -> list[VolumeStats]:
        """The pods' volume stats as last measured (upstream's calculators' GetLatest), for kubelet_volume_stats_*:
        every full summary (the eviction manager's, every 10 s) measures what is older than the period."""
        out: list[VolumeStats] = []
        for _, volumes in list(self._volume_cache.values()):
            ephemeral, persistent = summary.volume_stats(volumes)
            out.extend(ephemeral + persistent)
        return out

    def _read_disk(self, view: _HostView, sandbox: api_pb2.PodSandbox, names: Sequence[str]) -> None:
        meta = sandbox.metadata
        log_dir = os.path.join(self._pod_log_dir_root, f"{meta.namespace}_{meta.name}_{meta.uid}")
        etc_hosts = os.path.join(self._root_dir, "pods", meta.uid, "etc-hosts")
        view.disks[sandbox.id] = _PodDisk(
            logs={name: host.files_usage(os.path.join(log_dir, name)) for name in names},
            pod_logs=host.files_usage(log_dir),
            etc_hosts=host.disk_usage(etc_hosts) if os.path.exists(etc_hosts) else None,
            volumes=self._volume_cache.get(meta.uid, (0.0, []))[1],
        )

    def _read(
        self, runtime: _RuntimeView, *, full: bool, cadvisor: bool = False, filesystems: Sequence[str] = ()
    ) -> _HostView:
        view = _HostView()
        self._read_node(view, full=full)
        for path in filesystems:
            self._fs(view, path)
        listed = runtime.order if not cadvisor else list(runtime.sandboxes)
        for sid in listed:
            sandbox = runtime.sandboxes[sid]
            stats = runtime.stats.get(sid, [])
            self._read_pod(view, sandbox, [s.attributes.id for s in stats], full=full)
            if full and not cadvisor:
                self._read_disk(view, sandbox, [runtime.containers[s.attributes.id].metadata.name for s in stats])
            for s in stats:
                self._fs(view, s.writable_layer.fs_id.mountpoint)
        if full and not cadvisor:
            live = {runtime.sandboxes[sid].metadata.uid for sid in runtime.order}
            for uid in set(self._volume_cache) - live:
                del self._volume_cache[uid]
        if cadvisor:
            mounts = host.read_mounts()
            for path in [self._root_dir, *view.fs_by_path]:
                self._fs(view, path)
                view.devices[path] = host.device_for(path, mounts)
        known = {runtime.sandboxes[sid].metadata.uid for sid in runtime.sandboxes}
        for uid in set(self._pod_cgroups) - known:
            del self._pod_cgroups[uid]
        return view

    # --- the summary ---------------------------------------------------------------------------------------

    def _rate(self, key: tuple[str, str], timestamp_ns: int, usage_ns: int | None) -> int | None:
        if usage_ns is None:
            return None
        return self.cpu.update(key, CpuSample(timestamp_ns, usage_ns))

    def _cgroup_rate(self, sample: CgroupSample) -> int | None:
        return self._rate(("cgroup", sample.path), _ns(sample.time), sample.cpu_usage_ns)

    def _container_rate(self, stats: api_pb2.ContainerStats) -> int | None:
        if not stats.HasField("cpu") or not stats.cpu.HasField("usage_core_nano_seconds"):
            return None
        cpu = stats.cpu
        return self._rate(("container", stats.attributes.id), cpu.timestamp, cpu.usage_core_nano_seconds.value)

    def _sandbox_rate(self, stats: api_pb2.PodSandboxStats) -> int | None:
        cpu = stats.linux.cpu
        if not cpu.HasField("usage_core_nano_seconds"):
            return None
        return self._rate(("pod", stats.attributes.id), cpu.timestamp, cpu.usage_core_nano_seconds.value)

    async def summary(self, only_cpu_and_memory: bool = False) -> Summary:
        """upstream SummaryProvider.Get (the whole summary) or GetCPUAndMemoryStats (`only_cpu_and_memory`)."""
        full = not only_cpu_and_memory
        try:
            runtime = await self._runtime_view()
            image_fs = await self._images.image_fs_info(timeout=CRI_TIMEOUT) if full else None
        except CRIError as exc:
            raise StatsError(f"failed to list pod stats: {exc}") from exc
        if full:
            await self._refresh_volumes([runtime.sandboxes[sid].metadata.uid for sid in runtime.order])
        image_paths = [fs.fs_id.mountpoint for fs in image_fs.image_filesystems] if image_fs is not None else []
        if self._shared is not None and not runtime.order and self._shared.fresh(self._shared_key):
            # no pod to measure and the host-wide reads fresh: what is left is a statvfs or two, not worth a thread
            view = self._read(runtime, full=full, filesystems=image_paths)
        else:
            view = await asyncio.to_thread(self._read, runtime, full=full, filesystems=image_paths)
        fallback = await self._sandbox_stats([sid for sid in runtime.order if sid not in view.pods])
        now = self._wall()
        pods = tuple(self._pod(runtime, sid, view, fallback.get(sid), now, full=full) for sid in runtime.order)
        node = self._node(view, image_fs, now, full=full)
        self.cpu.prune(_ns(now))
        return Summary(node=node, pods=pods)

    def _pod(
        self,
        runtime: _RuntimeView,
        sid: str,
        view: _HostView,
        sandbox_stats: api_pb2.PodSandboxStats | None,
        now: datetime.datetime,
        *,
        full: bool,
    ) -> PodStats:
        sandbox = runtime.sandboxes[sid]
        disk = view.disks.get(sid)
        cgroup = view.pods.get(sid)
        measured: list[ContainerStats] = []
        for s in runtime.stats[sid]:
            container = runtime.containers[s.attributes.id]
            logs = None
            if full and disk is not None:
                logs = summary.logs_stats(disk.logs.get(container.metadata.name), view.root_fs, now)
            measured.append(
                summary.make_container_stats(
                    s,
                    container,
                    nano_cores=self._container_rate(s),
                    now=now,
                    rootfs_info=view.fs_by_path.get(s.writable_layer.fs_id.mountpoint),
                    logs=logs,
                    cpu_and_memory_only=not full,
                    psi=(cgroup.psi.get(s.attributes.id, NO_PRESSURE) if cgroup is not None else NO_PRESSURE)[:2],
                )
            )
        measures = None
        if cgroup is not None:
            measures = summary.measures_from_cgroup(
                cgroup.sample,
                self._cgroup_rate(cgroup.sample),
                interfaces=cgroup.interfaces,
                process_count=cgroup.process_count,
            )
        elif sandbox_stats is not None:
            measures = summary.measures_from_sandbox_stats(sandbox_stats, self._sandbox_rate(sandbox_stats))
        pod_logs = etc_hosts = None
        if disk is not None:
            pod_logs = summary.logs_stats(disk.pod_logs, view.root_fs, now)
            etc_hosts = summary.logs_stats(disk.etc_hosts, view.root_fs, now)
        return summary.make_pod_stats(
            sandbox,
            measured,
            measures,
            cpu_and_memory_only=not full,
            volumes=disk.volumes if disk else (),
            root_fs=view.root_fs,
            now=now,
            pod_logs=pod_logs,
            etc_hosts=etc_hosts,
        )

    def _node(
        self, view: _HostView, image_fs: api_pb2.ImageFsInfoResponse | None, now: datetime.datetime, *, full: bool
    ) -> NodeStats:
        root = view.root
        if root is None:
            raise StatsError("failed to get root cgroup stats: no root cgroup")
        cpu, memory = summary.cgroup_cpu_memory(root, self._cgroup_rate(root))
        system = []
        for name, sample in sorted(view.system.items()):
            start = self._created if name == SYSTEM_CONTAINER_KUBELET else None
            system.append(summary.system_container(name, sample, self._cgroup_rate(sample), start_time=start))
        swap = None
        if view.swap is not None:
            total, used = view.swap
            swap = SwapStats(time=root.time, swap_available_bytes=total - used, swap_usage_bytes=used)
        if not full:
            return NodeStats(
                node_name=self.node_name,
                start_time=root.start_time,
                system_containers=tuple(system),
                cpu=cpu,
                memory=memory,
                swap=swap,
            )
        runtime = None
        if image_fs is not None and image_fs.image_filesystems:
            first = image_fs.image_filesystems[0]
            image = summary.image_fs(first, view.fs_by_path.get(first.fs_id.mountpoint))
            runtime = RuntimeStats(image_fs=image, container_fs=image)
        return NodeStats(
            node_name=self.node_name,
            start_time=self._boot,
            system_containers=tuple(system),
            cpu=cpu,
            memory=memory,
            io=summary.cgroup_io(root),
            network=summary.network_stats(view.interfaces, now),
            fs=summary.node_fs(view.root_fs, root.time) if view.root_fs is not None else None,
            runtime=runtime,
            rlimit=summary.rlimit_stats(view.rlimit, now) if view.rlimit is not None else None,
            swap=swap,
        )

    # --- /metrics/cadvisor ---------------------------------------------------------------------------------

    async def cadvisor_containers(self) -> list[CadvisorContainer]:
        """The cgroups cAdvisor would report for the kubelet: the root (with the node's filesystems and
        interfaces), the pods' cgroup, each pod's cgroup, its pause container (with the pod's network) and its
        containers (with their writable layer)."""
        try:
            runtime = await self._runtime_view()
        except CRIError as exc:
            raise StatsError(f"failed to list containers: {exc}") from exc
        view = await asyncio.to_thread(self._read, runtime, full=True, cadvisor=True)
        return self._cadvisor_rows(runtime, view)

    def _cadvisor_rows(self, runtime: _RuntimeView, view: _HostView) -> list[CadvisorContainer]:
        rows: list[CadvisorContainer] = []
        if view.root is not None:
            filesystems: list[tuple[str, int]] = []
            for path in sorted(view.devices):
                device, info = view.devices[path], view.fs_by_path.get(path)
                if device and info is not None and device not in [d for d, _ in filesystems]:
                    filesystems.append((device, info.usage))
            network = tuple(NetworkCounters(i.name, i.rx_bytes, i.tx_bytes) for i in view.interfaces)
            rows.append(CadvisorContainer.from_cgroup(view.root, fs=tuple(filesystems), network=network))
        pods = view.system.get(SYSTEM_CONTAINER_PODS)
        if pods is not None:
            rows.append(CadvisorContainer.from_cgroup(pods))
        for sid, sandbox in runtime.sandboxes.items():
            cgroup = view.pods.get(sid)
            if cgroup is None:
                continue
            meta = sandbox.metadata
            rows.append(CadvisorContainer.from_cgroup(cgroup.sample, pod=meta.name, namespace=meta.namespace))
            if cgroup.pause is not None:
                interfaces = summary.node_interfaces_of(cgroup.interfaces or [])
                network = tuple(NetworkCounters(i.name, i.rx_bytes, i.tx_bytes) for i in interfaces)
                rows.append(
                    CadvisorContainer.from_cgroup(
                        cgroup.pause, name=sid, pod=meta.name, namespace=meta.namespace, network=network
                    )
                )
            for stats in runtime.stats.get(sid, ()):
                container = runtime.containers[stats.attributes.id]
                rows.append(self._cadvisor_container(sandbox, container, stats, cgroup, view))
        return rows

    def _cadvisor_container(
        self,
        sandbox: api_pb2.PodSandbox,
        container: api_pb2.Container,
        stats: api_pb2.ContainerStats,
        cgroup: _PodCgroup,
        view: _HostView,
    ) -> CadvisorContainer:
        layer = stats.writable_layer
        device = view.devices.get(layer.fs_id.mountpoint, "")
        fs = ((device, layer.used_bytes.value),) if device and layer.HasField("used_bytes") else ()
        has_cpu, has_memory = stats.HasField("cpu"), stats.HasField("memory")
        pressure = cgroup.psi.get(container.id, NO_PRESSURE)
        return CadvisorContainer(
            # cAdvisor's id is the container's cgroup: the runtime's scope under the systemd driver
            id=self._container_cgroup(cgroup.path, container.id),
            name=container.id,
            image=container.image.user_specified_image or container.image.image,
            pod=sandbox.metadata.name,
            namespace=sandbox.metadata.namespace,
            container=container.metadata.name,
            time=summary.from_ns(stats.cpu.timestamp) if has_cpu else None,
            start_time=summary.from_ns(container.created_at),
            cpu_usage_ns=stats.cpu.usage_core_nano_seconds.value if has_cpu else None,
            working_set_bytes=stats.memory.working_set_bytes.value if has_memory else None,
            fs=fs,
            cpu_psi=pressure.cpu,
            memory_psi=pressure.memory,
            io_psi=pressure.io,
        )
