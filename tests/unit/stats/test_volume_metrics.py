"""kubelet_volume_stats_* as upstream's volume stats collector writes them: claim-backed volumes only, one series
per claim, the health gauge only with a health report; through a real prometheus_client registry."""

from __future__ import annotations

import datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.stats.types import FsStats, PVCReference, VolumeStats
from nodeagent.stats.volumemetrics import HEALTH_ABNORMAL, VolumeStatsCollector, volume_samples

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)
LABELS = ("apps", "db")
DB = PVCReference("db", "apps")


def _volume(
    name: str = "data",
    claim: PVCReference | None = DB,
    *,
    capacity: int = 100,
    abnormal: bool | None = None,
) -> VolumeStats:
    fs = FsStats(
        NOW, available_bytes=70, capacity_bytes=capacity, used_bytes=30, inodes_free=9, inodes=10, inodes_used=1
    )
    return VolumeStats(name=name, fs=fs, pvc_ref=claim, abnormal=abnormal)


ALL_SIX = {
    "kubelet_volume_stats_capacity_bytes": [(LABELS, 100.0)],
    "kubelet_volume_stats_available_bytes": [(LABELS, 70.0)],
    "kubelet_volume_stats_used_bytes": [(LABELS, 30.0)],
    "kubelet_volume_stats_inodes": [(LABELS, 10.0)],
    "kubelet_volume_stats_inodes_free": [(LABELS, 9.0)],
    "kubelet_volume_stats_inodes_used": [(LABELS, 1.0)],
}


@pytest.mark.parametrize(
    ("volumes", "expected"),
    [
        ([], {name: [] for name in ALL_SIX} | {HEALTH_ABNORMAL: []}),
        ([_volume(claim=None)], {name: [] for name in ALL_SIX} | {HEALTH_ABNORMAL: []}),  # no claim: not reported
        ([_volume()], ALL_SIX | {HEALTH_ABNORMAL: []}),
        # the same claim mounted by a second pod: the first one's numbers only
        ([_volume(), _volume(capacity=999)], ALL_SIX | {HEALTH_ABNORMAL: []}),
        ([_volume(abnormal=False)], ALL_SIX | {HEALTH_ABNORMAL: [(LABELS, 0.0)]}),
        ([_volume(abnormal=True)], ALL_SIX | {HEALTH_ABNORMAL: [(LABELS, 1.0)]}),
    ],
)
def test_volume_samples(volumes: list[VolumeStats], expected: dict[str, list[tuple[tuple[str, str], float]]]) -> None:
    assert volume_samples(volumes) == expected


def test_collector_through_a_registry() -> None:
    latest: list[VolumeStats] = []
    registry = CollectorRegistry()
    registry.register(VolumeStatsCollector(lambda: latest))
    assert b"kubelet_volume_stats" not in generate_latest(registry)  # nothing measured: no family at all
    latest.extend([_volume(abnormal=True), _volume("other", PVCReference("logs", "apps"), capacity=5)])
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    capacity = families["kubelet_volume_stats_capacity_bytes"]
    assert capacity.type == "gauge" and capacity.documentation == "Capacity in bytes of the volume"
    assert {(s.labels["persistentvolumeclaim"], s.value) for s in capacity.samples} == {("db", 100.0), ("logs", 5.0)}
    assert [s.labels for s in families[HEALTH_ABNORMAL].samples] == [
        {"namespace": "apps", "persistentvolumeclaim": "db"}
    ]
