"""Lifecycle hooks: the request an httpGet hook sends (by table), each handler run against the scripted CRI runtime
on a real socket and a real HTTP server on loopback with upstream's failure messages, and the postStart step of a
container start through RuntimeManager (the event, the kill within the pod's grace, the waiting reason)."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.actions import RuntimePodStatus, SandboxState, SandboxStatus
from nodeagent.kuberuntime.hooks import (
    USER_AGENT,
    HookError,
    go_list,
    http_request,
    resolve_port,
    run_handler,
    run_post_start,
    run_pre_stop_within_grace,
)
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager, Waiting
from nodeagent.podconfig.storage import format_pod
from tests.unit.cri.scripted import Fail, ScriptedRuntime

POD: dict[str, Any] = {"metadata": {"name": "web", "namespace": "ns1", "uid": "u-1"}}
CONTAINER: dict[str, Any] = {"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}
REF = '"web_ns1(u-1)"'


def test_format_pod_and_go_list() -> None:
    assert format_pod(POD) == "web_ns1(u-1)"
    assert go_list(["sh", "-c", "exit 1"]) == "[sh -c exit 1]"
    assert go_list([]) == "[]"


@pytest.mark.parametrize(
    ("port", "expected"),
    [
        (80, 80),
        ("http", 8080),
        ("9090", 9090),
        ("nope", 'strconv.Atoi: parsing "nope": invalid syntax'),
        (0, "invalid port number: 0"),
    ],
)
def test_resolve_port(port: Any, expected: int | str) -> None:
    if isinstance(expected, int):
        assert resolve_port(port, CONTAINER) == expected
    else:
        with pytest.raises(HookError, match=expected):
            resolve_port(port, CONTAINER)


@pytest.mark.parametrize(
    ("action", "ips", "url", "headers"),
    [
        ({"port": "http", "path": "/hook"}, ["198.18.0.5"], "http://198.18.0.5:8080/hook", []),
        ({"port": 80}, ["198.18.0.5"], "http://198.18.0.5:80", []),
        ({"port": 80, "path": "x?a=1"}, ["fd00::5"], "http://[fd00::5]:80/x?a=1", []),
        ({"port": 443, "scheme": "HTTPS", "host": "example.test", "path": "/"}, [], "https://example.test:443/", []),
        (
            {"port": 80, "httpHeaders": [{"name": "X-A", "value": "1"}, {"name": "Accept", "value": "text/plain"}]},
            ["198.18.0.5"],
            "http://198.18.0.5:80",
            [("X-A", "1"), ("Accept", "text/plain")],
        ),
    ],
    ids=["named-port", "no-path", "ipv6-and-query", "host-and-https", "headers"],
)
def test_http_request(action: dict[str, Any], ips: list[str], url: str, headers: list[tuple[str, str]]) -> None:
    got_url, got_headers = http_request(action, CONTAINER, ips)
    assert got_url == url
    expected = [*headers, ("User-Agent", USER_AGENT)]
    if not any(name == "Accept" for name, _ in headers):
        expected.append(("Accept", "*/*"))
    assert got_headers == expected


def test_http_request_without_an_ip_fails_as_upstream() -> None:
    # A hostNetwork pod has no IP of its own in the runtime: upstream fails the same way.
    with pytest.raises(HookError, match="failed to find networking container"):
        http_request({"port": 80}, CONTAINER, [])


def test_http_request_with_empty_accept_removes_it() -> None:
    _, headers = http_request({"port": 80, "httpHeaders": [{"name": "Accept", "value": ""}]}, CONTAINER, ["1.2.3.4"])
    assert headers == [("User-Agent", USER_AGENT)]


class _Server:
    """An HTTP server on loopback answering every GET with `status`, recording the paths and headers."""

    def __init__(self, status: int) -> None:
        seen: list[tuple[str, dict[str, str]]] = []
        self.seen = seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, dict(self.headers)))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(params=[200, 500])
def server(request: pytest.FixtureRequest) -> Iterator[_Server]:
    running = _Server(request.param)
    try:
        yield running
    finally:
        running.close()


async def test_http_hook_succeeds_on_any_response(server: _Server, client: CRIClient) -> None:
    # Upstream discards the response: a 500 is no failure.
    handler = {"httpGet": {"port": server.port, "path": "/start", "httpHeaders": [{"name": "X-Hook", "value": "1"}]}}
    await run_handler(client.runtime, handler, pod=POD, container=CONTAINER, container_id="c1", pod_ips=["127.0.0.1"])
    [(path, headers)] = server.seen
    assert path == "/start"
    assert headers["X-Hook"] == "1"
    assert headers["User-Agent"] == USER_AGENT


async def test_http_hook_fails_when_the_request_fails(client: CRIClient) -> None:
    closed = _Server(200)
    closed.close()  # nothing listens there any more
    handler = {"httpGet": {"port": closed.port, "path": "/start"}}
    with pytest.raises(HookError) as info:
        await run_handler(
            client.runtime, handler, pod=POD, container=CONTAINER, container_id="c1", pod_ips=["127.0.0.1"]
        )
    assert info.value.message.startswith(
        f'HTTP lifecycle hook (/start) for Container "app" in Pod {REF} failed - error: '
        f'Get "http://127.0.0.1:{closed.port}/start": '
    )


async def test_exec_hook_success_and_failure(runtime: ScriptedRuntime, client: CRIClient) -> None:
    handler = {"exec": {"command": ["sh", "-c", "echo hi; exit 3"]}}
    runtime.script["ExecSync"] = api_pb2.ExecSyncResponse(exit_code=0)
    await run_handler(client.runtime, handler, pod=POD, container=CONTAINER, container_id="c1", pod_ips=[])
    runtime.script["ExecSync"] = api_pb2.ExecSyncResponse(exit_code=3, stdout=b"hi\n", stderr=b"oops")
    with pytest.raises(HookError) as info:
        await run_handler(client.runtime, handler, pod=POD, container=CONTAINER, container_id="c1", pod_ips=[])
    assert info.value.message == (
        f'Exec lifecycle hook ([sh -c echo hi; exit 3]) for Container "app" in Pod {REF} failed - error: command '
        "'sh -c echo hi; exit 3' exited with 3: oops, message: \"hi\\noops\""
    )
    [_, second] = runtime.calls_of("ExecSync")
    assert isinstance(second.request, api_pb2.ExecSyncRequest)
    assert (second.request.container_id, list(second.request.cmd), second.request.timeout) == (
        "c1",
        ["sh", "-c", "echo hi; exit 3"],
        0,  # postStart's command has no timeout, as upstream
    )


async def test_exec_hook_runtime_error(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["ExecSync"] = Fail(grpc.StatusCode.NOT_FOUND, "container not running")
    with pytest.raises(
        HookError, match=r'^Exec lifecycle hook \(\[true\]\) for Container "app" .* container not running'
    ):
        await run_handler(
            client.runtime, {"exec": {"command": ["true"]}}, pod=POD, container=CONTAINER, container_id="c1", pod_ips=[]
        )


async def test_sleep_and_invalid_handlers(client: CRIClient) -> None:
    await run_handler(
        client.runtime, {"sleep": {"seconds": 0}}, pod=POD, container=CONTAINER, container_id="c1", pod_ips=[]
    )
    with pytest.raises(HookError, match=r"^Cannot run handler: invalid handler"):
        await run_handler(client.runtime, {}, pod=POD, container=CONTAINER, container_id="c1", pod_ips=[])


async def test_run_post_start_without_a_hook_does_nothing(runtime: ScriptedRuntime, client: CRIClient) -> None:
    await run_post_start(client.runtime, POD, CONTAINER, "c1", [])
    assert runtime.calls == []


async def test_pre_stop_failure_is_reported(runtime: ScriptedRuntime, client: CRIClient) -> None:
    container = {**CONTAINER, "lifecycle": {"preStop": {"exec": {"command": ["false"]}}}}
    runtime.script["ExecSync"] = api_pb2.ExecSyncResponse(exit_code=1)
    seconds, error = await run_pre_stop_within_grace(client.runtime, container, "c1", [], 30, pod=POD)
    assert seconds == 0
    assert error is not None and error.startswith(f'Exec lifecycle hook ([false]) for Container "app" in Pod {REF}')


# --- postStart through the runtime manager -------------------------------------------------------------------------


def _pod(hook: dict[str, Any], grace: int = 7) -> dict[str, Any]:
    app = {"name": "app", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent", "lifecycle": {"postStart": hook}}
    return {
        "metadata": {"name": "web", "namespace": "ns1", "uid": "u-1"},
        "spec": {"containers": [app], "terminationGracePeriodSeconds": grace},
    }


def _script_start(runtime: ScriptedRuntime) -> None:
    runtime.script["ImageStatus"] = api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:1", size=1))
    runtime.script["CreateContainer"] = api_pb2.CreateContainerResponse(container_id="c9")
    runtime.script["PodSandboxStatus"] = api_pb2.PodSandboxStatusResponse(
        status=api_pb2.PodSandboxStatus(
            id="s1",
            state=api_pb2.SANDBOX_READY,
            created_at=1,
            network=api_pb2.PodSandboxNetworkStatus(ip="198.18.0.5"),
            metadata=api_pb2.PodSandboxMetadata(name="web", namespace="ns1", uid="u-1"),
        )
    )


STATUS = RuntimePodStatus(
    uid="u-1",
    name="web",
    namespace="ns1",
    sandboxes=(SandboxStatus(id="s1", state=SandboxState.READY, ip="198.18.0.5", host_network=False),),
)


async def test_failed_post_start_kills_the_container_and_waits_with_the_reason(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    _script_start(runtime)
    runtime.script["ExecSync"] = api_pb2.ExecSyncResponse(exit_code=1, stderr=b"no")
    events: list[tuple[str, str, str, str]] = []
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="10.0.0.1"),
        events=lambda pod, type_, reason, message, field_path: events.append((type_, reason, message, field_path)),
    )
    result = await manager.sync_pod(_pod({"exec": {"command": ["false"]}}), STATUS)

    assert [c.rpc for c in runtime.calls if c.rpc in ("StartContainer", "ExecSync", "StopContainer")] == [
        "StartContainer",
        "ExecSync",
        "StopContainer",
    ]
    [stop] = runtime.calls_of("StopContainer")
    assert isinstance(stop.request, api_pb2.StopContainerRequest)
    assert (stop.request.container_id, stop.request.timeout) == ("c9", 7)  # the pod's grace
    message = (
        f"Exec lifecycle hook ([false]) for Container \"app\" in Pod {REF} failed - error: command 'false' exited "
        'with 1: no, message: "no"'
    )
    assert result.waiting == {"app": Waiting("PostStartHookError", message)}
    field_path = "spec.containers{app}"
    assert ("Normal", "Started", "Started container app", field_path) in events
    tail = events[events.index(("Normal", "Started", "Started container app", field_path)) + 1 :]
    assert tail == [
        ("Warning", "FailedPostStartHook", "PostStartHook failed", field_path),  # the hook's message stays out
        ("Normal", "Killing", "FailedPostStartHook", field_path),
    ]


async def test_successful_post_start_leaves_the_container_running(runtime: ScriptedRuntime, client: CRIClient) -> None:
    _script_start(runtime)
    runtime.script["ExecSync"] = api_pb2.ExecSyncResponse(exit_code=0)
    manager = RuntimeManager(client.runtime, client.image, NodeContext(node_name="n1", host_ip="10.0.0.1"))
    result = await manager.sync_pod(_pod({"exec": {"command": ["true"]}}), STATUS)
    assert result.waiting == {}
    assert len(runtime.calls_of("ExecSync")) == 1
    assert runtime.calls_of("StopContainer") == []


async def test_post_start_waits_for_the_hook_before_the_next_container(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    # As upstream, containers start one after another: the second starts only once the first's hook returned.
    _script_start(runtime)
    order: list[str] = []

    async def slow_exec(request: Any) -> api_pb2.ExecSyncResponse:
        order.append("hook begins")
        await asyncio.sleep(0.05)
        order.append("hook ends")
        return api_pb2.ExecSyncResponse(exit_code=0)

    async def start(request: Any) -> api_pb2.StartContainerResponse:
        order.append("start")
        return api_pb2.StartContainerResponse()

    runtime.script["ExecSync"] = slow_exec
    runtime.script["StartContainer"] = start
    pod = _pod({"exec": {"command": ["true"]}})
    pod["spec"]["containers"].append({"name": "second", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent"})
    manager = RuntimeManager(client.runtime, client.image, NodeContext(node_name="n1", host_ip="10.0.0.1"))
    await manager.sync_pod(pod, STATUS)
    assert order == ["start", "hook begins", "hook ends", "start"]
