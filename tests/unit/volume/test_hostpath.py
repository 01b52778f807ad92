from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.volume.errors import SetUpError
from nodeagent.volume.hostpath import HostPathPlugin, check_type, validate_no_backsteps


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    os.symlink("dir", tmp_path / "link-to-dir")
    os.symlink("missing", tmp_path / "dangling")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "sock"))
    try:
        yield tmp_path
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("name", "path_type", "error"),
    [
        ("dir", "", None),
        ("missing", "", None),
        ("dir", "Directory", None),
        ("link-to-dir", "Directory", None),
        ("file", "Directory", "hostPath type check failed: {p} is not a directory"),
        ("missing", "Directory", "hostPath type check failed: {p} is not a directory"),
        ("dangling", "Directory", "hostPath type check failed: {p} is not a directory"),
        ("file", "File", None),
        ("dir", "File", "hostPath type check failed: {p} is not a file"),
        ("sock", "Socket", None),
        ("file", "Socket", "hostPath type check failed: {p} is not a socket file"),
        ("file", "CharDevice", "hostPath type check failed: {p} is not a character device"),
        ("dir", "BlockDevice", "hostPath type check failed: {p} is not a block device"),
        ("file", "DirectoryOrCreate", "hostPath type check failed: {p} is not a directory"),
        ("dir", "FileOrCreate", "hostPath type check failed: {p} is not a file"),
        ("dir", "Weird", "Weird is an invalid volume type"),
    ],
)
def test_check_type(tree: Path, name: str, path_type: str, error: str | None) -> None:
    path = str(tree / name)
    if error is None:
        check_type(path, path_type)
    else:
        with pytest.raises(SetUpError) as caught:
            check_type(path, path_type)
        assert str(caught.value) == error.format(p=path)


def test_char_device() -> None:
    check_type("/dev/null", "CharDevice")


def test_directory_or_create_makes_0755(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    old = os.umask(0)
    try:
        check_type(str(target), "DirectoryOrCreate")
    finally:
        os.umask(old)
    assert target.is_dir()
    assert target.stat().st_mode & 0o777 == 0o755


def test_file_or_create_makes_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    check_type(str(target), "FileOrCreate")
    assert target.is_file()
    assert target.read_bytes() == b""


def test_file_or_create_needs_the_parent(tmp_path: Path) -> None:
    target = tmp_path / "no" / "f"
    with pytest.raises(SetUpError) as caught:
        check_type(str(target), "FileOrCreate")
    assert str(caught.value) == f"open {target}: no such file or directory"


@pytest.mark.parametrize(("path", "ok"), [("/var/log", True), ("/var/../etc", False), ("/a/..b", True)])
def test_backsteps(path: str, ok: bool) -> None:
    if ok:
        validate_no_backsteps(path)
    else:
        with pytest.raises(SetUpError, match=r"must not contain '\.\.'"):
            validate_no_backsteps(path)


async def test_plugin_returns_the_path_and_checks(tree: Path) -> None:
    plugin = HostPathPlugin()
    volume = {"name": "h", "hostPath": {"path": str(tree / "dir"), "type": "Directory"}}
    assert await plugin.set_up({}, volume) == str(tree / "dir")
    bad = {"name": "h", "hostPath": {"path": str(tree / "file"), "type": "Directory"}}
    with pytest.raises(SetUpError, match="is not a directory"):
        await plugin.set_up({}, bad)
