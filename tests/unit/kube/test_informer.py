"""The reflector over a scripted apiserver: snapshots, changes, resume points, relists and backoff, without sleeping.

Each script ends with the request the test does not answer: ScriptExhausted then ends the loop, and the test
checks what the consumer got and what was asked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nodeagent.kube.informer import Added, Backoff, Deleted, Modified, ReflectorEvent, Synced, list_and_watch
from tests.unit.kube.scripted import Script, ScriptExhausted, bookmark, expired, line, obj, object_list, status, stream

PODS = "/api/v1/pods"
SELECTOR = "spec.nodeName=worker-1"
NO_JITTER = Backoff(initial=0.8, factor=2.0, cap=5.0, jitter=0.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def pod(name: str, rv: str) -> dict[str, Any]:
    return obj(name, rv, kind="Pod")


def listing(rv: str, *items: dict[str, Any], continue_token: str | None = None) -> httpx.Response:
    return object_list(rv, *items, continue_token=continue_token)


def watch_params(rv: str) -> dict[str, str]:
    return {
        "watch": "true",
        "resourceVersion": rv,
        "fieldSelector": SELECTOR,
        "timeoutSeconds": "300",
        "allowWatchBookmarks": "true",
    }


def list_params(**extra: str) -> dict[str, str]:
    return {"fieldSelector": SELECTOR, "limit": "500", **extra}


async def run(script: Script, clock: FakeClock | None = None) -> list[ReflectorEvent]:
    got: list[ReflectorEvent] = []

    async def on_event(event: ReflectorEvent) -> None:
        got.append(event)

    async with script.client() as client:
        with pytest.raises(ScriptExhausted):
            await list_and_watch(
                client,
                PODS,
                on_event=on_event,
                field_selector=SELECTOR,
                backoff=NO_JITTER,
                clock=clock or FakeClock(),
                rand=lambda: 0.0,
            )
    assert not script.steps, "the reflector stopped before the script's end"
    return got


def _long_watch(clock: FakeClock, *chunks: bytes) -> Any:
    """A watch that lasts (the clock moves while it runs) and then ends cleanly."""

    def reply(_: httpx.Request) -> httpx.Response:
        clock.now += 300.0
        return stream(*chunks)

    return reply


async def test_list_then_watch_then_resume_from_last_resource_version() -> None:
    script = (
        Script()
        .add("GET", PODS, listing("100", pod("a", "90"), continue_token="t"), list_params())
        .add("GET", PODS, listing("100", pod("b", "95")), list_params(**{"continue": "t"}))
        .add(
            "GET",
            PODS,
            stream(line("ADDED", pod("c", "101")), line("MODIFIED", pod("a", "102")), line("DELETED", pod("b", "103"))),
            watch_params("100"),
        )
        # The stream ended (server timeout): resume after the last event, then after the bookmark.
        .add("GET", PODS, stream(bookmark("150")), watch_params("103"))
        .add("GET", PODS, stream(line("ADDED", pod("d", "151"))), watch_params("150"))
    )
    got = await run(script)
    assert got == [
        Synced((pod("a", "90"), pod("b", "95")), "100"),
        Added(pod("c", "101")),
        Modified(pod("a", "102")),
        Deleted(pod("b", "103")),
        Added(pod("d", "151")),
    ]


async def test_gone_relists_and_watches_from_the_new_list(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent.kube.informer")
    clock = FakeClock()
    script = (
        Script()
        .add("GET", PODS, listing("100", pod("a", "90")), list_params())
        .add("GET", PODS, stream(line("ADDED", pod("b", "101")), expired()), watch_params("100"))
        .add("GET", PODS, listing("500", pod("b", "101"), pod("c", "400")), list_params())
        .add("GET", PODS, stream(line("DELETED", pod("c", "501"))), watch_params("500"))
    )
    got = await run(script, clock)
    assert got == [
        Synced((pod("a", "90"),), "100"),
        Added(pod("b", "101")),
        Synced((pod("b", "101"), pod("c", "400")), "500"),
        Deleted(pod("c", "501")),
    ]
    assert clock.sleeps == []  # the first Gone relists at once
    assert "watch restarted path=/api/v1/pods reason=gone phase=watch" in caplog.text


async def test_gone_answer_to_the_watch_request_relists_too() -> None:
    clock = FakeClock()
    script = (
        Script()
        .add("GET", PODS, listing("100"), list_params())
        .add("GET", PODS, status(410, "Expired", "too old resource version: 100 (300)"), watch_params("100"))
        .add("GET", PODS, listing("300"), list_params())
        # Gone again before any progress: now it backs off.
        .add("GET", PODS, stream(expired()), watch_params("300"))
        .add("GET", PODS, listing("301"), list_params())
    )
    got = await run(script, clock)
    assert got == [Synced((), "100"), Synced((), "300"), Synced((), "301")]
    assert clock.sleeps == [1.6]


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("timed out"),
        status(500, "InternalError", "etcd down"),
        status(503, "ServiceUnavailable", "shutting down"),
        status(429, "TooManyRequests", "throttled"),
        status(403, "Forbidden", "rbac not yet there"),
    ],
)
async def test_list_failures_back_off_exponentially_up_to_the_cap(failure: httpx.Response | Exception) -> None:
    clock = FakeClock()
    script = Script()
    for _ in range(5):
        script.add("GET", PODS, failure, list_params())
    script.add("GET", PODS, listing("7", pod("a", "5")), list_params())
    script.add("GET", PODS, stream(line("ADDED", pod("b", "8"))), watch_params("7"))
    got = await run(script, clock)
    assert got == [Synced((pod("a", "5"),), "7"), Added(pod("b", "8"))]
    assert clock.sleeps == [0.8, 1.6, 3.2, 5.0, 5.0]


async def test_watch_failure_resumes_the_watch_without_relisting() -> None:
    clock = FakeClock()
    script = (
        Script()
        .add("GET", PODS, listing("100"), list_params())
        .add(
            "GET",
            PODS,
            stream(line("ADDED", pod("a", "101")), httpx.RemoteProtocolError("peer closed connection")),
            watch_params("100"),
        )
        .add("GET", PODS, httpx.ConnectError("connection refused"), watch_params("101"))
        .add("GET", PODS, status(503, "ServiceUnavailable", "starting"), watch_params("101"))
        .add("GET", PODS, stream(line("MODIFIED", pod("a", "102"))), watch_params("101"))
        # Progress resets the backoff.
        .add("GET", PODS, httpx.ConnectError("connection refused"), watch_params("102"))
        .add("GET", PODS, _long_watch(clock, bookmark("200")), watch_params("102"))
    )
    got = await run(script, clock)
    assert got == [Synced((), "100"), Added(pod("a", "101")), Modified(pod("a", "102"))]
    assert clock.sleeps == [0.8, 1.6, 3.2, 0.8]


async def test_a_watch_that_ends_at_once_without_events_backs_off() -> None:
    clock = FakeClock()
    script = (
        Script()
        .add("GET", PODS, listing("100"), list_params())
        .add("GET", PODS, stream(), watch_params("100"))
        .add("GET", PODS, stream(), watch_params("100"))
        # A quiet watch that ran its course is no failure: resume at once, from the same point.
        .add("GET", PODS, _long_watch(clock), watch_params("100"))
        .add("GET", PODS, stream(line("ADDED", pod("a", "101"))), watch_params("100"))
    )
    got = await run(script, clock)
    assert got == [Synced((), "100"), Added(pod("a", "101"))]
    assert clock.sleeps == [0.8, 1.6]


async def test_a_list_without_resource_version_is_retried() -> None:
    clock = FakeClock()
    script = (
        Script()
        .add("GET", PODS, httpx.Response(200, json={"kind": "PodList", "items": []}), list_params())
        .add("GET", PODS, listing("3"), list_params())
    )
    got = await run(script, clock)
    assert got == [Synced((), "3")]
    assert clock.sleeps == [0.8]


async def test_consumer_errors_end_the_reflector() -> None:
    class Boom(Exception):
        pass

    async def on_event(event: ReflectorEvent) -> None:
        if isinstance(event, Added):
            raise Boom

    script = (
        Script()
        .add("GET", PODS, listing("1"), list_params())
        .add("GET", PODS, stream(line("ADDED", pod("a", "2"))), watch_params("1"))
    )
    async with script.client() as client:
        with pytest.raises(Boom):
            await list_and_watch(
                client, PODS, on_event=on_event, field_selector=SELECTOR, clock=FakeClock(), rand=lambda: 0.0
            )


@pytest.mark.parametrize(
    ("backoff", "rand", "delays"),
    [
        (Backoff(initial=0.8, factor=2.0, cap=30.0, jitter=0.0), 0.0, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]),
        (Backoff(initial=1.0, factor=2.0, cap=30.0, jitter=0.5), 1.0, [1.5, 3.0, 6.0, 12.0, 24.0, 30.0, 30.0, 30.0]),
    ],
)
def test_backoff_delays(backoff: Backoff, rand: float, delays: list[float]) -> None:
    assert [backoff.delay(n, rand) for n in range(1, 9)] == pytest.approx(delays)


class _Hanging(httpx.AsyncByteStream):
    """A watch that sends one event and then stays open, as a quiet apiserver does."""

    def __init__(self, first: bytes) -> None:
        self.first = first
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.first
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


async def test_cancelling_the_reflector_closes_its_watch() -> None:
    body = _Hanging(line("ADDED", pod("a", "2")))
    script = Script().add("GET", PODS, listing("1"), list_params())
    script.add("GET", PODS, httpx.Response(200, stream=body), watch_params("1"))
    got: asyncio.Queue[ReflectorEvent] = asyncio.Queue()

    async def on_event(event: ReflectorEvent) -> None:
        got.put_nowait(event)

    async with script.client() as client:
        task = asyncio.create_task(
            list_and_watch(
                client, PODS, on_event=on_event, field_selector=SELECTOR, clock=FakeClock(), rand=lambda: 0.0
            )
        )
        assert await asyncio.wait_for(got.get(), 5) == Synced((), "1")
        assert await asyncio.wait_for(got.get(), 5) == Added(pod("a", "2"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert body.closed
