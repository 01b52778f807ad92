"""A plugin-measured (CSI) volume in the stats: the claim a pod spec names (pvcRef), the conversion of the plugin's
metrics, the summary's JSON with volumeHealthStats, and the provider asking the plugin instead of walking the
volume, once per period per pod. The plugin's own NodeGetVolumeStats is tests/unit/volume/test_csi_plugin.py's; the
real driver is tests/integration/test_csi_volume_stats.py's."""

from __future__ import annotations

import asyncio
import datetime
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nodeagent.stats.cgroups import CgroupFS
from nodeagent.stats.provider import StatsProvider
from nodeagent.stats.types import FsStats, PVCReference, VolumeStats, volume_json
from nodeagent.stats.volumes import PluginVolumeStats, claim_ref, measured_volume
from nodeagent.volume.csi import CSIPlugin
from nodeagent.volume.csiutil import VolumeStats as CSIVolumeStats
from tests.unit.stats.test_provider import DATA, Clock, Runtime

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)


def _pod(*volumes: dict[str, Any], name: str = "web", namespace: str = "apps") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": "v2"}, "spec": {"volumes": list(volumes)}}


@pytest.mark.parametrize(
    ("pod", "volume", "expected"),
    [
        (_pod({"name": "data", "persistentVolumeClaim": {"claimName": "db"}}), "data", PVCReference("db", "apps")),
        # a generic ephemeral volume: the claim the ephemeral-volume controller makes, <pod>-<volume>
        (
            _pod({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}),
            "scratch",
            PVCReference("web-scratch", "apps"),
        ),
        (_pod({"name": "inline", "csi": {"driver": "d"}}), "inline", None),  # inline CSI: no claim
        (_pod({"name": "cache", "emptyDir": {}}), "cache", None),
        (_pod({"name": "data", "persistentVolumeClaim": {"claimName": "db"}}), "other", None),
        (None, "data", None),  # the pod is not known (any more)
    ],
)
def test_claim_ref(pod: Mapping[str, Any] | None, volume: str, expected: PVCReference | None) -> None:
    assert claim_ref(pod, volume) == expected


def test_measured_volume_is_persistent_with_every_field() -> None:
    metrics = CSIVolumeStats(70, 100, 30, 9, 10, 1)
    usage = measured_volume("data", metrics, NOW, PVCReference("db", "apps"))
    assert not usage.local_ephemeral and usage.abnormal is None
    assert usage.pvc_ref == PVCReference("db", "apps")


@pytest.mark.parametrize(
    ("abnormal", "expected_health"),
    [(None, None), (False, {"abnormal": False}), (True, {"abnormal": True})],
)
def test_volume_json_has_health_only_when_reported(abnormal: bool | None, expected_health: Any) -> None:
    stats = VolumeStats(
        name="data",
        fs=FsStats(NOW, available_bytes=0, capacity_bytes=5, used_bytes=0, inodes_free=0, inodes=0, inodes_used=0),
        pvc_ref=PVCReference("db", "apps"),
        abnormal=abnormal,
    )
    out = volume_json(stats)
    # upstream's order: FsStats inline, name, pvcRef, volumeHealthStats
    keys = ["time", "availableBytes", "capacityBytes", "usedBytes", "inodesFree", "inodes", "inodesUsed"]
    keys += ["name", "pvcRef"] + (["volumeHealthStats"] if expected_health is not None else [])
    assert list(out) == keys
    assert out.get("volumeHealthStats") == expected_health
    assert out["pvcRef"] == {"name": "db", "namespace": "apps"}


@dataclass
class FakePlugin:
    """The plugin's side of PluginVolumeStats; records what it was asked."""

    volumes: dict[str, dict[str, CSIVolumeStats | None]] = field(default_factory=dict)
    asked: list[tuple[str, str, bool]] = field(default_factory=list)
    hang: bool = False

    def measured_volumes(self, pod_uid: str) -> list[str]:
        return sorted(self.volumes.get(pod_uid, {}))

    async def volume_stats(
        self, pod_uid: str, volume_name: str, *, volume_health: bool = False
    ) -> CSIVolumeStats | None:
        self.asked.append((pod_uid, volume_name, volume_health))
        if self.hang:  # a driver that never answers
            await asyncio.Event().wait()
        return self.volumes[pod_uid][volume_name]


def test_the_csi_plugin_is_a_plugin_volume_stats() -> None:
    # statically (mypy) and at run time (the agent's isinstance)
    fake: PluginVolumeStats = FakePlugin()
    assert isinstance(fake, PluginVolumeStats)
    assert all(hasattr(CSIPlugin, m) for m in ("measured_volumes", "volume_stats"))


