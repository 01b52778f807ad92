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

The node's own log directory (/logs/) is served as Go's http.FileServer serves it for upstream: a file, or a
directory's HTML listing with every name escaped; a path that leaves the directory or names nothing is a 404.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

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
                if options.follow and len(chunk) < READ_CHUNK:
                    # That was the end of what the runtime had written: the next read would find nothing (and look
                    # for a rotation) before sleeping. A follower of a chatty container went through that empty
                    # read, two stats and its own wake-up for every write (issue 34: 100 followers, a fifth of the
                    # event loop); now it sleeps a poll at once and reads what came meanwhile.
                    await asyncio.sleep(poll)
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


# --- the node's log directory (/logs/) ---------------------------------------------------------------------------

# As Go's http.FileServer (upstream serves /logs/ with it): in the HTML text, html.EscapeString's five characters,
# with Go's short forms; links are URL-escaped as url.URL{Path: name}.String() writes them.
_HTML_ESCAPES = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", ord('"'): "&#34;", ord("'"): "&#39;"}
_PATH_SAFE = b"$&+,/:;=@"  # besides letters, digits and -._~: what Go leaves unescaped in a URL path


def go_html_escape(text: bytes) -> bytes:
    """Go's htmlReplacer (the file server's): & < > " ' replaced, every other byte kept as it is."""
    return text.decode("latin-1").translate(_HTML_ESCAPES).encode("latin-1")


def go_path_href(name: bytes) -> bytes:
    """Go's url.URL{Path: name}.String() for a relative name: every byte outside the path's safe set %-escaped
    (uppercase hex), and "./" in front when a colon would otherwise read as a URL scheme."""
    out = bytearray()
    for byte in name:
        char = bytes((byte,))
        if (byte < 0x80 and char.isalnum()) or char in b"-._~" or char in _PATH_SAFE:
            out += char
        else:
            out += b"%%%02X" % byte
    if b":" in name.split(b"/", 1)[0]:
        return b"./" + bytes(out)
    return bytes(out)


def directory_listing(entries: list[tuple[bytes, bool]]) -> bytes:
    """The HTML page Go's file server writes for a directory: `entries` are (file name, is a directory), sorted by
    name as bytes; a directory's name ends in "/"; each link is URL-escaped and its text HTML-escaped, so a file
    name (which any pod with a hostPath on the log directory can choose) never becomes markup."""
    lines = [b"<!doctype html>\n", b'<meta name="viewport" content="width=device-width">\n', b"<pre>\n"]
    for name, is_dir in sorted(entries):
        shown = name + b"/" if is_dir else name
        lines.append(b'<a href="' + go_path_href(shown) + b'">' + go_html_escape(shown) + b"</a>\n")
    lines.append(b"</pre>\n")
    return b"".join(lines)


class NodeLogNotFound(Exception):
    """The path names nothing under the log directory, or would leave it (404)."""


def node_log_target(root: str, rest: str) -> tuple[Path, bytes | None]:
    """The file under `root` that `rest` (the decoded URL path after /logs) names, with the directory's listing when
    it is one. NodeLogNotFound when it is missing, is neither a file nor a directory, or would lead out of `root`
    (through `..` or a symlink); a path the OS cannot even look up (an embedded NUL) is missing too, as upstream's
    404. Other OS errors (a name too long) propagate: Go's file server answers those with 500."""
    base = Path(root).resolve()
    try:
        target = (base / rest.lstrip("/")).resolve()
    except ValueError as exc:  # "embedded null byte"
        raise NodeLogNotFound(rest) from exc
    if target != base and base not in target.parents:
        raise NodeLogNotFound(rest)
    try:
        mode = target.stat().st_mode
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise NodeLogNotFound(rest) from exc
    if stat.S_ISDIR(mode):
        entries = []
        with os.scandir(os.fsencode(target)) as found:
            for entry in found:
                entries.append((entry.name, entry.is_dir(follow_symlinks=False)))  # as Go's DirEntry.IsDir
        return target, directory_listing(entries)
    if not stat.S_ISREG(mode):
        raise NodeLogNotFound(rest)
    return target, None
