"""The static pod URL source (staticPodURL, staticPodURLHeader): a Pod or PodList polled over HTTP (upstream: http.go).

- Polled every httpCheckFrequency (20 s) with the configured headers; redirects followed and proxy settings from the
  environment honoured, as Go's default client does for the kubelet. A whole poll (connection, headers and body) has
  10 s, upstream's client timeout, so a server that drips its answer cannot stall the source.
- The body is capped at 1 MiB while it arrives, after decompression: gzip is asked for (as Go's client does) and
  decompressed in bounded steps; another Content-Encoding is refused.
- A 200 answer holds a v1 Pod or a v1 PodList, in YAML or JSON, decoded safely (`manifest.py`); it becomes a SET of
  its pods. As upstream's tryDecodePodList, a PodList is used whole or not at all: one invalid item refuses the
  list, each invalid item is reported, and the pods run on as they were.
- An empty 200 answer is a SET of nothing, as upstream ("zero-length data received"); an answer identical to the
  previous one is not decoded again.
- An error status, a failed connection or an unusable answer changes nothing: the pods keep running. A failed poll
  is logged once until the error changes, and again after an answer came in between; an unusable answer is reported
  once (log and FailedValidation event, `problems.py`). Until the first usable answer the source has not reported,
  so housekeeping does not run yet (upstream's "sources ready").
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import httpx

from nodeagent.clock import Clock, SystemClock
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.sources.manifest import MAX_MANIFEST_BYTES, ManifestError, load_manifest
from nodeagent.sources.problems import ManifestProblem, ProblemReporter, ProblemSink
from nodeagent.sources.static import (
    HTTP_SOURCE,
    InvalidManifest,
    decode_pod,
    decode_pod_list,
    describe_kind,
    is_pod,
    is_pod_list,
)

log = logging.getLogger(__name__)

Pod = dict[str, Any]
SOURCE = HTTP_SOURCE
REQUEST_TIMEOUT = 10.0  # upstream's http.Client timeout for the manifest URL: the whole request, body included
# Compressed bytes read at most: a gzip stream of empty members would otherwise keep the decompressor busy.
MAX_RAW_BYTES = 2 * MAX_MANIFEST_BYTES
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class FetchError(Exception):
    """The URL gave no usable answer (connection, status, size, time): nothing changes."""


class UnusableAnswer(Exception):
    """The answer cannot be used as a whole: the document's problem, or each invalid item's of a PodList."""

    def __init__(self, problems: Iterable[ManifestProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


def _unparsable(url: str, reason: str) -> UnusableAnswer:
    return UnusableAnswer([ManifestProblem(url, f"couldn't parse as single or multiple pods({reason})")])


def decode_url_document(data: bytes, *, url: str, node_name: str) -> tuple[list[Pod], dict[str, str]]:
    """The pods of one answer and where each came from (the URL, or "URL items[i]"). Raises UnusableAnswer."""
    try:
        obj = load_manifest(data)
    except ManifestError as exc:
        raise _unparsable(url, str(exc)) from exc
    if is_pod_list(obj):
        try:
            items = decode_pod_list(obj, node_name=node_name, source=url)
        except InvalidManifest as exc:
            raise UnusableAnswer([ManifestProblem(url, str(exc))]) from exc
        pods: list[Pod] = []
        origins: dict[str, str] = {}
        problems: list[ManifestProblem] = []
        for i, item in enumerate(items):
            origin = f"{url} items[{i}]"
            if isinstance(item, InvalidManifest):
                problems.append(ManifestProblem(origin, str(item)))
            else:
                pods.append(item)
                origins[str(item["metadata"]["uid"])] = origin
        if problems:
            raise UnusableAnswer(problems)
        return pods, origins
    if not is_pod(obj):
        raise _unparsable(url, describe_kind(obj, "a v1 Pod or PodList"))
    try:
        pod = decode_pod(obj, node_name=node_name, source=url, is_file=False)
    except InvalidManifest as exc:
        raise UnusableAnswer([ManifestProblem(url, str(exc))]) from exc
    return [pod], {str(pod["metadata"]["uid"]): url}


def _header_list(headers: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    out = [(name, value) for name, values in headers.items() for value in values]
    if not any(name.lower() == "accept-encoding" for name, _ in out):
        out.append(("Accept-Encoding", "gzip"))  # as Go's client; httpx would also offer deflate, br, zstd
    return out


class _Body:
    """An answer's body as it arrives: decompressed in bounded steps, refused once it passes the cap."""

    def __init__(self, url: str, content_encoding: str) -> None:
        self._url = url
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if codings not in ([], ["gzip"]):
            raise FetchError(f"{url}: unsupported Content-Encoding {content_encoding!r} (only gzip is accepted)")
        self._gzip = zlib.decompressobj(_GZIP_WBITS) if codings else None
        self._raw = 0
        self._size = 0
        self._chunks: list[bytes] = []

    def feed(self, raw: bytes) -> None:
        self._raw += len(raw)
        if self._raw > MAX_RAW_BYTES:
            raise self._too_large()
        if self._gzip is None:
            self._add(raw)
            return
        try:
            while raw:
                # At most one byte past the cap per step: a gzip bomb is refused after 1 MiB, never expanded.
                self._add(self._gzip.decompress(raw, MAX_MANIFEST_BYTES + 1 - self._size))
                if self._gzip.eof:
                    raw = self._gzip.unused_data  # another gzip member follows (Go's reader reads them all)
                    if raw:
                        self._gzip = zlib.decompressobj(_GZIP_WBITS)
                else:
                    raw = self._gzip.unconsumed_tail
        except zlib.error as exc:
            raise FetchError(f"{self._url}: the gzip body is corrupt: {exc}") from exc

    def finish(self) -> bytes:
        if self._gzip is not None and self._raw and not self._gzip.eof:
            raise FetchError(f"{self._url}: the gzip body ends early")
        return b"".join(self._chunks)

    def _add(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > MAX_MANIFEST_BYTES:
            raise self._too_large()
        self._chunks.append(chunk)

    def _too_large(self) -> FetchError:
        return FetchError(f"{self._url}: the answer is over the size limit of {MAX_MANIFEST_BYTES} bytes")


class URLSource:
    def __init__(
        self,
        url: str,
        *,
        node_name: str,
        push: Callable[[SourceUpdate], None],
        check_frequency: float,
        on_problem: ProblemSink,
        headers: Mapping[str, Sequence[str]] | None = None,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self._url = url
        self._node_name = node_name
        self._push = push
        self._period = max(check_frequency, 1.0)
        self._problems = ProblemReporter(on_problem)
        self._headers = _header_list(headers or {})
        self._clock = clock or SystemClock()
        self._transport = transport
        self._timeout = timeout
        self._last_data: bytes | None = None
        self._last_used = False  # whether the last answer's pods were pushed
        self._last_answer_error = ""  # what the last answer itself logs ("zero-length data ..."), else ""
        self._last_error = ""  # the error logged last; "" once an answer without one came
        self.polls = 0

    async def run(self) -> None:
        """Runs until cancelled; never raises otherwise."""
        log.info("pod source started source=%s url=%s check_frequency=%ss", SOURCE, self._url, self._period)
        async with self._client() as client:
            while True:
                await self.poll_once(client)
                await self._clock.sleep(self._period)

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=self._transport, timeout=self._timeout, follow_redirects=True, headers=self._headers
        )

    async def poll_once(self, client: httpx.AsyncClient) -> bool:
        """One poll. True when the answer was used (a SET was pushed, or the same answer came again)."""
        self.polls += 1
        try:
            data = await self._fetch(client)
        except FetchError as exc:
            self._log_error(str(exc))
            return False
        if data != self._last_data:
            self._last_data = data
            self._last_used, self._last_answer_error = await self._apply(data)
        # The same answer again is not decoded again; either way an error of the polls before it is over.
        self._answered(self._last_answer_error)
        return self._last_used

    async def _apply(self, data: bytes) -> tuple[bool, str]:
        """Decode and push a new answer: whether it was used, and the error it logs ("" for none)."""
        if not data:
            self._problems.report(())
            self._push(SourceUpdate(SOURCE, Operation.SET, ()))
            return True, f"zero-length data received from {self._url}"
        try:
            pods, origins = await asyncio.to_thread(decode_url_document, data, url=self._url, node_name=self._node_name)
        except UnusableAnswer as exc:
            # As upstream: nothing is pushed, so the pods run on as they were.
            log.warning(
                "static pod URL answer not used, its pods are kept url=%s problems=%d", self._url, len(exc.problems)
            )
            self._problems.report(exc.problems)
            return False, ""
        except Exception as exc:
            # A bug of ours on strange input: logged with its traceback and reported; the source goes on.
            log.exception("static pod URL answer could not be decoded url=%s", self._url)
            message = f"could not decode the answer: {type(exc).__name__}: {exc}"
            self._problems.report([ManifestProblem(self._url, message)])
            return False, ""
        self._problems.report(())
        self._push(SourceUpdate(SOURCE, Operation.SET, tuple(pods), origins=origins))
        return True, ""

    async def _fetch(self, client: httpx.AsyncClient) -> bytes:
        try:
            async with asyncio.timeout(self._timeout):
                async with client.stream("GET", self._url) as response:
                    if response.status_code != httpx.codes.OK:
                        raise FetchError(f"{self._url}: {response.status_code} {response.reason_phrase}")
                    body = _Body(self._url, response.headers.get("Content-Encoding", ""))
                    async for raw in response.aiter_raw():
                        body.feed(raw)
                    return body.finish()
        except TimeoutError as exc:
            raise FetchError(f"{self._url}: no complete answer within {self._timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise FetchError(f"{self._url}: {type(exc).__name__}: {exc}") from exc

    def _answered(self, error: str) -> None:
        if error:
            self._log_error(error, consequence="no pods from it run")
            return
        if self._last_error:
            log.info("static pod URL readable again url=%s", self._url)
        self._last_error = ""

    def _log_error(self, message: str, *, consequence: str = "its pods are kept") -> None:
        if message != self._last_error:
            log.warning("static pod URL not read, %s url=%s error=%s", consequence, self._url, message)
        self._last_error = message
