"""The static pod URL source against httpx's MockTransport (the client's own seam) and a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import yaml

from nodeagent.podconfig import Operation, SourceUpdate
from nodeagent.sources.manifest import MAX_MANIFEST_BYTES
from nodeagent.sources.problems import ManifestProblem
from nodeagent.sources.url import URLSource
from tests.unit.fakeclock import FakeClock

URL = "http://manifests.test/pods"
NODE = "node-1"


def pod(name: str, image: str = "busybox:1.35") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": image}]}}  # fmt: skip


def pod_list(*items: dict[str, Any]) -> bytes:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "PodList", "items": list(items)}).encode()


class Server:
    def __init__(self) -> None:
        self.reply: Callable[[httpx.Request], httpx.Response] = lambda r: httpx.Response(200, content=b"")
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.reply(request)

    def serve(self, body: bytes, status: int = 200) -> None:
        self.reply = lambda r: httpx.Response(status, content=body)


class Harness:
    def __init__(self) -> None:
        self.server = Server()
        self.updates: list[SourceUpdate] = []
        self.problems: list[ManifestProblem] = []
        self.source = URLSource(
            URL,
            node_name=NODE,
            push=self.updates.append,
            check_frequency=20,
            on_problem=self.problems.append,
            headers={"Authorization": ["Bearer t"], "X-Multi": ["a", "b"]},
            clock=FakeClock(),
            transport=httpx.MockTransport(self.server),
        )

    async def poll(self) -> bool:
        async with self.source._client() as client:
            return await self.source.poll_once(client)

    def last(self) -> list[str]:
        assert self.updates[-1].op is Operation.SET
        return [p["metadata"]["name"] for p in self.updates[-1].pods]


@pytest.fixture
def h() -> Harness:
    return Harness()


async def test_a_single_pod_with_the_configured_headers(h: Harness) -> None:
    h.server.serve(yaml.safe_dump(pod("web")).encode())
    assert await h.poll()
    assert h.last() == ["web-node-1"]
    [request] = h.server.requests
    assert request.headers["Authorization"] == "Bearer t"
    assert request.headers.get_list("X-Multi") == ["a", "b"]
    uid = h.updates[-1].pods[0]["metadata"]["uid"]
    assert h.updates[-1].origins == {uid: URL}
    assert "tolerations" not in h.updates[-1].pods[0]["spec"]  # only pods from files tolerate NoExecute


async def test_a_pod_list_follows_changes_and_skips_bad_items(h: Harness) -> None:
    h.server.serve(pod_list(pod("one"), pod("two")))
    assert await h.poll()
    assert h.last() == ["one-node-1", "two-node-1"]
    h.server.serve(pod_list(pod("two"), pod("bad", image=""), pod("three")))
    assert await h.poll()
    assert h.last() == ["two-node-1", "three-node-1"]
    [problem] = h.problems
    assert problem.origin == f"{URL} items[1]"
    assert "image: Required value" in problem.message
    assert sorted(h.updates[-1].origins.values()) == [f"{URL} items[0]", f"{URL} items[2]"]
    # The same answer again: nothing new, not even a repeated report.
    pushes = len(h.updates)
    assert await h.poll()
    assert len(h.updates) == pushes and len(h.problems) == 1


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"boom", 500),
        (b"nope", 404),
        (b"#" * (MAX_MANIFEST_BYTES + 1), 200),
    ],
)
async def test_errors_change_nothing(h: Harness, body: bytes, status: int) -> None:
    h.server.serve(pod_list(pod("one")))
    assert await h.poll()
    h.server.serve(body, status)
    assert not await h.poll()
    assert h.last() == ["one-node-1"]  # no new SET: the pods keep running
    assert len(h.updates) == 1


async def test_a_connection_failure_before_any_answer_reports_nothing(h: Harness) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    h.server.reply = refuse
    assert not await h.poll()
    assert h.updates == []  # not seen yet: housekeeping waits for this source


async def test_an_unusable_document_is_reported_and_changes_nothing(h: Harness) -> None:
    h.server.serve(pod_list(pod("one")))
    await h.poll()
    h.server.serve(b"a: &x [1]\nb: *x\n")
    assert not await h.poll()
    assert not await h.poll()
    assert len(h.updates) == 1
    [problem] = h.problems
    assert problem.origin == URL
    assert "aliases are not allowed" in problem.message
    h.server.serve(yaml.safe_dump({"apiVersion": "v1", "kind": "Service"}).encode())
    assert not await h.poll()
    assert "couldn't parse as pod" in h.problems[-1].message


async def test_an_empty_answer_is_an_empty_set(h: Harness) -> None:
    h.server.serve(pod_list(pod("one")))
    await h.poll()
    h.server.serve(b"")
    assert await h.poll()
    assert h.updates[-1] == SourceUpdate("http", Operation.SET, ())


async def test_run_polls_on_the_period(h: Harness) -> None:
    clock = FakeClock()
    h.source._clock = clock
    h.server.serve(pod_list(pod("one")))
    task = asyncio.create_task(h.source.run())
    for _ in range(100):
        await asyncio.sleep(0.005)
        if h.updates:
            break
    assert h.source.polls == 1
    await clock.advance(19)
    assert h.source.polls == 1
    await clock.advance(1)
    for _ in range(100):
        await asyncio.sleep(0.005)
        if h.source.polls == 2:
            break
    assert h.source.polls == 2
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
