"""The httpGet probe (upstream pkg/probe/http): a GET against the pod IP, or the probe's host, on a named or
numbered port.

- The request (`http_request`, pure) has the scheme lower-cased (default http), the probe's headers, and unless the
  probe sets them, `User-Agent: kube-probe/<major>.<minor>` and `Accept: */*` (an Accept set to "" removes it).
  A `Host` header sets the request's host.
- A status from 200 to 399 is success, anything else a failure ("HTTP probe failed with statuscode: N", without
  the body, as upstream keeps response bodies out of failure messages).
- Redirects are followed only to the same host name (any port), at most 9 times ("stopped after 10 redirects").
  A redirect to another host is not followed: its 3xx is the answer, a WARNING ("Probe terminated redirects,
  Response body: ...") that the prober reports as a ProbeWarning event and counts as success.
- timeoutSeconds bounds the whole exchange, redirects and body included; a timeout, a connection error or a
  Location that cannot be parsed or dialled is a failure (with Go's message, except httpx's words for an
  unparsable Location). At most 10 KiB of the body are read. A URL that cannot be built from the probe is an error.
- TLS certificates are not verified, no proxy is used, and connections are not kept alive, as upstream.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from nodeagent.prober.probe import (
    MAX_OUTPUT_BYTES,
    USER_AGENT,
    Outcome,
    ProbeError,
    ProbeOutcome,
    dial_error_text,
    go_quote,
    join_host_port,
    resolve_container_port,
    truncate,
)
from nodeagent.prober.spec import HTTPGetAction

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
MAX_REQUESTS = 10  # Go's default redirect policy: the 10th redirect is refused


@dataclass(frozen=True)
class HTTPRequest:
    url: str
    headers: tuple[tuple[str, str], ...]


def format_url(scheme: str, host: str, port: int, path: str) -> str:
    """scheme://host:port + the path, whose query and fragment are kept (upstream formatURL)."""
    parsed = urllib.parse.urlsplit(path)
    url_path = parsed.path
    if url_path and not url_path.startswith("/"):
        url_path = "/" + url_path
    return urllib.parse.urlunsplit((scheme, join_host_port(host, port), url_path, parsed.query, parsed.fragment))


def probe_headers(headers: tuple[tuple[str, str], ...], user_agent: str = USER_AGENT) -> tuple[tuple[str, str], ...]:
    out = list(headers)
    names = {name.lower() for name, _ in out}
    if "user-agent" not in names:
        out.append(("User-Agent", user_agent))
    if "accept" not in names:
        out.append(("Accept", "*/*"))
    elif next(value for name, value in out if name.lower() == "accept") == "":
        out = [(name, value) for name, value in out if name.lower() != "accept"]
    return tuple(out)


def http_request(
    action: HTTPGetAction, container: Mapping[str, Any], pod_ip: str, *, user_agent: str = USER_AGENT
) -> HTTPRequest:
    """The probe's request (upstream NewRequestForHTTPGetAction); a bad port raises ProbeError."""
    scheme = action.scheme.lower() or "http"
    host = action.host or pod_ip
    port = resolve_container_port(action.port, container)
    return HTTPRequest(format_url(scheme, host, port, action.path), probe_headers(action.headers, user_agent))


def _insecure_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _describe(exc: httpx.HTTPError, url: httpx.URL) -> str:
    if isinstance(exc, httpx.ConnectError):
        port = url.port or (443 if url.scheme == "https" else 80)
        return f"dial tcp {join_host_port(url.host, port)}: {dial_error_text(exc)}"
    return str(exc) or type(exc).__name__


class HTTPProber:
    """One client for every httpGet probe of the node; close it with `aclose`."""

    def __init__(self) -> None:
        self._client = httpx.AsyncClient(
            verify=_insecure_tls(),
            trust_env=False,
            follow_redirects=False,
            timeout=None,  # the probe's own timeout bounds the whole exchange
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _get(self, url: httpx.URL, headers: tuple[tuple[str, str], ...]) -> tuple[int, str, bytes]:
        async with self._client.stream("GET", url, headers=list(headers)) as response:
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) >= MAX_OUTPUT_BYTES:
                    break  # upstream: a longer body is truncated, not an error
            return response.status_code, response.headers.get("location", ""), body

    async def probe(self, request: HTTPRequest, timeout: float) -> ProbeOutcome:
        try:
            url = httpx.URL(request.url)
        except httpx.InvalidURL as exc:
            # As upstream, a request that cannot be built is an error, not a verdict.
            raise ProbeError(f"parse {go_quote(request.url)}: {exc}") from exc
        first_host = url.host
        try:
            async with asyncio.timeout(timeout):
                requests = 0
                while True:
                    status, location, body = await self._get(url, request.headers)
                    requests += 1
                    if status not in REDIRECT_CODES or not location:
                        break
                    # An unparsable Location never gets here: httpx rejects it first (RemoteProtocolError, a failure).
                    target = url.join(location)
                    if target.host != first_host:
                        break  # another host: the redirect itself is the answer
                    if requests >= MAX_REQUESTS:
                        return ProbeOutcome(Outcome.FAILURE, f'Get "{target}": stopped after 10 redirects')
                    if target.port is not None and target.port > 65535:
                        # httpx parses such a port and the socket layer raises on it; Go's dialer refuses it.
                        message = f'Get "{target}": dial tcp: address {target.port}: invalid port'
                        return ProbeOutcome(Outcome.FAILURE, message)
                    url = target
        except TimeoutError:
            message = f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
            return ProbeOutcome(Outcome.FAILURE, message)
        except httpx.HTTPError as exc:
            return ProbeOutcome(Outcome.FAILURE, f'Get "{url}": {_describe(exc, url)}')
        text = truncate(body)
        if 200 <= status < 400:
            if status >= 300:
                return ProbeOutcome(Outcome.WARNING, f"Probe terminated redirects, Response body: {text}")
            return ProbeOutcome(Outcome.SUCCESS, text)
        return ProbeOutcome(Outcome.FAILURE, f"HTTP probe failed with statuscode: {status}")
