"""The status manager against the real apiserver, with the node's own credential (Node authorizer, NodeRestriction)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from nodeagent.clock import SystemClock
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, NotFound
from nodeagent.status.manager import StatusManager
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed


def pod_manifest(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


def running_status(api_status: dict[str, Any], *, ready: bool = True) -> dict[str, Any]:
    """What the kubelet publishes for a started pod, on top of what the apiserver holds (qosClass is immutable)."""
    flag = "True" if ready else "False"
    return {
        **api_status,
        "phase": "Running",
        "startTime": "2024-05-01T12:00:00Z",
        "conditions": [{"type": "Ready", "status": flag, "lastTransitionTime": "2024-05-01T12:00:05Z"}],
        "containerStatuses": [
            {
                "name": "c",
                "image": "busybox",
                "imageID": "",
                "containerID": "containerd://" + "0" * 64,
                "ready": ready,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2024-05-01T12:00:01Z"}},
            }
        ],
    }


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail("condition not met in time")
        await asyncio.sleep(0.1)


@pytest.fixture
async def node_client(testbed: Testbed, settings: Settings, admin: KubeClient) -> AsyncIterator[KubeClient]:
    async with KubeClient.from_kubeconfig(testbed.layout.node_kubeconfig) as client:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": settings.node_name}}
        with contextlib.suppress(AlreadyExists):
            await client.create(paths.nodes(), node)
        try:
            yield client
        finally:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.node(settings.node_name), grace_period_seconds=0)


async def test_the_node_patches_its_pods_status_once_and_never_a_recreated_pod(
    settings: Settings, admin: KubeClient, node_client: KubeClient
) -> None:
    name = f"status-{uuid.uuid4().hex[:6]}"
    pod_path = paths.pod("default", name)
    manager = StatusManager(node_client, clock=SystemClock(), sync_period=1.0)
    task = asyncio.create_task(manager.run(), name="status-manager")
    try:
        first = await admin.create(paths.pods("default"), pod_manifest(name, settings.node_name))
        wanted = running_status(first["status"])
        manager.set_pod_status(first, wanted)

        async def shows_running() -> bool:
            status = (await admin.get(pod_path))["status"]
            return bool(status.get("phase") == "Running")

        await eventually(shows_running)
        seen = (await admin.get(pod_path))["status"]
        assert [(c["type"], c["status"]) for c in seen["conditions"]] == [("Ready", "True")]
        assert seen["containerStatuses"][0]["state"] == {"running": {"startedAt": "2024-05-01T12:00:01Z"}}
        assert seen["containerStatuses"][0]["ready"] is True
        assert manager.patches_sent == 1

        # The same status again: nothing to send, through at least one periodic round.
        manager.set_pod_status(first, running_status(first["status"]))
        await asyncio.sleep(1.5)
        assert manager.patches_sent == 1

        # The pod is deleted and recreated under the same name; the old UID's worker publishes once more.
        await admin.delete(pod_path, grace_period_seconds=0)

        async def deleted() -> bool:
            try:
                await admin.get(pod_path)
            except NotFound:
                return True
            return False

        await eventually(deleted)
        second = await admin.create(paths.pods("default"), pod_manifest(name, settings.node_name))
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        manager.set_pod_status(first, running_status(first["status"], ready=False))

        async def tried() -> bool:
            return manager.patches_sent >= 2

        await eventually(tried)
        await asyncio.sleep(1.5)  # a periodic round too: the old UID's status is never retried

        assert manager.patches_sent == 2  # tried once, refused by the UID precondition (422: uid is immutable)
        recreated = await admin.get(pod_path)
        assert recreated["metadata"]["uid"] == second["metadata"]["uid"]
        assert recreated["status"].get("phase") == "Pending"
        assert "containerStatuses" not in recreated["status"]
        assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(NotFound):
            await admin.delete(pod_path, grace_period_seconds=0)
