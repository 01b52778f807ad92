"""The e2e suite's nginx images as the testbed builds them (Debian's nginx on the vanilla busybox rootfs, under
e2e-test-images/nginx:1.14-4 and :1.15-4) behave as upstream's do where specs look:

- with no command, the image's CMD serves the welcome page on port 80: another pod's `wget` reads it, the kubelet's
  httpGet readiness probe passes, and nginx's access log is the container's stdout (`kubectl logs`);
- a command such as the "back-off timer reset on image update" spec's `/bin/sh -c "sleep 5"` runs in it: `sh` and
  `sleep` are there (checked on the other tag, so both references pull).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    eventually,
    kubectl_logs,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_ready,
)

Obj = dict[str, Any]
LABEL = {"test": "nginx-image"}


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-nginx-image.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def _terminated(admin: KubeClient, agent: Agent, name: str) -> Obj:
    """The container's terminated state, once the pod (restartPolicy Never) is done."""

    async def check() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        status = pod.get("status") or {}
        if status.get("phase") not in ("Succeeded", "Failed"):
            return None
        [cs] = status["containerStatuses"]
        terminated: Obj = cs["state"]["terminated"]
        return terminated

    found: Obj = await eventually(check, timeout=120, what=f"{name} done", agent=agent)
    return found


async def test_nginx_serves_the_welcome_page_on_port_80(
    testbed: Testbed, agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = configs.nginx_image(settings)
    assert image.endswith("/e2e-test-images/nginx:1.14-4")  # upstream's repository path and manifest.go tag
    suffix = uuid.uuid4().hex[:6]
    server, client = f"nginx-{suffix}", f"nginx-client-{suffix}"
    probe = {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 1}
    # No command: the image's CMD, as the specs that run nginx give none.
    await admin.create(paths.pods(NS), one_container_pod(server, {"image": image, "readinessProbe": probe}, LABEL))
    ip, _ = await wait_ready(admin, agent, server)
    fetch = {"image": configs.e2e_busybox_image(settings), "command": ["wget", "-q", "-O", "-", f"http://{ip}:80/"]}
    await admin.create(paths.pods(NS), one_container_pod(client, fetch, LABEL, restartPolicy="Never"))
    terminated = await _terminated(admin, agent, client)
    assert terminated["exitCode"] == 0, terminated
    page = await kubectl_logs(testbed, client)
    assert "<title>Welcome to nginx!</title>" in page, page
    # The access log is the container's stdout: the client's GET is in `kubectl logs` of the server.

    async def logged() -> str | None:
        lines = [line for line in (await kubectl_logs(testbed, server)).splitlines() if '"GET / HTTP/1.1" 200' in line]
        return "\n".join(lines) or None

    assert "Wget" in await eventually(logged, timeout=30, what="the GET in nginx's access log", agent=agent)


async def test_sh_and_sleep_run_in_the_other_tag(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = configs.nginx_image(settings, configs.NGINX_NEW_IMAGE_TAG)
    assert image.endswith("/e2e-test-images/nginx:1.15-4")
    name = f"nginx-sh-{uuid.uuid4().hex[:6]}"
    # The back-off spec's command (its extra argument is $0 of the script, unused).
    container = {"image": image, "command": ["/bin/sh", "-c", "sleep 1 && exit 3", "/crash/missing"]}
    await admin.create(paths.pods(NS), one_container_pod(name, container, LABEL, restartPolicy="Never"))
    terminated = await _terminated(admin, agent, name)
    # 3, not 127 (no such command) nor 128+n: sh ran sleep to the end and then the script's own exit.
    assert terminated["exitCode"] == 3, terminated
    started, finished = terminated["startedAt"], terminated["finishedAt"]
    assert started < finished, terminated  # RFC 3339 UTC at second precision: sleep 1 spans at least one tick
