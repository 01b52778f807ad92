"""Kubelet API requests, from the bytes of the request head to the answer, with no socket: h11 parses the request
as the server's connection loop does (`nodeagent.server.http`), then `KubeletServer.handle` routes it with a fake
host and runtime (the read-only server's routing, every debugging handler on): path resolution of /logs/ (in a
temporary directory), container log queries (`parse_log_options`, `log_container_id`, the log reader over a small
CRI log file), exec/attach stream options, portForward ports, /run, /stats, /metrics, /healthz. The pure auth
parts run on the same request: `bearer_token`, `request_attributes`, `forbidden_message`, `user_from_certificate`.

A crash is an exception out of `handle` (the real server would log it and answer 500) or a request answered with
nothing at all. A 500 the handler chose is an answer (Go's file server answers 500 for a name too long).
`h11.RemoteProtocolError` is the documented refusal of a malformed request (the server answers 400).

The streaming side has no frame parser to fuzz: exec, attach and portForward splice the client's SPDY or WebSocket
bytes to the runtime's streaming server unchanged (`nodeagent.server.streaming`); what the agent parses of them is
the upgrade request, which this target covers."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Mapping
from typing import Any

import grpc
import h11
from hypothesis import strategies as st

from cri.errors import UnavailableError
from cri.v1 import api_pb2
from nodeagent.server.auth import User, bearer_token, forbidden_message, request_attributes, user_from_certificate
from nodeagent.server.http import Headers, Request, Responder, Upgraded, parse_target
from nodeagent.server.server import KubeletServer
from tests.fuzz.engine import Target
from tests.fuzz.strategies import json_values, strings

Pod = dict[str, Any]

_LOGS = tempfile.mkdtemp(prefix="nodeagent-fuzz-logs-")
atexit.register(shutil.rmtree, _LOGS, True)
os.makedirs(os.path.join(_LOGS, "pods", "default_web"), exist_ok=True)
with open(os.path.join(_LOGS, "syslog"), "w") as _f:
    _f.write("line 1\nline 2\n")
with open(os.path.join(_LOGS, "a<b>&\"'.log"), "w") as _f:
    _f.write("x\n")
if not os.path.lexists(os.path.join(_LOGS, "escape")):
    os.symlink("/etc", os.path.join(_LOGS, "escape"))
_CONTAINER_LOG = os.path.join(_LOGS, "pods", "default_web", "0.log")
with open(_CONTAINER_LOG, "w") as _f:
    _f.write(
        "2026-11-28T18:00:00.000000001Z stdout F hello\n"
        "2026-11-28T18:00:01.5Z stderr P part\n"
        "2026-11-28T18:00:01.6Z stderr F ial\n"
        "not a cri line\n"
    )

_POD: Pod = {
    "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
    "spec": {"containers": [{"name": "c"}], "initContainers": [{"name": "i"}]},
    "status": {
        "containerStatuses": [
            {"name": "c", "containerID": "containerd://abc", "state": {"running": {}},
             "lastState": {"terminated": {"containerID": "containerd://old"}}},
        ],
        "initContainerStatuses": [{"name": "i", "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
    },
}  # fmt: skip


class FakeHost:
    def pods(self) -> list[Pod]:
        return [_POD]

    def pod_by_name(self, namespace: str, name: str) -> Pod | None:
        return _POD if (namespace, name) == ("default", "web") else None

    def pod_status(self, pod: Pod) -> Mapping[str, Any] | None:
        return None

    async def running_pods(self) -> list[Pod]:
        return [_POD]

    async def running_container_id(self, pod: Pod, container: str) -> str | None:
        return "abc" if container == "c" else None

    async def running_sandbox_id(self, pod: Pod) -> str | None:
        return "sb"

    def syncloop_healthy(self) -> tuple[bool, str]:
        return True, ""

    def configz(self) -> Mapping[str, Any]:
        return {"staticPodPath": "/etc/kubernetes/manifests"}

    def metrics(self, path: str) -> bytes | None:
        return b"# metrics\n" if path in ("/metrics", "/metrics/probes") else None

    async def summary(self, only_cpu_and_memory: bool) -> Mapping[str, Any]:
        return {"node": {"nodeName": "node"}}

    async def resource_metrics(self) -> bytes:
        return b""

    async def cadvisor_metrics(self) -> bytes:
        return b""


class FakeRuntime:
    """Answers what the handlers ask before they would proxy; the streaming calls fail, so nothing dials out."""

    async def exec(self, request: api_pb2.ExecRequest, *, timeout: float | None = None) -> api_pb2.ExecResponse:
        raise UnavailableError("Exec", grpc.StatusCode.UNAVAILABLE, "fuzz: no streaming server")

    async def attach(self, request: api_pb2.AttachRequest, *, timeout: float | None = None) -> api_pb2.AttachResponse:
        raise UnavailableError("Attach", grpc.StatusCode.UNAVAILABLE, "fuzz: no streaming server")

    async def port_forward(
        self, request: api_pb2.PortForwardRequest, *, timeout: float | None = None
    ) -> api_pb2.PortForwardResponse:
        raise UnavailableError("PortForward", grpc.StatusCode.UNAVAILABLE, "fuzz: no streaming server")

    async def container_status(
        self, container_id: str, *, verbose: bool = False, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse:
        status = api_pb2.ContainerStatus(id=container_id, log_path=_CONTAINER_LOG, state=api_pb2.CONTAINER_EXITED)
        return api_pb2.ContainerStatusResponse(status=status)

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        return api_pb2.ExecSyncResponse(stdout=" ".join(cmd).encode(), exit_code=0)


class RecordingResponder(Responder):
    """Records the answer instead of writing it."""

    def __init__(self) -> None:
        self.started = False
        self.upgraded = None
        self.gone = asyncio.Event()
        self.status: int | None = None
        self.body = bytearray()

    async def send(
        self, status: int, body: bytes = b"", *, content_type: str = "text/plain; charset=utf-8", headers: Headers = ()
    ) -> None:
        self.status, self.started = status, True
        self.body += body

    async def start(self, status: int, *, content_type: str, headers: Headers = ()) -> None:
        self.status, self.started = status, True

    async def write(self, data: bytes) -> None:
        self.body += data

    async def end(self) -> None:
        pass

    async def upgrade(self, headers: Headers) -> Upgraded:
        raise AssertionError("no handler may upgrade without a runtime URL")


_SERVER = KubeletServer(host=FakeHost(), runtime=FakeRuntime(), node_name="node", node_log_dir=_LOGS, log_poll=0.0)  # type: ignore[arg-type]
_LOOP = asyncio.new_event_loop()

_segment = st.one_of(
    st.sampled_from(["default", "web", "c", "i", "u1", "x", "syslog", "pods", "escape", "..", ".", ""]), strings
)
_paths = st.one_of(
    st.builds(
        lambda prefix, segments: prefix + "/".join(segments),
        st.sampled_from(
            ["/containerLogs/", "/exec/", "/attach/", "/portForward/", "/run/", "/logs/", "/logs", "/stats/",
             "/stats", "/metrics", "/metrics/", "/healthz/", "/pods/", "/runningpods/", "/configz", "/", "//"]
        ),
        st.lists(_segment, max_size=5),
    ),
    st.sampled_from(["/logs/..%00/etc/shadow", "/logs/%2e%2e/%2e%2e/etc/passwd", "/logs/escape/passwd",
                     "/logs/../../etc/passwd", "/logs//etc/passwd", "/logs/%00", "/logs/pods/../syslog"]),
)  # fmt: skip
_query_keys = st.sampled_from(
    ["follow", "previous", "timestamps", "tailLines", "tail", "sinceSeconds", "sinceTime", "limitBytes", "input",
     "output", "error", "tty", "command", "port", "cmd", "only_cpu_and_memory", "x"]
)  # fmt: skip
_query_values = st.one_of(
    st.sampled_from(["1", "0", "true", "false", "all", "-1", "10", "80,443", "2026-11-28T18:00:01Z", "2026-13-45T99"]),
    strings,
)
_queries = st.lists(st.tuples(_query_keys, _query_values), max_size=6)
_header_names = st.sampled_from(
    ["Connection", "Upgrade", "Authorization", "X-Stream-Protocol-Version", "Sec-WebSocket-Protocol", "Content-Type"]
)
_header_values = st.one_of(
    st.sampled_from(["Upgrade", "upgrade, keep-alive", "websocket", "SPDY/3.1", "Bearer abc", "Bearer", "Basic x=",
                     "v4.channel.k8s.io", "channel.k8s.io", ""]),
    strings,
)  # fmt: skip
_methods = st.sampled_from(["GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "get", "X"])
_quote_safe = st.sampled_from(["/", "/%", "/.:@", ""])

requests = st.tuples(
    _methods,
    _paths,
    _quote_safe,
    _queries,
    st.lists(st.tuples(_header_names, _header_values), max_size=4),
    st.one_of(st.none(), json_values(4)),
    st.booleans(),
)


def _target(path: str, safe: str, query: list[tuple[str, str]], raw: bool) -> str:
    encoded = path if raw else urllib.parse.quote(path, safe=safe)
    return encoded + ("?" + urllib.parse.urlencode(query) if query else "")


def _to_request(method: str, target: str, headers: list[tuple[str, str]]) -> Request | None:
    """The request as the connection loop builds it; None when h11 refuses the bytes (the server's 400)."""
    head = f"{method} {target} HTTP/1.1\r\nHost: node\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    try:
        data = head.encode("utf-8", "surrogatepass")
    except UnicodeEncodeError:
        return None
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=1 << 20)
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(event, h11.Request):
        return None
    text_target = event.target.decode("latin-1")
    path, parsed = parse_target(text_target)
    return Request(
        method=event.method.decode("ascii"),
        target=text_target,
        path=path,
        query=parsed,
        headers=[(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in event.headers],
    )


def run(case: tuple[str, str, str, list[tuple[str, str]], list[tuple[str, str]], Any, bool]) -> None:
    method, path, safe, query, headers, cert, raw = case
    request = _to_request(method, _target(path, safe, query, raw), headers)
    if request is None:
        return
    bearer_token(request.header("authorization"))
    user_from_certificate(cert if isinstance(cert, dict) else None)
    attrs = request_attributes(User("fuzz", ("system:masters",)), request.method, request.path, "node")
    forbidden_message(attrs)
    responder = RecordingResponder()
    _LOOP.run_until_complete(asyncio.wait_for(_SERVER.handle(request, responder), 10))
    if responder.status is None:
        raise AssertionError(f"{request.method} {request.target}: no answer")


TARGET = Target("kubeletapi", requests, run, (), __doc__ or "")
