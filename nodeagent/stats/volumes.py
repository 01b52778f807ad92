"""Pod volumes a volume plugin measures itself (upstream volume.MetricsProvider): a CSI volume's stats come from its
driver's NodeGetVolumeStats, not from walking it (a network volume's `du` is slow and wrong), and the pod spec says
which volume is a claim (the summary's pvcRef, the kubelet_volume_stats_* labels).

The stats package knows the plugins only through `PluginVolumeStats`, which the kubernetes.io/csi plugin satisfies;
the agent hands it in.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from nodeagent.stats.host import DiskUsage, FsInfo
from nodeagent.stats.summary import VolumeUsage
from nodeagent.stats.types import PVCReference

# The pods' directory names of the plugins that measure their own volumes: never walked.
MEASURED_PLUGIN_DIRS = ("kubernetes.io~csi",)

# pod UID -> the pod as the kubelet knows it (spec.volumes), None when it does not
PodSpecGetter = Callable[[str], Mapping[str, Any] | None]


class VolumeMetrics(Protocol):
    """upstream volume.Metrics: zeros where the plugin had nothing; `abnormal` None without a health report."""

    @property
    def available_bytes(self) -> int: ...
    @property
    def capacity_bytes(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    def inodes_free(self) -> int: ...
    @property
    def inodes(self) -> int: ...
    @property
    def inodes_used(self) -> int: ...
    @property
    def abnormal(self) -> bool | None: ...


@runtime_checkable
class PluginVolumeStats(Protocol):
    """A volume plugin with its own metrics (upstream metricsCsi)."""

    def measured_volumes(self, pod_uid: str) -> list[str]:
        """The pod's volumes this plugin measures."""
        ...

    async def volume_stats(
        self, pod_uid: str, volume_name: str, *, volume_health: bool = False
    ) -> VolumeMetrics | None:
        """One volume's metrics; None when it cannot be measured (upstream's calculator then leaves it out)."""
        ...


def claim_ref(pod: Mapping[str, Any] | None, volume_name: str) -> PVCReference | None:
    """upstream calcAndStoreStats: a persistentVolumeClaim volume names its claim; a generic ephemeral volume its
    `<pod>-<volume>` claim (ephemeral.VolumeClaimName); other volumes, or an unknown pod, none."""
    if pod is None:
        return None
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") != volume_name:
            continue
        source = volume.get("persistentVolumeClaim")
        if source is not None:
            return PVCReference(name=str(source.get("claimName") or ""), namespace=namespace)
        if volume.get("ephemeral") is not None:
            return PVCReference(name=f"{metadata.get('name', '')}-{volume_name}", namespace=namespace)
        return None
    return None


def measured_volume(
    name: str, metrics: VolumeMetrics, time: datetime.datetime, pvc_ref: PVCReference | None
) -> VolumeUsage:
    """A plugin-measured volume as the summary's volume input: never local ephemeral storage (upstream
    IsLocalEphemeralVolume: emptyDir, configMap and gitRepo only)."""
    return VolumeUsage(
        name=name,
        usage=DiskUsage(used_bytes=metrics.used_bytes, inodes_used=metrics.inodes_used),
        fs=FsInfo(
            capacity=metrics.capacity_bytes,
            available=metrics.available_bytes,
            usage=metrics.used_bytes,
            inodes=metrics.inodes,
            inodes_free=metrics.inodes_free,
        ),
        time=time,
        local_ephemeral=False,
        pvc_ref=pvc_ref,
        abnormal=metrics.abnormal,
    )
