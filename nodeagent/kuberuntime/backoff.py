"""Exponential back-off per key: CrashLoopBackOff and image pull back-off (upstream: client-go flowcontrol.Backoff).

As upstream, with the kubelet's parameters (10 s initial, doubling, 300 s cap) and no jitter:

- `next(key, now)` records a restart: a new or expired entry starts at `initial`, otherwise the delay doubles up
  to `maximum`; the entry's last update is `now`.
- An entry expires once an event comes more than twice the maximum (10 minutes) after its last update: a container
  that ran that long before failing again starts over at 10 s.
- `in_backoff(key, now, since=finished_at)` says whether a restart must still wait: the time since `since` (the
  container's last finish) is below the current delay. It returns the time left as well.

Times are seconds on one clock (wall clock for container finish times). The clock is injected for `gc` and for the
callers that do not pass `now`; tests never sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nodeagent.kuberuntime.hashing import hash_container

DEFAULT_INITIAL = 10.0
DEFAULT_MAXIMUM = 300.0


@dataclass
class _Entry:
    backoff: float
    last_update: float


class BackoffView(Protocol):
    """The read-only part a pure decision (compute_pod_actions) needs."""

    def in_backoff(self, key: Hashable, now: float, *, since: float | None = None) -> tuple[bool, float]: ...

    def get(self, key: Hashable) -> float: ...


class Backoff:
    def __init__(
        self,
        *,
        initial: float = DEFAULT_INITIAL,
        maximum: float = DEFAULT_MAXIMUM,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"back-off needs 0 < initial <= maximum, got {initial} and {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._clock = clock
        self._entries: dict[Hashable, _Entry] = {}

    def _expired(self, event_time: float, entry: _Entry) -> bool:
        return event_time - entry.last_update > 2 * self.maximum

    def get(self, key: Hashable) -> float:
        """The current delay of `key`, 0 when it has none."""
        entry = self._entries.get(key)
        return entry.backoff if entry is not None else 0.0

    def next(self, key: Hashable, now: float | None = None) -> float:
        """Record a restart of `key` at `now`; returns the delay the next restart will wait."""
        now = self._clock() if now is None else now
        entry = self._entries.get(key)
        if entry is None or self._expired(now, entry):
            entry = _Entry(backoff=self.initial, last_update=now)
            self._entries[key] = entry
        else:
            entry.backoff = min(entry.backoff * 2, self.maximum)
            entry.last_update = now
        return entry.backoff

    def in_backoff(self, key: Hashable, now: float | None = None, *, since: float | None = None) -> tuple[bool, float]:
        """(True, seconds left) while a restart of `key` must wait; `since` defaults to the last `next` time."""
        now = self._clock() if now is None else now
        entry = self._entries.get(key)
        if entry is None:
            return False, 0.0
        event_time = entry.last_update if since is None else since
        if self._expired(event_time, entry):
            return False, 0.0
        remaining = entry.backoff - (now - event_time)
        return (True, remaining) if remaining > 0 else (False, 0.0)

    def reset(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def gc(self, now: float | None = None) -> None:
        """Forget entries idle for more than twice the maximum (upstream's GC)."""
        now = self._clock() if now is None else now
        for key in [k for k, e in self._entries.items() if self._expired(now, e)]:
            del self._entries[key]


def format_duration(seconds: float) -> str:
    """Go's time.Duration spelling for whole seconds, as upstream messages show it: 10s, 1m20s, 5m0s, 1h0m0s."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def container_backoff_key(pod_uid: str, container: Mapping[str, Any]) -> tuple[str, str, str]:
    """As upstream's getStableKey: the pod, the container's name and the hash of its spec. A changed spec (a new
    image, say) is a new key, so its first restart does not wait out the old spec's back-off."""
    return (pod_uid, str(container.get("name", "")), hash_container(container))


def crash_loop_message(delay: float, *, container_name: str, pod_name: str, pod_namespace: str, pod_uid: str) -> str:
    """Upstream's waiting message for reason CrashLoopBackOff."""
    return (
        f"back-off {format_duration(delay)} restarting failed container={container_name} "
        f"pod={pod_name}_{pod_namespace}({pod_uid})"
    )
