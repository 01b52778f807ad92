"""Watch events and the decoder of a watch stream.

A watch response is a stream of JSON documents, one per line: `{"type": "ADDED", "object": {...}}`. Lines arrive in
chunks that need not end on a line boundary, so the decoder buffers the partial tail. It is pure (bytes in, events
out) so that tests can feed it any chunking.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, get_args

from nodeagent.kube.errors import ApiUnavailable
from nodeagent.kube.request import Obj

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
_EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))
_MAX_SHOWN = 200


@dataclass(frozen=True)
class WatchEvent:
    """One watch event. `KubeClient.watch` raises on ERROR (its object is a Status), so callers see the other four.

    A BOOKMARK carries only `metadata.resourceVersion`: the point to resume from, with no change to deliver.
    """

    type: EventType
    object: Obj

    @property
    def resource_version(self) -> str | None:
        metadata = self.object.get("metadata")
        rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return rv if isinstance(rv, str) and rv else None


def parse_event(line: bytes) -> WatchEvent:
    """One line of a watch stream as an event; a line that is not one is a broken stream (ApiUnavailable)."""
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise ApiUnavailable(f"malformed watch event: {line[:_MAX_SHOWN]!r}") from exc
    if not isinstance(doc, dict):
        raise ApiUnavailable(f"malformed watch event: {line[:_MAX_SHOWN]!r}")
    kind, obj = doc.get("type"), doc.get("object")
    if kind not in _EVENT_TYPES or not isinstance(obj, dict):
        raise ApiUnavailable(f"malformed watch event: {line[:_MAX_SHOWN]!r}")
    return WatchEvent(kind, obj)


class WatchDecoder:
    """Splits a byte stream into lines and each line into a WatchEvent."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[WatchEvent]:
        self._buffer += chunk
        end = self._buffer.rfind(b"\n")
        if end < 0:
            return []
        complete = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return [parse_event(line) for line in complete.split(b"\n") if line.strip()]

    def close(self) -> list[WatchEvent]:
        """At the end of the stream: the last event if it came without its newline."""
        tail = bytes(self._buffer)
        self._buffer.clear()
        return [parse_event(tail)] if tail.strip() else []
