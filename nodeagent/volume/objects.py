"""ConfigMaps and Secrets for volumes, through a short cache in front of the node's GETs (never a list of all
secrets): concurrent set ups of one object share one request (twenty pods starting at once read kube-root-ca.crt
once), and a result is reused for `ttl` seconds, so the remount every pod sync asks for costs no request. An update
reaches running pods within the sync period plus the TTL, as upstream's TTL-based object cache promises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from nodeagent.volume.plugin import ObjectGetter

DEFAULT_TTL = 5.0

_Key = tuple[str, str, str]


class ObjectCache:
    def __init__(self, get: ObjectGetter, *, now: Callable[[], float], ttl: float = DEFAULT_TTL) -> None:
        self._get = get
        self._now = now
        self._ttl = ttl
        self._cached: dict[_Key, tuple[float, Mapping[str, Any] | None]] = {}
        self._pending: dict[_Key, asyncio.Future[Mapping[str, Any] | None]] = {}

    async def get(self, resource: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        key = (resource, namespace, name)
        hit = self._cached.get(key)
        if hit is not None and self._now() - hit[0] < self._ttl:
            return hit[1]
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Mapping[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            value = await self._get(resource, namespace, name)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: a failure with no one else waiting is not "never retrieved"
            raise
        else:
            future.set_result(value)
            self._cached[key] = (self._now(), value)
            self._expire()
            return value
        finally:
            del self._pending[key]

    def _expire(self) -> None:
        now = self._now()
        for key in [k for k, (at, _) in self._cached.items() if now - at >= self._ttl]:
            del self._cached[key]
