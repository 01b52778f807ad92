"""new_pleg: which PLEG each `pleg` setting gives, with which relist settings."""

from __future__ import annotations

import asyncio

import pytest

from pleg.cache import Cache
from pleg.evented import EventedPLEG
from pleg.events import PodLifecycleEvent
from pleg.generator import new_pleg
from pleg.generic import GenericPLEG
from pleg.health import RelistDuration
from pleg.metrics import PLEGMetrics
from tests.unit.fakeclock import FakeClock
from tests.unit.pleg.fakeruntime import FakeRuntime


@pytest.mark.parametrize(("mode", "kind"), [("generic", GenericPLEG), ("evented", EventedPLEG), ("auto", EventedPLEG)])
async def test_modes(
    mode: str,
    kind: type,
    runtime: FakeRuntime,
    channel: asyncio.Queue[PodLifecycleEvent],
    cache: Cache,
    clock: FakeClock,
    metrics: PLEGMetrics,
) -> None:
    pleg = new_pleg(mode, runtime, channel, cache, clock=clock, metrics=metrics, relist_threshold=10.0)  # type: ignore[arg-type]
    assert isinstance(pleg, kind)
    assert pleg.watch() is channel
    if isinstance(pleg, GenericPLEG):
        assert pleg.duration == RelistDuration(period=1.0, threshold=10.0)
    else:
        assert pleg._generic_duration == RelistDuration(period=1.0, threshold=10.0)
        assert pleg._stay_generic_if_unimplemented is (mode == "auto")


async def test_an_unknown_mode_is_refused(
    runtime: FakeRuntime,
    channel: asyncio.Queue[PodLifecycleEvent],
    cache: Cache,
    clock: FakeClock,
    metrics: PLEGMetrics,
) -> None:
    with pytest.raises(ValueError, match="pleg mode must be one of generic, evented, auto, got 'sometimes'"):
        new_pleg("sometimes", runtime, channel, cache, clock=clock, metrics=metrics)  # type: ignore[arg-type]
