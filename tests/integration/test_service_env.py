"""Service environment variables as a pod sees them: the master service always, the Services of its namespace with
enableServiceLinks (the default), none of them without."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]
SERVICE = "svc-env-web"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-service-env.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def _env_of(admin: KubeClient, cri: CRIClient, agent: Agent, name: str) -> dict[str, str]:
    async def running_id() -> str:
        pod: Obj = await admin.get(paths.pod(NS, name))
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            if "running" in (status.get("state") or {}):
                return str(status["containerID"]).rpartition("://")[2]
        return ""

    container_id = await eventually(running_id, timeout=90, what=f"{name} running", agent=agent)
    answer = await cri.runtime.exec_sync(container_id, ["env"], timeout=30)
    return dict(line.split("=", 1) for line in answer.stdout.decode().splitlines() if "=" in line)


async def test_service_variables(agent: Agent, admin: KubeClient, cri_client: CRIClient, settings: Settings) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    service = await admin.create(
        paths.api_path("services", namespace=NS),
        {
            "metadata": {"name": SERVICE},
            "spec": {"selector": {"app": "nothing"}, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
        },
    )
    ip = service["spec"]["clusterIP"]
    names = {}
    for links in (True, False):
        name = f"svc-env-{str(links).lower()}-{uuid.uuid4().hex[:5]}"
        names[links] = name
        await admin.create(
            paths.pods(NS),
            {
                "metadata": {"name": name},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": links,
                    "containers": [
                        {"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}
                    ],
                },
            },
        )
    linked = await _env_of(admin, cri_client, agent, names[True])
    assert linked["SVC_ENV_WEB_SERVICE_HOST"] == ip
    assert linked["SVC_ENV_WEB_SERVICE_PORT"] == "8080"
    assert linked["SVC_ENV_WEB_SERVICE_PORT_HTTP"] == "8080"
    assert linked["SVC_ENV_WEB_PORT"] == f"tcp://{ip}:8080"
    assert linked["SVC_ENV_WEB_PORT_8080_TCP_ADDR"] == ip
    assert linked["KUBERNETES_SERVICE_HOST"] == "198.19.0.1"
    assert linked["KUBERNETES_SERVICE_PORT"] == "443"
    unlinked = await _env_of(admin, cri_client, agent, names[False])
    assert "SVC_ENV_WEB_SERVICE_HOST" not in unlinked
    assert unlinked["KUBERNETES_SERVICE_HOST"] == "198.19.0.1"
