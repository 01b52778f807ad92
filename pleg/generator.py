"""The PodLifecycleEventGenerator interface (upstream: pleg.go) and the choice between the two implementations.

The agent depends only on this Protocol: it runs `run()` as a supervised task, hands `watch()`'s channel to the
syncLoop, reads `healthy()` for the node's Ready condition, and asks for `request_relist(uid)` after a sync that
changed a pod. Upstream's Start/Stop are `run()` and the cancellation of its task.

`new_pleg` picks by the agent's `pleg` setting: "generic" relists every second; "evented" follows CRI container
events with a slow relist underneath, and keeps trying the stream when it fails; "auto" (the default) is evented,
but stays generic for good when the runtime does not implement GetContainerEvents.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Protocol

from cri.service import RuntimeService
from pleg.cache import PodStatusCache
from pleg.clock import Clock
from pleg.evented import EventedPLEG
from pleg.events import PodLifecycleEvent
from pleg.generic import DEFAULT_CALL_TIMEOUT, GenericPLEG
from pleg.health import EVENTED_RELIST, GENERIC_RELIST, RelistDuration
from pleg.metrics import PLEGMetrics

MODES = ("generic", "evented", "auto")


class PodLifecycleEventGenerator(Protocol):
    def watch(self) -> asyncio.Queue[PodLifecycleEvent]:
        """The channel the syncLoop reads; the PLEG never waits on it (a full channel drops and counts)."""
        ...

    def update(self, duration: RelistDuration) -> None: ...

    def healthy(self) -> tuple[bool, str]:
        """(healthy, why not): the message follows "PLEG is not healthy: " in the node's Ready condition."""
        ...

    async def relist(self) -> bool: ...

    def request_relist(self, uid: str) -> None:
        """Relist this pod soon, out of the period (never waits)."""
        ...

    def request_reinspect(self, uid: str) -> None:
        """Relist this pod soon and inspect it even when no container changed state (after an in-place resize)."""
        ...

    async def run(self) -> None: ...


def new_pleg(
    mode: str,
    runtime: RuntimeService,
    channel: asyncio.Queue[PodLifecycleEvent],
    cache: PodStatusCache,
    *,
    clock: Clock,
    metrics: PLEGMetrics,
    relist_threshold: float = GENERIC_RELIST.threshold,
    call_timeout: float = DEFAULT_CALL_TIMEOUT,
) -> GenericPLEG | EventedPLEG:
    """The PLEG for a `pleg` setting. `relist_threshold` is the generic relist's (the evented one stays 10 min)."""
    if mode not in MODES:
        raise ValueError(f"pleg mode must be one of {', '.join(MODES)}, got {mode!r}")
    generic_duration = replace(GENERIC_RELIST, threshold=relist_threshold)
    generic = GenericPLEG(
        runtime, channel, cache, clock=clock, metrics=metrics, duration=generic_duration, call_timeout=call_timeout
    )
    if mode == "generic":
        return generic
    return EventedPLEG(
        runtime,
        generic,
        cache,
        clock=clock,
        metrics=metrics,
        generic_duration=generic_duration,
        evented_duration=EVENTED_RELIST,
        stay_generic_if_unimplemented=mode == "auto",
    )
