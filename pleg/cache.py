"""The pod status cache (upstream: pkg/kubelet/container/cache.go): pod UID → the runtime's status and when it was seen.

The PLEG writes it (a relist's inspections, a container event's status); pod workers read it. A worker never acts on
stale state: it asks for a status *newer than* its own last sync (`get_newer_than`) and waits until the cache has
one. An entry counts as newer when it was written after that time, or when the cache as a whole is known to be
fresh past it: a relist that completed, or the evented PLEG's periodic tick, moves the global timestamp
(`update_time`), which also answers for pods the runtime no longer knows (an empty status).

Times are wall-clock seconds (float), because a container event's time comes from the runtime's clock. `set` keeps
the newer of two writes, so a slow relist cannot overwrite what a later event reported. A failed inspection is
stored as an error that `get_newer_than` raises (`PodStatusUnavailable`), so the worker retries instead of acting.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from typing import Protocol

from pleg.status import PodStatus


class PodStatusUnavailable(Exception):
    """The last inspection of this pod failed; the cause is the runtime's error."""

    def __init__(self, uid: str, error: Exception) -> None:
        super().__init__(f"pod status of {uid} is unavailable: {error}")
        self.uid = uid
        self.error = error


class PodStatusCache(Protocol):
    """What the PLEG writes and pod workers read (upstream: kubecontainer.Cache)."""

    def get(self, uid: str) -> PodStatus:
        """The cached status, or an empty one when the runtime has nothing of the pod. Never waits, never raises."""
        ...

    def get_all(self) -> list[PodStatus]: ...

    def set(self, uid: str, status: PodStatus | None, error: Exception | None, timestamp: float) -> bool:
        """Store what an inspection found at `timestamp`; False (nothing stored) when the cache holds a newer one."""
        ...

    def set_observed_time(self, uid: str, timestamp: float) -> None:
        """The pod was looked at again at `timestamp` and had not changed."""
        ...

    async def get_newer_than(self, uid: str, min_time: float) -> PodStatus:
        """The status once the cache knows one newer than `min_time`; raises PodStatusUnavailable for an error."""
        ...

    def has_newer_than(self, uid: str, min_time: float) -> bool:
        """Whether `get_newer_than(uid, min_time)` would answer at once. Never waits."""
        ...

    def delete(self, uid: str) -> None: ...

    def update_time(self, timestamp: float) -> None:
        """Every entry is at least as fresh as `timestamp` (a relist finished that started then, or an event made
        then was received). The time never moves back."""
        ...


@dataclass(frozen=True)
class _Entry:
    status: PodStatus
    error: Exception | None
    modified: float


class Cache:
    """The in-memory PodStatusCache. Single event loop: no locks; waiting readers are futures."""

    def __init__(self) -> None:
        self._pods: dict[str, _Entry] = {}
        self._timestamp: float | None = None  # None until the first relist finished: nothing is known yet
        self._subscribers: dict[str, list[tuple[float, asyncio.Future[_Entry]]]] = {}

    @property
    def timestamp(self) -> float | None:
        return self._timestamp

    def get(self, uid: str) -> PodStatus:
        return self._entry(uid).status

    def get_all(self) -> list[PodStatus]:
        return [entry.status for entry in self._pods.values()]

    def set(self, uid: str, status: PodStatus | None, error: Exception | None, timestamp: float) -> bool:
        cached = self._pods.get(uid)
        if cached is not None and cached.modified > timestamp:
            return False
        self._pods[uid] = _Entry(status if status is not None else PodStatus(uid=uid), error, timestamp)
        self._notify(uid, timestamp)
        return True

    def set_observed_time(self, uid: str, timestamp: float) -> None:
        cached = self._pods.get(uid)
        if cached is not None and cached.modified < timestamp:
            self._pods[uid] = replace(cached, modified=timestamp)
        self._notify(uid, timestamp)

    async def get_newer_than(self, uid: str, min_time: float) -> PodStatus:
        entry = self._if_newer(uid, min_time)
        if entry is None:
            future: asyncio.Future[_Entry] = asyncio.get_running_loop().create_future()
            waiting = self._subscribers.setdefault(uid, [])
            waiting.append((min_time, future))
            try:
                entry = await future
            finally:
                with contextlib.suppress(ValueError):
                    waiting.remove((min_time, future))
                if not waiting and self._subscribers.get(uid) is waiting:
                    del self._subscribers[uid]
        if entry.error is not None:
            raise PodStatusUnavailable(uid, entry.error) from entry.error
        return entry.status

    def has_newer_than(self, uid: str, min_time: float) -> bool:
        return self._if_newer(uid, min_time) is not None

    def delete(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def update_time(self, timestamp: float) -> None:
        if self._timestamp is not None and timestamp <= self._timestamp:
            return
        self._timestamp = timestamp
        for uid in list(self._subscribers):
            self._notify(uid, timestamp)

    def waiting(self) -> int:
        """How many readers wait for a newer status (for tests and metrics)."""
        return sum(len(w) for w in self._subscribers.values())

    def _entry(self, uid: str) -> _Entry:
        # A pod the cache does not hold has nothing in the runtime as of the last relist: an empty status.
        return self._pods.get(uid) or _Entry(PodStatus(uid=uid), None, 0.0)

    def _if_newer(self, uid: str, min_time: float) -> _Entry | None:
        cached = self._pods.get(uid)
        globally_newer = self._timestamp is not None and self._timestamp > min_time
        if cached is None:
            return self._entry(uid) if globally_newer else None
        if cached.modified > min_time or globally_newer:
            return cached
        return None

    def _notify(self, uid: str, timestamp: float) -> None:
        for min_time, future in self._subscribers.get(uid, []):
            if timestamp > min_time and not future.done():
                future.set_result(self._entry(uid))
