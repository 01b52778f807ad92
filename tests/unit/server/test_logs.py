"""CRI log reading: parsing, tail from the end, the writer's joins and limits, following across rotation."""

from __future__ import annotations

import asyncio
import datetime
import os
from pathlib import Path

import pytest

from nodeagent.server import logs
from nodeagent.server.logs import LogOptions, read_logs

UTC = datetime.UTC


def record(second: int, stream: str, tag: str, text: str, nanos: str = "000000000") -> str:
    return f"2026-11-25T10:00:{second:02d}.{nanos}Z {stream} {tag} {text}\n"


async def collect(path: Path, options: LogOptions, **kw: object) -> bytes:
    out = bytearray()

    async def emit(data: bytes) -> None:
        out.extend(data)

    await read_logs(str(path), options, emit, **kw)  # type: ignore[arg-type]
    return bytes(out)


@pytest.mark.parametrize(
    ("line", "stream", "partial", "content"),
    [
        (b"2026-11-25T10:00:00.123456789Z stdout F hello world", "stdout", False, b"hello world"),
        (b"2026-11-25T10:00:00Z stderr P part", "stderr", True, b"part"),
        (b"2026-11-25T10:00:00.1+02:00 stdout F ", "stdout", False, b""),
        (b"2026-11-25T10:00:00.1Z stdout F", "stdout", False, b""),
    ],
)
def test_parse_record(line: bytes, stream: str, partial: bool, content: bytes) -> None:
    rec = logs.parse_record(line)
    assert (rec.stream, rec.partial, rec.content) == (stream, partial, content)
    assert rec.timestamp.tzinfo is not None


@pytest.mark.parametrize("line", [b"garbage", b"2026-11-25T10:00:00Z stdin F x", b"notatime stdout F x"])
def test_parse_record_rejects(line: bytes) -> None:
    with pytest.raises(logs.LogFormatError):
        logs.parse_record(line)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (b"2026-11-25T10:00:00.123450000Z", b"2026-11-25T10:00:00.12345Z"),
        (b"2026-11-25T10:00:00.000000000Z", b"2026-11-25T10:00:00Z"),
        (b"2026-11-25T10:00:00Z", b"2026-11-25T10:00:00Z"),
    ],
)
def test_go_rfc3339nano(raw: bytes, shown: bytes) -> None:
    assert logs.format_go_rfc3339nano(raw) == shown


@pytest.mark.parametrize(
    ("content", "lines", "expected"),
    [
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc\n", 5, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b""),
        (b"a\nb\nc", 1, b"c"),
        (b"", 3, b""),
    ],
)
def test_tail_start(tmp_path: Path, content: bytes, lines: int, expected: bytes) -> None:
    path = tmp_path / "f"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = logs.tail_start(fd, len(content), lines)
    finally:
        os.close(fd)
    assert content[start:] == expected


def test_tail_start_crosses_blocks(tmp_path: Path) -> None:
    lines = [f"line {i:05d} " + "x" * 300 + "\n" for i in range(100)]
    content = "".join(lines).encode()
    path = tmp_path / "f"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = logs.tail_start(fd, len(content), 30)
    finally:
        os.close(fd)
    assert content[start:] == "".join(lines[-30:]).encode()


async def test_read_joins_partials_and_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text(
        record(1, "stdout", "P", "hel", "100000000")
        + record(1, "stdout", "F", "lo", "200000000")
        + record(2, "stderr", "F", "err")
    )
    assert await collect(path, LogOptions()) == b"hello\nerr\n"
    shown = await collect(path, LogOptions(timestamps=True))
    assert shown == b"2026-11-25T10:00:01.1Z hello\n2026-11-25T10:00:02Z err\n"


async def test_read_tail_since_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text("".join(record(i, "stdout", "F", f"line{i}") for i in range(10)))
    assert await collect(path, LogOptions(tail=2)) == b"line8\nline9\n"
    since = datetime.datetime(2026, 11, 25, 10, 0, 7, tzinfo=UTC)
    assert await collect(path, LogOptions(since=since)) == b"line7\nline8\nline9\n"
    assert await collect(path, LogOptions(limit_bytes=8)) == b"line0\nli"


async def test_read_skips_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text(record(1, "stdout", "F", "a") + "not a record\n" + record(2, "stdout", "F", "b"))
    assert await collect(path, LogOptions()) == b"a\nb\n"


