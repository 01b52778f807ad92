"""Named, guarded background tasks, stopped in reverse order of start on shutdown (kopf-style)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Supervisor:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []
        self.failed = asyncio.Event()

    def start(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(self._guard(name, coro), name=name)
        self._tasks.append(task)
        return task

    async def _guard(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
            log.error("background task ended unexpectedly task=%s", name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background task failed task=%s", name)
        self.failed.set()

    async def stop(self, timeout: float = 10.0) -> None:
        for task in reversed(self._tasks):
            if task.done():
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout)
            log.info("background task stopped task=%s", task.get_name())
        self._tasks.clear()
