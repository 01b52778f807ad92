"""KubeClient over httpx.MockTransport: what goes out on the wire and how each answer comes back."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from nodeagent import __version__
from nodeagent.kube.client import BearerToken, KubeClient
from nodeagent.kube.errors import (
    AlreadyExists,
    ApiError,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.kube.metrics import RestClientMetrics
from nodeagent.kube.watch import WatchEvent
from tests.unit.kube.scripted import SERVER, Script, bookmark, expired, line, obj, object_list, status, stream

CM = "/api/v1/namespaces/default/configmaps"


@pytest.mark.parametrize(
    ("reply", "cls", "reason"),
    [
        (status(401, "Unauthorized"), Unauthorized, "Unauthorized"),
        (status(403, "Forbidden", "nope"), Forbidden, "Forbidden"),
        (status(404, "NotFound", 'configmaps "x" not found'), NotFound, "NotFound"),
        (status(409, "Conflict", "modified"), Conflict, "Conflict"),
        (status(409, "AlreadyExists", "exists"), AlreadyExists, "AlreadyExists"),
        (status(410, "Gone", "too old"), Gone, "Gone"),
        (status(422, "Invalid", "bad name"), Invalid, "Invalid"),
        (status(429, "TooManyRequests", "slow down"), TooManyRequests, "TooManyRequests"),
        (status(500, "InternalError", "boom"), ServerError, "InternalError"),
        (status(503, "ServiceUnavailable", "starting"), ServerError, "ServiceUnavailable"),
        (httpx.Response(404, text="404 page not found"), NotFound, "NotFound"),
        (httpx.Response(302, headers={"Location": "/elsewhere"}), ApiError, "Found"),
    ],
)
async def test_failure_answers_raise_their_class(reply: httpx.Response, cls: type[ApiError], reason: str) -> None:
    script = Script().add("GET", f"{CM}/x", reply)
    async with script.client() as client:
        with pytest.raises(ApiError) as caught:
            await client.get(f"{CM}/x")
    assert type(caught.value) is cls
    assert caught.value.reason == reason
    assert caught.value.status_code == reply.status_code


async def test_retry_after_header_reaches_the_error() -> None:
    reply = status(429, "TooManyRequests", "slow down")
    reply.headers["Retry-After"] = "2"
    # No retries left: the answer is final, and its Retry-After is the caller's (tests/unit/kube/test_retry.py).
    async with Script().add("GET", f"{CM}/x", reply).client(max_retries=0) as client:
        with pytest.raises(TooManyRequests) as caught:
            await client.get(f"{CM}/x")
    assert caught.value.retry_after == 2.0


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("connection refused"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.ReadTimeout("read timed out"),
        httpx.RemoteProtocolError("peer closed connection"),
        httpx.ReadError(""),
    ],
)
async def test_transport_failures_are_unavailable(exc: httpx.RequestError) -> None:
    async with Script().add("GET", f"{CM}/x", exc).client() as client:
        with pytest.raises(ApiUnavailable) as caught:
            await client.get(f"{CM}/x")
    assert caught.value.__cause__ is exc
    assert f"GET {CM}/x" in str(caught.value)
    assert type(exc).__name__ in str(caught.value)


@pytest.mark.parametrize("body", [b"<html>", b"[1]"])
async def test_malformed_success_is_unavailable(body: bytes) -> None:
    async with Script().add("GET", f"{CM}/x", httpx.Response(200, content=body)).client() as client:
        with pytest.raises(ApiUnavailable, match="malformed response"):
            await client.get(f"{CM}/x")


async def test_headers_body_and_content_type_on_the_wire() -> None:
    answered = obj("x", "5")
    script = (
        Script()
        .add("POST", CM, httpx.Response(201, json=answered))
        .add("PUT", f"{CM}/x", httpx.Response(200, json=answered))
        .add("PATCH", f"{CM}/x/status", httpx.Response(200, json=answered))
        .add("PATCH", f"{CM}/x", httpx.Response(200, json=answered))
        .add("DELETE", f"{CM}/x", httpx.Response(200, json={"kind": "Status", "status": "Success"}))
    )
    async with script.client() as client:
        assert await client.create(CM, {"metadata": {"name": "x"}}) == answered
        assert await client.replace(f"{CM}/x", answered) == answered
        await client.patch(f"{CM}/x", {"status": {"a": 1}}, subresource="status")
        await client.patch(f"{CM}/x", [{"op": "remove", "path": "/data/a"}], patch_type="json")
        await client.delete(f"{CM}/x", grace_period_seconds=0, preconditions_uid="u1")
    create, replace, strategic, json_patch, delete = script.requests
    for request in script.requests:
        assert request.headers["User-Agent"] == f"nodeagent/{__version__}"
        assert request.headers["Accept"] == "application/json"
        assert str(request.url).startswith(SERVER)
    assert create.headers["Content-Type"] == "application/json"
    assert json.loads(create.content) == {"metadata": {"name": "x"}}
    assert replace.headers["Content-Type"] == "application/json"
    assert strategic.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert json.loads(strategic.content) == {"status": {"a": 1}}
    assert json_patch.headers["Content-Type"] == "application/json-patch+json"
    assert json.loads(json_patch.content) == [{"op": "remove", "path": "/data/a"}]
    assert json.loads(delete.content) == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": "u1"},
    }


async def test_per_request_timeout_and_default() -> None:
    script = (
        Script().add("GET", f"{CM}/x", httpx.Response(200, json={})).add("GET", f"{CM}/y", httpx.Response(200, json={}))
    )
    async with script.client() as client:
        await client.get(f"{CM}/x", request_timeout=5.0)
        await client.get(f"{CM}/y")
    assert script.requests[0].extensions["timeout"]["read"] == 5.0
    assert script.requests[1].extensions["timeout"]["read"] == 30.0


async def test_server_with_a_path_prefix_and_tls_server_name() -> None:
    script = Script().add("GET", "/k8s/clusters/c1/api/v1/nodes/n", httpx.Response(200, json={}))
    credentials = ClusterCredentials(server="https://proxy.test/k8s/clusters/c1", tls_server_name="kubernetes")
    async with script.client(credentials) as client:
        await client.get("/api/v1/nodes/n")
    assert script.requests[0].extensions["sni_hostname"] == "kubernetes"


async def test_list_follows_continue_tokens() -> None:
    script = (
        Script()
        .add(
            "GET",
            CM,
            object_list("100", obj("a", "90"), obj("b", "91"), continue_token="t1"),
            {"labelSelector": "app=x", "resourceVersion": "0", "limit": "2"},
        )
        .add(
            "GET",
            CM,
            object_list("100", obj("c", "92"), continue_token="t2"),
            {"labelSelector": "app=x", "limit": "2", "continue": "t1"},
        )
        .add("GET", CM, object_list("100"), {"labelSelector": "app=x", "limit": "2", "continue": "t2"})
    )
    async with script.client() as client:
        listed = await client.list(CM, label_selector="app=x", resource_version="0", limit=2)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "b", "c"]
    assert listed["metadata"] == {"resourceVersion": "100"}
    assert listed["kind"] == "List"


async def test_list_with_expired_continue_token_is_gone() -> None:
    script = (
        Script()
        .add("GET", CM, object_list("100", obj("a", "90"), continue_token="t1"))
        .add("GET", CM, status(410, "Expired", "The provided continue parameter is too old"))
    )
    async with script.client() as client:
        with pytest.raises(Gone):
            await client.list(CM, limit=1)


async def test_watch_yields_events_from_chunked_lines() -> None:
    a, b = obj("a", "11"), obj("a", "12", data={"k": "v"})
    body = line("ADDED", a) + line("MODIFIED", b) + bookmark("20") + line("DELETED", obj("a", "21"))
    reply = stream(*(body[i : i + 5] for i in range(0, len(body), 5)))
    script = Script().add(
        "GET",
        CM,
        reply,
        {
            "watch": "true",
            "resourceVersion": "10",
            "fieldSelector": "metadata.name=a",
            "timeoutSeconds": "300",
            "allowWatchBookmarks": "true",
        },
    )
    async with script.client() as client:
        events = [
            e
            async for e in client.watch(
                CM, resource_version="10", field_selector="metadata.name=a", timeout_seconds=300
            )
        ]
    assert [(e.type, e.resource_version) for e in events] == [
        ("ADDED", "11"),
        ("MODIFIED", "12"),
        ("BOOKMARK", "20"),
        ("DELETED", "21"),
    ]
    assert events[1].object == b
    # The read timeout leaves the server room to end the watch itself.
    assert script.requests[0].extensions["timeout"]["read"] == 330.0


async def test_watch_error_410_raises_gone_after_earlier_events() -> None:
    script = Script().add("GET", CM, stream(line("ADDED", obj("a", "11")), expired()))
    seen: list[WatchEvent] = []
    async with script.client() as client:
        with pytest.raises(Gone) as caught:
            async for event in client.watch(CM, resource_version="10"):
                seen.append(event)
    assert [e.type for e in seen] == ["ADDED"]
    assert caught.value.reason == "Expired"
    assert caught.value.status_code == 410


@pytest.mark.parametrize(
    ("reply", "cls"),
    [
        (status(410, "Expired", "too old resource version: 1 (50)"), Gone),
        (status(403, "Forbidden", "nope"), Forbidden),
        (status(500, "InternalError", "boom"), ServerError),
        (httpx.ConnectError("refused"), ApiUnavailable),
        (stream(line("ADDED", obj("a", "11")), httpx.RemoteProtocolError("incomplete chunked read")), ApiUnavailable),
        (stream(b'{"type": "ADDED", "obj'), ApiUnavailable),
        (stream(line("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError"})), ServerError),
    ],
)
async def test_watch_failures_raise_their_class(reply: httpx.Response | Exception, cls: type[Exception]) -> None:
    async with Script().add("GET", CM, reply).client() as client:
        with pytest.raises(cls):
            async for _ in client.watch(CM, resource_version="10"):
                pass


class _Lines(httpx.AsyncByteStream):
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


async def test_watch_closed_early_closes_the_stream() -> None:
    body = _Lines(line("ADDED", obj("a", "11")), line("ADDED", obj("b", "12")))
    client = Script().add("GET", CM, httpx.Response(200, stream=body)).client()
    async with client, contextlib.aclosing(client.watch(CM, resource_version="10")) as events:
        async for event in events:
            assert event.type == "ADDED"
            break
    assert body.closed


async def test_bearer_token_inline_and_from_kubeconfig_credentials() -> None:
    script = Script().add("GET", "/api/v1/nodes/n", httpx.Response(200, json={}))
    async with script.client(ClusterCredentials(server=SERVER, token="s3cret")) as client:
        await client.get("/api/v1/nodes/n")
    assert script.requests[0].headers["Authorization"] == "Bearer s3cret"


def test_token_file_is_reread_after_the_refresh_period(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one\n")
    now = [0.0]
    auth = BearerToken("inline", token_file, refresh=60.0, clock=lambda: now[0])
    assert auth.current() == "one"
    token_file.write_text("two\n")
    now[0] = 59.0
    assert auth.current() == "one"
    now[0] = 60.0
    assert auth.current() == "two"
    token_file.unlink()  # mid-rotation: keep the last good token
    now[0] = 200.0
    assert auth.current() == "two"


async def test_rest_client_metrics_count_answers_and_failures() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/down":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(404 if request.url.path == "/missing" else 200, json={"kind": "Status"})

    registry = CollectorRegistry()
    client = KubeClient(ClusterCredentials(server="https://api.example:6443"), transport=httpx.MockTransport(handler))
    client.metrics = RestClientMetrics(registry)
    await client.get("/ok")
    with pytest.raises(NotFound):
        await client.get("/missing")
    with pytest.raises(ApiUnavailable):
        await client.get("/down")
    await client.aclose()

    def count(code: str) -> float | None:
        return registry.get_sample_value(
            "rest_client_requests_total", {"code": code, "host": "api.example:6443", "method": "GET"}
        )

    assert (count("200"), count("404"), count("<error>")) == (1.0, 1.0, 1.0)
    assert (
        registry.get_sample_value(
            "rest_client_request_duration_seconds_count", {"verb": "GET", "host": "api.example:6443"}
        )
        == 3.0
    )


class _Gate(httpx.AsyncBaseTransport):
    """Holds every GET of a configmap until released, and counts how many are under way at once; a watch (the
    `watch=true` query) answers at once with an endless stream, held open by the test."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.under_way = 0
        self.most = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") == "true":

            async def endless() -> AsyncIterator[bytes]:
                await asyncio.Event().wait()
                yield b""

            return httpx.Response(200, content=endless())
        self.under_way += 1
        self.most = max(self.most, self.under_way)
        try:
            await self.release.wait()
        finally:
            self.under_way -= 1
        return httpx.Response(200, json=obj("a", "1"))


