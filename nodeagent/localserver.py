"""The agent's loopback HTTP endpoint: /healthz and /pods, and the `nodeagent pods` client of it.

Without an apiserver (standalone mode, a VM running static pods) there is no `kubectl get pods`; the upstream kubelet
answers /pods (a v1 PodList) on its read-only port and /healthz on its healthz port. nodeagent serves both on the
healthz address and port (`healthzBindAddress`, default 127.0.0.1, and `healthzPort`, default 10248; 0 turns it
off), so the pod list never leaves the machine. The full kubelet server (:10250, TLS, authn/authz, logs, exec) is
another part; this one stays small: GET only, one request per connection, no TLS.

- /healthz: 200 "ok" while the agent's background tasks run, 500 with the reason otherwise.
- /pods: the pods the agent runs (mirror pods left out), each with the latest status the agent generated.

When the port is taken (another agent on the machine) the server logs it and tries again every 5 s, as the
kubelet's healthz server does; the agent keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from nodeagent.clock import Clock, SystemClock
from nodeagent.podconfig.storage import CONFIG_MIRROR_ANNOTATION

log = logging.getLogger(__name__)

Pod = dict[str, Any]
RETRY_PERIOD = 5.0
READ_TIMEOUT = 5.0
MAX_REQUEST_HEAD = 8192

HealthCheck = Callable[[], tuple[bool, str]]
PodLister = Callable[[], Sequence[Pod]]


def running_pods(pods: Sequence[Pod], status_of: Callable[[str], dict[str, Any] | None]) -> list[Pod]:
    """What /pods lists: the pods of every source but mirror pods, each with the latest status the agent generated."""
    out = []
    for pod in pods:
        if CONFIG_MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
            continue
        status = status_of(str((pod.get("metadata") or {}).get("uid", "")))
        out.append({**pod, "status": status} if status is not None else pod)
    return out


def pod_list(pods: Sequence[Pod]) -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(pods)}


def _response(status: int, reason: str, body: bytes, content_type: str, *, head: bool = False) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        "",
        "",
    ]
    return "\r\n".join(lines).encode() + (b"" if head else body)


class LocalServer:
    def __init__(
        self,
        address: str,
        port: int,
        *,
        pods: PodLister,
        health: HealthCheck,
        clock: Clock | None = None,
    ) -> None:
        self._address = address
        self._port = port
        self._pods = pods
        self._health = health
        self._clock = clock or SystemClock()
        self.requests = 0
        self.bound = asyncio.Event()

    async def run(self) -> None:
        """Serve until cancelled; a failed bind is retried every RETRY_PERIOD seconds."""
        while True:
            try:
                server = await asyncio.start_server(self._handle, self._address, self._port, reuse_address=True)
            except OSError as exc:
                log.error(
                    "local server not started, will retry address=%s port=%d error=%s", self._address, self._port, exc
                )
                await self._clock.sleep(RETRY_PERIOD)
                continue
            log.info("local server listening address=%s port=%d paths=/healthz,/pods", self._address, self._port)
            self.bound.set()
            try:
                async with server:
                    await server.serve_forever()
            finally:
                self.bound.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            writer.write(self.respond(head))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except Exception:
            log.exception("local server request failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def respond(self, head: bytes) -> bytes:
        """The whole HTTP response to a request head (pure apart from the pod lister and the health check)."""
        self.requests += 1
        if len(head) > MAX_REQUEST_HEAD:
            return _response(431, "Request Header Fields Too Large", b"", "text/plain")
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(400, "Bad Request", b"bad request\n", "text/plain")
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return _response(405, "Method Not Allowed", b"method not allowed\n", "text/plain")
        path = target.split("?", 1)[0]
        head_only = method == "HEAD"
        if path == "/healthz":
            ok, reason = self._health()
            if ok:
                return _response(200, "OK", b"ok", "text/plain; charset=utf-8", head=head_only)
            return _response(500, "Internal Server Error", reason.encode(), "text/plain; charset=utf-8", head=head_only)
        if path == "/pods":
            body = json.dumps(pod_list(self._pods()), separators=(",", ":")).encode()
            return _response(200, "OK", body, "application/json", head=head_only)
        return _response(404, "Not Found", b"404 page not found\n", "text/plain; charset=utf-8", head=head_only)


# --- `nodeagent pods` ---------------------------------------------------------------------------------------------


class LocalServerUnreachable(RuntimeError):
    """The agent's local endpoint did not answer."""


async def fetch_pods(address: str, port: int, *, timeout: float = 10.0) -> dict[str, Any]:
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{port}/pods"
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            response = await client.get(url)
            response.raise_for_status()
            out: dict[str, Any] = response.json()
            return out
    except (httpx.HTTPError, ValueError) as exc:
        raise LocalServerUnreachable(
            f"cannot read {url}: {exc} (is `nodeagent run` running with healthzPort {port}?)"
        ) from exc


def _container_summary(status: Mapping[str, Any]) -> tuple[int, int, int, str]:
    """(ready, total, restarts, the reason a container gives) over the regular containers."""
    statuses = [c for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)]
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = ""
    for c in statuses:
        state = c.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason"):
            reason = str(waiting["reason"])
        elif terminated.get("reason") and not reason:
            reason = str(terminated["reason"])
    return ready, len(statuses), restarts, reason


def _age(start: str | None, now: datetime.datetime) -> str:
    if not start:
        return "<unknown>"
    try:
        started = datetime.datetime.fromisoformat(start.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = max(int((now - started).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_pods(pods: Mapping[str, Any], *, now: datetime.datetime) -> str:
    """A table like `kubectl get pods -o wide`, from a PodList."""
    header = ("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "UID")
    rows: list[tuple[str, ...]] = [header]
    for pod in pods.get("items") or []:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        spec_containers = (pod.get("spec") or {}).get("containers") or []
        ready, total, restarts, reason = _container_summary(status)
        shown = str(status.get("reason") or reason or status.get("phase") or "Pending")
        if meta.get("deletionTimestamp"):
            shown = "Terminating"
        rows.append(
            (
                str(meta.get("namespace", "")),
                str(meta.get("name", "")),
                f"{ready}/{max(total, len(spec_containers))}",
                shown,
                str(restarts),
                _age(status.get("startTime"), now),
                str(status.get("podIP") or "<none>"),
                str(meta.get("uid", "")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
