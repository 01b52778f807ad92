"""A minimal inotify watch of a directory tree, on the event loop (libc through ctypes).

Why not watchfiles, which the static pod source uses: its watch starts in a thread and says nothing once it is in
place, so a socket created right after the start could be seen only by the next periodic scan. Here, as upstream's
fsnotify, `add` returns once the kernel watch exists, so a scan made after it misses nothing. Only what the plugin
watcher needs: names created or moved in (new sockets, new subdirectories) and names removed or moved out.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import os
import struct
from collections.abc import Callable

IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

WATCH_MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
_HEADER = struct.Struct("iIII")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class InotifyError(OSError):
    pass


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise InotifyError(code, f"{what}: {os.strerror(code)}")
    return result


class Inotify:
    """One inotify instance; `on_event(path, mask)` runs on the loop for every event (paths are absolute)."""

    def __init__(self, on_event: Callable[[str, int], None]) -> None:
        self._on_event = on_event
        self._fd = _check(_libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        self._paths: dict[int, str] = {}
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._fd, self._read)

    def add(self, directory: str) -> None:
        wd = _check(_libc.inotify_add_watch(self._fd, os.fsencode(directory), WATCH_MASK), f"watch {directory}")
        self._paths[wd] = directory

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _read(self) -> None:
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return
            raise
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size : offset + _HEADER.size + length].rstrip(b"\0")
            offset += _HEADER.size + length
            directory = self._paths.get(wd, "")
            if mask & IN_IGNORED:
                self._paths.pop(wd, None)
            path = os.path.join(directory, os.fsdecode(raw)) if raw else directory
            self._on_event(path, mask)
