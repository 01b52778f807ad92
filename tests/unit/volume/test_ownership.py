from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nodeagent.volume.ownership import (
    pod_fs_group,
    pod_fs_group_change_policy,
    requires_permission_change,
    set_volume_ownership,
)

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


OTHER_GROUP = 1234


def _done_root(volume: Path, root_mode: int = 0o2770) -> None:
    """A volume whose root already looks owned by GROUP, with a file inside that still has another group."""
    os.chown(volume, -1, GROUP)
    volume.chmod(root_mode)
    os.chown(volume / "file", -1, OTHER_GROUP)


@pytest.mark.parametrize(
    ("policy", "root_gid", "root_mode", "read_only", "walked"),
    [
        # Upstream's skipPermissionChange: only OnRootMismatch skips, and only when the root matches.
        ("OnRootMismatch", GROUP, 0o2770, False, False),
        ("OnRootMismatch", GROUP, 0o2775, False, False),  # a superset of the bits matches too
        ("OnRootMismatch", GROUP, 0o2550, True, False),  # read-only: r-x for user and group is enough
        ("OnRootMismatch", GROUP, 0o2550, False, True),  # read-write wants rwx
        ("OnRootMismatch", GROUP, 0o0770, False, True),  # no setgid bit
        ("OnRootMismatch", GROUP, 0o2760, False, True),  # no group search
        ("OnRootMismatch", OTHER_GROUP, 0o2770, False, True),  # another group
        ("Always", GROUP, 0o2770, False, True),
        (None, GROUP, 0o2770, False, True),
    ],
)
def test_fs_group_change_policy(
    volume: Path, policy: str | None, root_gid: int, root_mode: int, read_only: bool, walked: bool
) -> None:
    _done_root(volume, root_mode)
    os.chown(volume, -1, root_gid)
    set_volume_ownership(str(volume), GROUP, read_only=read_only, change_policy=policy)
    assert (os.lstat(volume / "file").st_gid == GROUP) is walked
    assert (os.lstat(volume / "sub" / "inner").st_gid == GROUP) is walked


def test_on_root_mismatch_walks_a_root_that_is_not_a_directory(tmp_path: Path) -> None:
    single = tmp_path / "single"
    single.write_text("x")
    os.chown(single, -1, GROUP)
    single.chmod(0o2770)
    assert requires_permission_change(str(single), GROUP, read_only=False)
    assert requires_permission_change(str(tmp_path / "missing"), GROUP, read_only=False)


def test_pod_fs_group_change_policy() -> None:
    spec = {"spec": {"securityContext": {"fsGroup": 1, "fsGroupChangePolicy": "OnRootMismatch"}}}
    assert pod_fs_group_change_policy(spec) == "OnRootMismatch"
    assert pod_fs_group_change_policy({"spec": {}}) is None
