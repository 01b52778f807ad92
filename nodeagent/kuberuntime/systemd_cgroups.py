"""The systemd cgroup driver (cgroup v2): the kubelet's cgroups as systemd slices, made as libcontainer's systemd
manager makes them for upstream's cgroup manager.

Upstream's cgroup manager, with `cgroupDriver: systemd`, names a cgroup as a slice (systemd_cgroup_names.to_systemd:
`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, - as _>.slice`) and hands libcontainer the
leaf as Name and its parent slice as Parent ("-.slice" at the top). Then, per cgroup:

- Create = Apply(-1) then Set. Apply starts a transient unit with StartTransientUnit: Description "libcontainer
  container <name>", `Wants=<parent>` (a slice's parent comes from its name; a scope would get Slice= and Delegate=,
  a slice gets neither), Memory/CPU/IO/TasksAccounting on, DefaultDependencies off; a unit that exists already is
  kept (Apply with pid -1 ignores UnitExists). It then enables the controllers down to the cgroup as fs2 does
  (cgroup_v2.create_cgroup_path). Set sends the resources as unit properties (SetUnitProperties, runtime) and then
  writes the same values to the cgroup files (fs2's Set).
- The resource properties (genV2ResourcesProperties, for what the kubelet passes): MemoryMax from the memory limit,
  CPUWeight from the cpu shares through upstream's conversion (cgroup_v2.shares_to_weight), CPUQuotaPeriodUSec
  (systemd >= 242) and CPUQuotaPerSecUSec from the CFS quota and period (quota x 1e6 / period, rounded up to 10 ms
  since systemd keeps whole percents; "infinity" when unlimited), TasksMax from a pids limit. Devices are skipped
  (the kubelet sets SkipDevices), and so is hugetlb (no unit property; nodeagent writes none either).
- Destroy = StopUnit (a unit not loaded is fine), ResetFailedUnit, and the directory removed if systemd left it.

Only the unified hierarchy: on a systemd host with cgroup v1 the agent refuses the driver (agent.cgroup_driver_problem).
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
from dataclasses import dataclass
from pathlib import Path

from nodeagent.kuberuntime import cgroup_v2
from nodeagent.kuberuntime.cgroups import (
    CGROUP_ROOT,
    QUOTA_PERIOD,
    CgroupfsPodCgroups,
    PodCgroupError,
    PodResourceConfig,
    remove_cgroup_tree,
)
from nodeagent.kuberuntime.systemd_cgroup_names import SLICE_SUFFIX
from nodeagent.kuberuntime.systemd_dbus import (
    NO_SUCH_UNIT,
    NOT_LOADED,
    UNIT_EXISTS,
    Property,
    SystemdBus,
    SystemdError,
    version_number,
)

log = logging.getLogger(__name__)

UINT64_MAX = 2**64 - 1  # systemd's "infinity" for a limit, libcontainer's uint64(-1)
ROOT_SLICE = "-.slice"
CPU_QUOTA_PERIOD_SINCE = 242  # systemd has CPUQuotaPeriodUSec since v242
QUOTA_GRANULE = 10000  # systemd keeps CPUQuota as whole percents of a second: 10 ms


@dataclass(frozen=True)
class SystemdResources:
    """The part of libcontainer's configs.Resources that the kubelet sets on its cgroups (0: not set, as Go's zero
    values there); `cpu_weight` already converted from shares."""

    memory: int = 0
    cpu_weight: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    pids_limit: int = 0


def resources_for(config: PodResourceConfig, *, pids_limit: int | None = None) -> SystemdResources:
    """Upstream's toResources for cgroup v2: what is None stays unset (0); an unlimited memory (<= 0) is -1."""
    memory = 0 if config.memory is None else (config.memory if config.memory > 0 else -1)
    return SystemdResources(
        memory=memory,
        cpu_weight=0 if config.cpu_shares is None else cgroup_v2.shares_to_weight(config.cpu_shares),
        cpu_quota=config.cpu_quota or 0,
        cpu_period=config.cpu_period or 0,
        pids_limit=pids_limit or 0,
    )


def _u64(value: int) -> tuple[str, object]:
    return ("t", value & UINT64_MAX)  # Go's uint64(x): -1 is infinity


