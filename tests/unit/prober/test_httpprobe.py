"""The httpGet probe: the request it builds (pure, by table) and its verdicts against a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

from nodeagent.prober.httpprobe import HTTPProber, HTTPRequest, http_request
from nodeagent.prober.probe import Outcome, ProbeError, ProbeOutcome
from nodeagent.prober.spec import HTTPGetAction

CONTAINER: dict[str, Any] = {"name": "web", "ports": [{"name": "http", "containerPort": 8080}]}
UA = ("User-Agent", "kube-probe/1.34")
ACCEPT = ("Accept", "*/*")


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (HTTPGetAction(80, "/healthz"), HTTPRequest("http://198.18.0.9:80/healthz", (UA, ACCEPT))),
        (HTTPGetAction("http", "/"), HTTPRequest("http://198.18.0.9:8080/", (UA, ACCEPT))),
        (HTTPGetAction("8081", ""), HTTPRequest("http://198.18.0.9:8081", (UA, ACCEPT))),
        (HTTPGetAction(443, "/x", scheme="HTTPS"), HTTPRequest("https://198.18.0.9:443/x", (UA, ACCEPT))),
        (HTTPGetAction(80, "/", host="example.test"), HTTPRequest("http://example.test:80/", (UA, ACCEPT))),
        # The query survives; a path without its slash gets one, as Go's URL.String writes it.
        (HTTPGetAction(80, "/r?loc=a%2Fb"), HTTPRequest("http://198.18.0.9:80/r?loc=a%2Fb", (UA, ACCEPT))),
        (HTTPGetAction(80, "healthz"), HTTPRequest("http://198.18.0.9:80/healthz", (UA, ACCEPT))),
        # The probe's own User-Agent and Accept win; an empty Accept removes the header.
        (
            HTTPGetAction(80, "/", headers=(("user-agent", "mine"), ("X-A", "1"))),
            HTTPRequest("http://198.18.0.9:80/", (("user-agent", "mine"), ("X-A", "1"), ACCEPT)),
        ),
        (HTTPGetAction(80, "/", headers=(("Accept", ""),)), HTTPRequest("http://198.18.0.9:80/", (UA,))),
        (
            HTTPGetAction(80, "/", headers=(("Accept", "text/plain"),)),
            HTTPRequest("http://198.18.0.9:80/", (("Accept", "text/plain"), UA)),
        ),
    ],
    ids=[
        "numbered-port",
        "named-port",
        "port-as-string",
        "https",
        "own-host",
        "query-kept",
        "relative-path",
        "own-user-agent",
        "empty-accept",
        "own-accept",
    ],
)
def test_http_request(action: HTTPGetAction, expected: HTTPRequest) -> None:
    assert http_request(action, CONTAINER, "198.18.0.9") == expected


def test_http_request_with_an_undeclared_port_name() -> None:
    with pytest.raises(ProbeError, match='parsing "metrics"'):
        http_request(HTTPGetAction("metrics", "/"), CONTAINER, "198.18.0.9")


@dataclass
class Server:
    """A tiny HTTP/1.1 server: routes by path, records each request's path and headers."""

    port: int = 0
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        lines = head.decode().split("\r\n")
        target = lines[0].split(" ")[1]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        self.requests.append((target, headers))
        url = urllib.parse.urlsplit(target)
        query = dict(urllib.parse.parse_qsl(url.query))
        status, body, extra = 200, b"fine", ""
        if url.path == "/fail":
            status, body = 500, b"do not show this"
        elif url.path == "/redirect":
            status, body, extra = int(query.get("code", "302")), b"moved", f"Location: {query['to']}\r\n"
        elif url.path == "/loop":
            status, body, extra = 302, b"again", "Location: /loop\r\n"
        elif url.path == "/big":
            body = b"b" * 20_000
        elif url.path == "/hang":
            await reader.read()  # no answer until the client gives up and closes
        reply = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
        with contextlib.suppress(ConnectionError):
            writer.write(reply.encode() + body)
            await writer.drain()
        writer.close()


async def _serve() -> Server:
    server = Server()
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = server.server.sockets[0].getsockname()[1]
    return server


@pytest_asyncio.fixture(loop_scope="session")
async def servers() -> AsyncIterator[tuple[Server, Server]]:
    first, second = await _serve(), await _serve()
    try:
        yield first, second
    finally:
        for s in (first, second):
            assert s.server is not None
            s.server.close()


@pytest_asyncio.fixture(loop_scope="session")
async def prober() -> AsyncIterator[HTTPProber]:
    http = HTTPProber()
    try:
        yield http
    finally:
        await http.aclose()


def _get(server: Server, path: str) -> HTTPRequest:
    return http_request(HTTPGetAction(server.port, path), {}, "127.0.0.1")


async def test_success_and_failure(servers: tuple[Server, Server], prober: HTTPProber) -> None:
    first, _ = servers
    assert await prober.probe(_get(first, "/ok"), 1) == ProbeOutcome(Outcome.SUCCESS, "fine")
    assert await prober.probe(_get(first, "/fail"), 1) == ProbeOutcome(
        Outcome.FAILURE, "HTTP probe failed with statuscode: 500"
    )
    big = await prober.probe(_get(first, "/big"), 1)
    assert big.result is Outcome.SUCCESS
    assert len(big.output) == 10240


