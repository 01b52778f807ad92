from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent.volume.emptydir import EmptyDirPlugin, pod_memory_limit, tmpfs_size
from nodeagent.volume.errors import SetUpError
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.plugin import VolumeHost
from tests.unit.volume.fakes import FakeMounter, exists, file_mode, read_text, write_text

GI = 1024**3
MI = 1024**2


def _c(name: str, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, **extra}
    if memory is not None:
        out["resources"] = {"limits": {"memory": memory}}
    return out


def _pod(containers: list[dict[str, Any]], inits: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"uid": "u1"}, "spec": {"containers": containers, "initContainers": inits or [], **spec}}


@pytest.mark.parametrize(
    ("pod", "limit"),
    [
        (_pod([_c("a", "1Gi")]), GI),
        (_pod([_c("a", "1Gi"), _c("b", "512Mi")]), GI + 512 * MI),
        (_pod([_c("a", "1Gi"), _c("b")]), None),
        (_pod([_c("a", "1Gi")], [_c("i", "2Gi")]), 2 * GI),
        (_pod([_c("a", "1Gi")], [_c("i")]), None),
        (_pod([_c("a", "1Gi")], [_c("side", "256Mi", restartPolicy="Always")]), GI + 256 * MI),
        (_pod([_c("a", "1Gi")], [_c("side", "1Gi", restartPolicy="Always"), _c("i", "1536Mi")]), 2560 * MI),
        (_pod([_c("a", "1Gi")], overhead={"memory": "100Mi"}), GI + 100 * MI),
        (_pod([_c("a", "0")]), None),
        (_pod([]), None),
    ],
)
def test_pod_memory_limit(pod: dict[str, Any], limit: int | None) -> None:
    assert pod_memory_limit(pod) == limit


def _vol(size_limit: str | None = None) -> dict[str, Any]:
    empty: dict[str, Any] = {"medium": "Memory"}
    if size_limit is not None:
        empty["sizeLimit"] = size_limit
    return {"name": "m", "emptyDir": empty}


@pytest.mark.parametrize(
    ("pod", "volume", "allocatable", "size"),
    [
        # Upstream calculateEmptyDirMemorySize: node allocatable, lowered to the pod limit, lowered to sizeLimit.
        (_pod([_c("a")]), _vol(), 8 * GI, 8 * GI),
        (_pod([_c("a", "1Gi")]), _vol(), 8 * GI, GI),
        (_pod([_c("a", "1Gi")]), _vol("64Mi"), 8 * GI, 64 * MI),
        (_pod([_c("a", "1Gi")]), _vol("2Gi"), 8 * GI, GI),
        (_pod([_c("a")]), _vol("64Mi"), 8 * GI, 64 * MI),
        (_pod([_c("a", "16Gi")]), _vol(), 8 * GI, 8 * GI),
        (_pod([_c("a")]), _vol("0"), 8 * GI, 8 * GI),
        (_pod([_c("a")]), _vol(), 0, 0),
        (_pod([_c("a", "1Gi")]), _vol(), 0, GI),
        (_pod([_c("a", "1Gi")]), {"name": "wrapped"}, 8 * GI, GI),
    ],
)
def test_tmpfs_size(pod: dict[str, Any], volume: dict[str, Any], allocatable: int, size: int) -> None:
    assert tmpfs_size(pod, volume, allocatable) == size


def _plugin(tmp_path: Path, mounter: FakeMounter) -> EmptyDirPlugin:
    host = VolumeHost(PodDirs(str(tmp_path)), mounter, node_allocatable={"memory": "4Gi"})
    return EmptyDirPlugin(host)


async def test_disk_set_up_and_tear_down(tmp_path: Path) -> None:
    mounter = FakeMounter()
    plugin = _plugin(tmp_path, mounter)
    path = await plugin.set_up(_pod([_c("a")]), {"name": "cache", "emptyDir": {}})
    assert path == f"{tmp_path}/pods/u1/volumes/kubernetes.io~empty-dir/cache"
    assert file_mode(path) == 0o777
    assert exists(str(tmp_path), "pods/u1/plugins/kubernetes.io~empty-dir/cache/ready")
    write_text("x", path, "data")
    # Set up again (after a restart, say): the data stays.
    await plugin.set_up(_pod([_c("a")]), {"name": "cache", "emptyDir": {}})
    assert read_text(path, "data") == "x"
    assert plugin.reconstruct("u1", "cache") == path
    await plugin.tear_down("u1", "cache")
    assert not exists(path)
    assert plugin.reconstruct("u1", "cache") is None
    assert mounter.calls == []


async def test_memory_mounts_one_tmpfs_sized(tmp_path: Path) -> None:
    mounter = FakeMounter()
    plugin = _plugin(tmp_path, mounter)
    pod = _pod([_c("a", "1Gi")])
    path = await plugin.set_up(pod, _vol())
    await plugin.set_up(pod, _vol())
    assert mounter.calls == [("tmpfs", path, f"size={GI}")]
    await plugin.tear_down("u1", "m")
    assert mounter.calls[-1] == ("unmount", path)
    assert mounter.table == []
    assert not exists(path)


@pytest.mark.parametrize(
    ("medium", "message"),
    [
        ("HugePages", "emptyDir medium HugePages is not supported on this node: hugetlbfs is not available"),
        ("HugePages-2Mi", "emptyDir medium HugePages-2Mi is not supported on this node: hugetlbfs is not available"),
        ("Tape", 'unknown storage medium "Tape"'),
    ],
)
async def test_unsupported_media(tmp_path: Path, medium: str, message: str) -> None:
    plugin = _plugin(tmp_path, FakeMounter())
    with pytest.raises(SetUpError) as caught:
        await plugin.set_up(_pod([_c("a")]), {"name": "h", "emptyDir": {"medium": medium}})
    assert str(caught.value) == message
    assert not (tmp_path / "pods").exists()
