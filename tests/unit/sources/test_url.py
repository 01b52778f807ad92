"""The static pod URL source against httpx's MockTransport (the client's own seam) and a fake clock."""

from __future__ import annotations

import asyncio
import gzip
import logging
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable
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


def answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    """A response whose body streams, as a real server's does (`content=` would hand httpx a body already read)."""
    return httpx.Response(status, stream=httpx.ByteStream(body), headers=headers)


class Server:
    def __init__(self) -> None:
        self.reply: Callable[[httpx.Request], httpx.Response] = lambda r: answer(200, b"")
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.reply(request)

    def serve(self, body: bytes, status: int = 200) -> None:
        self.reply = lambda r: answer(status, body)


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


async def test_a_pod_list_follows_changes(h: Harness) -> None:
    h.server.serve(pod_list(pod("one"), pod("two")))
    assert await h.poll()
    assert h.last() == ["one-node-1", "two-node-1"]
    h.server.serve(pod_list(pod("two"), pod("three")))
    assert await h.poll()
    assert h.last() == ["two-node-1", "three-node-1"]
    assert sorted(h.updates[-1].origins.values()) == [f"{URL} items[0]", f"{URL} items[1]"]
    assert h.problems == []


@pytest.mark.parametrize(
    ("items", "bad"),
    [
        ((pod("two"), pod("bad", image=""), pod("three")), {1: "invalid pod: [spec.containers[0].image: Required"}),
        ((pod("one", image=""), pod("two"), "junk"), {0: "invalid pod: [", 2: "couldn't parse as pod(a str"}),
        ((pod("one"), pod("two", image=""), pod("three")), {1: "invalid pod: ["}),  # a running pod's item broke
    ],
)
async def test_a_pod_list_with_an_invalid_item_is_refused_whole_and_changes_nothing(
    h: Harness, items: tuple[Any, ...], bad: dict[int, str]
) -> None:
    """As upstream's tryDecodePodList: one invalid item refuses the list; the pods run on as they were."""
    h.server.serve(pod_list(pod("one"), pod("two")))
    assert await h.poll()
    h.server.serve(pod_list(*items))
    assert not await h.poll()
    assert len(h.updates) == 1 and h.last() == ["one-node-1", "two-node-1"]
    assert {p.origin: p.message for p in h.problems}.keys() == {f"{URL} items[{i}]" for i in bad}
    for problem in h.problems:
        assert problem.message.startswith(bad[int(problem.origin.rsplit("[", 1)[1][:-1])])
    # The same answer again: nothing new, not even a repeated report.
    assert not await h.poll()
    assert len(h.updates) == 1 and len(h.problems) == len(bad)
    # Fixed: the list is used, and nothing more is reported.
    h.server.serve(pod_list(pod("one"), pod("three")))
    assert await h.poll()
    assert h.last() == ["one-node-1", "three-node-1"]
    assert len(h.problems) == len(bad)


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
    assert h.problems[-1].message == (
        "couldn't parse as single or multiple pods(kind 'Service' of apiVersion 'v1' is not a v1 Pod or PodList)"
    )
    h.server.serve(yaml.safe_dump(pod("bad", image="")).encode())
    assert not await h.poll()
    assert h.problems[-1] == ManifestProblem(URL, "invalid pod: [spec.containers[0].image: Required value]")
    assert len(h.updates) == 1


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    "fail",
    [lambda r: answer(500, b"boom"), refuse],
    ids=["status", "connection"],
)
async def test_an_error_is_logged_again_after_an_answer_came_in_between(
    h: Harness, caplog: pytest.LogCaptureFixture, fail: Callable[[httpx.Request], httpx.Response]
) -> None:
    body = pod_list(pod("one"))
    h.server.serve(body)
    assert await h.poll()
    caplog.set_level(logging.INFO, logger="nodeagent.sources.url")

    def errors() -> int:
        return sum(1 for r in caplog.records if r.levelno == logging.WARNING and "not read" in r.getMessage())

    h.server.reply = fail
    assert not await h.poll()
    assert not await h.poll()
    assert errors() == 1  # once while it lasts
    h.server.serve(body)  # the very same answer as before the error
    assert await h.poll()
    h.server.reply = fail
    assert not await h.poll()
    assert errors() == 2
    assert any("readable again" in r.getMessage() for r in caplog.records)
    assert len(h.updates) == 1


def gzipped(reply: bytes, status: int = 200, encoding: str = "gzip") -> Callable[[httpx.Request], httpx.Response]:
    return lambda r: answer(status, reply, {"Content-Encoding": encoding})


async def test_gzip_is_asked_for_and_decompressed(h: Harness) -> None:
    body = pod_list(pod("one"), pod("two"))
    # Two gzip members are one body, as Go's reader reads them.
    h.server.reply = gzipped(gzip.compress(body[:10]) + gzip.compress(body[10:]))
    assert await h.poll()
    assert h.last() == ["one-node-1", "two-node-1"]
    assert h.server.requests[-1].headers["Accept-Encoding"] == "gzip"


def test_a_configured_accept_encoding_is_sent_as_configured() -> None:
    source = URLSource(URL, node_name=NODE, push=print, check_frequency=20, on_problem=print,
                       headers={"accept-encoding": ["identity"]})  # fmt: skip
    assert source._client().headers.get_list("Accept-Encoding") == ["identity"]


def gzip_bomb() -> bytes:
    """64 MiB of zeros in about 64 KiB (compressed a MiB at a time: the test measures the memory of the poll)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(64)) + compressor.flush()


BOMB = gzip_bomb()


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (gzipped(b"a: 1", encoding="br"), "unsupported Content-Encoding 'br'"),
        (gzipped(b"a: 1", encoding="gzip, deflate"), "unsupported Content-Encoding"),
        (gzipped(b"not gzip at all"), "the gzip body is corrupt"),
        (gzipped(gzip.compress(b"a: 1\n" * 100)[:-12]), "the gzip body ends early"),
        (gzipped(gzip.compress(b"x") + b"trailing junk"), "the gzip body is corrupt"),
        (gzipped(BOMB), "over the size limit"),
    ],
    ids=["br", "two-codings", "corrupt", "truncated", "trailing", "bomb"],
)
async def test_a_body_that_cannot_be_read_changes_nothing(
    h: Harness, reply: Callable[[httpx.Request], httpx.Response], error: str, caplog: pytest.LogCaptureFixture
) -> None:
    h.server.serve(pod_list(pod("one")))
    assert await h.poll()
    h.server.reply = reply
    tracemalloc.start()
    try:
        assert not await h.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20  # the bomb's 64 MiB are never built: decompression stops past the 1 MiB cap
    assert error in caplog.text
    assert len(h.updates) == 1 and h.problems == []


class Drip(httpx.AsyncByteStream):
    """A body that starts and never ends (a server dripping bytes slower than any per-read timeout notices)."""

    def __init__(self) -> None:
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"apiVersion: v1\n"
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


async def test_a_whole_poll_is_bounded_in_time(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    h.server.serve(pod_list(pod("one")))
    assert await h.poll()
    drip = Drip()
    h.server.reply = lambda r: httpx.Response(200, stream=drip)
    h.source._timeout = 0.05
    assert not await asyncio.wait_for(h.poll(), 5)
    assert "no complete answer within 0.05s" in caplog.text
    assert drip.closed
    assert len(h.updates) == 1


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