async def test_max_requests_bounds_the_requests_under_way_and_not_the_watches() -> None:
    gate = _Gate()
    client = KubeClient(ClusterCredentials(server=SERVER), transport=gate, max_requests=2)
    async with client:
        # Two watches open first: they take no slot.
        watches = [client.watch(CM, resource_version="1") for _ in range(2)]
        pending_watches = [asyncio.create_task(anext(w)) for w in watches]
        gets = [asyncio.create_task(client.get(f"{CM}/a")) for _ in range(5)]
        for _ in range(20):
            await asyncio.sleep(0)
        under_way = gate.under_way
        gate.release.set()
        answers = await asyncio.gather(*gets)
        assert under_way == 2
        for task in pending_watches:
            task.cancel()
        await asyncio.gather(*pending_watches, return_exceptions=True)
        for w in watches:
            await w.aclose()
    assert [a["metadata"]["name"] for a in answers] == ["a"] * 5
    assert gate.most == 2


async def test_a_request_waiting_for_a_slot_past_its_timeout_is_unavailable() -> None:
    gate = _Gate()
    client = KubeClient(ClusterCredentials(server=SERVER), transport=gate, max_requests=1)
    async with client:
        held = asyncio.create_task(client.get(f"{CM}/a"))
        for _ in range(5):
            await asyncio.sleep(0)
        try:
            with pytest.raises(ApiUnavailable, match=r"no request slot free within 0\.1s"):
                async with asyncio.timeout(5):  # the mock transport has no timeouts of its own
                    await client.get(f"{CM}/a", request_timeout=0.1)
        finally:
            gate.release.set()
        assert (await held)["metadata"]["name"] == "a"
    assert gate.most == 1


@pytest.mark.parametrize("bad", [0, 17])
def test_max_requests_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match=f"max_requests {bad}: want 1..16"):
        KubeClient(ClusterCredentials(server=SERVER), max_requests=bad)
