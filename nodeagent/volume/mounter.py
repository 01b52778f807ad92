"""Mounts: reading /proc/self/mountinfo, and mount(2)/umount(2) through libc (no `mount` binary per call).

`Mounter` is the seam: `LinuxMounter` is the real one; unit tests use a fake that records calls. Every call is
blocking and short; callers that may hit a slow unmount run it in a thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from nodeagent.volume.errors import MountError

MOUNTINFO = "/proc/self/mountinfo"
MS_BIND = 4096


@dataclass(frozen=True)
class MountInfo:
    mount_point: str
    fstype: str
    source: str
    root: str = "/"


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # The kernel escapes space, tab, newline and backslash in octal (\040 ...). Most fields have none: the table is
    # read on every set up of a memory volume, and a character loop over a few hundred lines costs milliseconds.
    if "\\" not in field:
        return field
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountInfo]:
    """`36 35 98:0 /root /mnt/point rw,noatime master:1 - ext3 /dev/root rw` → MountInfo per line, in order."""
    mounts = []
    for line in text.splitlines():
        # Optional fields (shared:N, master:N ...) sit between field 6 and the lone "-"; no field holds a raw space
        # (the kernel escapes it), so " - " is that separator.
        head, sep, tail = line.partition(" - ")
        fields, fs = head.split(), tail.split()
        if not sep or len(fields) < 6 or len(fs) < 2:
            continue
        mounts.append(MountInfo(_unescape(fields[4]), fs[0], _unescape(fs[1]), _unescape(fields[3])))
    return mounts


def mount_at(mounts: Iterable[MountInfo], path: str) -> MountInfo | None:
    """The mount on top at `path` (the last one listed wins, as stacked mounts are listed in order)."""
    path = posixpath.normpath(path)
    found = None
    for m in mounts:
        if m.mount_point == path:
            found = m
    return found


def mounts_under(mounts: Iterable[MountInfo], path: str) -> list[MountInfo]:
    """Mounts at or below `path`, deepest (and latest) first: the order to unmount them in."""
    path = posixpath.normpath(path)
    prefix = path.rstrip("/") + "/"
    found = [(i, m) for i, m in enumerate(mounts) if m.mount_point == path or m.mount_point.startswith(prefix)]
    found.sort(key=lambda im: (-im[1].mount_point.count("/"), -im[0]))
    return [m for _, m in found]


class Mounter(Protocol):
    def mounts(self) -> list[MountInfo]: ...

    def mount_tmpfs(self, target: str, options: Sequence[str]) -> None: ...

    def bind(self, source: str, target: str) -> None: ...

    def unmount(self, target: str) -> None: ...


class DirectoryMounter:
    """A mounter that mounts nothing, for emulated nodes (`nodeagent fleet`): a tmpfs volume is a plain directory,
    binds and unmounts do nothing, and the mount table is empty, so a thousand nodes in one process leave no mount
    behind on the host whatever way they stop."""

    def mounts(self) -> list[MountInfo]:
        return []

    def mount_tmpfs(self, target: str, options: Sequence[str]) -> None:
        del target, options

    def bind(self, source: str, target: str) -> None:
        del source, target

    def unmount(self, target: str) -> None:
        del target


class LinuxMounter:
    def __init__(self, mountinfo: str = MOUNTINFO) -> None:
        self._mountinfo = mountinfo
        self._libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self._libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self._libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def mounts(self) -> list[MountInfo]:
        with open(self._mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            return parse_mountinfo(f.read())

    def _mount(self, source: str, target: str, *, fstype: str | None, flags: int, data: str | None, what: str) -> None:
        result = self._libc.mount(
            os.fsencode(source),
            os.fsencode(target),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        )
        if result != 0:
            errno = ctypes.get_errno()
            raise MountError(f"mount failed: {os.strerror(errno).lower()}\nMounting arguments: {what}")

    def mount_tmpfs(self, target: str, options: Sequence[str]) -> None:
        opts = ",".join(options)
        what = f"-t tmpfs {'-o ' + opts + ' ' if opts else ''}tmpfs {target}"
        self._mount("tmpfs", target, fstype="tmpfs", flags=0, data=opts or None, what=what)

    def bind(self, source: str, target: str) -> None:
        self._mount(
            source, target, fstype=None, flags=MS_BIND, data=None, what=f"--no-canonicalize -o bind {source} {target}"
        )

    def unmount(self, target: str) -> None:
        if self._libc.umount2(os.fsencode(target), 0) != 0:
            errno = ctypes.get_errno()
            raise MountError(f"unmount failed: {os.strerror(errno).lower()}\nUnmounting arguments: {target}")
