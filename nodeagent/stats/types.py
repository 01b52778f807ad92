"""The Summary API's values (upstream k8s.io/kubelet/pkg/apis/stats/v1alpha1) and their JSON.

The dataclasses keep Python names; `summary_json` writes upstream's field names in upstream's order (Go marshals a
struct's fields in declaration order), leaves out what upstream marks omitempty when it is unset, and writes times as
metav1.Time does (RFC 3339 in UTC, whole seconds; null for no time). PSI (KubeletPSI, beta and on by default in
v1.34): `psi` in cpu and memory, and `io` with its `psi`, where the cgroup has *.pressure files (cgroup v2; upstream
writes zeros on v1, where cAdvisor has none: nodeagent leaves them out there). Not carried: the accelerators and
user-defined metrics (cAdvisor only).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

# upstream SystemContainer* names
SYSTEM_CONTAINER_KUBELET = "kubelet"
SYSTEM_CONTAINER_RUNTIME = "runtime"
SYSTEM_CONTAINER_MISC = "misc"
SYSTEM_CONTAINER_PODS = "pods"


@dataclass(frozen=True, slots=True)
class PSIData:
    """One line of a *.pressure file: total stall time (microseconds) and the 10/60/300 s averages (percent)."""

    total: int = 0
    avg10: float = 0.0
    avg60: float = 0.0
    avg300: float = 0.0


@dataclass(frozen=True, slots=True)
class PSIStats:
    full: PSIData = PSIData()
    some: PSIData = PSIData()


@dataclass(frozen=True, slots=True)
class IOStats:
    time: datetime.datetime
    psi: PSIStats | None = None


@dataclass(frozen=True, slots=True)
class CPUStats:
    time: datetime.datetime
    usage_nano_cores: int | None = None
    usage_core_nano_seconds: int | None = None
    psi: PSIStats | None = None


@dataclass(frozen=True, slots=True)
class MemoryStats:
    time: datetime.datetime
    available_bytes: int | None = None
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None
    psi: PSIStats | None = None


@dataclass(frozen=True, slots=True)
class SwapStats:
    time: datetime.datetime
    swap_available_bytes: int | None = None
    swap_usage_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class FsStats:
    time: datetime.datetime | None
    available_bytes: int | None = None
    capacity_bytes: int | None = None
    used_bytes: int | None = None
    inodes_free: int | None = None
    inodes: int | None = None
    inodes_used: int | None = None


@dataclass(frozen=True, slots=True)
class InterfaceStats:
    name: str
    rx_bytes: int | None = None
    rx_errors: int | None = None
    tx_bytes: int | None = None
    tx_errors: int | None = None


@dataclass(frozen=True, slots=True)
class NetworkStats:
    time: datetime.datetime
    default: InterfaceStats | None = None  # upstream's inline InterfaceStats: the default interface (eth0)
    interfaces: tuple[InterfaceStats, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerStats:
    name: str
    start_time: datetime.datetime | None
    cpu: CPUStats | None = None
    memory: MemoryStats | None = None
    io: IOStats | None = None
    rootfs: FsStats | None = None
    logs: FsStats | None = None
    swap: SwapStats | None = None


@dataclass(frozen=True, slots=True)
class PodReference:
    name: str
    namespace: str
    uid: str


@dataclass(frozen=True, slots=True)
class PVCReference:
    name: str
    namespace: str


@dataclass(frozen=True, slots=True)
class VolumeStats:
    name: str
    fs: FsStats
    pvc_ref: PVCReference | None = None
    abnormal: bool | None = None  # upstream VolumeHealthStats.Abnormal; None: no volumeHealthStats


@dataclass(frozen=True, slots=True)
class ProcessStats:
    process_count: int | None = None


@dataclass(frozen=True, slots=True)
class PodStats:
    pod_ref: PodReference
    start_time: datetime.datetime | None
    containers: tuple[ContainerStats, ...] = ()
    cpu: CPUStats | None = None
    memory: MemoryStats | None = None
    io: IOStats | None = None
    network: NetworkStats | None = None
    volume_stats: tuple[VolumeStats, ...] = ()
    ephemeral_storage: FsStats | None = None
    process_stats: ProcessStats | None = None
    swap: SwapStats | None = None


@dataclass(frozen=True, slots=True)
class RlimitStats:
    time: datetime.datetime
    max_pid: int | None = None
    num_of_running_processes: int | None = None


@dataclass(frozen=True, slots=True)
class RuntimeStats:
    image_fs: FsStats | None = None
    container_fs: FsStats | None = None


@dataclass(frozen=True, slots=True)
class NodeStats:
    node_name: str
    start_time: datetime.datetime | None
    system_containers: tuple[ContainerStats, ...] = ()
    cpu: CPUStats | None = None
    memory: MemoryStats | None = None
    io: IOStats | None = None
    network: NetworkStats | None = None
    fs: FsStats | None = None
    runtime: RuntimeStats | None = None
    rlimit: RlimitStats | None = None
    swap: SwapStats | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    node: NodeStats
    pods: tuple[PodStats, ...] = ()


# --- JSON ---------------------------------------------------------------------------------------------------


def go_time(value: datetime.datetime | None) -> str | None:
    """metav1.Time's JSON: RFC 3339 in UTC with whole seconds; a zero time is null."""
    if value is None:
        return None
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """omitempty: a nil pointer or an empty slice is left out."""
    if value is None or (isinstance(value, list) and not value):
        return
    out[key] = value


