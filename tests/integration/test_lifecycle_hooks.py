"""postStart hooks on the real testbed: exec, httpGet and sleep run right after the container starts, and a failing
hook kills the container, which is restarted, with upstream's events and waiting reason.

The agent runs as a subprocess (`nodeagent run`); the tests create pods as admin, read a container's CRI log on the
host, and for the httpGet hook serve HTTP on loopback themselves (the agent sends the hook's request from the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import http.server
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-lifecycle-hooks.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _name(prefix: str) -> str:
    return f"hook-{prefix}-{uuid.uuid4().hex[:5]}"


async def run_pod(admin: KubeClient, name: str, container: Obj, *, grace: int = 2) -> Obj:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": False,
            "containers": [container],
        },
    }
    created: Obj = await admin.create(paths.pods(NS), body)
    return created


async def get_pod(admin: KubeClient, name: str) -> Obj:
    pod: Obj = await admin.get(paths.pod(NS, name))
    return pod


def main_status(pod: Obj) -> Obj:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    out: Obj = statuses[0]
    return out


async def wait_ready(admin: KubeClient, agent: Agent, name: str) -> Obj:
    async def ready() -> Obj | None:
        pod = await get_pod(admin, name)
        return pod if main_status(pod).get("ready") else None

    got: Obj = await eventually(ready, timeout=90, what=f"{name} ready", agent=agent)
    return got


async def events_of(admin: KubeClient, name: str, reason: str) -> list[Obj]:
    listed = await admin.list(paths.events(NS), field_selector=f"involvedObject.name={name},reason={reason}")
    items: list[Obj] = listed["items"]
    return items


def _seconds(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")


async def test_exec_post_start_writes_a_file_the_main_container_reads(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("exec")
    container = {
        "name": "main",
        "image": configs.busybox_image(settings),
        # The main process waits for what the hook writes; without the hook it would wait for ever.
        "command": [
            "sh",
            "-c",
            "until [ -f /tmp/poststart ]; do sleep 1; done; echo main read: $(cat /tmp/poststart); exec sleep 3600",
        ],
        "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo written-by-poststart > /tmp/poststart"]}}},
    }
    await run_pod(admin, name, container)
    pod = await wait_ready(admin, agent, name)
    container_id = main_status(pod)["containerID"].rpartition("://")[2]
    log_path = (await cri_client.runtime.container_status(container_id)).status.log_path

    async def read_in_log() -> bool:
        return b"main read: written-by-poststart" in await asyncio.to_thread(Path(log_path).read_bytes)

    await eventually(read_in_log, timeout=30, what="the main container read the hook's file", agent=agent)
    assert main_status(pod)["restartCount"] == 0
    assert await events_of(admin, name, "FailedPostStartHook") == []


class _HookServer:
    """Records the requests the agent sends; the agent runs on this host, so loopback reaches it."""

    def __init__(self) -> None:
        seen: list[tuple[str, dict[str, str]]] = []
        self.seen = seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, dict(self.headers)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


async def test_http_get_post_start_reaches_its_host(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    server = _HookServer()
    try:
        name = _name("http")
        hook = {
            "host": "127.0.0.1",
            "port": server.port,
            "path": f"/started?pod={name}",
            "httpHeaders": [{"name": "X-Hook", "value": "post-start"}],
        }
        container = {
            "name": "main",
            "image": configs.busybox_image(settings),
            "command": ["sleep", "3600"],
            "lifecycle": {"postStart": {"httpGet": hook}},
        }
        await run_pod(admin, name, container)
        await wait_ready(admin, agent, name)
        [(path, headers)] = server.seen
        assert path == f"/started?pod={name}"
        assert headers["X-Hook"] == "post-start"
        assert headers["User-Agent"].startswith("kube-lifecycle/")
    finally:
        server.close()


async def test_sleep_post_start_holds_the_container_back_from_ready(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("sleep")
    container = {
        "name": "main",
        "image": configs.busybox_image(settings),
        "command": ["sleep", "3600"],
        "lifecycle": {"postStart": {"sleep": {"seconds": 3}}},
    }
    await run_pod(admin, name, container, grace=10)  # the API wants a sleep shorter than the grace
    pod = await wait_ready(admin, agent, name)
    started = _seconds(main_status(pod)["state"]["running"]["startedAt"])
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "ContainersReady")
    # The sync that started the container returned only after the hook: no status said it ran before then.
    assert _seconds(ready["lastTransitionTime"]) - started >= datetime.timedelta(seconds=2)


async def test_failing_post_start_kills_and_restarts_the_container(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("fail")
    container = {
        "name": "main",
        "image": configs.busybox_image(settings),
        "command": ["sleep", "3600"],
        "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo no-good; exit 1"]}}},
    }
    created = await run_pod(admin, name, container)
    uid = created["metadata"]["uid"]
    waiting: list[Obj] = []

    async def watch_waiting() -> None:
        # Every waiting state the pod went through: PostStartHookError lasts a grace period (the kill), then the
        # container restarts or backs off.
        async with contextlib.aclosing(
            admin.watch(
                paths.pods(NS),
                resource_version=created["metadata"]["resourceVersion"],
                field_selector=f"metadata.name={name}",
                timeout_seconds=120,
            )
        ) as stream:
            async for event in stream:
                state = main_status(event.object).get("state") or {}
                if "waiting" in state:
                    waiting.append(state["waiting"])

    watcher = asyncio.create_task(watch_waiting())
    try:

        async def restarted() -> Obj | None:
            pod = await get_pod(admin, name)
            return pod if main_status(pod).get("restartCount", 0) >= 1 and main_status(pod).get("lastState") else None

        pod = await eventually(restarted, timeout=90, what=f"{name} restarted", agent=agent)
        failed = await eventually(
            lambda: events_of(admin, name, "FailedPostStartHook"), timeout=30, what="FailedPostStartHook", agent=agent
        )
        assert {(e["type"], e["message"], e["involvedObject"]["fieldPath"]) for e in failed} == {
            ("Warning", "PostStartHook failed", "spec.containers{main}")
        }
        killing = await events_of(admin, name, "Killing")
        assert "FailedPostStartHook" in {e["message"] for e in killing}
        # The killed run: `sleep` ignores SIGTERM as PID 1, so the grace ran out and it was killed.
        assert main_status(pod)["lastState"]["terminated"]["exitCode"] == 137
        message = (
            f'Exec lifecycle hook ([sh -c echo no-good; exit 1]) for Container "main" in Pod "{name}_{NS}({uid})" '
            "failed - error: command 'sh -c echo no-good; exit 1' exited with 1: , message: \"no-good\\n\""
        )

        async def seen_reason() -> bool:
            return {"reason": "PostStartHookError", "message": message} in waiting

        await eventually(seen_reason, timeout=30, what="waiting PostStartHookError", agent=agent)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