async def test_headers_reach_the_server(servers: tuple[Server, Server], prober: HTTPProber) -> None:
    first, _ = servers
    first.requests.clear()
    action = HTTPGetAction(first.port, "/ok", headers=(("X-Probe", "yes"), ("Host", "svc.example")))
    assert (await prober.probe(http_request(action, {}, "127.0.0.1"), 1)).result is Outcome.SUCCESS
    [(path, headers)] = first.requests
    assert path == "/ok"
    assert headers["x-probe"] == "yes"
    assert headers["host"] == "svc.example"
    assert headers["user-agent"] == "kube-probe/1.34"
    assert headers["accept"] == "*/*"


async def test_redirects(servers: tuple[Server, Server], prober: HTTPProber) -> None:
    first, second = servers
    same_host_other_port = f"http://127.0.0.1:{second.port}/ok"
    other_host = f"http://localhost:{second.port}/ok"
    second.requests.clear()
    # The same host name (any port) is followed, as upstream's redirect checker compares host names only.
    followed = await prober.probe(_get(first, "/redirect?to=" + urllib.parse.quote(same_host_other_port)), 1)
    assert followed == ProbeOutcome(Outcome.SUCCESS, "fine")
    assert [p for p, _ in second.requests] == ["/ok"]
    # Another host: not followed, the redirect is the answer, a warning (success plus a ProbeWarning event).
    second.requests.clear()
    for code in (301, 302, 307):
        warned = await prober.probe(_get(first, f"/redirect?code={code}&to=" + urllib.parse.quote(other_host)), 1)
        assert warned == ProbeOutcome(Outcome.WARNING, "Probe terminated redirects, Response body: moved")
    assert second.requests == []
    # A redirect to a failing page on the same host fails.
    failing = f"http://127.0.0.1:{first.port}/fail"
    assert (await prober.probe(_get(first, "/redirect?to=" + urllib.parse.quote(failing)), 1)).result is Outcome.FAILURE
    # Go's default policy: the 10th redirect is refused.
    first.requests.clear()
    looped = await prober.probe(_get(first, "/loop"), 2)
    assert looped == ProbeOutcome(
        Outcome.FAILURE, f'Get "http://127.0.0.1:{first.port}/loop": stopped after 10 redirects'
    )
    assert len(first.requests) == 10


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        # Unparsable: a failure, as Go's client fails the request. httpx rejects such a Location itself while it
        # builds the redirect it does not follow (RemoteProtocolError), so the words are httpx's, not Go's
        # "failed to parse Location header".
        ("http://[::1/", 'Get "{url}": Invalid URL in location header: '),
        ("http://127.0.0.1:80a/", 'Get "{url}": Invalid URL in location header: '),
        # Parsed, but no port to dial: Go's dialer refuses it; here the socket layer raised OverflowError in an
        # ExceptionGroup, past httpx, and the worker logged a crash every period instead of a verdict.
        ("http://127.0.0.1:99999/ok", 'Get "http://127.0.0.1:99999/ok": dial tcp: address 99999: invalid port'),
    ],
    ids=["bad-host", "bad-port", "port-out-of-range"],
)
async def test_a_bad_location_is_a_failure(
    servers: tuple[Server, Server], prober: HTTPProber, location: str, expected: str
) -> None:
    first, _ = servers
    request = _get(first, "/redirect?to=" + urllib.parse.quote(location))
    outcome = await prober.probe(request, 1)
    assert outcome.result is Outcome.FAILURE
    assert outcome.output.startswith(expected.format(url=request.url)), outcome.output


async def test_a_request_that_cannot_be_built_is_an_error(prober: HTTPProber) -> None:
    # The probe's own host makes an unparsable URL: as upstream, the probe errors (no verdict); httpx.InvalidURL,
    # not an httpx.HTTPError, escaped and the worker logged a crash every period.
    request = http_request(HTTPGetAction(80, "/", host="[::1"), {}, "198.18.0.9")
    with pytest.raises(ProbeError, match=r'^parse "http://\[::1:80/": '):
        await prober.probe(request, 1)


async def test_timeout_and_refused(servers: tuple[Server, Server], prober: HTTPProber) -> None:
    first, _ = servers
    hung = await prober.probe(_get(first, "/hang"), 0.2)
    assert hung.result is Outcome.FAILURE
    assert hung.output == (
        f'Get "http://127.0.0.1:{first.port}/hang": context deadline exceeded '
        "(Client.Timeout exceeded while awaiting headers)"
    )
    closed = await _serve()
    assert closed.server is not None
    closed.server.close()
    await closed.server.wait_closed()
    refused = await prober.probe(_get(closed, "/"), 1)
    assert refused == ProbeOutcome(
        Outcome.FAILURE,
        f'Get "http://127.0.0.1:{closed.port}/": dial tcp 127.0.0.1:{closed.port}: connect: connection refused',
    )
