"""A full file system during a write, for real: the atomic writer on a tiny tmpfs that the test mounts (64 KiB, or
a handful of inodes), and an update that does not fit. The old version must stay whole and visible, the failed
one must leave nothing behind (its space is given back), and the next update that fits must go through.

The writer's other tests fake the failure (an injected write_file); these let the kernel refuse the blocks or the
inodes, and go through the same path the configMap, secret and projected plugins take (`projection._write` on a
LinuxMounter, which sees the tmpfs already mounted and leaves it be).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.volume.atomic_writer import DATA_DIR_NAME, NEW_DATA_DIR_NAME, AtomicWriter, FileProjection
from nodeagent.volume.fsutil import os_error_text
from nodeagent.volume.mounter import LinuxMounter, mount_at
from nodeagent.volume.projection import _write

KIB = 1024


def _mount(target: Path, options: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], check=True, capture_output=True)


def _unmount(target: Path) -> None:
    subprocess.run(["umount", str(target)], check=False, capture_output=True)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A tmpfs with the options the test is parametrised with (`size=64k` by default), unmounted afterwards even
    when the test fails."""
    options = getattr(request, "param", "size=64k")
    target = tmp_path / "vol"
    target.mkdir()
    _mount(target, options)
    try:
        assert mount_at(LinuxMounter().mounts(), os.path.realpath(target)) is not None
        yield target
    finally:
        _unmount(target)


def _read_all(target: Path) -> dict[str, bytes]:
    """What a container sees: the user-visible names, through the `..data` symlink."""
    out: dict[str, bytes] = {}
    for name in sorted(os.listdir(target)):
        if name.startswith(".."):
            continue
        for dirpath, _, files in os.walk(target / name, followlinks=True):
            for file in files:
                full = Path(dirpath) / file
                out[str(full.relative_to(target))] = full.read_bytes()
        if (target / name).is_file():
            out[name] = (target / name).read_bytes()
    return out


def _versions(target: Path) -> list[str]:
    return sorted(n for n in os.listdir(target) if n.startswith("..") and n not in (DATA_DIR_NAME, NEW_DATA_DIR_NAME))


def _free(target: Path) -> tuple[int, int]:
    st = os.statvfs(target)
    return st.f_bfree, st.f_ffree


def _payload(files: dict[str, bytes]) -> dict[str, FileProjection]:
    return {path: FileProjection(data, 0o644) for path, data in files.items()}


OLD = {"app.conf": b"port=80\n", "nested/key": b"old"}


@pytest.mark.parametrize(
    ("tiny_tmpfs", "too_big", "fits"),
    [
        # Blocks run out: one file larger than what is left beside the old version.
        ("size=64k", {"app.conf": b"x" * (80 * KIB), "nested/key": b"new"}, {"app.conf": b"port=81\n"}),
        # Blocks run out halfway: the first files fit, a later one does not.
        (
            "size=64k",
            {f"part-{i}": b"y" * (12 * KIB) for i in range(8)},
            {"app.conf": b"port=82\n", "nested/key": b"new"},
        ),
        # Inodes run out: a few more files than the file system can hold (the directory, the old version's files,
        # links and directories take the rest).
        (
            "size=1m,nr_inodes=16",
            {f"many-{i}": b"z" for i in range(12)},
            {"app.conf": b"port=83\n", "one-more": b"1"},
        ),
    ],
    indirect=["tiny_tmpfs"],
    ids=["one-large-file", "full-halfway", "out-of-inodes"],
)
def test_a_write_that_does_not_fit_keeps_the_old_version(
    tiny_tmpfs: Path, too_big: dict[str, bytes], fits: dict[str, bytes]
) -> None:
    writer = AtomicWriter(str(tiny_tmpfs), "test")
    assert writer.write(_payload(OLD)) is True
    before_link = os.readlink(tiny_tmpfs / DATA_DIR_NAME)
    before_versions = _versions(tiny_tmpfs)
    before_free = _free(tiny_tmpfs)

    with pytest.raises(OSError) as caught:
        writer.write(_payload(too_big))
    assert caught.value.errno == errno.ENOSPC
    # The message names the file, as upstream's (Go's *PathError) does.
    text = os_error_text(caught.value, "write")
    assert text.endswith(": no space left on device") and f"{tiny_tmpfs}/.." in text, text

    # The old version is untouched and whole: same `..data` target, same files, same content; the half-written
    # version is gone, and so is the space it took.
    assert os.readlink(tiny_tmpfs / DATA_DIR_NAME) == before_link
    assert _versions(tiny_tmpfs) == before_versions
    assert not os.path.lexists(tiny_tmpfs / NEW_DATA_DIR_NAME)
    assert _read_all(tiny_tmpfs) == OLD
    assert _free(tiny_tmpfs) == before_free

    # An update that fits still goes through afterwards.
    assert writer.write(_payload(fits)) is True
    assert _read_all(tiny_tmpfs) == fits
    assert len(_versions(tiny_tmpfs)) == 1


def test_the_plugins_write_path_on_a_full_tmpfs(tiny_tmpfs: Path) -> None:
    """`projection._write`, what configMap, secret and projected volumes call: the tmpfs is already mounted, so the
    set up leaves it be, and a refresh that does not fit raises with the old content in place and nothing torn
    down (only a first set up that fails removes what it made)."""
    mounter = LinuxMounter()
    path = os.path.realpath(tiny_tmpfs)

    def write(files: dict[str, bytes]) -> None:
        _write(mounter, path, _payload(files), memory=True, size=64 * KIB, ctx="test", fs_group=None)

    write(OLD)
    mounted = [m for m in mounter.mounts() if m.mount_point == path]
    with pytest.raises(OSError) as caught:
        write({"app.conf": b"x" * (96 * KIB)})
    assert caught.value.errno == errno.ENOSPC
    assert _read_all(tiny_tmpfs) == OLD
    # Still the one tmpfs, still mounted: a failed refresh neither unmounts nor mounts again.
    assert [m for m in mounter.mounts() if m.mount_point == path] == mounted
