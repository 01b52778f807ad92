"""The clock the PLEG is given. Structurally the agent's `nodeagent.clock.Clock` (pleg may not import nodeagent), so
the agent passes its own and unit tests a fake one that only moves when they advance it."""

from __future__ import annotations

import datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> datetime.datetime: ...

    async def sleep(self, seconds: float) -> None: ...


def wall_seconds(clock: Clock) -> float:
    """Wall time as the cache keeps it: seconds since the epoch, comparable with a CRI event's created_at."""
    return clock.wall().timestamp()
