"""PodConfig: the sources push their reports here; the merged, typed updates wait on one queue for the syncLoop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodeagent.podconfig.storage import InvalidPodSink, Pod, PodStorage, PodUpdate, SourceUpdate


class PodConfig:
    """Merges the reports of the named sources. The update queue is unbounded: a config change is never dropped."""

    def __init__(
        self,
        sources: Sequence[str],
        *,
        now: Callable[[], str] | None = None,
        on_invalid: InvalidPodSink | None = None,
    ) -> None:
        self._sources = tuple(sources)
        self._storage = PodStorage(now=now, on_invalid=on_invalid)
        self.updates: asyncio.Queue[PodUpdate] = asyncio.Queue()

    @property
    def sources(self) -> tuple[str, ...]:
        return self._sources

    def push(self, update: SourceUpdate) -> None:
        if update.source not in self._sources:
            raise ValueError(f"unknown pod source {update.source!r}; known: {', '.join(self._sources)}")
        for merged in self._storage.merge(update):
            self.updates.put_nowait(merged)

    def sources_ready(self) -> bool:
        return self._storage.seen_all(self._sources)

    def pods(self) -> list[Pod]:
        return self._storage.pods()

    def pod_by_uid(self, uid: str) -> Pod | None:
        return self._storage.pod_by_uid(uid)

    def pod_views(self) -> list[Mapping[str, Any]]:
        return self._storage.pod_views()

    def pod_view(self, uid: str) -> Mapping[str, Any] | None:
        return self._storage.pod_view(uid)

    def pods_by_full_name(self, full_name: str) -> list[Pod]:
        return self._storage.pods_by_full_name(full_name)
