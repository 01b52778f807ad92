from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nodeagent.volume.ownership import pod_fs_group, set_volume_ownership

GROUP = 4321


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    root = tmp_path / "vol"
    (root / "sub").mkdir(parents=True, mode=0o755)
    root.chmod(0o755)
    (root / "sub").chmod(0o755)
    (root / "file").write_text("x")
    (root / "file").chmod(0o600)
    (root / "sub" / "inner").write_text("y")
    (root / "sub" / "inner").chmod(0o644)
    (tmp_path / "outside").write_text("z")
    (tmp_path / "outside").chmod(0o600)
    os.symlink(str(tmp_path / "outside"), root / "link")
    return root


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize(
    ("read_only", "root_mode", "file_mode", "inner_mode"),
    [
        (False, 0o2775, 0o660, 0o664),
        (True, 0o2755, 0o640, 0o644),
    ],
)
def test_walk(volume: Path, read_only: bool, root_mode: int, file_mode: int, inner_mode: int) -> None:
    set_volume_ownership(str(volume), GROUP, read_only=read_only)
    assert (mode(volume), mode(volume / "file"), mode(volume / "sub" / "inner")) == (root_mode, file_mode, inner_mode)
    assert mode(volume / "sub") == root_mode
    for path in (volume, volume / "file", volume / "sub", volume / "sub" / "inner", volume / "link"):
        assert os.lstat(path).st_gid == GROUP, path
    # The symlink got the group; its target outside the volume was not touched.
    outside = volume.parent / "outside"
    assert (os.stat(outside).st_gid, mode(outside)) == (0, 0o600)


def test_no_fs_group_changes_nothing(volume: Path) -> None:
    set_volume_ownership(str(volume), None, read_only=False)
    assert mode(volume / "file") == 0o600


def test_pod_fs_group() -> None:
    assert pod_fs_group({"spec": {"securityContext": {"fsGroup": 2000}}}) == 2000
    assert pod_fs_group({"spec": {}}) is None
