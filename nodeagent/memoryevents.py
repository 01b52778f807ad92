"""The memory.events notifier (cgroup v2): an inotify watch on the pods cgroup's memory.events wakes the eviction
manager when its high/max/oom/oom_kill counters grow (the arithmetic, and why upstream has none: eviction.memoryevents).

The kernel reports a change of memory.events as a file-modified event: inotify IN_MODIFY (kernfs_notify), which
works on cgroupfs as on any file, so the unit tests drive it with real files. The watch's fd is read by the running
event loop (`add_reader`): no thread, no polling.

The care PSI taught (nodeagent.memorynotifier): a PSI event is consumed by the poll that reports it, so the wake-up
itself had to be the notification. Here the inotify queue holds the events until read and the counters stay in the
file, so the wake-up is only a cue: the watch's queue is drained (all of it, so the fd stops being readable; the
kernel coalesces repeated events anyway) and the counters are read and compared with the ones last reported. The
baseline is read after the watch is in place, so a change between the two is either in the baseline or seen.

Armed at the manager's first update (like the PSI notifiers), once: memory.events has no threshold to move. If the
cgroup goes away (the watch reports IN_IGNORED), the notifier disarms and the next update arms it again.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from eviction.memoryevents import HOLDOFF_SECONDS, MEMORY_EVENTS_FILE, moved, notification, parse_memory_events
from eviction.notify import notified_thresholds
from eviction.thresholds import Threshold
from nodeagent.memorynotifier import NotifierError, ThresholdNotifier
from nodeagent.stats.cgroups import CGROUP_ROOT
from nodeagent.stats.provider import kubepods_cgroup
from nodeagent.stats.types import Summary

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_IGNORED = 0x00008000
_HEADER = struct.Struct("iIII")
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class ModifyWatch(Protocol):
    """A watch on one file whose fd is readable after the file was modified."""

    def fileno(self) -> int: ...

    def drain(self) -> bool:
        """Reads every queued event; False once the watched file is gone (its watch removed)."""
        ...

    def close(self) -> None: ...


class InotifyModifyWatch:
    """inotify (libc through ctypes) watching one file for IN_MODIFY."""

    def __init__(self, path: str) -> None:
        fd: int = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        if _libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY) < 0:
            code = ctypes.get_errno()
            os.close(fd)
            raise OSError(code, f"watch {path}: {os.strerror(code)}")
        self._fd: int = fd

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> bool:
        alive = True
        while True:
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                return alive
            except InterruptedError:
                continue
            offset = 0
            while offset + _HEADER.size <= len(data):
                _wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                offset += _HEADER.size + length
                if mask & IN_IGNORED:
                    alive = False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _read_text(path: str) -> str:
    return Path(path).read_text()


class MemoryEventsNotifier:
    """One cgroup's memory.events; a ThresholdNotifier for the eviction manager (start, update, stop)."""

    def __init__(
        self,
        path: str,
        *,
        cgroup: str = "pods",
        holdoff: float = HOLDOFF_SECONDS,
        watch: Callable[[str], ModifyWatch] = InotifyModifyWatch,
        read: Callable[[str], str] = _read_text,
    ) -> None:
        self.path = path
        self.cgroup = cgroup
        self.description = f"memory.events of the {cgroup} cgroup"
        self._holdoff = holdoff
        self._watch_factory = watch
        self._read = read
        self._handler: Callable[[str], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch: ModifyWatch | None = None
        self._reported: dict[str, int] = {}
        self._last_report: float | None = None
        self._held: asyncio.TimerHandle | None = None

    def start(self, handler: Callable[[str], None]) -> None:
        self._handler = handler
        log.info("eviction manager created memory events notifier notifier=%s path=%s", self.description, self.path)

    def update(self, summary: Summary, allocatable_memory: int | None) -> None:
        del summary, allocatable_memory
        if self._watch is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            watch = self._watch_factory(self.path)
        except OSError as e:
            raise NotifierError(f"watch {self.path}: {e.strerror}") from e
        try:
            # After the watch exists: a change from here on is either in this baseline or reported by the watch.
            self._reported = parse_memory_events(self._read(self.path))
        except OSError as e:
            watch.close()
            raise NotifierError(f"read {self.path}: {e.strerror}") from e
        self._loop, self._watch = loop, watch
        loop.add_reader(watch.fileno(), self._readable)
        log.info("eviction manager armed memory events notifier path=%s counters=%s", self.path, self._reported)

    def _readable(self) -> None:
        watch = self._watch
        if watch is None:
            return
        if not watch.drain():
            log.warning("eviction manager memory events file gone, re-armed at the next update path=%s", self.path)
            self._disarm()
            return
        if self._held is not None:
            return  # a report is due at the end of the hold-off; it reads the counters then
        loop = self._loop
        assert loop is not None
        wait = 0.0 if self._last_report is None else self._last_report + self._holdoff - loop.time()
        if wait > 0:
            self._held = loop.call_later(wait, self._report)
        else:
            self._report()

    def _report(self) -> None:
        self._held = None
        try:
            counters = parse_memory_events(self._read(self.path))
        except OSError as e:
            log.warning("eviction manager memory events unreadable path=%s error=%s", self.path, e.strerror)
            return
        grown = moved(self._reported, counters)
        self._reported = counters
        if not grown:
            return  # only `low` moved, or a change already counted
        if self._loop is not None:
            self._last_report = self._loop.time()
        if self._handler is not None:
            self._handler(notification(self.cgroup, grown))

    def _disarm(self) -> None:
        if self._held is not None:
            self._held.cancel()
            self._held = None
        if self._watch is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._watch.fileno())
            self._watch.close()
            self._watch = None

    def stop(self) -> None:
        self._disarm()


def memory_events_notifiers(
    thresholds: Sequence[Threshold],
    *,
    cgroup_root: str = "/",
    cgroup_driver: str = "cgroupfs",
    mount: Path = CGROUP_ROOT,
) -> list[ThresholdNotifier]:
    """On cgroup v2 with a memory threshold notified (as memorynotifier.memory_notifiers decides): the pods cgroup's
    memory.events, as the root cgroup has none and the pods cgroup's counts the events of every pod below it. None
    on v1 (memory.events is v2's)."""
    if not notified_thresholds(thresholds) or not (mount / "cgroup.controllers").exists():
        return []
    relative = kubepods_cgroup(cgroup_root, cgroup_driver).strip("/")
    return [MemoryEventsNotifier(os.path.join(str(mount), relative, MEMORY_EVENTS_FILE))]


__all__ = ["InotifyModifyWatch", "MemoryEventsNotifier", "ModifyWatch", "memory_events_notifiers"]
