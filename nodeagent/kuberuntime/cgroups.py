"""Pod cgroups (cgroupfs driver), as upstream's pod container manager keeps them.

Removing: runc creates a container's parent cgroups but removes only its own, so the pod-level cgroup
(`.../kubepods/<qos>/pod<uid>`) is the kubelet's to delete once the pod's containers are gone. Works for cgroup v1
(one tree per controller) and v2 (one tree).

Sizing: `pod_resource_config` is upstream's ResourceConfigForPod (cpu shares from the pod's requests; cfs quota and
period, and a memory limit, from its limits when every container declares one or the pod sets a pod-level limit of
that resource, always for a Guaranteed pod; BestEffort gets the minimum shares only). Requests and limits are
nodeagent.admission.resources' PodRequests / PodLimits, pod-level resources (`spec.resources`) in place of the
containers' sums where set. `CgroupfsPodCgroups` writes it into the pod cgroup before the sandbox
starts (upstream's EnsureExists) and, resource by resource, during an in-place resize (SetPodCgroupConfig), and reads
it back (GetPodCgroupConfig). cgroup v1: cpu.shares, cpu.cfs_quota_us, cpu.cfs_period_us, memory.limit_in_bytes;
v2: cpu.weight, cpu.max, memory.max (never memory.high: upstream writes it only under the MemoryQoS feature gate,
off by default). An unlimited quota reads back as -1, as upstream's. With podPidsLimit > 0 the pod cgroup is also
made with pids.max at that limit (upstream's EnsureExists; a resize leaves it). On v2 the pod cgroup is made by
`cgroup_v2.create_cgroup_path`, which turns the controllers on down the way (kubepods, its QoS tier).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from nodeagent.admission.resources import is_pod_level_resources_set, pod_level_limits, pod_limits, pod_requests
from nodeagent.config.quantity import parse_quantity
from nodeagent.kuberuntime import cgroup_v2
from nodeagent.kuberuntime.qos import QOSClass, pod_qos

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _hierarchies(root: Path) -> list[Path]:
    if cgroup_v2.is_unified(root):  # v2: a single unified tree
        return [root]
    return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()] if root.is_dir() else []


def remove_cgroup_tree(cgroup_path: str, *, root: Path = CGROUP_ROOT) -> int:
    """rmdir `cgroup_path` and everything below it in every hierarchy, deepest first; returns how many went.

    A cgroup that still holds a process refuses rmdir; it is left for the next attempt.
    """
    relative = cgroup_path.strip("/")
    if not relative:
        raise ValueError("refusing to remove the root cgroup")
    removed = 0
    for hierarchy in _hierarchies(root):
        top = hierarchy / relative
        if not top.is_dir():
            continue
        for dirpath, _, _ in sorted(os.walk(top), key=lambda entry: entry[0].count("/"), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
                removed += 1
    return removed


def kill_cgroup_processes(cgroup_path: str, *, root: Path = CGROUP_ROOT) -> int:
    """SIGKILL every process in `cgroup_path` and below, in every hierarchy; returns how many were signalled.

    As upstream's pod container manager does before it removes a pod cgroup (tryKillingCgroupProcesses): whatever
    still runs there belongs to nobody the runtime will stop.
    """
    relative = cgroup_path.strip("/")
    if not relative:
        raise ValueError("refusing to kill the root cgroup")
    pids: set[int] = set()
    for hierarchy in _hierarchies(root):
        top = hierarchy / relative
        if not top.is_dir():
            continue
        for dirpath, _, _ in os.walk(top):
            with contextlib.suppress(OSError):
                text = (Path(dirpath) / "cgroup.procs").read_text()
                pids.update(int(p) for p in text.split())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, 9)
    return len(pids)


# --- sizing ---------------------------------------------------------------------------------------------------------

MIN_SHARES = 2
MAX_SHARES = 262144
QUOTA_PERIOD = 100000
MIN_QUOTA = 1000
UNLIMITED = -1
MAX_INT64 = 2**63 - 1


def milli_cpu_to_shares(milli: int) -> int:
    if milli == 0:
        return MIN_SHARES
    return min(MAX_SHARES, max(MIN_SHARES, milli * 1024 // 1000))


def milli_cpu_to_quota(milli: int, period: int = QUOTA_PERIOD) -> int:
    if milli == 0:
        return 0
    return max(MIN_QUOTA, milli * period // 1000)


@dataclass(frozen=True)
class PodResourceConfig:
    """Upstream cm.ResourceConfig, cpu and memory: None leaves that value as it is (not written)."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    memory: int | None = None


