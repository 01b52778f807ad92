"""The subPath guard against escaping symlinks (CVE-2017-1002101, CVE-2021-25741), on real directories; the bind
mount itself goes to a fake mounter (the real one is exercised by the integration tests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.volume.errors import MountError, SubPathError
from nodeagent.volume.subpath import (
    bind_subpath,
    clean_subpaths,
    path_within_base,
    safe_make_dir,
    safe_open,
    validate_subpath,
)
from tests.unit.volume.fakes import FakeMounter


@pytest.mark.parametrize(
    ("sub", "error"),
    [
        ("a/b", None),
        ("..a", None),
        ("/etc", "error SubPath `/etc` must not be an absolute path"),
        ("a/../../b", "unable to provision SubPath `a/../../b`: must not contain '..'"),
        ("..", "unable to provision SubPath `..`: must not contain '..'"),
    ],
)
def test_validate_subpath(sub: str, error: str | None) -> None:
    if error is None:
        validate_subpath(sub)
    else:
        with pytest.raises(SubPathError) as caught:
            validate_subpath(sub)
        assert caught.value.message == error


@pytest.mark.parametrize(
    ("path", "base", "inside"),
    [("/v/a", "/v", True), ("/v", "/v", True), ("/va", "/v", False), ("/v/../x", "/v", False), ("/", "/v", False)],
)
def test_path_within_base(path: str, base: str, inside: bool) -> None:
    assert path_within_base(path, base) is inside


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    vol = tmp_path / "volume"
    (vol / "inside" / "deep").mkdir(parents=True)
    (vol / "file").write_text("data")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("host secret")
    os.symlink(str(tmp_path / "outside"), vol / "abs-escape")
    os.symlink("../outside", vol / "rel-escape")
    os.symlink("inside/deep", vol / "good-link")
    os.symlink("/etc", vol / "inside" / "etc")
    return vol


@pytest.mark.parametrize("sub", ["abs-escape", "rel-escape", "rel-escape/secret", "inside/etc", "abs-escape/new"])
def test_escaping_symlinks_are_refused(volume: Path, tmp_path: Path, sub: str) -> None:
    mounter = FakeMounter()
    target = str(tmp_path / "subpaths" / "v" / "c" / "0")
    with pytest.raises(OSError):
        if not os.path.lexists(volume / sub):
            safe_make_dir(sub, str(volume), 0o755)
        bind_subpath(mounter, path=str(volume / sub), volume_path=str(volume), target=target)
    assert mounter.calls == []
    assert not os.path.lexists(tmp_path / "outside" / "new")


def test_symlink_inside_the_volume_is_followed(volume: Path, tmp_path: Path) -> None:
    mounter = FakeMounter()
    target = str(tmp_path / "subpaths" / "v" / "c" / "0")
    assert bind_subpath(mounter, path=str(volume / "good-link"), volume_path=str(volume), target=target) == target
    kind, source, bound = mounter.calls[0]
    assert (kind, bound) == ("bind", target)
    assert source.startswith("/proc/self/fd/")
    assert os.path.isdir(target)
    # Again: already bound to the same directory, nothing new.
    os.rmdir(target)
    os.symlink(str(volume / "inside" / "deep"), target)  # the fake's "mount": the target resolves to the source
    assert bind_subpath(mounter, path=str(volume / "good-link"), volume_path=str(volume), target=target) == target
    assert len(mounter.calls) == 1


def test_file_subpath_gets_a_file_target(volume: Path, tmp_path: Path) -> None:
    mounter = FakeMounter()
    target = str(tmp_path / "t" / "0")
    bind_subpath(mounter, path=str(volume / "file"), volume_path=str(volume), target=target)
    assert os.path.isfile(target)


def test_failed_bind_leaves_no_target(volume: Path, tmp_path: Path) -> None:
    class Failing(FakeMounter):
        def bind(self, source: str, target: str) -> None:
            raise MountError("mount failed: permission denied")

    target = str(tmp_path / "t" / "0")
    with pytest.raises(MountError):
        bind_subpath(Failing(), path=str(volume / "inside"), volume_path=str(volume), target=target)
    assert not os.path.lexists(target)


def test_safe_open_refuses_a_symlink_component(volume: Path) -> None:
    # As if the component were swapped for a symlink after the symlinks were resolved.
    with pytest.raises(OSError, match="unexpected symlink found"):
        safe_open(str(volume / "good-link"), str(volume))
    os.close(safe_open(str(volume / "inside" / "deep"), str(volume)))


def test_safe_make_dir(volume: Path) -> None:
    safe_make_dir("inside/new/newer", str(volume), 0o775)
    made = volume / "inside" / "new" / "newer"
    assert made.is_dir()
    assert made.stat().st_mode & 0o777 == 0o775
    with pytest.raises(OSError):
        safe_make_dir("file/sub", str(volume), 0o755)


def test_clean_subpaths_unmounts_then_removes(tmp_path: Path) -> None:
    mounter = FakeMounter()
    root = tmp_path / "volume-subpaths"
    (root / "v" / "c1").mkdir(parents=True)
    (root / "v" / "c1" / "0").mkdir()
    (root / "v" / "c1" / "1").write_text("")
    mounter.bind("/x", str(root / "v" / "c1" / "0"))
    clean_subpaths(mounter, str(root / "v"))
    assert ("unmount", str(root / "v" / "c1" / "0")) in mounter.calls
    assert not root.exists()


def test_clean_subpaths_keeps_what_will_not_unmount(tmp_path: Path) -> None:
    root = tmp_path / "volume-subpaths"
    target = root / "v" / "c1" / "0"
    target.mkdir(parents=True)
    (target / "user-data").write_text("precious")
    mounter = FakeMounter(fail_unmount={str(target)})
    mounter.bind("/x", str(target))
    with pytest.raises(MountError):
        clean_subpaths(mounter, str(root / "v"))
    assert (target / "user-data").read_text() == "precious"
