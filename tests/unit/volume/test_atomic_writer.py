from __future__ import annotations

import datetime
import errno
import os
import re
from pathlib import Path

import pytest

from nodeagent.volume.atomic_writer import (
    DATA_DIR_NAME,
    AtomicWriter,
    FileProjection,
    paths_to_remove,
    validate_path,
    validate_payload,
)
from nodeagent.volume.errors import PayloadError

NOW = datetime.datetime(2026, 11, 25, 10, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("a", None),
        ("a/b/c", None),
        ("..a", "invalid path: must not start with '..': ..a"),
        ("a..b", None),
        ("a/..b", None),
        ("..", "invalid path: must not contain '..': .."),
        ("a/../b", "invalid path: must not contain '..': a/../b"),
        ("/etc/passwd", "invalid path: must be relative path: /etc/passwd"),
        ("", 'invalid path: must not be empty: ""'),
        ("x" * 256, "invalid path: filenames must be less than or equal to 255 characters"),
        ("a/" * 2049, "invalid path: must be less than or equal to 4096 characters"),
    ],
)
def test_validate_path(path: str, error: str | None) -> None:
    if error is None:
        validate_path(path)
    else:
        with pytest.raises(PayloadError) as caught:
            validate_path(path)
        assert str(caught.value) == error


def test_validate_payload_cleans_paths() -> None:
    clean = validate_payload({"a//b/./c": FileProjection(b"x", 0o644)})
    assert list(clean) == ["a/b/c"]


@pytest.mark.parametrize(
    ("old", "new", "removed"),
    [
        ({"a", "b"}, {"a"}, {"b"}),
        ({"dir", "dir/x", "dir/y"}, {"dir/x"}, {"dir/y"}),
        ({"dir", "dir/x"}, {"other"}, {"dir", "dir/x"}),
        ({"a"}, {"a", "b"}, set()),
    ],
)
def test_paths_to_remove(old: set[str], new: set[str], removed: set[str]) -> None:
    assert paths_to_remove(old, {p: FileProjection(b"", 0o644) for p in new}) == removed


def _read(target: Path, name: str) -> bytes:
    return (target / name).read_bytes()


def _ts_dirs(target: Path) -> list[str]:
    return sorted(n for n in os.listdir(target) if n.startswith("..") and n not in (DATA_DIR_NAME, "..data_tmp"))


def test_first_write_lays_out_upstreams_scheme(tmp_path: Path) -> None:
    writer = AtomicWriter(str(tmp_path), "test", now=lambda: NOW)
    assert writer.write({"key": FileProjection(b"v1", 0o600), "dir/nested": FileProjection(b"n", 0o644)})
    ts = os.readlink(tmp_path / DATA_DIR_NAME)
    assert re.fullmatch(r"\.\.2026_11_25_10_00_00\.\d+", ts)
    assert os.readlink(tmp_path / "key") == "..data/key"
    assert os.readlink(tmp_path / "dir") == "..data/dir"
    assert _read(tmp_path, "key") == b"v1"
    assert _read(tmp_path, "dir/nested") == b"n"
    assert (tmp_path / ts / "key").stat().st_mode & 0o7777 == 0o600
    assert (tmp_path / ts).stat().st_mode & 0o777 == 0o755


def test_update_swaps_and_prunes(tmp_path: Path) -> None:
    writer = AtomicWriter(str(tmp_path), "test", now=lambda: NOW)
    writer.write({"a": FileProjection(b"1", 0o644), "b": FileProjection(b"2", 0o644)})
    first = writer.current()
    assert writer.write({"a": FileProjection(b"changed", 0o644)})
    assert writer.current() != first
    assert _read(tmp_path, "a") == b"changed"
    assert not os.path.lexists(tmp_path / "b")
    assert _ts_dirs(tmp_path) == [writer.current()]


@pytest.mark.parametrize(
    ("second", "changed"),
    [
        ({"a": FileProjection(b"1", 0o644)}, False),
        ({"a": FileProjection(b"1", 0o600)}, False),
        ({"a": FileProjection(b"2", 0o644)}, True),
        ({"a": FileProjection(b"1", 0o644), "b": FileProjection(b"", 0o644)}, True),
        ({}, True),
    ],
)
def test_write_only_when_something_changed(tmp_path: Path, second: dict[str, FileProjection], changed: bool) -> None:
    writer = AtomicWriter(str(tmp_path), "test")
    writer.write({"a": FileProjection(b"1", 0o644)})
    before = writer.current()
    assert writer.write(second) is changed
    assert (writer.current() != before) is changed


def test_failed_write_keeps_old_content(tmp_path: Path) -> None:
    """A full tmpfs or disk while writing: the old version stays, nothing half written is left."""
    AtomicWriter(str(tmp_path), "test").write({"a": FileProjection(b"old", 0o644), "b": FileProjection(b"b", 0o644)})
    before = os.readlink(tmp_path / DATA_DIR_NAME)

    def full(path: str, data: bytes, mode: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    writer = AtomicWriter(str(tmp_path), "test", write_file=full)
    with pytest.raises(OSError, match="No space left"):
        writer.write({"a": FileProjection(b"new", 0o644), "c": FileProjection(b"c", 0o644)})
    assert os.readlink(tmp_path / DATA_DIR_NAME) == before
    assert _read(tmp_path, "a") == b"old"
    assert _read(tmp_path, "b") == b"b"
    assert _ts_dirs(tmp_path) == [before]


def test_failed_write_midway_keeps_old_content(tmp_path: Path) -> None:
    writer = AtomicWriter(str(tmp_path), "test")
    writer.write({"a": FileProjection(b"old", 0o644)})
    before = writer.current()
    # "x" as a file and as a directory: the second cannot be written.
    with pytest.raises(OSError):
        writer.write({"x": FileProjection(b"file", 0o644), "x/y": FileProjection(b"nested", 0o644)})
    assert writer.current() == before
    assert _read(tmp_path, "a") == b"old"
    assert _ts_dirs(tmp_path) == [before]


def test_invalid_payload_writes_nothing(tmp_path: Path) -> None:
    writer = AtomicWriter(str(tmp_path), "test")
    with pytest.raises(PayloadError):
        writer.write({"../escape": FileProjection(b"x", 0o644)})
    assert os.listdir(tmp_path) == []


def test_leftovers_of_an_interrupted_write_are_cleaned(tmp_path: Path) -> None:
    writer = AtomicWriter(str(tmp_path), "test")
    writer.write({"a": FileProjection(b"1", 0o644)})
    (tmp_path / "..2020_01_01_00_00_00.1").mkdir()
    os.symlink("..2020_01_01_00_00_00.1", tmp_path / "..data_tmp")
    writer.write({"a": FileProjection(b"2", 0o644)})
    assert _ts_dirs(tmp_path) == [writer.current()]
    assert not os.path.lexists(tmp_path / "..data_tmp")
    assert _read(tmp_path, "a") == b"2"


def test_old_file_handle_keeps_old_content(tmp_path: Path) -> None:
    """What a subPath bind mount relies on: the old version's inode is untouched by an update."""
    writer = AtomicWriter(str(tmp_path), "test")
    writer.write({"a": FileProjection(b"old", 0o644)})
    with open(tmp_path / "a", "rb") as held:
        writer.write({"a": FileProjection(b"new", 0o644)})
        assert held.read() == b"old"
    assert _read(tmp_path, "a") == b"new"
