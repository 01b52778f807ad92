"""`KubeClient`: the one thin layer that sends `request.ApiRequest`s to the apiserver through httpx.

Everything about a verb (path, query, body, content type) is decided in `request`; here a request is sent, the
answer decoded, and failures mapped once: HTTP failures through `errors.error_from_response`, transport failures
to `ApiUnavailable`, both with `raise ... from`. The httpx transport is the seam: unit tests pass an
`httpx.MockTransport`, production builds a TLS context from the kubeconfig.

Objects are JSON dicts (`Obj`). The client sends a request again only when the apiserver says when to, as
client-go's REST client does: a 429, or a 5xx, with a Retry-After header, up to 10 times within the request's timeout
(`retry`). Every other failure goes to the caller at once: the callers (the reflector, the node-status loop, the
lease, the status manager) each own their retry policy, as the kubelet's managers do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self
from urllib.parse import urlencode

import httpx

from nodeagent import __version__
from nodeagent.clock import Clock, SystemClock
from nodeagent.kube.direct import DirectConnection, ProtocolError
from nodeagent.kube.errors import ApiUnavailable, KubeconfigError, error_from_response, error_from_status
from nodeagent.kube.kubeconfig import ClusterCredentials, load_kubeconfig, read_token, ssl_context
from nodeagent.kube.metrics import RestClientMetrics
from nodeagent.kube.request import (
    JSON,
    ApiRequest,
    Obj,
    PatchBody,
    PatchType,
    PropagationPolicy,
    create_request,
    delete_request,
    get_request,
    list_request,
    patch_request,
    replace_request,
    watch_request,
)
from nodeagent.kube.retry import MAX_RETRIES, Retries
from nodeagent.kube.transport import MAX_KEEPALIVE_CONNECTIONS, ApiTransport
from nodeagent.kube.watch import WatchDecoder, WatchEvent

log = logging.getLogger(__name__)

USER_AGENT = f"nodeagent/{__version__}"
DEFAULT_TIMEOUT = 30.0
# A watch asks the server to end it after timeoutSeconds; the read timeout leaves the server room to do so first.
WATCH_READ_GRACE = 30.0
TOKEN_FILE_REFRESH = 60.0
# How often a direct request also closes httpx's expired idle connections (`send_direct`).
SWEEP_INTERVAL = 30.0
# The watches an agent keeps open, each on a connection of its own (its pods, its Node, Services, RuntimeClasses):
# `max_requests` leaves them room among the kept connections.
MAX_WATCHES = 4
# The most `max_requests` may be: the pool's kept connections less the watches'.
MAX_REQUESTS_BOUND = MAX_KEEPALIVE_CONNECTIONS - MAX_WATCHES


class BearerToken(httpx.Auth):
    """`Authorization: Bearer ...` from an inline token or a token file re-read every minute (as client-go does)."""

    def __init__(
        self,
        token: str | None,
        token_file: Path | None,
        *,
        refresh: float = TOKEN_FILE_REFRESH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._token = token
        self._file = token_file
        self._refresh = refresh
        self._clock = clock
        self._read_at: float | None = None

    def current(self) -> str | None:
        if self._file is not None and (self._read_at is None or self._clock() - self._read_at >= self._refresh):
            try:
                self._token = read_token(self._file)
            except KubeconfigError as exc:
                # Keep the last good token: the file may be mid-rotation.
                log.warning("token file unreadable path=%s error=%s", self._file, exc)
            self._read_at = self._clock()
        return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self.current()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


def _encode(body: PatchBody) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _decode_body(method: str, path: str, body: bytes) -> Obj:
    if not body:
        return {}
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise ApiUnavailable(f"malformed response to {method} {path}: not JSON") from exc
    if not isinstance(doc, dict):
        raise ApiUnavailable(f"malformed response to {method} {path}: not an object")
    return doc


class _Answer(NamedTuple):
    """One attempt's answer, whichever connection it came over."""

    status: int
    retry_after: str | None  # the Retry-After header
    body: bytes


