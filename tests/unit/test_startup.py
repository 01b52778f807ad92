"""Start-up stages give way to a stop signal; the first runtime connection is retried within its budget. Time is the
fake clock's; the runtime is the scripted CRI server on a real socket (a refused call is a real UNAVAILABLE)."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.startup import (
    RuntimeUnavailable,
    StopRequested,
    runtime_retry_delays,
    until_stopped,
    wait_for_runtime,
)
from tests.unit.cri.conftest import client, runtime, socket_dir
from tests.unit.cri.scripted import Fail, ScriptedRuntime
from tests.unit.fakeclock import FakeClock


async def test_a_stage_that_finishes_returns_its_result() -> None:
    async def stage() -> int:
        return 7

    assert await until_stopped(asyncio.Event(), "counting", stage()) == 7


async def test_a_stage_failure_propagates() -> None:
    async def stage() -> None:
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        await until_stopped(asyncio.Event(), "breaking", stage())


async def test_a_stop_cancels_a_stage_that_waits_for_ever() -> None:
    stop, cancelled = asyncio.Event(), asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    task = asyncio.create_task(until_stopped(stop, "registering the node", forever()))
    await asyncio.sleep(0)
    assert not task.done()
    stop.set()
    with pytest.raises(StopRequested) as stopped:
        await task
    assert stopped.value.stage == "registering the node"
    assert cancelled.is_set()


async def test_a_stop_before_a_stage_never_starts_it() -> None:
    stop = asyncio.Event()
    stop.set()
    started = False

    async def stage() -> None:
        nonlocal started
        started = True

    with pytest.raises(StopRequested):
        await until_stopped(stop, "relisting", stage())
    assert not started


async def test_a_stage_stuck_in_a_thread_does_not_hold_the_stop() -> None:
    stop, gate = asyncio.Event(), threading.Event()
    task = asyncio.create_task(until_stopped(stop, "reading the node's facts", asyncio.to_thread(gate.wait), 0.05))
    await asyncio.sleep(0)
    stop.set()
    with pytest.raises(StopRequested):
        await asyncio.wait_for(task, 5)
    gate.set()


def test_runtime_retry_delays() -> None:
    assert runtime_retry_delays(0) == []
    assert runtime_retry_delays(1) == [0.5]
    assert runtime_retry_delays(20) == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert sum(runtime_retry_delays(120)) <= 120


VERSION = api_pb2.VersionResponse(
    version="0.1.0", runtime_name="containerd", runtime_version="1.7.24", runtime_api_version="v1"
)


async def test_the_runtime_is_waited_for_until_it_answers(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["Version"] = Fail(grpc.StatusCode.UNAVAILABLE, "starting")
    clock = FakeClock()
    task = asyncio.create_task(wait_for_runtime(client.runtime, runtime.endpoint, budget=120, clock=clock))
    await _until(lambda: len(runtime.calls_of("Version")) == 1)
    await _until(lambda: clock.sleepers == 1)  # the answer is in and the retry waits
    await clock.advance(0.4)
    assert len(runtime.calls_of("Version")) == 1  # the first retry waits 0.5 s
    await clock.advance(0.1)
    await _until(lambda: len(runtime.calls_of("Version")) == 2)
    runtime.script["Version"] = VERSION  # the runtime is up now
    await _until(lambda: clock.sleepers == 1)
    await clock.advance(1.0)
    version = await asyncio.wait_for(task, 5)
    assert (version.name, version.version, str(version)) == ("containerd", "1.7.24", "containerd://1.7.24")
    assert len(runtime.calls_of("Version")) == 3


async def test_a_runtime_that_never_answers_fails_after_the_budget(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["Version"] = Fail(grpc.StatusCode.UNAVAILABLE, "no runtime")
    clock = FakeClock()
    task = asyncio.create_task(wait_for_runtime(client.runtime, runtime.endpoint, budget=2, clock=clock))
    for calls in (1, 2):
        await _until(lambda calls=calls: len(runtime.calls_of("Version")) == calls)
        # The server counts the call before the client has its answer and goes to sleep: advance only then, or the
        # sleep starts after the advance and never ends (failed 5 in 15 under load).
        await _until(lambda: clock.sleepers == 1)
        await clock.advance(1.0)
    with pytest.raises(RuntimeUnavailable, match=r"is not reachable: .*no runtime"):
        await asyncio.wait_for(task, 5)
    assert len(runtime.calls_of("Version")) == 3  # budget 2 s: waits of 0.5 s and 1 s, then it gives up


async def _until(check: object, timeout: float = 5.0) -> None:
    assert callable(check)
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.01)


__all__ = ["client", "runtime", "socket_dir"]  # fixtures
