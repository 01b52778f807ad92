"""Ephemeral containers (`kubectl debug`) on the real testbed: added through the pod's `ephemeralcontainers`
subresource as an admin would, they run in the pod's existing sandbox (sharing the target container's PID
namespace), are never restarted after they exit, change nothing for the pod's other containers, and go with the pod.

The agent runs as a subprocess (`nodeagent run`); what runs is read through containerd's CRI, in every state.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]
UID_LABEL = "io.kubernetes.pod.uid"
NAME_LABEL = "io.kubernetes.container.name"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-ephemeral.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def containers_of(cri: CRIClient, uid: str) -> dict[str, list[api_pb2.Container]]:
    """The pod's containers in every state, by container name, newest first."""
    out: dict[str, list[api_pb2.Container]] = {}
    for c in await cri.runtime.list_containers():
        if c.labels.get(UID_LABEL) == uid:
            out.setdefault(c.labels[NAME_LABEL], []).append(c)
    for instances in out.values():
        instances.sort(key=lambda c: c.created_at, reverse=True)
    return out


def debug_container(name: str, image: str, command: list[str]) -> Obj:
    # As `kubectl debug --target=main` sends it (the apiserver defaults the rest).
    return {
        "name": name,
        "image": image,
        "command": command,
        "targetContainerName": "main",
        "stdin": False,
        "tty": False,
    }


async def test_ephemeral_container_runs_in_the_sandbox_is_never_restarted_and_goes_with_the_pod(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    image = configs.busybox_image(settings)
    name = f"debugme-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}],
        },
    }
    created = await admin.create(paths.pods(NS), pod)
    uid = created["metadata"]["uid"]
    try:

        async def running() -> Obj | None:
            got = await admin.get(paths.pod(NS, name))
            statuses = (got.get("status") or {}).get("containerStatuses") or []
            return got if statuses and "running" in statuses[0].get("state", {}) else None

        before = await eventually(running, timeout=60, what="pod running", agent=agent)
        [main] = (await containers_of(cri_client, uid))["main"]
        sandboxes = [s for s in await cri_client.runtime.list_pod_sandbox() if s.labels.get(UID_LABEL) == uid]
        assert len(sandboxes) == 1

        # A debugger that inspects the target and then fails, and one that stays: as kubectl debug adds them.
        probe = ["sh", "-c", "sleep 8; exit 3"]
        patch = {"spec": {"ephemeralContainers": [debug_container("debugger", image, probe)]}}
        await admin.patch(paths.pod(NS, name), patch, subresource="ephemeralcontainers")

        async def debugger_running() -> api_pb2.Container | None:
            found = (await containers_of(cri_client, uid)).get("debugger") or []
            return found[0] if found and found[0].state == api_pb2.CONTAINER_RUNNING else None

        debugger = await eventually(debugger_running, timeout=30, what="ephemeral container running", agent=agent)
        assert debugger.pod_sandbox_id == main.pod_sandbox_id == sandboxes[0].id
        # In the pod's sandbox: the pod's hostname (its UTS namespace); in the target's PID namespace: its sleep.
        hostname = await cri_client.runtime.exec_sync(debugger.id, ["hostname"], timeout=5)
        assert hostname.stdout.decode().strip() == name
        ps = await cri_client.runtime.exec_sync(debugger.id, ["ps"], timeout=5)
        assert "sleep 3600" in ps.stdout.decode(), ps.stdout.decode()

        async def debugger_exited() -> bool:
            found = (await containers_of(cri_client, uid)).get("debugger") or []
            return bool(found) and found[0].state == api_pb2.CONTAINER_EXITED

        await eventually(debugger_exited, timeout=30, what="ephemeral container exited", agent=agent)
        await asyncio.sleep(6)  # several syncs and relists: an ordinary container would have been restarted by now
        now = await containers_of(cri_client, uid)
        assert [c.id for c in now["debugger"]] == [debugger.id], "the ephemeral container was restarted"
        exited = await cri_client.runtime.container_status(debugger.id)
        assert exited.status.exit_code == 3
        assert [c.id for c in now["main"]] == [main.id], "the pod's container was restarted"
        assert now["main"][0].state == api_pb2.CONTAINER_RUNNING
        assert [s.id for s in await cri_client.runtime.list_pod_sandbox() if s.labels.get(UID_LABEL) == uid] == [
            sandboxes[0].id
        ], "the sandbox changed"
        after = await admin.get(paths.pod(NS, name))
        [main_status] = after["status"]["containerStatuses"]
        assert main_status["restartCount"] == 0
        assert main_status["containerID"] == before["status"]["containerStatuses"][0]["containerID"]

        async def ephemeral_status(container: str, state: str) -> Obj | None:
            got = await admin.get(paths.pod(NS, name))
            for status in (got.get("status") or {}).get("ephemeralContainerStatuses") or []:
                if status["name"] == container and state in (status.get("state") or {}):
                    return dict(status)
            return None

        reported = await eventually(
            lambda: ephemeral_status("debugger", "terminated"), timeout=20, what="debugger reported", agent=agent
        )
        assert reported["state"]["terminated"]["exitCode"] == 3
        assert reported["containerID"] == f"containerd://{debugger.id}"
        assert reported["restartCount"] == 0

        # A second one that stays; deleting the pod kills it with the pod.
        stays = debug_container("stays", image, ["sleep", "3600"])
        patch = {"spec": {"ephemeralContainers": [debug_container("debugger", image, probe), stays]}}
        await admin.patch(paths.pod(NS, name), patch, subresource="ephemeralcontainers")

        async def stays_running() -> bool:
            found = (await containers_of(cri_client, uid)).get("stays") or []
            return bool(found) and found[0].state == api_pb2.CONTAINER_RUNNING

        await eventually(stays_running, timeout=30, what="second ephemeral container running", agent=agent)
        assert [c.id for c in (await containers_of(cri_client, uid))["debugger"]] == [debugger.id]
        await eventually(lambda: ephemeral_status("stays", "running"), timeout=20, what="stays reported", agent=agent)
    finally:
        await admin.delete(paths.pod(NS, name), grace_period_seconds=2)

    async def gone() -> bool:
        left = [c for c in await cri_client.runtime.list_containers() if c.labels.get(UID_LABEL) == uid]
        left += [s for s in await cri_client.runtime.list_pod_sandbox() if s.labels.get(UID_LABEL) == uid]
        return not left

    await eventually(gone, timeout=20, what="pod and its ephemeral containers gone from containerd", agent=agent)
