"""The kubelet API (upstream pkg/kubelet/server/server.go): routes, the auth filter, and the handlers.

Paths, methods, status codes and error texts are upstream's, so the apiserver's proxy, kubectl and the e2e suite see
the kubelet they expect:

- /healthz (+ /healthz/ping, /healthz/log, /healthz/syncloop), /pods, /runningpods/, /configz;
- /containerLogs/{ns}/{pod}/{container} (GET; follow, tailLines|tail, sinceSeconds, sinceTime, timestamps, previous,
  limitBytes);
- /exec, /attach: GET or POST /{ns}/{pod}[/{uid}]/{container}; /portForward: /{ns}/{pod}[/{uid}]; /run: POST;
- /metrics and /metrics/probes: the agent's Prometheus registries;
- /stats/summary (GET or POST; only_cpu_and_memory=true), /metrics/resource and /metrics/cadvisor: from the stats
  provider (nodeagent.stats); anything else under /stats/ is go-restful's 404, as upstream serves only the summary;
- /logs/: the node's log directory, read only.

Every request passes the auth filter first (authentication, then authorization per `auth.request_attributes`).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cri.errors import CRIError, NotFoundError
from cri.v1 import api_pb2
from nodeagent.localserver import pod_list
from nodeagent.server import logs as logreader
from nodeagent.server.auth import (
    Attributes,
    Authenticator,
    AuthError,
    Authorizer,
    forbidden_message,
    request_attributes,
)
from nodeagent.server.http import Request, Responder
from nodeagent.server.streaming import StreamOptionsError, port_forward_ports, proxy_upgrade, stream_options
from nodeagent.stats.errors import StatsError

log = logging.getLogger(__name__)

Pod = dict[str, Any]
JSON_TYPE = "application/json"


class ServerHost(Protocol):
    """What the server needs from the agent (upstream's HostInterface, the narrow part we serve)."""

    def pods(self) -> list[Pod]:
        """The pods the agent runs, with their latest status (/pods)."""
        ...

    def pod_by_name(self, namespace: str, name: str) -> Pod | None:
        """A pod the agent knows by name; for a mirror pod's name, its static pod."""
        ...

    def pod_status(self, pod: Pod) -> Mapping[str, Any] | None:
        """The status the agent last generated for the pod (None: none yet)."""
        ...

    async def running_pods(self) -> list[Pod]:
        """What runs in the runtime, as bare pods (/runningpods/)."""
        ...

    async def running_container_id(self, pod: Pod, container: str) -> str | None:
        """The ID of the running container of that name in the pod (upstream findContainer), None if none."""
        ...

    async def running_sandbox_id(self, pod: Pod) -> str | None: ...

    def syncloop_healthy(self) -> tuple[bool, str]: ...

    def configz(self) -> Mapping[str, Any]: ...

    def metrics(self, path: str) -> bytes | None:
        """The text exposition of /metrics or /metrics/probes (None: no such registry)."""
        ...

    async def summary(self, only_cpu_and_memory: bool) -> Mapping[str, Any]:
        """/stats/summary as upstream's JSON; raises StatsError when it cannot be made."""
        ...

    async def resource_metrics(self) -> bytes:
        """/metrics/resource (a failed summary is resource_scrape_error 1 in it, never an error)."""
        ...

    async def cadvisor_metrics(self) -> bytes:
        """/metrics/cadvisor (a failed listing is container_scrape_error 1 in it)."""
        ...


class StreamingRuntime(Protocol):
    async def exec(self, request: api_pb2.ExecRequest, *, timeout: float | None = None) -> api_pb2.ExecResponse: ...

    async def attach(
        self, request: api_pb2.AttachRequest, *, timeout: float | None = None
    ) -> api_pb2.AttachResponse: ...

    async def port_forward(
        self, request: api_pb2.PortForwardRequest, *, timeout: float | None = None
    ) -> api_pb2.PortForwardResponse: ...

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse: ...

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse: ...


@dataclass
class KubeletServer:
    host: ServerHost
    runtime: StreamingRuntime
    node_name: str
    authenticator: Authenticator | None = None  # None (with authorizer None): the read-only server, no auth
    authorizer: Authorizer | None = None
    node_log_dir: str = "/var/log"
    enable_debugging_handlers: bool = True
    enable_system_log_handler: bool = True
    log_poll: float = logreader.POLL_SECONDS
    active_streams: int = field(default=0, init=False)
    # Stats answers being computed, by endpoint: concurrent requests for one share its computation (single flight).
    _inflight: dict[str, asyncio.Future[Any]] = field(default_factory=dict, init=False, repr=False)

    async def handle(self, request: Request, responder: Responder) -> None:
        if not upstream_registered(request.path):
            # Upstream's ServeMux answers a path outside every pattern it registered before any filter runs.
            await responder.text(404, "404 page not found")
            return
        if self.authenticator is not None and not await self._authorized(request, responder):
            return
        path = request.path
        for pattern, methods, handler in self._routes():
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if request.method not in methods:
                await responder.text(405, "Method Not Allowed", headers=[("allow", ", ".join(sorted(methods)))])
                return
            await handler(request, responder, match.groupdict())
            return
        await responder.text(404, "404 page not found")

    # --- the auth filter -----------------------------------------------------------------------------------

    async def _authorized(self, request: Request, responder: Responder) -> bool:
        """Upstream's auth filter. Its answers are go-restful's WriteErrorString: the text as it is (the 403's ends in
        a newline, the others do not), no nosniff header."""
        assert self.authenticator is not None
        try:
            user = await self.authenticator.authenticate(request.peer_cert, request.header("authorization"))
        except AuthError as exc:
            log.warning("kubelet api authentication error error=%s", exc)
            await _error_string(responder, 401, "Unauthorized")
            return False
        if user is None:
            await _error_string(responder, 401, "Unauthorized")
            return False
        attrs = request_attributes(user, request.method, request.path, self.node_name)
        if self.authorizer is None:
            return True
        for attr in attrs:
            try:
                if await self.authorizer.allowed(attr):
                    return True
            except AuthError as exc:
                log.warning("kubelet api authorization error user=%s error=%s", user.name, exc)
                await _error_string(responder, 500, _authz_error(attr))
                return False
        log.info(
            "kubelet api forbidden user=%s verb=%s subresources=%s",
            user.name,
            attrs[0].verb,
            ",".join(a.subresource for a in attrs),
        )
        await _error_string(responder, 403, forbidden_message(attrs))
        return False

    # --- routing -------------------------------------------------------------------------------------------

    def _routes(self) -> list[tuple[re.Pattern[str], frozenset[str], RouteHandler]]:
        get, both = frozenset({"GET", "HEAD"}), frozenset({"GET", "POST"})
        seg = r"[^/]+"
        routes: list[tuple[str, frozenset[str], RouteHandler]] = [
            (r"/healthz(?:/(?P<check>[^/]+))?", get, self._healthz),
            (r"/pods/?", get, self._pods),
        ]
        if self.enable_debugging_handlers:
            routes += [
                (r"/runningpods/?", get, self._running_pods),
                (r"/configz", get, self._configz),
                (rf"/containerLogs/(?P<ns>{seg})/(?P<pod>{seg})/(?P<container>{seg})", get, self._container_logs),
                (
                    rf"/exec/(?P<ns>{seg})/(?P<pod>{seg})(?:/(?P<uid>{seg}))?/(?P<container>{seg})",
                    both,
                    self._exec,
                ),
                (
                    rf"/attach/(?P<ns>{seg})/(?P<pod>{seg})(?:/(?P<uid>{seg}))?/(?P<container>{seg})",
                    both,
                    self._attach,
                ),
                (rf"/portForward/(?P<ns>{seg})/(?P<pod>{seg})(?:/(?P<uid>{seg}))?", both, self._port_forward),
                (
                    rf"/run/(?P<ns>{seg})/(?P<pod>{seg})(?:/(?P<uid>{seg}))?/(?P<container>{seg})",
                    frozenset({"POST"}),
                    self._run,
                ),
            ]
            if self.enable_system_log_handler:
                routes.append((r"/logs(?P<rest>/.*)?", get, self._node_logs))
            else:
                routes.append((r"/logs(?:/.*)?", get, self._logs_disabled))
        else:
            routes += [
                (rf"/{p}(?:/.*)?", frozenset({"GET", "POST", "PUT", "DELETE", "HEAD"}), self._debugging_disabled)
                for p in ("run", "exec", "attach", "portForward", "containerLogs", "runningpods", "logs")
            ]
        any_method = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
        routes += [
            (r"/stats/summary/?", any_method, self._stats_summary),
            (r"/stats", any_method, self._stats_redirect),
            (r"/stats/.*", any_method, self._stats_not_found),
            (r"/metrics/resource", get, self._resource_metrics),
            (r"/metrics/cadvisor", get, self._cadvisor_metrics),
        ]
        routes += [(r"/metrics(?P<sub>/[a-z]+)?", get, self._metrics)]
        return [(re.compile(p), m, h) for p, m, h in routes]

    # --- handlers ------------------------------------------------------------------------------------------

    async def _debugging_disabled(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        await responder.text(405, "Debug endpoints are disabled.")

    async def _logs_disabled(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        await responder.text(405, "logs endpoint is disabled.")

    async def _healthz(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        check = params.get("check")
        checks = {"ping": (True, ""), "log": (True, ""), "syncloop": self.host.syncloop_healthy()}
        if check is not None:
            if check not in checks:
                await responder.text(404, "404 page not found")
                return
            ok, why = checks[check]
            await responder.text(200 if ok else 500, "ok" if ok else f"internal server error: {why}")
            return
        failed = [name for name, (ok, _) in checks.items() if not ok]
        if not failed:
            await responder.text(200, "ok")
            return
        lines = [f"[{'-' if name in failed else '+'}]{name} {'failed' if name in failed else 'ok'}" for name in checks]
        await responder.text(500, "\n".join([*lines, "healthz check failed"]))

    async def _pods(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        await _json(responder, pod_list(self.host.pods()))

    async def _running_pods(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        try:
            pods = await self.host.running_pods()
        except CRIError as exc:
            await responder.text(500, str(exc))
            return
        await _json(responder, pod_list(pods))

    async def _configz(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        await _json(responder, {"kubeletconfig": self.host.configz()})

    async def _metrics(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        body = self.host.metrics(request.path)
        if body is None:
            await responder.text(404, "404 page not found")
            return
        await responder.send(200, body, content_type="text/plain; version=0.0.4; charset=utf-8")

    async def _stats_summary(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        if request.method not in ("GET", "POST"):
            # go-restful's answer for a route without that method
            await responder.send(405, b"405: Method Not Allowed", headers=[("allow", "GET, POST")])
            return
        # as upstream: only exactly one only_cpu_and_memory=true selects the CPU-and-memory summary
        only = request.query.get("only_cpu_and_memory") == ["true"]
        try:
            body = await self._shared(f"summary only={only}", lambda: self.host.summary(only))
        except StatsError as exc:
            log.error("kubelet api stats summary failed error=%s", exc)
            await responder.send(500, f"Internal Error: {exc}".encode())
            return
        # go-restful pretty-prints its JSON answers with one space of indent
        await responder.send(200, json.dumps(body, indent=1).encode(), content_type=JSON_TYPE)

    async def _shared(self, key: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """The stats endpoints read every container's cgroups (in a thread that holds the GIL against the pod
        workers). Under a burst of scrapes, requests that arrive while one is being computed get that answer instead
        of starting their own, so the agent's cost stays one computation at a time (upstream serves them from
        cadvisor's cache). A client that goes away does not cancel the computation the others wait for."""
        shared = self._inflight.get(key)
        if shared is None:
            shared = asyncio.ensure_future(make())
            self._inflight[key] = shared

            def done(future: asyncio.Future[Any], key: str = key) -> None:
                self._inflight.pop(key, None)
                if not future.cancelled():
                    future.exception()  # retrieved: every waiter may have gone

            shared.add_done_callback(done)
        return await asyncio.shield(shared)

    async def _stats_redirect(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        # Go's ServeMux sends a subtree's root without its slash to the subtree (/stats/ is registered).
        await responder.send(
            301,
            b'<a href="/stats/">Moved Permanently</a>.\n\n' if request.method == "GET" else b"",
            content_type="text/html; charset=utf-8",
            headers=[("location", "/stats/")],
        )

    async def _stats_not_found(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        # /stats/ is a go-restful web service with only /summary: its router's 404, no newline
        await responder.send(404, b"404: Page Not Found")

    async def _resource_metrics(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        body = await self._shared("resource", self.host.resource_metrics)
        await responder.send(200, body, content_type="text/plain; version=0.0.4; charset=utf-8")

    async def _cadvisor_metrics(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        body = await self._shared("cadvisor", self.host.cadvisor_metrics)
        await responder.send(200, body, content_type="text/plain; version=0.0.4; charset=utf-8")

    async def _node_logs(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        """The node's log directory, read only: a file, or a directory's listing (no escape out of it)."""
        rest = params.get("rest") or "/"
        try:
            target, listing = await asyncio.to_thread(logreader.node_log_target, self.node_log_dir, rest)
            if listing is not None:
                await responder.send(200, listing, content_type="text/html; charset=utf-8")
                return
            f = await asyncio.to_thread(target.open, "rb")
        except (logreader.NodeLogNotFound, FileNotFoundError):
            # FileNotFoundError: removed between the look and the open.
            await responder.text(404, "404 page not found")
            return
        except PermissionError:
            await responder.text(403, "403 Forbidden")
            return
        except OSError as exc:
            # As Go's file server for an error that is neither "not exist" nor "permission" (a name too long).
            log.warning("node log not served path=%r error=%s", rest, exc)
            await responder.text(500, "500 Internal Server Error")
            return
        with f:
            await responder.start(200, content_type="text/plain; charset=utf-8")
            while chunk := await asyncio.to_thread(f.read, 256 * 1024):
                await responder.write(chunk)
        await responder.end()

    async def _container_logs(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        namespace, name, container = params["ns"], params["pod"], params["container"]
        try:
            options, previous = parse_log_options(request.query, now=datetime.datetime.now(datetime.UTC))
        except LogQueryError as exc:
            await responder.text(exc.status, exc.body)
            return
        pod = self.host.pod_by_name(namespace, name)
        if pod is None:
            await responder.text(404, f'pod "{name}" does not exist')
            return
        if not _has_container(pod, container):
            await responder.text(404, f'container "{container}" not found in pod "{name}"')
            return
        status = self.host.pod_status(pod) or pod.get("status") or {}
        try:
            container_id = log_container_id(status, name, container, previous=previous)
        except ContainerLogError as exc:
            await responder.text(400, str(exc))
            return
        try:
            answer = await self.runtime.container_status(container_id)
        except CRIError as exc:
            await responder.text(400, f'failed to get container status "{container_id}": {exc}')
            return
        path = answer.status.log_path
        if not path:
            await responder.text(400, f'failed to get log path of container "{container_id}"')
            return

        async def running() -> bool:
            try:
                state = (await self.runtime.container_status(container_id)).status.state
            except NotFoundError:
                return False
            return state == api_pb2.CONTAINER_RUNNING

        await responder.start(200, content_type="text/plain")
        self.active_streams += 1
        try:
            await logreader.read_logs(path, options, responder.write, running=running, poll=self.log_poll)
        except FileNotFoundError:
            pass  # the container's log is gone (rotated away or removed): the answer ends
        finally:
            self.active_streams -= 1
        await responder.end()

    async def _exec(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        await self._remote_command(request, responder, params, attach=False)

    async def _attach(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        await self._remote_command(request, responder, params, attach=True)

    async def _remote_command(
        self, request: Request, responder: Responder, params: dict[str, str], *, attach: bool
    ) -> None:
        """exec and attach: the stream options, the running container, the runtime's URL, the proxied upgrade."""
        try:
            options = stream_options(request.query)
        except StreamOptionsError as exc:
            await responder.text(400, str(exc))
            return
        container_id = await self._stream_container(responder, params)
        if container_id is None:
            return
        streams = {"tty": options.tty, "stdin": options.stdin, "stdout": options.stdout, "stderr": options.stderr}
        try:
            if attach:
                url = (await self.runtime.attach(api_pb2.AttachRequest(container_id=container_id, **streams))).url
            else:
                command = request.query.get("command") or []
                answer = await self.runtime.exec(api_pb2.ExecRequest(container_id=container_id, cmd=command, **streams))
                url = answer.url
        except CRIError as exc:
            await responder.text(500, str(exc))
            return
        await self._proxy(request, responder, url)

    async def _port_forward(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        try:
            ports = port_forward_ports(request)
        except StreamOptionsError as exc:
            await responder.text(400, str(exc))
            return
        pod = self.host.pod_by_name(params["ns"], params["pod"])
        if pod is None:
            await responder.text(404, "pod does not exist")
            return
        uid = params.get("uid")
        if uid and str((pod.get("metadata") or {}).get("uid", "")) != uid:
            await responder.text(404, "pod not found")
            return
        sandbox_id = await self.host.running_sandbox_id(pod)
        if sandbox_id is None:
            name = f"{params['pod']}_{params['ns']}"
            await responder.text(500, f'pod not found ("{name}")')
            return
        try:
            url = (
                await self.runtime.port_forward(api_pb2.PortForwardRequest(pod_sandbox_id=sandbox_id, port=ports))
            ).url
        except CRIError as exc:
            await responder.text(500, str(exc))
            return
        await self._proxy(request, responder, url)

    async def _run(self, request: Request, responder: Responder, params: dict[str, str]) -> None:
        container_id = await self._stream_container(responder, params)
        if container_id is None:
            return
        cmd = (request.param("cmd") or "").split(" ")
        try:
            answer = await self.runtime.exec_sync(container_id, cmd, 0)
        except CRIError as exc:
            await responder.text(500, str(exc))
            return
        await responder.send(200, bytes(answer.stdout) + bytes(answer.stderr), content_type=JSON_TYPE)

    async def _stream_container(self, responder: Responder, params: dict[str, str]) -> str | None:
        pod = self.host.pod_by_name(params["ns"], params["pod"])
        if pod is None:
            await responder.text(404, "pod does not exist")
            return None
        uid = params.get("uid")
        container = params["container"]
        if uid and str((pod.get("metadata") or {}).get("uid", "")) != uid:
            container_id = None
        else:
            container_id = await self.host.running_container_id(pod, container)
        if container_id is None:
            await responder.text(500, f'container not found ("{container}")')
            return None
        return container_id

    async def _proxy(self, request: Request, responder: Responder, url: str) -> None:
        if not request.wants_upgrade:
            # As upstream's UpgradeAwareHandler with upgradeRequired.
            await responder.text(400, "Upgrade request required")
            return
        self.active_streams += 1
        try:
            await proxy_upgrade(request, responder, url)
        finally:
            self.active_streams -= 1


RouteHandler = Callable[[Request, Responder, dict[str, str]], Awaitable[None]]

# The patterns upstream v1.34 registers on its ServeMux with the default feature gates (go-restful adds "/x/" for a web
# service at "/x"); a trailing slash is a subtree. /statusz and /flagz are behind alpha gates and not registered.
_REGISTERED_EXACT = frozenset(
    {
        "/healthz", "/healthz/ping", "/healthz/log", "/healthz/syncloop", "/pods", "/stats", "/metrics",
        "/metrics/cadvisor", "/metrics/resource", "/metrics/probes", "/configz", "/containerLogs", "/exec",
        "/attach", "/portForward", "/run", "/debug/flags/v",
    }
)  # fmt: skip
_REGISTERED_SUBTREES = (
    "/pods/", "/stats/", "/logs/", "/containerLogs/", "/exec/", "/attach/", "/portForward/", "/run/", "/runningpods/",
    "/checkpoint/", "/debug/pprof/",
)  # fmt: skip


def upstream_registered(path: str) -> bool:
    """Whether upstream's ServeMux has a pattern for `path` (else its bare 404, before authentication). A subtree's
    root without the slash ("/logs", "/runningpods") is redirected there by the ServeMux: counted as registered."""
    if path in _REGISTERED_EXACT or path.startswith(_REGISTERED_SUBTREES):
        return True
    return path + "/" in _REGISTERED_SUBTREES


async def _error_string(responder: Responder, status: int, message: str) -> None:
    """go-restful's Response.WriteErrorString: the message as it is, Go's sniffed text/plain."""
    await responder.send(status, message.encode())


def _authz_error(attr: Attributes) -> str:
    return (
        f"Authorization error (user={attr.user.name}, verb={attr.verb}, resource=nodes, subresource={attr.subresource})"
    )


async def _json(responder: Responder, body: Any) -> None:
    await responder.send(200, json.dumps(body).encode(), content_type=JSON_TYPE)


def _has_container(pod: Pod, name: str) -> bool:
    spec = pod.get("spec") or {}
    return any(
        c.get("name") == name
        for key in ("containers", "initContainers", "ephemeralContainers")
        for c in spec.get(key) or ()
    )


# --- container log queries ----------------------------------------------------------------------------------


class LogQueryError(ValueError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


_DECODE_ERROR = '{"message": "Unable to decode query."}'
_INVALID = '{"message": "Invalid request."}'


def _bool(value: str) -> bool:
    """Go's strconv.ParseBool, as the parameter codec decodes booleans."""
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False", ""):
        return False
    raise ValueError(value)


def _int(value: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError(value)
    return int(value)


def parse_log_options(query: Mapping[str, list[str]], *, now: datetime.datetime) -> tuple[logreader.LogOptions, bool]:
    """PodLogOptions from the query, decoded and validated as upstream (400 when undecodable, 422 when invalid);
    returns the reader's options and `previous`."""
    values = {k: v[0] for k, v in query.items() if v}
    tail = values.get("tail")
    if tail:
        values.pop("tailLines", None)
        if tail != "all":
            values["tailLines"] = tail
    try:
        follow = _bool(values.get("follow", ""))
        previous = _bool(values.get("previous", ""))
        timestamps = _bool(values.get("timestamps", ""))
        tail_lines = _int(values["tailLines"]) if "tailLines" in values else None
        since_seconds = _int(values["sinceSeconds"]) if "sinceSeconds" in values else None
        limit_bytes = _int(values["limitBytes"]) if "limitBytes" in values else None
        since_time = logreader.parse_cri_time(values["sinceTime"]) if "sinceTime" in values else None
    except (ValueError, logreader.LogFormatError) as exc:
        raise LogQueryError(400, _DECODE_ERROR) from exc
    if since_seconds is not None and since_time is not None:
        raise LogQueryError(422, _INVALID)
    if (since_seconds is not None and since_seconds < 1) or (limit_bytes is not None and limit_bytes < 1):
        raise LogQueryError(422, _INVALID)
    if tail_lines is not None and tail_lines < 0:
        raise LogQueryError(422, _INVALID)
    since = since_time
    if since_seconds is not None:
        since = now - datetime.timedelta(seconds=since_seconds)
    options = logreader.LogOptions(
        tail=tail_lines if tail_lines is not None else -1,
        limit_bytes=limit_bytes if limit_bytes is not None else -1,
        since=since,
        follow=follow,
        timestamps=timestamps,
    )
    return options, previous


class ContainerLogError(ValueError):
    """Why a container has no log to show: 400 with upstream's text."""


def _bare_id(container_id: str) -> str:
    return container_id.split("://", 1)[-1]


def log_container_id(status: Mapping[str, Any], pod_name: str, container: str, *, previous: bool) -> str:
    """Which container instance's log to read (upstream validateContainerLogStatus)."""
    found: Mapping[str, Any] | None = None
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        found = next((c for c in status.get(key) or () if c.get("name") == container), None)
        if found is not None:
            break
    if found is None:
        raise ContainerLogError(f'container "{container}" in pod "{pod_name}" is not available')
    state = found.get("state") or {}
    last = (found.get("lastState") or {}).get("terminated")
    waiting, running, terminated = state.get("waiting"), state.get("running"), state.get("terminated")
    if previous:
        if not last or not last.get("containerID"):
            raise ContainerLogError(f'previous terminated container "{container}" in pod "{pod_name}" not found')
        return _bare_id(str(last["containerID"]))
    if running is not None:
        return _bare_id(str(found.get("containerID", "")))
    if terminated is not None:
        if terminated.get("containerID"):
            return _bare_id(str(terminated["containerID"]))
        if last and last.get("containerID"):
            return _bare_id(str(last["containerID"]))
        raise ContainerLogError(f'container "{container}" in pod "{pod_name}" is terminated')
    if last is not None:
        if not last.get("containerID"):
            raise ContainerLogError(f'container "{container}" in pod "{pod_name}" is terminated')
        return _bare_id(str(last["containerID"]))
    if waiting is not None:
        reason = str(waiting.get("reason", ""))
        if reason == "ErrImagePull":
            raise ContainerLogError(
                f'container "{container}" in pod "{pod_name}" is waiting to start: image can\'t be pulled'
            )
        if reason == "ImagePullBackOff":
            raise ContainerLogError(
                f'container "{container}" in pod "{pod_name}" is waiting to start: trying and failing to pull image'
            )
        raise ContainerLogError(f'container "{container}" in pod "{pod_name}" is waiting to start: {reason}')
    raise ContainerLogError(f'container "{container}" in pod "{pod_name}" is waiting to start - no logs yet')
