"""kubelet_volume_stats_* on /metrics (upstream pkg/kubelet/metrics/collectors/volume_stats.go): the pods' volume
stats as last measured, for claim-backed volumes only, one series per claim (the first pod's, as upstream's set of
seen PVCReferences), labelled namespace and persistentvolumeclaim. The health gauge only for a volume whose plugin
reported a condition (the CSIVolumeHealth gate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from nodeagent.stats.types import FsStats, PVCReference, VolumeStats

LABELS = ("namespace", "persistentvolumeclaim")
HEALTH_ABNORMAL = "kubelet_volume_stats_health_status_abnormal"


@dataclass(frozen=True, slots=True)
class _Gauge:
    name: str
    help: str
    value: Callable[[FsStats], int | None]


# upstream's names and help texts, in its order
GAUGES = (
    _Gauge("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume", lambda f: f.capacity_bytes),
    _Gauge(
        "kubelet_volume_stats_available_bytes", "Number of available bytes in the volume", lambda f: f.available_bytes
    ),
    _Gauge("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", lambda f: f.used_bytes),
    _Gauge("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", lambda f: f.inodes),
    _Gauge("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", lambda f: f.inodes_free),
    _Gauge("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", lambda f: f.inodes_used),
)
HEALTH_HELP = (
    "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates "
    "volume is healthy"
)


def volume_samples(volumes: Iterable[VolumeStats]) -> dict[str, list[tuple[tuple[str, str], float]]]:
    """Metric name -> [((namespace, claim), value)], in upstream's order; volumes without a claim left out, a claim
    seen before (another pod's mount of it) too."""
    out: dict[str, list[tuple[tuple[str, str], float]]] = {g.name: [] for g in GAUGES}
    out[HEALTH_ABNORMAL] = []
    seen: set[PVCReference] = set()
    for volume in volumes:
        ref = volume.pvc_ref
        if ref is None or ref in seen:
            continue
        seen.add(ref)
        labels = (ref.namespace, ref.name)
        for gauge in GAUGES:
            out[gauge.name].append((labels, float(gauge.value(volume.fs) or 0)))
        if volume.abnormal is not None:
            out[HEALTH_ABNORMAL].append((labels, 1.0 if volume.abnormal else 0.0))
    return out


class VolumeStatsCollector:
    """A prometheus_client collector over the provider's latest volume stats (`latest`: no measuring here, as
    upstream's collector reads its calculators' cache)."""

    def __init__(self, latest: Callable[[], Sequence[VolumeStats]]) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        helps = {g.name: g.help for g in GAUGES} | {HEALTH_ABNORMAL: HEALTH_HELP}
        for name, samples in volume_samples(self._latest()).items():
            if not samples:  # as a Go registry: a family without samples is not written
                continue
            family = GaugeMetricFamily(name, helps[name], labels=list(LABELS))
            for labels, value in samples:
                family.add_metric(list(labels), value)
            yield family
