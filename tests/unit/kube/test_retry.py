"""KubeClient honours Retry-After as client-go's REST client does (nodeagent/kube/retry.py): a 429, or a 5xx, with an
integer Retry-After header is waited for and sent again, body and all, up to 10 times within the request's timeout;
anything else is final at once.

Time is a clock that jumps by what is slept, so "after N s" is read from the clock, not waited for."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry

from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError, ServerError, TooManyRequests
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.kube.metrics import RestClientMetrics
from nodeagent.kube.retry import MAX_RETRIES, Retries, retry_after_seconds
from tests.unit.kube.loopback import serving
from tests.unit.kube.scripted import Script, line, obj, status, stream

CM = "/api/v1/namespaces/default/configmaps"


class JumpClock:
    """Time moves only by what is slept; every sleep is recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=self.now)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def throttled(retry_after: str | None = "1", code: int = 429, reason: str = "TooManyRequests") -> httpx.Response:
    reply = status(code, reason, "Too many requests, please try again later.")
    if retry_after is not None:
        reply.headers["Retry-After"] = retry_after
    return reply


def at(clock: JumpClock, sent: list[float], reply: httpx.Response) -> Callable[[httpx.Request], httpx.Response]:
    """A reply that records the clock's time when the request came."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(clock.now)
        return reply

    return answer


@pytest.mark.parametrize(
    ("code", "header", "expected"),
    [
        (429, "1", 1),
        (429, "7", 7),
        (429, " 3 ", 3),
        (429, "+2", 2),
        (429, "-1", 0),  # a negative wait is none
        (429, "0", 0),
        (503, "5", 5),
        (500, "1", 1),
        (504, "2", 2),
        (429, None, None),  # no header: final, whatever the Status's details say
        (503, None, None),
        (429, "1.5", None),  # not an integer (Go's strconv.Atoi)
        (429, "Wed, 21 Oct 2015 07:28:00 GMT", None),  # an HTTP date: not read
        (429, "1_0", None),
        (429, "", None),
        (409, "1", None),  # only 429 and 5xx
        (404, "1", None),
        (200, "1", None),
    ],
)
def test_retry_after_seconds(code: int, header: str | None, expected: int | None) -> None:
    assert retry_after_seconds(code, header) == expected


def test_retries_are_counted_and_cut_at_the_deadline() -> None:
    retries = Retries(max_retries=2, deadline=10.0)
    assert retries.next_wait(429, "3", now=0.0) == 3.0
    assert retries.next_wait(429, "30", now=3.0) == 7.0  # ends at the deadline
    assert retries.expired(10.0) and not retries.expired(9.9)
    assert retries.next_wait(429, "1", now=4.0) is None  # the third retry: none left
    assert Retries(max_retries=0).next_wait(429, "1", now=0.0) is None
    assert Retries(deadline=None).next_wait(503, "600", now=0.0) == 600.0  # no deadline: no cap (a watch)
    assert retries.remaining(now=8.0, timeout=30.0) == 2.0
    assert Retries(deadline=10.0).remaining(now=8.0, timeout=30.0) == 30.0  # a first attempt: its whole timeout
    assert Retries(deadline=None).remaining(now=8.0, timeout=30.0) == 30.0


async def test_429_with_retry_after_is_sent_again_after_that_many_seconds() -> None:
    clock = JumpClock()
    sent: list[float] = []
    script = (
        Script()
        .add("GET", f"{CM}/x", at(clock, sent, throttled("3")))
        .add("GET", f"{CM}/x", at(clock, sent, httpx.Response(200, json=obj("x", "5"))))
    )
    async with script.client(clock=clock) as client:
        assert await client.get(f"{CM}/x") == obj("x", "5")
    assert sent == [0.0, 3.0]
    assert clock.sleeps == [3.0]


@pytest.mark.parametrize(("code", "reason"), [(503, "ServiceUnavailable"), (500, "InternalError"), (504, "Timeout")])
async def test_5xx_with_retry_after_is_retried(code: int, reason: str) -> None:
    clock = JumpClock()
    script = (
        Script()
        .add("GET", f"{CM}/x", throttled("2", code, reason))
        .add("GET", f"{CM}/x", throttled("2", code, reason))
        .add("GET", f"{CM}/x", httpx.Response(200, json=obj("x", "5")))
    )
    async with script.client(clock=clock) as client:
        assert await client.get(f"{CM}/x") == obj("x", "5")
    assert clock.sleeps == [2.0, 2.0]


@pytest.mark.parametrize(
    ("reply", "cls"),
    [
        (throttled(None, 500, "InternalError"), ServerError),
        (throttled(None, 503, "ServiceUnavailable"), ServerError),
        (throttled(None), TooManyRequests),  # a 429 without the header (details.retryAfterSeconds only)
        (throttled("Wed, 21 Oct 2015 07:28:00 GMT"), TooManyRequests),
        (throttled("1", 409, "Conflict"), ApiError),
    ],
)
async def test_a_failure_without_a_usable_retry_after_is_final_at_once(
    reply: httpx.Response, cls: type[ApiError]
) -> None:
    clock = JumpClock()
    script = Script().add("GET", f"{CM}/x", reply)
    async with script.client(clock=clock) as client:
        with pytest.raises(cls):
            await client.get(f"{CM}/x")
    assert len(script.requests) == 1
    assert clock.sleeps == []


async def test_after_the_last_retry_the_caller_gets_too_many_requests() -> None:
    clock = JumpClock()
    script = Script()
    for _ in range(MAX_RETRIES + 1):
        script.add("GET", f"{CM}/x", throttled("1"))
    registry = CollectorRegistry()
    client = script.client(clock=clock)
    client.metrics = RestClientMetrics(registry)
    async with client:
        with pytest.raises(TooManyRequests) as caught:
            await client.get(f"{CM}/x")
    assert caught.value.retry_after == 1.0  # the last answer's, for the caller's own policy
    assert len(script.requests) == 1 + MAX_RETRIES == 11
    assert clock.sleeps == [1.0] * MAX_RETRIES
    labels = {"code": "429", "host": "kube.test:6443"}
    # Every attempt is a request; every one after the first is a retry; the request is timed once, waits included.
    assert registry.get_sample_value("rest_client_requests_total", {**labels, "method": "GET"}) == 11.0
    assert registry.get_sample_value("rest_client_request_retries_total", {**labels, "verb": "GET"}) == 10.0
    duration = {"verb": "GET", "host": "kube.test:6443"}
    assert registry.get_sample_value("rest_client_request_duration_seconds_count", duration) == 1.0
    assert registry.get_sample_value("rest_client_request_duration_seconds_sum", duration) == 10.0


async def test_the_wait_ends_at_the_request_timeout_and_gives_up_there() -> None:
    clock = JumpClock()
    script = Script().add("PUT", f"{CM}/x", throttled("30"))
    async with script.client(clock=clock) as client:
        with pytest.raises(TooManyRequests):
            await client.replace(f"{CM}/x", obj("x", "5"), request_timeout=10.0)
    assert len(script.requests) == 1  # not sent again with no time left
    assert clock.sleeps == [10.0]


async def test_retries_fit_in_the_request_timeout() -> None:
    """A lease renewal (10 s timeout, as upstream's heartbeat client) under Retry-After: 1 sends at 0..9 s and gives
    up at 10 s, not past it."""
    clock = JumpClock()
    sent: list[float] = []
    script = Script()
    for _ in range(MAX_RETRIES + 1):
        script.add("PUT", f"{CM}/x", at(clock, sent, throttled("1")))
    async with script.client(clock=clock) as client:
        with pytest.raises(TooManyRequests):
            await client.replace(f"{CM}/x", obj("x", "5"), request_timeout=10.0)
    assert sent == [float(s) for s in range(10)]
    assert clock.now == 10.0


async def test_a_body_is_sent_again_intact() -> None:
    clock = JumpClock()
    body = {"metadata": {"name": "x"}, "data": {"k": "v" * 100}}
    patch = [{"op": "replace", "path": "/data/k", "value": "w"}]
    script = (
        Script()
        .add("POST", CM, throttled("1"))
        .add("POST", CM, httpx.Response(201, json=obj("x", "1")))
        .add("PATCH", f"{CM}/x", throttled("1", 503, "ServiceUnavailable"))
        .add("PATCH", f"{CM}/x", httpx.Response(200, json=obj("x", "2")))
    )
    async with script.client(clock=clock) as client:
        await client.create(CM, body, field_manager="m")
        await client.patch(f"{CM}/x", patch, patch_type="json")
    post1, post2, patch1, patch2 = script.requests
    assert json.loads(post2.content) == json.loads(post1.content) == body
    assert (post2.url, post2.headers["Content-Type"]) == (post1.url, post1.headers["Content-Type"])
    assert json.loads(patch2.content) == json.loads(patch1.content) == patch
    assert patch2.headers["Content-Type"] == patch1.headers["Content-Type"] == "application/json-patch+json"


async def test_a_watch_opening_is_retried_and_then_streams() -> None:
    clock = JumpClock()
    script = Script().add("GET", CM, throttled("2")).add("GET", CM, stream(line("ADDED", obj("a", "6"))))
    async with script.client(clock=clock) as client:
        events = [e async for e in client.watch(CM, resource_version="5")]
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "a")]
    assert clock.sleeps == [2.0]
    assert script.requests[0].url == script.requests[1].url


class ThrottlingServer:
    """HTTP/1.1 with keep-alive on loopback: `throttle` answers of 429 with Retry-After 1, then 200 echoing the
    request's body; every request's (method, body) is kept."""

    def __init__(self, throttle: int) -> None:
        self.port = 0
        self.throttle = throttle
        self.seen: list[tuple[str, bytes]] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode().split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen.append((lines[0].split(" ")[0], body))
                if len(self.seen) <= self.throttle:
                    code, extra, payload = 429, "Retry-After: 1\r\n", json.dumps({"kind": "Status", "code": 429})
                else:
                    code, extra, payload = 200, "", body.decode()
                data = payload.encode()
                writer.write(f"HTTP/1.1 {code} X\r\nContent-Length: {len(data)}\r\n{extra}\r\n".encode() + data)
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def direct_client(server: ThrottlingServer, clock: JumpClock) -> AsyncIterator[KubeClient]:
    async with serving(server):
        credentials = ClusterCredentials(server=f"http://127.0.0.1:{server.port}")
        async with KubeClient(credentials, direct=True, clock=clock) as client:
            yield client


async def test_the_direct_connection_retries_the_same_way() -> None:
    """A fleet node's Lease PUT goes over the direct connection (kube/direct.py): throttled twice, then renewed, its
    body sent three times the same, over the one kept connection."""
    clock = JumpClock()
    lease = {"kind": "Lease", "metadata": {"name": "n1", "resourceVersion": "7"}, "spec": {"holderIdentity": "n1"}}
    server = ThrottlingServer(throttle=2)
    async with direct_client(server, clock) as client:
        assert await client.replace_direct("/apis/coordination.k8s.io/v1/x/n1", lease, request_timeout=10.0) == lease
    assert [m for m, _ in server.seen] == ["PUT"] * 3
    assert len({b for _, b in server.seen}) == 1
    assert json.loads(server.seen[0][1]) == lease
    assert clock.sleeps == [1.0, 1.0]
    assert server.connections == 1


async def test_the_direct_connection_gives_up_at_the_deadline() -> None:
    clock = JumpClock()
    server = ThrottlingServer(throttle=100)
    async with direct_client(server, clock) as client:
        with pytest.raises(TooManyRequests):
            await client.get_direct("/apis/coordination.k8s.io/v1/x/n1", request_timeout=3.0)
    assert len(server.seen) == 3  # at 0, 1 and 2 s; the wait after the third reaches the deadline
    assert clock.now == 3.0