def _limits_declared(pod: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether the pod's cgroup gets a cpu / memory limit outside Guaranteed: every container declares one (upstream
    PodLimits' ContainerFn), or the pod sets a non-zero pod-level limit of it."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    declared = [
        (container.get("resources") or {}).get("limits") or {}
        for container in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ()))
    ]
    cpu_declared = all(parse_quantity(str(limits.get("cpu") or 0)) for limits in declared)
    memory_declared = all(parse_quantity(str(limits.get("memory") or 0)) for limits in declared)
    if is_pod_level_resources_set(pod):
        pod_level = pod_level_limits(pod)
        cpu_declared = cpu_declared or bool(pod_level.get("cpu"))
        memory_declared = memory_declared or bool(pod_level.get("memory"))
    return cpu_declared, memory_declared


def pod_resource_config(pod: Mapping[str, Any], *, period: int = QUOTA_PERIOD) -> PodResourceConfig:
    """Upstream ResourceConfigForPod (cpu CFS quota enforced, no memory QoS) for the pod as allocated."""
    requests = pod_requests(pod)
    limits = pod_limits(pod)
    cpu_declared, memory_declared = _limits_declared(pod)
    shares = milli_cpu_to_shares(math.ceil(requests.get("cpu", Decimal(0)) * 1000))
    quota = milli_cpu_to_quota(math.ceil(limits.get("cpu", Decimal(0)) * 1000), period)
    memory = math.ceil(limits.get("memory", Decimal(0)))
    qos = pod_qos(pod)
    if qos is QOSClass.GUARANTEED:
        return PodResourceConfig(cpu_shares=shares, cpu_quota=quota, cpu_period=period, memory=memory)
    if qos is QOSClass.BURSTABLE:
        config = PodResourceConfig(cpu_shares=shares)
        if cpu_declared:
            config = replace(config, cpu_quota=quota, cpu_period=period)
        if memory_declared:
            config = replace(config, memory=memory)
        return config
    return PodResourceConfig(cpu_shares=MIN_SHARES)


class PodCgroupError(Exception):
    """A pod cgroup value could not be read or written."""


class PodCgroups(Protocol):
    """The pod container manager's part that resize uses (upstream PodContainerManager)."""

    def ensure(self, cgroup: str, config: PodResourceConfig) -> None: ...

    def read(self, cgroup: str) -> PodResourceConfig: ...

    def write(self, cgroup: str, config: PodResourceConfig) -> None: ...

    def memory_usage(self, cgroup: str) -> int: ...

    def destroy(self, cgroup: str) -> None: ...