def _go_float(value: float) -> float | int:
    """As Go writes a float64: a whole number without ".0"."""
    return int(value) if value.is_integer() else value


def _psi_data_json(d: PSIData) -> dict[str, Any]:
    return {"total": d.total, "avg10": _go_float(d.avg10), "avg60": _go_float(d.avg60), "avg300": _go_float(d.avg300)}


def psi_json(s: PSIStats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"full": _psi_data_json(s.full), "some": _psi_data_json(s.some)}


def io_json(s: IOStats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out: dict[str, Any] = {"time": go_time(s.time)}
    _put(out, "psi", psi_json(s.psi))
    return out


def cpu_json(s: CPUStats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out: dict[str, Any] = {"time": go_time(s.time)}
    _put(out, "usageNanoCores", s.usage_nano_cores)
    _put(out, "usageCoreNanoSeconds", s.usage_core_nano_seconds)
    _put(out, "psi", psi_json(s.psi))
    return out


def memory_json(s: MemoryStats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out: dict[str, Any] = {"time": go_time(s.time)}
    _put(out, "availableBytes", s.available_bytes)
    _put(out, "usageBytes", s.usage_bytes)
    _put(out, "workingSetBytes", s.working_set_bytes)
    _put(out, "rssBytes", s.rss_bytes)
    _put(out, "pageFaults", s.page_faults)
    _put(out, "majorPageFaults", s.major_page_faults)
    _put(out, "psi", psi_json(s.psi))
    return out


def swap_json(s: SwapStats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out: dict[str, Any] = {"time": go_time(s.time)}
    _put(out, "swapAvailableBytes", s.swap_available_bytes)
    _put(out, "swapUsageBytes", s.swap_usage_bytes)
    return out


def _fs_fields(out: dict[str, Any], s: FsStats) -> dict[str, Any]:
    out["time"] = go_time(s.time)
    _put(out, "availableBytes", s.available_bytes)
    _put(out, "capacityBytes", s.capacity_bytes)
    _put(out, "usedBytes", s.used_bytes)
    _put(out, "inodesFree", s.inodes_free)
    _put(out, "inodes", s.inodes)
    _put(out, "inodesUsed", s.inodes_used)
    return out


def fs_json(s: FsStats | None) -> dict[str, Any] | None:
    return None if s is None else _fs_fields({}, s)


def _interface_fields(out: dict[str, Any], s: InterfaceStats) -> dict[str, Any]:
    out["name"] = s.name  # not omitempty upstream: "" when there is no default interface
    _put(out, "rxBytes", s.rx_bytes)
    _put(out, "rxErrors", s.rx_errors)
    _put(out, "txBytes", s.tx_bytes)
    _put(out, "txErrors", s.tx_errors)
    return out


def network_json(s: NetworkStats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out: dict[str, Any] = {"time": go_time(s.time)}
    _interface_fields(out, s.default or InterfaceStats(name=""))
    _put(out, "interfaces", [_interface_fields({}, i) for i in s.interfaces])
    return out


def container_json(s: ContainerStats) -> dict[str, Any]:
    out: dict[str, Any] = {"name": s.name, "startTime": go_time(s.start_time)}
    _put(out, "cpu", cpu_json(s.cpu))
    _put(out, "memory", memory_json(s.memory))
    _put(out, "io", io_json(s.io))
    _put(out, "rootfs", fs_json(s.rootfs))
    _put(out, "logs", fs_json(s.logs))
    _put(out, "swap", swap_json(s.swap))
    return out


def volume_json(s: VolumeStats) -> dict[str, Any]:
    out = _fs_fields({}, s.fs)
    _put(out, "name", s.name or None)
    if s.pvc_ref is not None:
        out["pvcRef"] = {"name": s.pvc_ref.name, "namespace": s.pvc_ref.namespace}
    if s.abnormal is not None:
        out["volumeHealthStats"] = {"abnormal": s.abnormal}
    return out


def pod_json(s: PodStats) -> dict[str, Any]:
    out: dict[str, Any] = {
        "podRef": {"name": s.pod_ref.name, "namespace": s.pod_ref.namespace, "uid": s.pod_ref.uid},
        "startTime": go_time(s.start_time),
        # not omitempty upstream: a nil slice is null
        "containers": [container_json(c) for c in s.containers] if s.containers else None,
    }
    _put(out, "cpu", cpu_json(s.cpu))
    _put(out, "memory", memory_json(s.memory))
    _put(out, "io", io_json(s.io))
    _put(out, "network", network_json(s.network))
    _put(out, "volume", [volume_json(v) for v in s.volume_stats])
    _put(out, "ephemeral-storage", fs_json(s.ephemeral_storage))
    if s.process_stats is not None:
        process: dict[str, Any] = {}
        _put(process, "process_count", s.process_stats.process_count)
        out["process_stats"] = process
    _put(out, "swap", swap_json(s.swap))
    return out


def node_json(s: NodeStats) -> dict[str, Any]:
    out: dict[str, Any] = {"nodeName": s.node_name}
    _put(out, "systemContainers", [container_json(c) for c in s.system_containers])
    out["startTime"] = go_time(s.start_time)
    _put(out, "cpu", cpu_json(s.cpu))
    _put(out, "memory", memory_json(s.memory))
    _put(out, "io", io_json(s.io))
    _put(out, "network", network_json(s.network))
    _put(out, "fs", fs_json(s.fs))
    if s.runtime is not None:
        runtime: dict[str, Any] = {}
        _put(runtime, "imageFs", fs_json(s.runtime.image_fs))
        _put(runtime, "containerFs", fs_json(s.runtime.container_fs))
        out["runtime"] = runtime
    if s.rlimit is not None:
        rlimit: dict[str, Any] = {"time": go_time(s.rlimit.time)}
        _put(rlimit, "maxpid", s.rlimit.max_pid)
        _put(rlimit, "curproc", s.rlimit.num_of_running_processes)
        out["rlimit"] = rlimit
    _put(out, "swap", swap_json(s.swap))
    return out


def summary_json(s: Summary) -> dict[str, Any]:
    """The Summary as upstream's JSON (the handler writes it; `pods` is [] when there are none, as upstream makes
    the slice)."""
    return {"node": node_json(s.node), "pods": [pod_json(p) for p in s.pods]}
