"""The static pod URL source (staticPodURL, staticPodURLHeader): a Pod or PodList polled over HTTP (upstream: http.go).

- Polled every httpCheckFrequency (20 s) with the configured headers; 10 s per request, redirects followed and proxy
  settings from the environment honoured, as Go's default client does for the kubelet.
- A 200 answer holds a v1 Pod or a v1 PodList, in YAML or JSON, decoded safely (`manifest.py`: 1 MiB cap, no
  aliases); it becomes a SET of the usable pods. An item of a list that cannot be used is reported and left out, and
  the other items run (upstream refuses the whole list; here bad input loses nothing else).
- An empty 200 answer is a SET of nothing, as upstream ("zero-length data received"); an answer identical to the
  previous one is not decoded again.
- An error status, a failed connection or an unusable document changes nothing: the pods keep running, and the error
  is logged once until it changes. Until the first usable answer the source has not reported, so housekeeping does
  not run yet (upstream's "sources ready").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from nodeagent.clock import Clock, SystemClock
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.sources.manifest import MAX_MANIFEST_BYTES, ManifestError, load_manifest
from nodeagent.sources.problems import ManifestProblem, ProblemReporter, ProblemSink
from nodeagent.sources.static import HTTP_SOURCE, InvalidManifest, decode_pod, decode_pod_list, is_pod_list

log = logging.getLogger(__name__)

Pod = dict[str, Any]
SOURCE = HTTP_SOURCE
REQUEST_TIMEOUT = 10.0  # upstream's http.Client timeout for the manifest URL


class FetchError(Exception):
    """The URL gave no usable answer (connection, status, size): nothing changes."""


def decode_url_document(
    data: bytes, *, url: str, node_name: str
) -> tuple[list[Pod], dict[str, str], list[ManifestProblem]]:
    """The pods of one answer, where each came from, and what could not be used. Raises InvalidManifest when the
    document as a whole is neither a Pod nor a PodList."""
    try:
        obj = load_manifest(data)
    except ManifestError as exc:
        raise InvalidManifest(f"couldn't parse as single or multiple pods({exc})") from exc
    if not is_pod_list(obj):
        pod = decode_pod(obj, node_name=node_name, source=url, is_file=False)
        return [pod], {str(pod["metadata"]["uid"]): url}, []
    pods: list[Pod] = []
    origins: dict[str, str] = {}
    problems: list[ManifestProblem] = []
    for i, item in enumerate(decode_pod_list(obj, node_name=node_name, source=url)):
        origin = f"{url} items[{i}]"
        if isinstance(item, InvalidManifest):
            problems.append(ManifestProblem(origin, str(item)))
        else:
            pods.append(item)
            origins[str(item["metadata"]["uid"])] = origin
    return pods, origins, problems


def _header_list(headers: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, values in headers.items() for value in values]


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
    ) -> None:
        self._url = url
        self._node_name = node_name
        self._push = push
        self._period = max(check_frequency, 1.0)
        self._problems = ProblemReporter(on_problem)
        self._headers = _header_list(headers or {})
        self._clock = clock or SystemClock()
        self._transport = transport
        self._last_data: bytes | None = None
        self._last_used = False  # whether the last answer's pods were pushed
        self._last_error = ""
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
            transport=self._transport, timeout=REQUEST_TIMEOUT, follow_redirects=True, headers=self._headers
        )

    async def poll_once(self, client: httpx.AsyncClient) -> bool:
        """One poll. True when the answer was used (a SET was pushed, or the same answer came again)."""
        self.polls += 1
        try:
            data = await self._fetch(client)
        except FetchError as exc:
            self._log_error(str(exc))
            return False
        if data == self._last_data:
            return self._last_used
        self._last_data = data
        if not data:
            self._log_error(f"zero-length data received from {self._url}")
            self._problems.report(())
            self._push(SourceUpdate(SOURCE, Operation.SET, ()))
            self._last_used = True
            return True
        try:
            pods, origins, problems = await asyncio.to_thread(
                decode_url_document, data, url=self._url, node_name=self._node_name
            )
        except Exception as exc:
            # The whole document is unusable: report it and keep what runs, as upstream does. (Anything other than
            # InvalidManifest is a bug of ours on strange input: logged with its traceback, the source goes on.)
            if not isinstance(exc, InvalidManifest):
                log.exception("static pod URL answer could not be decoded url=%s", self._url)
            self._problems.report([ManifestProblem(self._url, str(exc))])
            self._last_used = False
            return False
        self._last_used = True
        if self._last_error:
            log.info("static pod URL readable again url=%s", self._url)
        self._last_error = ""
        self._problems.report(problems)
        self._push(SourceUpdate(SOURCE, Operation.SET, tuple(pods), origins=origins))
        return True

    async def _fetch(self, client: httpx.AsyncClient) -> bytes:
        try:
            async with client.stream("GET", self._url) as response:
                if response.status_code != httpx.codes.OK:
                    raise FetchError(f"{self._url}: {response.status_code} {response.reason_phrase}")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_MANIFEST_BYTES:
                        raise FetchError(
                            f"{self._url}: the answer is over the size limit of {MAX_MANIFEST_BYTES} bytes"
                        )
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.HTTPError as exc:
            raise FetchError(f"{self._url}: {type(exc).__name__}: {exc}") from exc

    def _log_error(self, message: str) -> None:
        if message != self._last_error:
            log.warning("static pod URL not read, its pods are kept url=%s error=%s", self._url, message)
        self._last_error = message