class CgroupfsPodCgroups:
    """Pod cgroups under the cgroupfs mount `root` (v1: the cpu, memory and pids hierarchies; v2: the unified tree).
    `pod_pids_limit` is the kubelet's podPidsLimit (-1 or 0: none)."""

    def __init__(self, root: Path = CGROUP_ROOT, *, pod_pids_limit: int = -1) -> None:
        self._root = root
        self._pids_limit = pod_pids_limit if pod_pids_limit > 0 else None

    def _v2(self) -> bool:
        return cgroup_v2.is_unified(self._root)

    def _dir(self, controller: str, cgroup: str) -> Path:
        relative = cgroup.strip("/")
        if self._v2():
            return self._root / relative
        return self._root / controller / relative

    @staticmethod
    def _write_file(path: Path, value: str) -> None:
        try:
            path.write_text(value)
        except OSError as exc:
            raise PodCgroupError(f"failed to write {value!r} to {path}: {exc.strerror or exc}") from exc

    @staticmethod
    def _read_file(path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise PodCgroupError(f"failed to read {path}: {exc.strerror or exc}") from exc

    def ensure(self, cgroup: str, config: PodResourceConfig) -> None:
        """Upstream EnsureExists: the pod cgroup made in each hierarchy (runc adopts it) and sized."""
        if self._v2():
            try:
                cgroup_v2.create_cgroup_path(self._root, cgroup)
            except cgroup_v2.CgroupV2Error as exc:
                raise PodCgroupError(f"failed to create pod cgroup {cgroup}: {exc}") from exc
        else:
            for controller in ("cpu", "memory", *(("pids",) if self._pids_limit is not None else ())):
                try:
                    self._dir(controller, cgroup).mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise PodCgroupError(f"failed to create pod cgroup {cgroup}: {exc.strerror or exc}") from exc
        self.write(cgroup, config)
        if self._pids_limit is not None:
            self._write_file(self._dir("pids", cgroup) / "pids.max", str(self._pids_limit))

    def write(self, cgroup: str, config: PodResourceConfig) -> None:
        if self._v2():
            directory = self._dir("", cgroup)
            if config.cpu_shares is not None:
                self._write_file(directory / "cpu.weight", str(cgroup_v2.shares_to_weight(config.cpu_shares)))
            if config.cpu_quota is not None:
                period = config.cpu_period or QUOTA_PERIOD
                quota = "max" if config.cpu_quota <= 0 else str(config.cpu_quota)
                self._write_file(directory / "cpu.max", f"{quota} {period}")
            if config.memory is not None:
                self._write_file(directory / "memory.max", "max" if config.memory <= 0 else str(config.memory))
            return
        cpu, memory = self._dir("cpu", cgroup), self._dir("memory", cgroup)
        if config.cpu_shares is not None:
            self._write_file(cpu / "cpu.shares", str(config.cpu_shares))
        if config.cpu_period is not None:
            self._write_file(cpu / "cpu.cfs_period_us", str(config.cpu_period))
        if config.cpu_quota is not None:
            self._write_file(cpu / "cpu.cfs_quota_us", str(config.cpu_quota if config.cpu_quota > 0 else UNLIMITED))
        if config.memory is not None:
            self._write_file(memory / "memory.limit_in_bytes", str(config.memory if config.memory > 0 else UNLIMITED))

    def destroy(self, cgroup: str) -> None:
        """Upstream Destroy: the pod cgroup and whatever is left below it removed (a cgroup still holding a process
        stays, for the next cleanup)."""
        remove_cgroup_tree(cgroup, root=self._root)

    def memory_usage(self, cgroup: str) -> int:
        """The pod cgroup's memory usage in bytes (v1 memory.usage_in_bytes, v2 memory.current)."""
        if self._v2():
            return int(self._read_file(self._dir("", cgroup) / "memory.current"))
        return int(self._read_file(self._dir("memory", cgroup) / "memory.usage_in_bytes"))

    def read(self, cgroup: str) -> PodResourceConfig:
        """Upstream GetPodCgroupConfig (cpu and memory): an unlimited quota reads as -1."""
        if self._v2():
            directory = self._dir("", cgroup)
            quota_text, period_text = self._read_file(directory / "cpu.max").split()
            memory_text = self._read_file(directory / "memory.max")
            return PodResourceConfig(
                cpu_shares=cgroup_v2.weight_to_shares(int(self._read_file(directory / "cpu.weight"))),
                cpu_quota=UNLIMITED if quota_text == "max" else int(quota_text),
                cpu_period=int(period_text),
                memory=MAX_INT64 if memory_text == "max" else int(memory_text),
            )
        cpu, memory = self._dir("cpu", cgroup), self._dir("memory", cgroup)
        # v1 reports "no memory limit" as its largest page-aligned value, which upstream compares as it is (so a
        # new limit is a decrease from it).
        return PodResourceConfig(
            cpu_shares=int(self._read_file(cpu / "cpu.shares")),
            cpu_quota=int(self._read_file(cpu / "cpu.cfs_quota_us")),
            cpu_period=int(self._read_file(cpu / "cpu.cfs_period_us")),
            memory=int(self._read_file(memory / "memory.limit_in_bytes")),
        )
