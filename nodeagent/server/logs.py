"""Container logs as the kubelet serves them (upstream pkg/kubelet/kuberuntime/logs): the CRI log files read, filtered
and followed.

A CRI log file holds one record per line: `<RFC3339Nano time> <stdout|stderr> <P|F> <content>`. `F` ends a line;
`P` is a part of a longer line whose next record continues it, so parts are joined by writing them one after the
other, with the timestamp (when asked for) only before the first part. As upstream:

- `tailLines` counts newlines back from the end of the file in blocks, so a 2 GB file with tailLines=10 reads a few
  KiB (upstream's tail.FindTailLineStartIndex; each record counts as a line);
- `sinceTime`/`sinceSeconds` skip records older than the time; `limitBytes` cuts the output at that many bytes;
- `follow` waits for more records; when the file is rotated (renamed, a new one created at the same path) the rest of
  the old file is read and then the new one; once the container is no longer running and the file has nothing new,
  the stream ends;
- a line that does not parse is skipped with a log line.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

BLOCK = 4096
READ_CHUNK = 256 * 1024
# How often a follower with nothing new looks at the file and the container (upstream: stateCheckPeriod 5 s for
# the container; fsnotify for the file — polling at 0.2 s keeps `logs -f` close to live without inotify).
POLL_SECONDS = 0.2
STATE_CHECK_SECONDS = 1.0

STDOUT = "stdout"
STDERR = "stderr"


class LogFormatError(ValueError):
    """A line that is not a CRI log record."""


@dataclass(frozen=True)
class LogOptions:
    """Upstream's podLogOptions after defaulting: tail -1 = all, limit -1 = no limit."""

    tail: int = -1
    limit_bytes: int = -1
    since: datetime.datetime | None = None
    follow: bool = False
    timestamps: bool = False
    streams: frozenset[str] = frozenset({STDOUT, STDERR})


@dataclass(frozen=True)
class LogRecord:
    raw_time: bytes
    stream: str
    partial: bool
    content: bytes

    @property
    def timestamp(self) -> datetime.datetime:
        """Parsed on demand: only `since` needs it, and parsing every line would cost more than the copy."""
        return parse_cri_time(self.raw_time.decode("ascii", "replace"))


def parse_cri_time(text: str) -> datetime.datetime:
    """RFC3339 with up to nine fractional digits (Python's parser takes six)."""
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    main, sep, rest = text.partition(".")
    if sep:
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        text = f"{main}.{(digits + '000000')[:6]}{rest}"
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise LogFormatError(f"unexpected timestamp {text!r}") from exc
    if moment.tzinfo is None:
        raise LogFormatError(f"timestamp without zone {text!r}")
    return moment


def _looks_like_time(stamp: bytes) -> bool:
    """A cheap shape check of an RFC3339 timestamp (2006-01-02T15:04:05[.frac](Z|±hh:mm))."""
    return (
        len(stamp) >= 20
        and stamp[4:5] == b"-"
        and stamp[10:11] == b"T"
        and stamp[13:14] == b":"
        and stamp[:4].isdigit()
        and (stamp.endswith(b"Z") or stamp[-6:-5] in (b"+", b"-"))
    )


