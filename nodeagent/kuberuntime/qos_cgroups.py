"""The QoS tier cgroups, `<cgroupRoot>/kubepods/burstable` and `.../besteffort`, as upstream's QOSContainerManager
keeps them (cgroupfs driver, cgroup v1 and v2).

BestEffort always has the minimum cpu shares (2); Burstable has the shares of the summed cpu requests of the active
Burstable pods (PodRequests: a pod-level cpu request in place of its containers' sum; MilliCPUToShares, so 2 when
there are none). Upstream sets them when it starts, before it makes a new
pod's cgroup (SyncPod: UpdateQOSCgroups when the pod cgroup does not exist yet) and every minute. On v1 the shares
go to cpu.shares, on v2 to cpu.weight through upstream's conversion, with the tier made as every v2 cgroup here
(`cgroup_v2.create_cgroup_path`: the controllers on, down to it). Guaranteed pods sit directly under kubepods and have
no tier. The memory limits upstream puts on the tiers only come with the QOSReserved feature gate (off by default),
so none are written.

With the systemd driver (`systemd` given) the same three cgroups are slices, made as upstream's cgroup manager makes
them (systemd_cgroups.SystemdCgroupManager: StartTransientUnit when the cgroup does not exist, then the CPUWeight
property and the cpu.weight file): kubepods.slice first (upstream's node allocatable cgroup, created here without
limits as the cgroupfs driver's kubepods is), then kubepods-burstable.slice and kubepods-besteffort.slice.
"""

from __future__ import annotations

import asyncio
import logging
import math
import posixpath
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodeagent.admission.resources import pod_requests
from nodeagent.kuberuntime import cgroup_v2
from nodeagent.kuberuntime.cgroups import CGROUP_ROOT, MIN_SHARES, PodCgroupError, milli_cpu_to_shares
from nodeagent.kuberuntime.qos import QOSClass, pod_qos
from nodeagent.kuberuntime.sandbox_config import pod_cgroup_parent
from nodeagent.kuberuntime.systemd_cgroup_names import to_systemd
from nodeagent.kuberuntime.systemd_cgroups import SystemdCgroupManager, SystemdResources

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]
TIERS = (QOSClass.BURSTABLE, QOSClass.BEST_EFFORT)
QOS_UPDATE_PERIOD = 60.0  # upstream's periodicQOSCgroupUpdateInterval


def qos_cgroup(qos: QOSClass, cgroup_root: str = "/") -> str:
    """The tier's cgroup path (the pod cgroup's parent): `/kubepods/burstable`, `/kubepods/besteffort`."""
    return posixpath.dirname(pod_cgroup_parent("", qos, cgroup_root))


def qos_cpu_shares(active_pods: Sequence[Pod]) -> dict[QOSClass, int]:
    """Upstream setCPUCgroupConfig: the tiers' cpu shares for these active pods."""
    burstable_milli = sum(
        math.ceil(pod_requests(pod).get("cpu", Decimal(0)) * 1000)
        for pod in active_pods
        if pod_qos(pod) is QOSClass.BURSTABLE
    )
    return {QOSClass.BURSTABLE: milli_cpu_to_shares(burstable_milli), QOSClass.BEST_EFFORT: MIN_SHARES}


class QOSCgroups:
    """Upstream's QOSContainerManager, cpu part: `update` makes the two tiers (if need be) and sizes them."""

    def __init__(
        self,
        active_pods: Callable[[], Sequence[Pod]],
        *,
        cgroup_root: str = "/",
        root: Path = CGROUP_ROOT,
        systemd: SystemdCgroupManager | None = None,
    ) -> None:
        self._active_pods = active_pods
        self._cgroup_root = cgroup_root
        self._root = root
        self._systemd = systemd

    def _update_slices(self, systemd: SystemdCgroupManager, shares: Mapping[QOSClass, int]) -> None:
        kubepods = to_systemd(posixpath.dirname(qos_cgroup(QOSClass.BURSTABLE, self._cgroup_root)))
        if not systemd.exists(kubepods):
            systemd.create(kubepods, SystemdResources())
        for qos in TIERS:
            cgroup = to_systemd(qos_cgroup(qos, self._cgroup_root))
            weight = cgroup_v2.shares_to_weight(shares[qos])
            if systemd.exists(cgroup):
                systemd.set(cgroup, SystemdResources(cpu_weight=weight))
            else:
                systemd.create(cgroup, SystemdResources(cpu_weight=weight))
            try:
                (systemd.root / cgroup.strip("/") / "cpu.weight").write_text(str(weight))
            except OSError as exc:
                raise PodCgroupError(f"failed to update QoS cgroup {cgroup}: {exc}") from exc

    def update(self, active_pods: Sequence[Pod] | None = None) -> dict[QOSClass, int]:
        """Upstream UpdateCgroups (cpu shares) for `active_pods` (None: read them here); returns what was written.
        Raises PodCgroupError. From a thread, pass the pods: the pod config belongs to the event loop (`update_async`).
        """
        shares = qos_cpu_shares(self._active_pods() if active_pods is None else active_pods)
        if self._systemd is not None:
            self._update_slices(self._systemd, shares)
            log.debug(
                "qos slices updated burstable_shares=%d besteffort_shares=%d",
                shares[QOSClass.BURSTABLE],
                shares[QOSClass.BEST_EFFORT],
            )
            return shares
        unified = cgroup_v2.is_unified(self._root)
        for qos in TIERS:
            cgroup = qos_cgroup(qos, self._cgroup_root)
            try:
                if unified:
                    directory = cgroup_v2.create_cgroup_path(self._root, cgroup)
                    (directory / "cpu.weight").write_text(str(cgroup_v2.shares_to_weight(shares[qos])))
                else:
                    for controller in ("cpu", "memory"):
                        (self._root / controller / cgroup.strip("/")).mkdir(parents=True, exist_ok=True)
                    (self._root / "cpu" / cgroup.strip("/") / "cpu.shares").write_text(str(shares[qos]))
            except (OSError, cgroup_v2.CgroupV2Error) as exc:
                raise PodCgroupError(f"failed to update QoS cgroup {cgroup}: {exc}") from exc
        log.debug(
            "qos cgroups updated burstable_shares=%d besteffort_shares=%d",
            shares[QOSClass.BURSTABLE],
            shares[QOSClass.BEST_EFFORT],
        )
        return shares

    async def update_async(self) -> dict[QOSClass, int]:
        """`update` with the active pods read here, on the event loop, and the files written in a thread. Read from
        the thread, the pod config changed under the iteration ('dictionary changed size during iteration'), and the
        periodic update's exception stopped the agent (issue 34's churn)."""
        pods = list(self._active_pods())
        return await asyncio.to_thread(self.update, pods)

    async def run(self, period: float = QOS_UPDATE_PERIOD) -> None:
        """Upstream Start and its periodic UpdateCgroups: now, then every `period` seconds; a failure is logged and
        tried again at the next round."""
        while True:
            try:
                await self.update_async()
            except PodCgroupError as exc:
                log.warning("qos cgroups update failed error=%s", exc)
            await asyncio.sleep(period)
