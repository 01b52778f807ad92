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

    def start(self, name: str, coro: Coroutine[Any, Any, None], *, finite: bool = False) -> asyncio.Task[None]:
        """A task that runs until stopped; one that ends is a failure, unless `finite` (a job done once, such as
        making the node's CSINode), whose end is only logged. A failure of either sets `failed`."""
        task = asyncio.create_task(self._guard(name, coro, finite), name=name)
        self._tasks.append(task)
        return task

    async def _guard(self, name: str, coro: Coroutine[Any, Any, None], finite: bool) -> None:
        try:
            await coro
            if finite:
                log.info("background task done task=%s", name)
                return
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
