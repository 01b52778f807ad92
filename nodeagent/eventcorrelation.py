"""What the event recorder does with an event before it is sent, as client-go's EventCorrelator (the kubelet's).

Three steps, in upstream's order (tools/record/events_cache.go, v0.34):
- aggregation: events about one object with the same type and reason but different messages, 10 of them within
  10 minutes of each other, become one event "(combined from similar events): <latest message>", counted up;
- de-duplication: an event equal to one already sent (same object and field path, type, reason, message) is a patch
  of that Event's count, lastTimestamp and message; the count rises even for occurrences the spam filter drops;
- the spam filter: per object, a token bucket of 25 events refilled at one every 5 minutes; an event without a token
  is not sent at all (what `kubectl describe` shows of a long crash loop: the count stops rising after 25 events).

Each of the three keeps at most 4,096 keys, the least recently used going first. The source (component and host) is
the recorder's own, so it is left out of the keys. Pure: the caller passes each event's time.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from nodeagent.events import ObjectRef

CACHE_SIZE = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = datetime.timedelta(seconds=600)
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED_PREFIX = "(combined from similar events): "

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class TokenBucket:
    """Full at first (`burst` tokens), refilled at `qps`; `try_accept` takes a token if there is one."""

    def __init__(self, burst: int, qps: float, now: float) -> None:
        self._burst = float(burst)
        self._qps = qps
        self._tokens = float(burst)
        self._last = now

    def try_accept(self, now: float) -> bool:
        if now > self._last:
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last: datetime.datetime | None = None


@dataclass(frozen=True)
class _Observed:
    name: str
    count: int
    first: datetime.datetime


@dataclass(frozen=True)
class Correlated:
    """The event to send: a new Event (count 1) or a patch of the one named `name` (count above 1); `skip` when the
    spam filter dropped it."""

    ref: ObjectRef
    type: str
    reason: str
    message: str
    name: str
    count: int
    first: datetime.datetime
    last: datetime.datetime
    skip: bool


def event_name(ref: ObjectRef, at: datetime.datetime) -> str:
    """An Event's name as client-go makes it: the object's name and the time in nanoseconds, in hex."""
    return f"{ref.name}.{int(at.timestamp() * 1e9):x}"


class EventCorrelator:
    def __init__(
        self,
        *,
        cache_size: int = CACHE_SIZE,
        aggregate_max_events: int = AGGREGATE_MAX_EVENTS,
        aggregate_interval: datetime.timedelta = AGGREGATE_INTERVAL,
        spam_burst: int = SPAM_BURST,
        spam_qps: float = SPAM_QPS,
    ) -> None:
        self._aggregates: _Lru[tuple[object, ...], _Aggregate] = _Lru(cache_size)
        self._observed: _Lru[tuple[object, ...], _Observed] = _Lru(cache_size)
        self._spam: _Lru[ObjectRef, TokenBucket] = _Lru(cache_size)
        self._max_events = aggregate_max_events
        self._interval = aggregate_interval
        self._burst = spam_burst
        self._qps = spam_qps

    def correlate(self, ref: ObjectRef, type_: str, reason: str, message: str, at: datetime.datetime) -> Correlated:
        # Aggregation: by object (its field path left out), type and reason; the messages seen are the local keys.
        whole = dataclasses.replace(ref, field_path="")
        aggregate_key: tuple[object, ...] = ("aggregate", whole, type_, reason)
        aggregate = self._aggregates.get(aggregate_key)
        if aggregate is None or aggregate.last is None or at - aggregate.last > self._interval:
            aggregate = _Aggregate()
        aggregate.messages.add(message)
        aggregate.last = at
        self._aggregates.put(aggregate_key, aggregate)
        key: tuple[object, ...]
        if len(aggregate.messages) < self._max_events:
            key = ("event", ref, type_, reason, message)
        else:
            aggregate.messages.pop()  # as upstream's PopAny: the set never grows past the threshold
            key = aggregate_key
            message = COMBINED_PREFIX + message
        # De-duplication: the same key again is the same Event, counted up (even when the filter drops it below).
        seen = self._observed.get(key)
        observed = (
            _Observed(event_name(ref, at), 1, at) if seen is None else _Observed(seen.name, seen.count + 1, seen.first)
        )
        self._observed.put(key, observed)
        # The spam filter: per object, whatever the field path, type, reason or message.
        bucket = self._spam.get(whole)
        if bucket is None:
            bucket = TokenBucket(self._burst, self._qps, at.timestamp())
            self._spam.put(whole, bucket)
        skip = not bucket.try_accept(at.timestamp())
        return Correlated(ref, type_, reason, message, observed.name, observed.count, observed.first, at, skip)