def cpu_quota_properties(quota: int, period: int, systemd_version: int) -> list[Property]:
    """libcontainer's addCpuQuota."""
    properties: list[Property] = []
    if period != 0 and systemd_version >= CPU_QUOTA_PERIOD_SINCE:
        properties.append(("CPUQuotaPeriodUSec", _u64(period)))
    if quota != 0 or period != 0:
        per_second = UINT64_MAX
        if quota > 0:
            per_second = quota * 1_000_000 // (period or QUOTA_PERIOD)
            if per_second % QUOTA_GRANULE:
                per_second = (per_second // QUOTA_GRANULE + 1) * QUOTA_GRANULE
        properties.append(("CPUQuotaPerSecUSec", _u64(per_second)))
    return properties


def resource_properties(resources: SystemdResources, systemd_version: int) -> list[Property]:
    """libcontainer's genV2ResourcesProperties for these resources (no devices, no swap, no cpuset), in its order."""
    properties: list[Property] = []
    if resources.memory != 0:
        properties.append(("MemoryMax", _u64(resources.memory)))
    if resources.cpu_weight != 0:
        properties.append(("CPUWeight", _u64(resources.cpu_weight)))
    properties += cpu_quota_properties(resources.cpu_quota, resources.cpu_period, systemd_version)
    if resources.pids_limit > 0 or resources.pids_limit == -1:
        properties.append(("TasksMax", _u64(resources.pids_limit)))
    return properties


def unit_and_parent(cgroup: str) -> tuple[str, str]:
    """The kubelet's libctCgroupConfig for systemd: the path's last slice is the unit (Name), the one above it the
    Parent ("-.slice" at the top)."""
    directory, base = posixpath.split(cgroup.rstrip("/"))
    if not base.endswith(SLICE_SUFFIX):
        raise PodCgroupError(f"not a systemd slice path: {cgroup!r}")
    parent = ROOT_SLICE if directory in ("", "/") else posixpath.basename(directory)
    return base, parent


def apply_properties(unit: str, parent: str) -> list[Property]:
    """libcontainer's Apply(-1) properties for a unit: Wants= for a slice, Slice= and Delegate= for a scope."""
    properties: list[Property] = [("Description", ("s", f"libcontainer container {unit}"))]
    if unit.endswith(SLICE_SUFFIX):
        properties.append(("Wants", ("as", [parent])))
    else:
        properties += [("Slice", ("s", parent)), ("Delegate", ("b", True))]
    properties += [
        ("MemoryAccounting", ("b", True)),
        ("CPUAccounting", ("b", True)),
        ("IOAccounting", ("b", True)),
        ("TasksAccounting", ("b", True)),
        ("DefaultDependencies", ("b", False)),
    ]
    return properties


class SystemdCgroupManager:
    """Upstream's cgroup manager with the systemd driver, on the unified hierarchy at `root`. Paths are the slice
    paths (to_systemd's), which are also the cgroups' paths under the mount."""

    def __init__(self, bus: SystemdBus, root: Path = CGROUP_ROOT) -> None:
        self._bus = bus
        self.root = root
        self._version: int | None = None

    def systemd_version(self) -> int:
        if self._version is None:
            try:
                self._version = version_number(self._bus.version())
            except SystemdError as exc:
                raise PodCgroupError(f"cannot read systemd's version: {exc}") from exc
        return self._version

    def exists(self, cgroup: str) -> bool:
        """Upstream Exists, v2: the cgroup's directory is there."""
        return (self.root / cgroup.strip("/")).is_dir()

    def create(self, cgroup: str, resources: SystemdResources) -> None:
        """Apply(-1) and Set's unit half: the slice started (or kept), its controllers enabled, its properties set."""
        unit, parent = unit_and_parent(cgroup)
        try:
            self._bus.start_transient_unit(unit, apply_properties(unit, parent))
        except SystemdError as exc:
            if exc.name != UNIT_EXISTS:
                raise PodCgroupError(f"unable to start unit {unit!r}: {exc}") from exc
        try:
            cgroup_v2.create_cgroup_path(self.root, cgroup)
        except cgroup_v2.CgroupV2Error as exc:
            raise PodCgroupError(f"failed to create cgroup {cgroup}: {exc}") from exc
        self.set(cgroup, resources)
        log.debug("systemd slice started unit=%s parent=%s", unit, parent)

    def set(self, cgroup: str, resources: SystemdResources) -> None:
        """Set's unit half (SetUnitProperties); the caller writes the files."""
        unit, _ = unit_and_parent(cgroup)
        properties = resource_properties(resources, self.systemd_version())
        if not properties:
            return
        try:
            self._bus.set_unit_properties(unit, properties)
        except SystemdError as exc:
            raise PodCgroupError(f"unable to set unit properties of {unit!r}: {exc}") from exc

    def destroy(self, cgroup: str) -> None:
        """Destroy: the unit stopped (not loaded is fine) and its failed state reset; the directory removed if left."""
        unit, _ = unit_and_parent(cgroup)
        if not self.exists(cgroup):
            return  # an active slice has its cgroup: nothing to stop (the pod's other QoS tiers, a second cleanup)
        try:
            self._bus.stop_unit(unit)
        except SystemdError as exc:
            if exc.name not in (NO_SUCH_UNIT, NOT_LOADED):
                raise PodCgroupError(f"unable to stop unit {unit!r}: {exc}") from exc
        with contextlib.suppress(SystemdError):  # nothing failed, nothing to reset
            self._bus.reset_failed_unit(unit)
        remove_cgroup_tree(cgroup, root=self.root)
        log.debug("systemd slice stopped unit=%s", unit)


class SystemdPodCgroups:
    """PodCgroups with the systemd driver: the pod slice made and sized through systemd, then its files written as
    the cgroupfs driver's v2 half writes them (libcontainer's Set does both)."""

    def __init__(self, manager: SystemdCgroupManager, *, pod_pids_limit: int = -1) -> None:
        self._manager = manager
        self._pids_limit = pod_pids_limit if pod_pids_limit > 0 else None
        self._files = CgroupfsPodCgroups(manager.root, pod_pids_limit=pod_pids_limit)

    def ensure(self, cgroup: str, config: PodResourceConfig) -> None:
        self._manager.create(cgroup, resources_for(config, pids_limit=self._pids_limit))
        self._files.ensure(cgroup, config)

    def write(self, cgroup: str, config: PodResourceConfig) -> None:
        self._manager.set(cgroup, resources_for(config))
        self._files.write(cgroup, config)

    def read(self, cgroup: str) -> PodResourceConfig:
        return self._files.read(cgroup)

    def memory_usage(self, cgroup: str) -> int:
        return self._files.memory_usage(cgroup)

    def destroy(self, cgroup: str) -> None:
        self._manager.destroy(cgroup)