async def test_follow_ends_when_container_stops_and_survives_rotation(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text(record(1, "stdout", "F", "first"))
    state = {"running": True}
    out = bytearray()

    async def emit(data: bytes) -> None:
        out.extend(data)

    async def running() -> bool:
        return state["running"]

    follower = asyncio.create_task(
        read_logs(str(path), LogOptions(follow=True), emit, running=running, poll=0.01, state_check=0.05)
    )
    await asyncio.sleep(0.1)
    with path.open("a") as f:
        f.write(record(2, "stdout", "F", "second"))
    await asyncio.sleep(0.1)
    # Rotation: the old file renamed, a new one at the path.
    path.rename(tmp_path / "0.log.20261125-100003")
    path.write_text(record(4, "stdout", "F", "after rotation"))
    await asyncio.sleep(0.1)
    assert not follower.done()
    state["running"] = False
    await asyncio.wait_for(follower, 2)
    assert bytes(out) == b"first\nsecond\nafter rotation\n"


async def test_a_follower_sleeps_right_after_writing_what_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a read that reached the end of the file, the follower sleeps a poll without first reading nothing and
    looking for a rotation (what it did for every write of a chatty container)."""
    path = tmp_path / "0.log"
    path.write_text(record(1, "stdout", "F", "first"))
    reads: list[int] = []
    rotation_checks: list[str] = []
    real_pread, real_replaced = os.pread, logs._replaced

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        reads.append(len(data))
        return data

    def counting_replaced(fd: int, name: str) -> bool:
        rotation_checks.append(name)
        return real_replaced(fd, name)

    monkeypatch.setattr(logs.os, "pread", counting_pread)
    monkeypatch.setattr(logs, "_replaced", counting_replaced)
    out = bytearray()

    async def emit(data: bytes) -> None:
        out.extend(data)

    async def running() -> bool:
        return True

    follower = asyncio.create_task(read_logs(str(path), LogOptions(follow=True), emit, running=running, poll=3600))
    for _ in range(10):
        await asyncio.sleep(0)
    assert bytes(out) == b"first\n"
    assert reads == [len(record(1, "stdout", "F", "first"))]
    assert rotation_checks == []
    follower.cancel()
    with pytest.raises(asyncio.CancelledError):
        await follower


async def test_follow_with_limit_ends_at_limit(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text(record(1, "stdout", "F", "0123456789"))

    async def running() -> bool:
        return True

    out = await asyncio.wait_for(collect(path, LogOptions(follow=True, limit_bytes=4), running=running, poll=0.01), 2)
    assert out == b"0123"


async def test_tail_of_a_2gb_log_reads_only_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "0.log"
    with path.open("wb") as f:
        f.write(record(0, "stdout", "F", "first").encode())
        f.truncate(2 * 1024**3)  # a sparse 2 GiB of earlier output
        f.seek(0, 2)
        f.write(b"\n" + "".join(record(i, "stdout", "F", f"line{i}") for i in range(20)).encode())
    real_pread = os.pread
    read = {"bytes": 0}

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        read["bytes"] += len(data)
        return data

    monkeypatch.setattr(logs.os, "pread", counting_pread)
    out = await collect(path, LogOptions(tail=10))
    assert out == "".join(f"line{i}\n" for i in range(10, 20)).encode()
    assert read["bytes"] < 1024 * 1024


async def test_fast_path_matches_the_line_by_line_path(tmp_path: Path) -> None:
    """Plain reads go through one regex substitution per block; the same log read with a filter that forces the
    line-by-line path (a `since` before everything) must give the same bytes."""
    lines = []
    expected = bytearray()
    for i in range(3000):
        stream = "stderr" if i % 7 == 0 else "stdout"
        if i % 5 == 0:
            lines.append(record(i % 60, stream, "P", f"part{i}-"))
            expected += f"part{i}-".encode()
        else:
            lines.append(record(i % 60, stream, "F", f"line {i}  with  spaces"))
            expected += f"line {i}  with  spaces\n".encode()
    lines.append(record(1, "stdout", "F", "").rstrip("\n") + "\n")
    expected += b"\n"
    path = tmp_path / "0.log"
    path.write_text("".join(lines))
    fast = await collect(path, LogOptions())
    slow = await collect(path, LogOptions(since=datetime.datetime(2000, 1, 1, tzinfo=UTC)))
    assert fast == slow == bytes(expected)
