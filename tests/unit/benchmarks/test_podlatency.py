"""benchmarks/podlatency.py: clusterloader2's phases from watch receive times, and the paced creates."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks.podlatency import StartupLatency, paced_create


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)  # what is due runs before the time moves on, as on a real loop
        self.now += seconds


def pod(name: str, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name}, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_each_phase_is_the_first_event_that_shows_it() -> None:
    clock = Clock()
    timing = StartupLatency(clock)
    for at, kind, body in [
        (100.0, "ADDED", pod("a")),
        (100.2, "MODIFIED", pod("a", "n1")),
        (100.3, "MODIFIED", pod("a", "n1")),  # a later event with the same phase moves nothing
        (100.9, "MODIFIED", pod("a", "n1", "Running")),
        (101.5, "MODIFIED", pod("a", "n1", "Running")),
        (101.6, "ADDED", pod("b", "n2")),  # first seen already bound: created and scheduled at once
        (102.0, "MODIFIED", pod("b", "n2", "Running")),
        (102.1, "ADDED", pod("c")),  # never scheduled
        (103.0, "DELETED", pod("d", "n1", "Running")),  # a deletion records nothing
    ]:
        clock.now = at
        timing.observe(kind, body)
    assert timing.running() == 2
    assert sorted(round(x, 3) for x in timing.latencies("schedule_to_watch")) == [0.4, 0.7]
    assert sorted(round(x, 3) for x in timing.latencies("pod_startup")) == [0.4, 0.9]
    summary = timing.summary()
    assert summary["schedule_to_watch"] == {"pods": 2, "p50_ms": 400.0, "p99_ms": 700.0, "max_ms": 700.0}
    assert summary["create_to_schedule"]["pods"] == 2
    assert "default/d" not in timing.phases


def test_no_pods_gives_no_figures() -> None:
    empty = {"pods": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    assert StartupLatency().summary()["schedule_to_watch"] == empty


def test_creates_are_paced_and_do_not_wait_for_each_other() -> None:
    clock = Clock()
    started: list[float] = []
    release = asyncio.Event()

    async def create(body: dict[str, Any]) -> None:
        started.append(clock.now)
        await release.wait()  # no answer until every create has been sent

    async def scenario() -> float:
        job = asyncio.ensure_future(paced_create(create, [{}] * 5, 10.0, clock=clock, sleep=clock.sleep))
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(started) == 5
        release.set()
        return await job

    achieved = asyncio.run(scenario())
    assert [round(t - 100, 3) for t in started] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert achieved == 10.0


def test_a_failed_create_is_raised() -> None:
    async def create(body: dict[str, Any]) -> None:
        if body.get("bad"):
            raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        asyncio.run(paced_create(create, [{}, {"bad": True}, {}], 1000.0))
