"""A scripted apiserver behind httpx.MockTransport (httpx's own seam): each request must match the next step."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from nodeagent.clock import Clock
from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.kube.retry import MAX_RETRIES

SERVER = "https://kube.test:6443"

Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class ScriptExhausted(Exception):
    """The code under test sent a request the script did not expect: ends a reflector loop in tests."""


@dataclass
class Step:
    method: str
    path: str
    reply: Reply
    params: dict[str, str] | None = None  # exact query parameters, when given


@dataclass
class Script:
    steps: deque[Step] = field(default_factory=deque)
    requests: list[httpx.Request] = field(default_factory=list)

    def add(self, method: str, path: str, reply: Reply, params: dict[str, str] | None = None) -> Script:
        self.steps.append(Step(method, path, reply, params))
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.steps:
            raise ScriptExhausted(f"unexpected request {request.method} {request.url}")
        step = self.steps.popleft()
        assert (request.method, request.url.path) == (step.method, step.path), request.url
        if step.params is not None:
            assert dict(request.url.params) == step.params, request.url
        if isinstance(step.reply, Exception):
            raise step.reply
        if isinstance(step.reply, httpx.Response):
            return step.reply
        return step.reply(request)

    def client(
        self,
        credentials: ClusterCredentials | None = None,
        *,
        clock: Clock | None = None,
        max_retries: int = MAX_RETRIES,
    ) -> KubeClient:
        return KubeClient(
            credentials or ClusterCredentials(server=SERVER),
            transport=httpx.MockTransport(self),
            clock=clock,
            max_retries=max_retries,
        )


def status(code: int, reason: str, message: str = "", **extra: Any) -> httpx.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    body.update(message=message, **extra)
    return httpx.Response(code, json=body)


def obj(name: str, rv: str, kind: str = "ConfigMap", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "resourceVersion": rv}, **extra}


def object_list(rv: str, *items: dict[str, Any], continue_token: str | None = None) -> httpx.Response:
    metadata: dict[str, Any] = {"resourceVersion": rv}
    if continue_token:
        metadata.update({"continue": continue_token, "remainingItemCount": 1})
    return httpx.Response(200, json={"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": list(items)})


def line(kind: str, o: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": o}).encode() + b"\n"


def bookmark(rv: str) -> bytes:
    return line("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": rv}})


def expired() -> bytes:
    return line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})


def stream(*chunks: bytes | Exception) -> httpx.Response:
    """A streamed 200 answer, chunk by chunk; an exception in the chunks breaks the stream there."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            if isinstance(chunk, Exception):
                raise chunk
            yield chunk

    return httpx.Response(200, content=body())
