"""A Clock for unit tests: time moves only when the test advances it."""

from __future__ import annotations

import asyncio
import datetime


class FakeClock:
    def __init__(self, start: float = 0.0) -> None:
        self.t = start
        self._waiters: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=self.t)

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self.t + seconds, future))
        try:
            await future
        finally:
            self._waiters = [(d, f) for d, f in self._waiters if f is not future]

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting: a test advances only once the code under test has gone to sleep."""
        return sum(1 for _, future in self._waiters if not future.done())

    async def advance(self, seconds: float) -> None:
        self.t += seconds
        for deadline, future in list(self._waiters):
            if deadline <= self.t and not future.done():
                future.set_result(None)
        for _ in range(10):
            await asyncio.sleep(0)
