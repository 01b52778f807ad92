"""NodeStatusManager against the testbed's real apiserver, with the node's own credential (Node authorizer and
NodeRestriction in force): registration, the Ready condition following the runtime's health, and the Lease."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from cri.client import CRIClient
from nodeagent.clock import SystemClock
from nodeagent.config import KubeletConfiguration
from nodeagent.kube import KubeClient, NotFound, paths
from nodeagent.nodestatus import NODE_LEASE_NAMESPACE, gather_node_facts
from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.testbed.layout import Settings

if TYPE_CHECKING:
    from nodeagent.testbed.testbed import Testbed

pytestmark = pytest.mark.integration

DEADLINE = 60.0


class Health:
    def __init__(self) -> None:
        self.ready = True
        self.message = ""

    async def __call__(self) -> tuple[bool, str]:
        return self.ready, self.message


def _ready(node: dict[str, Any]) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = node.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), {})


async def _eventually(read: Callable[[], Any], check: Callable[[Any], bool], timeout: float = 10.0) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            with contextlib.suppress(NotFound):
                value = await read()
                if check(value):
                    return value
            await asyncio.sleep(0.2)


async def _delete_node_and_lease(admin: KubeClient, name: str) -> None:
    for path in (paths.node(name), paths.lease(NODE_LEASE_NAMESPACE, name)):
        with contextlib.suppress(NotFound):
            await admin.delete(path)


async def test_register_report_status_and_renew_lease(
    testbed: Testbed, settings: Settings, cri_client: CRIClient
) -> None:
    name = settings.node_name
    version = await cri_client.runtime.version("v1")
    runtime_version = f"{version.runtime_name}://{version.runtime_version}"
    facts = await asyncio.to_thread(
        gather_node_facts, container_runtime_version=runtime_version, kubelet_version="v1.31.0", hostname=name
    )
    config = KubeletConfiguration(node_lease_duration_seconds=8, node_status_update_frequency=timedelta(seconds=1))
    health = Health()
    events: list[tuple[str, str, str]] = []
    lease_path = paths.lease(NODE_LEASE_NAMESPACE, name)
    async with (
        asyncio.timeout(DEADLINE),
        KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin,
        KubeClient.from_kubeconfig(testbed.layout.node_kubeconfig) as node_client,
    ):
        await _delete_node_and_lease(admin, name)
        manager = NodeStatusManager(
            node_client,
            node_name=name,
            config=config,
            facts=facts,
            runtime_health=health,
            clock=SystemClock(),
            record_event=lambda *event: events.append(event),
        )
        task: asyncio.Task[None] | None = None
        try:
            await manager.register()
            task = asyncio.create_task(manager.run(), name="node-status-under-test")

            node = await _eventually(lambda: admin.get(paths.node(name)), lambda n: _ready(n).get("status") == "True")
            labels = node["metadata"]["labels"]
            assert labels["kubernetes.io/hostname"] == name
            assert labels["kubernetes.io/os"] == "linux"
            assert labels["kubernetes.io/arch"] == facts.architecture
            assert node["status"]["capacity"]["pods"] == str(config.max_pods)
            assert {"cpu", "memory", "ephemeral-storage", "pods"} <= set(node["status"]["allocatable"])
            assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == runtime_version
            assert runtime_version.startswith("containerd://")
            assert _ready(node)["reason"] == "KubeletReady"
            seen = manager.node()
            assert seen is not None and seen["metadata"]["uid"] == node["metadata"]["uid"]

            lease = await _eventually(lambda: admin.get(lease_path), lambda _: True)
            assert lease["metadata"]["ownerReferences"] == [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
            ]
            assert lease["spec"]["holderIdentity"] == name
            assert lease["spec"]["leaseDurationSeconds"] == 8
            first_renew = lease["spec"]["renewTime"]
            renewed = await _eventually(
                lambda: admin.get(lease_path), lambda lease: lease["spec"]["renewTime"] > first_renew, timeout=6.0
            )
            assert renewed["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]

            health.ready, health.message = False, "container runtime is down"
            node = await _eventually(lambda: admin.get(paths.node(name)), lambda n: _ready(n).get("status") == "False")
            assert (_ready(node)["reason"], _ready(node)["message"]) == ("KubeletNotReady", "container runtime is down")
            assert ("Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady") in events
            assert manager.status_patches >= 2
            assert manager.last_report_time is not None
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # Other tests in the session create and delete a Node of this name: leave none behind.
            await _delete_node_and_lease(admin, name)