def _unavailable(request: ApiRequest, exc: httpx.RequestError) -> ApiUnavailable:
    detail = str(exc) or type(exc).__name__
    return ApiUnavailable(f"{request.method} {request.path}: {type(exc).__name__}: {detail}")


class KubeClient:
    """An async client of one apiserver. Use as `async with KubeClient.from_kubeconfig(path) as client:`."""

    def __init__(
        self,
        credentials: ClusterCredentials,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        user_agent: str = USER_AGENT,
        direct: bool = False,
        max_retries: int = MAX_RETRIES,
        clock: Clock | None = None,
        max_requests: int | None = None,
    ) -> None:
        self.credentials = credentials
        # At most this many requests through httpx at once, watches apart (None: no bound). Over HTTP/1.1 each
        # request under way holds a connection of its own: a fleet node's burst (its pods' status patches, events and
        # deletions together) opened as many, and past the pool's 20 kept ones each was a new TCP connection and TLS
        # handshake, closed after one use (docs/fleet.md, "Connections per node"). Bounded below the kept ones, the
        # node's requests reuse the same few connections and wait their turn instead, within their own timeout.
        if max_requests is not None and not 0 < max_requests <= MAX_REQUESTS_BOUND:
            raise ValueError(f"max_requests {max_requests}: want 1..{MAX_REQUESTS_BOUND}")
        self._slots = asyncio.Semaphore(max_requests) if max_requests is not None else None
        self.max_requests = max_requests
        self._timeout = timeout
        # How many times a request answered 429 or 5xx with a Retry-After is sent again (`retry`); the clock times
        # the waits and the request's deadline.
        self.max_retries = max_retries
        self._clock: Clock = clock if clock is not None else SystemClock()
        # Set by the agent to count and time every request (rest_client_* on its /metrics).
        self.metrics: RestClientMetrics | None = None
        self._metrics_host = httpx.URL(credentials.server).netloc.decode()
        self._extensions: dict[str, Any] = (
            {"sni_hostname": credentials.tls_server_name} if credentials.tls_server_name else {}
        )
        auth = (
            BearerToken(credentials.token, credentials.token_file)
            if credentials.token or credentials.token_file
            else None
        )
        # With a transport given (tests), do not build a context nobody uses. Kept: client certificate rotation
        # loads the new pair into it (`reload_client_certificate`) and closes the connections made with the old one
        # (`close_connections`). Ours closes a TLS handshake cut short (`transport`).
        self.tls_context: ssl.SSLContext | None = None
        # `send_direct`'s connection, beside httpx's pool: only for a client made with `direct=True` (a fleet's lease
        # heartbeats and its nodes' own clients, where its CPU counts), and never with a test's transport. Without it
        # the `*_direct` methods go through httpx like every other request (a single agent: one HTTP client, one
        # behaviour).
        self._direct: DirectConnection | None = None
        self._swept = float("-inf")  # when send_direct last closed httpx's expired idle connections
        if transport is None:
            self.tls_context = ssl_context(credentials)
            transport = ApiTransport(self.tls_context)
            if direct:
                self._direct = DirectConnection(
                    credentials.server,
                    self.tls_context,
                    server_hostname=credentials.tls_server_name,
                    user_agent=user_agent,
                    authorization=auth.current if auth is not None else lambda: None,
                )
        self._transport = transport
        self._http = httpx.AsyncClient(
            base_url=credentials.server,
            transport=transport,
            auth=auth,
            headers={"User-Agent": user_agent, "Accept": "application/json"},
            timeout=timeout,
        )

    def reload_client_certificate(self, pair: Path) -> None:
        """Present the certificate and key in `pair` (one PEM file) from the next TLS handshake on. Connections open
        now keep the identity they authenticated with until `close_connections`."""
        if self.tls_context is not None:
            self.tls_context.load_cert_chain(str(pair))

    async def close_connections(self) -> None:
        """Close every connection to the apiserver, watches and requests under way included (see
        `ApiTransport.close_connections`); a no-op with a transport given by a test."""
        if self._direct is not None:
            self._direct.close()
        if isinstance(self._transport, ApiTransport):
            await self._transport.close_connections()

    @classmethod
    def from_kubeconfig(
        cls,
        path: Path,
        *,
        context: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        direct: bool = False,
        max_requests: int | None = None,
    ) -> KubeClient:
        return cls(
            load_kubeconfig(path, context=context),
            transport=transport,
            timeout=timeout,
            direct=direct,
            max_requests=max_requests,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._direct is not None:
            self._direct.close()
        await self._http.aclose()

    def _build(self, request: ApiRequest, timeout: httpx.Timeout) -> httpx.Request:
        headers = {"Content-Type": request.content_type} if request.content_type else {}
        return self._http.build_request(
            request.method,
            request.path,
            params=request.params,
            content=_encode(request.body) if request.body is not None else None,
            headers=headers,
            timeout=timeout,
            extensions=self._extensions,
        )

    async def send(self, request: ApiRequest, *, request_timeout: float | None = None) -> Obj:
        """Send one request and return the object the apiserver answered with; the single exit for errors. An
        answer with a Retry-After is waited for and sent again (`_retrying`)."""
        return await self._retrying(request, request_timeout or self._timeout, self._attempt)

    async def _attempt(self, request: ApiRequest, timeout: float, retry: bool) -> _Answer:
        """One attempt through httpx; with `max_requests`, once a slot is free, the wait counted in `timeout`."""
        if self._slots is None:
            return await self._send_http(request, timeout, retry)
        loop = asyncio.get_running_loop()
        started = loop.time()  # the loop's clock, which times asyncio.timeout
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
        except TimeoutError:
            self._count(request.method, "<error>", retry)
            raise ApiUnavailable(
                f"{request.method} {request.path}: no request slot free within {timeout:.1f}s "
                f"({self.max_requests} requests under way)"
            ) from None
        try:
            return await self._send_http(request, max(timeout - (loop.time() - started), 0.001), retry)
        finally:
            self._slots.release()

    async def _send_http(self, request: ApiRequest, timeout: float, retry: bool) -> _Answer:
        try:
            response = await self._http.send(self._build(request, httpx.Timeout(timeout)))
        except httpx.RequestError as exc:
            log.debug("api request failed method=%s path=%s error=%r", request.method, request.path, exc)
            self._count(request.method, "<error>", retry)
            raise _unavailable(request, exc) from exc
        self._count(request.method, str(response.status_code), retry)
        return _Answer(response.status_code, response.headers.get("Retry-After"), response.content)

    async def _retrying(
        self,
        request: ApiRequest,
        timeout: float,
        attempt: Callable[[ApiRequest, float, bool], Awaitable[_Answer]],
    ) -> Obj:
        """Send `request` by `attempt` until an answer is final: a success, a failure that says nothing of when to
        try again, the retries used up, or the deadline (`timeout` from now, the whole request's, as client-go's
        request timeout) reached. Every request but a watch passes here."""
        started = self._clock.monotonic()
        retries = Retries(max_retries=self.max_retries, deadline=started + timeout)
        try:
            while True:
                sent = self._clock.monotonic()
                answer = await attempt(request, retries.remaining(sent, timeout), retries.attempts > 0)
                log.debug(
                    "api request method=%s path=%s status=%d duration=%.3f",
                    request.method,
                    request.path,
                    answer.status,
                    self._clock.monotonic() - sent,
                )
                if 200 <= answer.status < 300:
                    return _decode_body(request.method, request.path, answer.body)
                if not await self._wait_to_retry(request, retries, answer.status, answer.retry_after):
                    raise error_from_response(answer.status, answer.body, retry_after=answer.retry_after)
        finally:
            if self.metrics is not None:
                self.metrics.observe_duration(
                    host=self._metrics_host, verb=request.method, seconds=self._clock.monotonic() - started
                )

    async def _wait_to_retry(self, request: ApiRequest, retries: Retries, status: int, retry_after: str | None) -> bool:
        """After a failed answer: wait its Retry-After and say True to send again, or say False (at once, or when the
        wait has reached the request's deadline) to give up with this answer's error."""
        wait = retries.next_wait(status, retry_after, self._clock.monotonic())
        if wait is None:
            return False
        # client-go logs this at V(4) ("Got a Retry-After response" delay, attempt, url).
        log.debug(
            "api request retry after method=%s path=%s status=%d retry_after=%s delay=%.3f attempt=%d",
            request.method,
            request.path,
            status,
            retry_after,
            wait,
            retries.attempts,
        )
        await self._clock.sleep(wait)
        if retries.expired(self._clock.monotonic()):
            log.debug(
                "api request retry gave up at its deadline method=%s path=%s status=%d attempt=%d",
                request.method,
                request.path,
                status,
                retries.attempts,
            )
            return False
        return True

    def _count(self, method: str, code: str, retry: bool) -> None:
        """One attempt in rest_client_requests_total and, past the first, rest_client_request_retries_total (as
        client-go's withRetry.After counts them)."""
        if self.metrics is not None:
            self.metrics.count(host=self._metrics_host, method=method, code=code, retry=retry)

    async def get(self, path: str, *, resource_version: str | None = None, request_timeout: float | None = None) -> Obj:
        return await self.send(get_request(path, resource_version=resource_version), request_timeout=request_timeout)

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """All items of a collection, following `continue` tokens page by page (each page its own request).

        The result is the first page's list object with every page's items; all pages share its resourceVersion,
        since a continue token pins the snapshot. An expired token raises Gone, as it does in client-go's pager.
        """
        first = await self.send(
            list_request(
                path,
                label_selector=label_selector,
                field_selector=field_selector,
                resource_version=resource_version,
                limit=limit,
            ),
            request_timeout=request_timeout,
        )
        items = [*(first.get("items") or [])]
        page = first
        while token := (page.get("metadata") or {}).get("continue"):
            page = await self.send(
                list_request(
                    path,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    limit=limit,
                    continue_token=token,
                ),
                request_timeout=request_timeout,
            )
            items.extend(page.get("items") or [])
        metadata = {
            k: v for k, v in (first.get("metadata") or {}).items() if k not in ("continue", "remainingItemCount")
        }
        return {**first, "metadata": metadata, "items": items}

    async def create(
        self, path: str, body: Obj, *, field_manager: str | None = None, request_timeout: float | None = None
    ) -> Obj:
        return await self.send(create_request(path, body, field_manager=field_manager), request_timeout=request_timeout)

    async def replace(
        self, path: str, body: Obj, *, field_manager: str | None = None, request_timeout: float | None = None
    ) -> Obj:
        return await self.send(
            replace_request(path, body, field_manager=field_manager), request_timeout=request_timeout
        )

    async def get_direct(
        self, path: str, *, resource_version: str | None = None, request_timeout: float | None = None
    ) -> Obj:
        """`get` over the direct connection (a fleet node's Lease, and its Node every node-status tick)."""
        return await self.send_direct(get_request(path, resource_version=resource_version), request_timeout)

    async def create_direct(self, path: str, body: Obj, *, request_timeout: float | None = None) -> Obj:
        """`create` over the direct connection."""
        return await self.send_direct(create_request(path, body), request_timeout)

    async def replace_direct(self, path: str, body: Obj, *, request_timeout: float | None = None) -> Obj:
        """`replace` for a small object renewed often (the node's Lease), over the direct connection."""
        return await self.send_direct(replace_request(path, body), request_timeout)

    async def patch_direct(
        self,
        path: str,
        body: PatchBody,
        *,
        patch_type: PatchType = "strategic",
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """`patch` over the direct connection (a fleet node's status)."""
        return await self.send_direct(
            patch_request(path, body, patch_type=patch_type, subresource=subresource), request_timeout
        )

    async def send_direct(self, request: ApiRequest, request_timeout: float | None = None) -> Obj:
        """`send` over a kept connection of the client's own, without httpx (`direct`): a third to a quarter of the
        CPU and fewer event-loop turns, for the small requests a fleet node makes every 10 s. Only a client made with
        `direct=True` has that connection; any other (a single agent, a test's transport) sends through httpx as
        `send` does. Same answers, errors and retries as `send`."""
        if self._direct is None:
            return await self.send(request, request_timeout=request_timeout)
        if isinstance(self._transport, ApiTransport) and time.monotonic() - self._swept >= SWEEP_INTERVAL:
            # httpx's pool closes its expired connections only when a request comes to it, and a fleet node's
            # periodic ones come here instead.
            self._swept = time.monotonic()
            await self._transport.close_expired()
        return await self._retrying(request, request_timeout or self._timeout, self._attempt_direct)

    async def _attempt_direct(self, request: ApiRequest, timeout: float, retry: bool) -> _Answer:
        """One attempt over the direct connection."""
        assert self._direct is not None
        method, path = request.method, request.path
        target = f"{path}?{urlencode(request.params)}" if request.params else path
        body = _encode(request.body) if request.body is not None else None
        try:
            response = await self._direct.request(
                method, target, body, timeout=timeout, content_type=request.content_type or JSON
            )
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError, ValueError) as exc:
            log.debug("api request failed method=%s path=%s error=%r", method, path, exc)
            self._count(method, "<error>", retry)
            raise ApiUnavailable(f"{method} {path}: {type(exc).__name__}: {str(exc) or type(exc).__name__}") from exc
        self._count(method, str(response.status), retry)
        return _Answer(response.status, response.headers.get("retry-after"), response.body)

    async def patch(
        self,
        path: str,
        body: PatchBody,
        *,
        patch_type: PatchType = "strategic",
        field_manager: str | None = None,
        force: bool | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        request = patch_request(
            path, body, patch_type=patch_type, field_manager=field_manager, force=force, subresource=subresource
        )
        return await self.send(request, request_timeout=request_timeout)

    async def delete(
        self,
        path: str,
        *,
        grace_period_seconds: int | None = None,
        preconditions_uid: str | None = None,
        preconditions_resource_version: str | None = None,
        propagation_policy: PropagationPolicy | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """Returns the deleted object, the object marked for deletion (graceful), or a Success Status."""
        request = delete_request(
            path,
            grace_period_seconds=grace_period_seconds,
            preconditions_uid=preconditions_uid,
            preconditions_resource_version=preconditions_resource_version,
            propagation_policy=propagation_policy,
        )
        return await self.send(request, request_timeout=request_timeout)

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        field_selector: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncGenerator[WatchEvent, None]:
        """The events of a collection after `resource_version`, until the server ends the stream.

        An ERROR event raises its mapped error (code 410, "Expired", raises Gone: list again). A consumer that stops
        early closes the stream with `contextlib.aclosing(client.watch(...))`.
        """
        request = watch_request(
            path,
            resource_version=resource_version,
            field_selector=field_selector,
            label_selector=label_selector,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=allow_bookmarks,
        )
        read = timeout_seconds + WATCH_READ_GRACE if timeout_seconds is not None else None
        # The opening request is retried as any other on a Retry-After (client-go's Request.Watch), without a
        # deadline: a watch has no request timeout, only the server's timeoutSeconds.
        retries = Retries(max_retries=self.max_retries)
        while True:
            built = self._build(request, httpx.Timeout(self._timeout, read=read))
            try:
                response = await self._http.send(built, stream=True)
            except httpx.RequestError as exc:
                self._count(request.method, "<error>", retries.attempts > 0)
                raise _unavailable(request, exc) from exc
            self._count(request.method, str(response.status_code), retries.attempts > 0)
            if response.is_success:
                break
            try:
                body = await response.aread()
            except httpx.RequestError as exc:
                raise _unavailable(request, exc) from exc
            finally:
                await response.aclose()
            retry_after = response.headers.get("Retry-After")
            if not await self._wait_to_retry(request, retries, response.status_code, retry_after):
                raise error_from_response(response.status_code, body, retry_after=retry_after)
        try:
            log.debug("watch started path=%s resource_version=%s", path, resource_version)
            decoder = WatchDecoder()
            async for chunk in response.aiter_bytes():
                for event in decoder.feed(chunk):
                    if event.type == "ERROR":
                        raise error_from_status(event.object)
                    yield event
            for event in decoder.close():
                if event.type == "ERROR":
                    raise error_from_status(event.object)
                yield event
        except httpx.RequestError as exc:
            raise _unavailable(request, exc) from exc
        finally:
            await response.aclose()
