"""The watch decoder turns any chunking of a stream into the same events."""

from __future__ import annotations

import json

import pytest

from nodeagent.kube.errors import ApiUnavailable
from nodeagent.kube.watch import WatchDecoder, WatchEvent

ADDED = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "11"}}}
BOOKMARK = {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "12"}}}
DELETED = {"type": "DELETED", "object": {"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "13"}}}
ERROR = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}

STREAM = b"".join(json.dumps(e).encode() + b"\n" for e in (ADDED, BOOKMARK, DELETED, ERROR))
EXPECTED = [WatchEvent(e["type"], e["object"]) for e in (ADDED, BOOKMARK, DELETED, ERROR)]  # type: ignore[arg-type]


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize(
    "chunks",
    [
        [STREAM],
        _chunks(STREAM, 1),
        _chunks(STREAM, 7),
        _chunks(STREAM, 64),
        # Chunks that end exactly on, just before and just after a newline.
        [STREAM[: STREAM.index(b"\n")], STREAM[STREAM.index(b"\n") :]],
        [STREAM[: STREAM.index(b"\n") + 1], STREAM[STREAM.index(b"\n") + 1 :]],
        # Blank lines (keep-alives) are skipped.
        [b"\n", STREAM.replace(b"\n", b"\n\n")],
        # The last event without its newline still counts at the end of the stream.
        [STREAM.rstrip(b"\n")],
    ],
)
def test_any_chunking_gives_the_same_events(chunks: list[bytes]) -> None:
    decoder = WatchDecoder()
    events: list[WatchEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    assert events == EXPECTED


def test_partial_line_waits_for_its_end() -> None:
    decoder = WatchDecoder()
    line = json.dumps(ADDED).encode()
    assert decoder.feed(line[:10]) == []
    assert decoder.feed(line[10:]) == []
    assert decoder.feed(b"\n") == [EXPECTED[0]]


def test_resource_version_of_events() -> None:
    assert [e.resource_version for e in EXPECTED] == ["11", "12", "13", None]


@pytest.mark.parametrize(
    "line",
    [
        b"{not json}\n",
        b"[1, 2]\n",
        b'{"type": "SOMETHING", "object": {}}\n',
        b'{"type": "ADDED", "object": "x"}\n',
        b'{"type": "ADDED"}\n',
    ],
)
def test_malformed_lines_are_a_broken_stream(line: bytes) -> None:
    with pytest.raises(ApiUnavailable, match="malformed watch event"):
        WatchDecoder().feed(line)


def test_truncated_tail_is_a_broken_stream() -> None:
    decoder = WatchDecoder()
    decoder.feed(json.dumps(ADDED).encode()[:20])
    with pytest.raises(ApiUnavailable):
        decoder.close()
