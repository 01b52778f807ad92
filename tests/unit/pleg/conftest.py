"""Fixtures of the PLEG unit tests: a fake clock, the in-memory runtime on that clock, a cache, metrics, a channel."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from pleg.cache import Cache
from pleg.events import PodLifecycleEvent
from pleg.generic import GenericPLEG
from pleg.metrics import PLEGMetrics
from tests.unit.fakeclock import FakeClock
from tests.unit.pleg.fakeruntime import FakeRuntime


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1000.0)


@pytest.fixture
def runtime(clock: FakeClock) -> FakeRuntime:
    return FakeRuntime(lambda: int(clock.wall().timestamp() * 1e9))


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> PLEGMetrics:
    return PLEGMetrics(registry)


@pytest.fixture
def channel() -> asyncio.Queue[PodLifecycleEvent]:
    return asyncio.Queue(maxsize=100)


@pytest.fixture
def cache() -> Cache:
    return Cache()


@pytest.fixture
def generic(
    runtime: FakeRuntime,
    channel: asyncio.Queue[PodLifecycleEvent],
    cache: Cache,
    clock: FakeClock,
    metrics: PLEGMetrics,
) -> GenericPLEG:
    return GenericPLEG(runtime, channel, cache, clock=clock, metrics=metrics, call_timeout=0.05)  # type: ignore[arg-type]


def drain(channel: asyncio.Queue[PodLifecycleEvent]) -> list[PodLifecycleEvent]:
    out = []
    while not channel.empty():
        out.append(channel.get_nowait())
    return out