def parse_record(line: bytes) -> LogRecord:
    """One line (without its newline) of a CRI log file."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        raise LogFormatError(f"unexpected log line {line[:80]!r}")
    stamp, stream, tag = parts[0], parts[1].decode("ascii", "replace"), parts[2]
    if stream not in (STDOUT, STDERR):
        raise LogFormatError(f"unexpected stream type {stream!r}")
    if not _looks_like_time(stamp):
        raise LogFormatError(f"unexpected timestamp {stamp[:40]!r}")
    content = parts[3] if len(parts) == 4 else b""
    return LogRecord(stamp, stream, tag == b"P", content)


def format_go_rfc3339nano(text_time: bytes) -> bytes:
    """The record's own timestamp as Go's RFC3339Nano prints it: trailing zeros of the fraction dropped."""
    text = text_time.decode("ascii", "replace")
    main, sep, rest = text.partition(".")
    if not sep:
        return text_time
    digits = ""
    while rest and rest[0].isdigit():
        digits, rest = digits + rest[0], rest[1:]
    digits = digits.rstrip("0")
    return f"{main}{'.' + digits if digits else ''}{rest}".encode()


def tail_start(fd: int, size: int, lines: int) -> int:
    """The offset of the first of the last `lines` lines, reading blocks back from the end (a trailing newline at
    the end of the file ends the last line, it does not start an empty one)."""
    if lines < 0:
        return 0
    if lines == 0:
        return size
    count = 0
    end = size
    # A file that ends in a newline: that newline belongs to the last line.
    first = True
    while end > 0:
        start = max(0, end - BLOCK)
        block = os.pread(fd, end - start, start)
        index = len(block)
        if first:
            first = False
            if block.endswith(b"\n"):
                index -= 1
        while True:
            index = block.rfind(b"\n", 0, index)
            if index < 0:
                break
            count += 1
            if count == lines:
                return start + index + 1
        end = start
    return 0


class LogWriter:
    """Turns records into what the client sees: parts joined, the timestamp before a line's first part, the byte
    limit enforced (`done` turns true once it is reached). Output collects in a buffer that `flush` hands to `emit`
    in one piece: one write per read of the file, not one per line."""

    def __init__(self, emit: Callable[[bytes], Awaitable[None]], options: LogOptions) -> None:
        self._emit = emit
        self._options = options
        self._remaining = options.limit_bytes
        self._in_line: dict[str, bool] = {}
        self._buffer = bytearray()
        self.done = False

    def write(self, record: LogRecord) -> None:
        if self.done or record.stream not in self._options.streams:
            return
        if self._options.since is not None and record.timestamp < self._options.since:
            return
        out = record.content if record.partial else record.content + b"\n"
        if self._options.timestamps and not self._in_line.get(record.stream):
            out = format_go_rfc3339nano(record.raw_time) + b" " + out
        self._in_line[record.stream] = record.partial
        if self._remaining >= 0:
            if len(out) >= self._remaining:
                out = out[: self._remaining]
                self.done = True
            self._remaining -= len(out)
        self._buffer += out

    @property
    def plain(self) -> bool:
        """Records go out as their bare content: no time filter, no timestamps, both streams."""
        options = self._options
        return options.since is None and not options.timestamps and options.streams == {STDOUT, STDERR}

    def write_plain(self, out: bytes) -> None:
        """Content already stripped of the record prefixes (only while `plain`)."""
        if self.done:
            return
        if self._remaining >= 0:
            if len(out) >= self._remaining:
                out = out[: self._remaining]
                self.done = True
            self._remaining -= len(out)
        self._buffer += out

    async def flush(self) -> None:
        if self._buffer:
            data, self._buffer = bytes(self._buffer), bytearray()
            await self._emit(data)


async def read_logs(
    path: str,
    options: LogOptions,
    emit: Callable[[bytes], Awaitable[None]],
    *,
    running: Callable[[], Awaitable[bool]] | None = None,
    poll: float = POLL_SECONDS,
    state_check: float = STATE_CHECK_SECONDS,
) -> None:
    """Write the log at `path` to `emit` as upstream's ReadLogs does. `running` tells a follower whether the
    container still runs (once it does not and the file has nothing new, following ends)."""
    writer = LogWriter(emit, options)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        offset = tail_start(fd, size, options.tail) if options.tail >= 0 else 0
        pending = b""
        idle = 0.0
        while True:
            chunk = os.pread(fd, READ_CHUNK, offset)
            if chunk:
                idle = 0.0
                offset += len(chunk)
                pending += chunk
                body, newline, pending = pending.rpartition(b"\n")
                if newline:
                    _write_block(writer, body + newline, path)
                await writer.flush()
                if writer.done:
                    return
                continue
            if not options.follow:
                if pending:
                    _write_line(writer, pending, path)
                    await writer.flush()
                return
            # Rotation: a new file at the path. The runtime may still be writing its last lines into the old one
            # (it reopens right after the rename): wait a poll, read the old file to its end, then switch.
            if _replaced(fd, path):
                await asyncio.sleep(poll)
                if os.pread(fd, 1, offset):
                    continue
                try:
                    new_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                os.close(fd)
                fd, offset = new_fd, 0
                continue
            await asyncio.sleep(poll)
            idle += poll
            if idle >= state_check:
                idle = 0.0
                if running is not None and not await running():
                    # One last look: what the container wrote right before it exited.
                    rest = os.pread(fd, READ_CHUNK, offset)
                    if not rest:
                        if pending:
                            _write_line(writer, pending, path)
                            await writer.flush()
                        return
    finally:
        os.close(fd)


def _write_block(writer: LogWriter, block: bytes, path: str) -> None:
    """Whole lines (`block` ends with a newline). Without a filter or prefix to apply, when every line is a full
    (F) record, the contents go out in one join (the common case, and the fast one: a few C-level passes instead of a
    Python loop per record); otherwise line by line (partial lines joined, bad lines skipped and logged)."""
    lines = block.split(b"\n")
    lines.pop()
    if writer.plain:
        parts = [line.split(b" ", 3) for line in lines]
        if all(
            len(p) == 4 and p[2] == b"F" and (p[1] == b"stdout" or p[1] == b"stderr") and p[0][10:11] == b"T"
            for p in parts
        ):
            writer.write_plain(b"\n".join([p[3] for p in parts]) + b"\n")
            return
    for line in lines:
        _write_line(writer, line, path)
        if writer.done:
            return


def _write_line(writer: LogWriter, line: bytes, path: str) -> None:
    try:
        record = parse_record(line)
    except LogFormatError as exc:
        log.warning("container log line skipped path=%s error=%s", path, exc)
        return
    writer.write(record)


def _replaced(fd: int, path: str) -> bool:
    """Whether `path` now names another file than `fd` (after a rotation)."""
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino)
