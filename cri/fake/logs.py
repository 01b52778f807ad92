"""The fake runtime's container log files, in the CRI log format containerd writes (`<time> <stream> <F|P> <text>`).

As containerd 1.7 (`createContainerLoggers` in its StartContainer): the file is opened at StartContainer, not at
CreateContainer (a created container that never started has no file), its directory made first (`openLogFile`:
MkdirAll 0755, then O_CREATE|O_APPEND|O_WRONLY 0640), and nothing at all is written when the container has no
log path. RemoveContainer leaves the file: it is the kubelet's to remove (upstream removeContainerLog, our container
GC). A file that cannot be opened fails StartContainer; what cannot be written afterwards (a full disk) is lost, as
containerd's logger drops it, and the container runs on.

The fake writes a container's whole output once, at start, in one small write on the loop's default executor: no
thread of its own, no timer, no write later (docs/fleet.md, "Container logs on emulated nodes", measures it).
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)

STDOUT = "stdout"
# containerd's default max_container_log_line_size: a longer line is cut into partial (P) records of this size.
MAX_LINE_BYTES = 16 * 1024
DIR_MODE = 0o755
FILE_MODE = 0o640


def timestamp(now_ns: int) -> str:
    """Go's RFC3339Nano in UTC, as containerd stamps each record on a UTC host: nanoseconds with their trailing zeros
    dropped (no fraction at all when it is zero)."""
    seconds, nanos = divmod(now_ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"


def records(text: str, now_ns: int, stream: str = STDOUT) -> bytes:
    """`text` as a stream's records: each full line one `F` record; a line longer than MAX_LINE_BYTES as `P` records
    of that size and an `F` with its rest; a last line without its newline (`echo -n`) as a `P` record, as
    containerd writes what a process left unterminated when its stream closed."""
    if not text:
        return b""
    prefix = f"{timestamp(now_ns)} {stream} ".encode()
    lines = text.encode().split(b"\n")
    last = lines.pop()  # b"" when the text ends with a newline
    out = bytearray()
    for line in lines:
        rest = line
        while len(rest) > MAX_LINE_BYTES:
            out += prefix + b"P " + rest[:MAX_LINE_BYTES] + b"\n"
            rest = rest[MAX_LINE_BYTES:]
        out += prefix + b"F " + rest + b"\n"
    while last:
        out += prefix + b"P " + last[:MAX_LINE_BYTES] + b"\n"
        last = last[MAX_LINE_BYTES:]
    return bytes(out)


def open_log(path: str) -> int:
    """containerd's openLogFile: the directory made, the file opened for appending (created 0640). OSError when
    either fails."""
    os.makedirs(os.path.dirname(path), mode=DIR_MODE, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)


def write_log(path: str, data: bytes, *, container_id: str) -> None:
    """Opens the container's log (OSError when it cannot: the start fails) and writes `data`; a write that fails is
    logged and dropped."""
    fd = open_log(path)
    try:
        if data:
            try:
                os.write(fd, data)
            except OSError as exc:
                log.warning(
                    "fake container log write failed id=%s path=%s bytes=%d error=%s",
                    container_id[:12],
                    path,
                    len(data),
                    exc.strerror or exc,
                )
    finally:
        os.close(fd)