def _typed(plugin: CSIPlugin) -> PluginVolumeStats:
    return plugin  # mypy checks the CSI plugin against the Protocol here


@pytest.fixture
def world(tmp_path: Path) -> tuple[StatsProvider, FakePlugin, Clock, Path]:
    root_dir = tmp_path / "kubelet"
    snapshot = tmp_path / "snapshots"
    snapshot.mkdir()
    volumes = root_dir / "pods" / "v2" / "volumes"
    (volumes / "kubernetes.io~empty-dir" / "cache").mkdir(parents=True)
    # a CSI volume's published directory: a walk would count this file
    published = volumes / "kubernetes.io~csi" / "data" / "mount"
    published.mkdir(parents=True)
    (published / "big").write_bytes(b"b" * 50000)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/kubepods/burstable/podv2/ctr\n")
    cgroups = tmp_path / "cgroup"
    shutil.copytree(DATA, cgroups)
    plugin = FakePlugin({"v2": {"data": CSIVolumeStats(70, 100, 30, 9, 10, 1, abnormal=False)}})
    runtime, clock = Runtime(str(snapshot)), Clock()
    pods = {
        "v2": _pod({"name": "data", "persistentVolumeClaim": {"claimName": "db"}}, {"name": "cache", "emptyDir": {}})
    }
    provider = StatsProvider(
        runtime,
        runtime,
        node_name="node-1",
        root_dir=str(root_dir),
        pod_log_dir_root=str(tmp_path / "logs"),
        cgroupfs=CgroupFS(cgroups),
        proc=proc,
        wall=lambda: clock.now,
        monotonic=lambda: clock.mono,
        plugin_volumes=plugin,
        pod_spec=pods.get,
        volume_health=True,
        volume_stats_timeout=0.05,
    )
    return provider, plugin, clock, tmp_path


async def test_csi_volume_comes_from_the_plugin_not_the_disk(
    world: tuple[StatsProvider, FakePlugin, Clock, Path],
) -> None:
    provider, plugin, _, _ = world
    [pod] = (await provider.summary()).pods
    by_name = {v.name: v for v in pod.volume_stats}
    assert list(by_name) == ["cache", "data"]  # ephemeral first, then persistent
    data = by_name["data"]
    assert data.fs == FsStats(
        time=data.fs.time,
        available_bytes=70,
        capacity_bytes=100,
        used_bytes=30,
        inodes_free=9,
        inodes=10,
        inodes_used=1,
    )
    assert data.pvc_ref == PVCReference("db", "apps") and data.abnormal is False
    assert by_name["cache"].pvc_ref is None
    assert plugin.asked == [("v2", "data", True)]
    # the CSI volume is no local ephemeral storage: its 30 bytes (and the 50000 on disk) are not the pod's
    assert pod.ephemeral_storage is not None and (pod.ephemeral_storage.used_bytes or 0) < 30000
    assert provider.latest_volume_stats() == list(pod.volume_stats)


async def test_plugin_is_asked_once_per_period(world: tuple[StatsProvider, FakePlugin, Clock, Path]) -> None:
    provider, plugin, clock, _ = world
    await provider.summary()
    await provider.summary(only_cpu_and_memory=True)  # the CPU-and-memory summary measures no volume
    clock.advance(59)
    await provider.summary()
    assert len(plugin.asked) == 1
    clock.advance(1)
    plugin.volumes["v2"]["data"] = CSIVolumeStats(0, 200, 0, 0, 0, 0)
    [pod] = (await provider.summary()).pods
    assert len(plugin.asked) == 2
    assert [v.fs.capacity_bytes for v in pod.volume_stats if v.name == "data"] == [200]


async def test_volume_the_plugin_cannot_measure_is_left_out(
    world: tuple[StatsProvider, FakePlugin, Clock, Path],
) -> None:
    provider, plugin, _, _ = world
    plugin.volumes["v2"]["data"] = None  # upstream: NotSupported or a failed call, the volume is skipped
    [pod] = (await provider.summary()).pods
    assert [v.name for v in pod.volume_stats] == ["cache"]


async def test_hung_plugin_does_not_hold_the_summary(world: tuple[StatsProvider, FakePlugin, Clock, Path]) -> None:
    provider, plugin, _, _ = world
    plugin.hang = True
    [pod] = (await asyncio.wait_for(provider.summary(), 5)).pods
    assert [v.name for v in pod.volume_stats] == ["cache"]
