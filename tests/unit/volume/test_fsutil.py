from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from nodeagent.volume.fsutil import os_error_text, remove_all_one_filesystem
from nodeagent.volume.mounter import MountInfo
from tests.unit.volume.fakes import FakeMounter


def test_removes_a_tree_without_following_symlinks(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("x")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("y")
    os.symlink(str(keep), tree / "link")
    remove_all_one_filesystem(str(tree), FakeMounter())
    assert not tree.exists()
    assert (keep / "precious").read_text() == "x"


def test_refuses_below_a_mount(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "bound").mkdir(parents=True)
    (tree / "bound" / "user-data").write_text("x")
    mounter = FakeMounter([MountInfo(str(tree / "bound"), "none", "/somewhere")])
    with pytest.raises(OSError, match="is mounted"):
        remove_all_one_filesystem(str(tree), mounter)
    assert (tree / "bound" / "user-data").exists()


@pytest.mark.parametrize(
    ("exc", "op", "text"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/v/f"), "write", "write /v/f: no space left on device"),
        (OSError(errno.EACCES, "Permission denied"), "", "permission denied"),
    ],
)
def test_os_error_text(exc: OSError, op: str, text: str) -> None:
    assert os_error_text(exc, op) == text
