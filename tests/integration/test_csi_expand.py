"""Online node expansion on the real testbed: the e2e suite's CSI mock driver with EXPAND_VOLUME
(--node-expand-required). The module proxy serves no external-resizer, so the test plays its part as the resizer
writes it for a driver that needs node expansion: the PV's capacity grows, the claim's status gets
allocatedResources and allocatedResourceStatuses[storage] = NodeResizePending. At the pod's next resync the agent
calls NodeExpandVolume and finishes the claim's status as upstream's kubelet does."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, csistack
from nodeagent.testbed.csistack import DriverSpec, DriverStack
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.volume import csiutil
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    events,
    eventually,
    node_ready,
    running_id,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
EXPAND = "/csi.v1.Node/NodeExpandVolume"
DRIVER = DriverSpec(name="expand.csi-mock.nodeagent.test", attach_required=False, mock_args=("--node-expand-required",))
MI = 1 << 20


class Bed:
    def __init__(self, testbed: Testbed, agent: Agent) -> None:
        self.testbed = testbed
        self.agent = agent
        self.stack: DriverStack | None = None


@pytest.fixture(scope="module")
def bed(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    config = agent_config(testbed, tmp_path_factory.mktemp("csi-expand") / "nodeagent.yaml", syncFrequency="5s")
    holder = Bed(testbed, start_agent(testbed, testbed.layout.logs / "agent-csi-expand.log", config=config))
    try:
        yield holder
    finally:
        stop_agent(holder.agent)
        asyncio.run(_delete_objects(testbed))
        csistack.stop_driver(testbed.layout, DRIVER.name)
        asyncio.run(clean_up(testbed, settings))


async def _delete_objects(testbed: Testbed) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for pod in (await admin.list(paths.pods(NS)))["items"]:
            if pod["metadata"]["name"].startswith("csie-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
        for claim in (await admin.list(paths.api_path("persistentvolumeclaims", namespace=NS)))["items"]:
            if claim["metadata"]["name"].startswith("csie-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(
                        paths.api_path("persistentvolumeclaims", namespace=NS, name=claim["metadata"]["name"])
                    )
        for pv in (await admin.list(paths.api_path("persistentvolumes")))["items"]:
            if pv["metadata"]["name"].startswith("csie-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.api_path("persistentvolumes", name=pv["metadata"]["name"]))
        await csistack.delete_csidriver(admin, DRIVER.name)


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=bed.agent)
    if bed.stack is None:
        bed.stack = await csistack.start_driver(bed.testbed.layout, DRIVER)
        await csistack.delete_csidriver(admin, DRIVER.name)
        await csistack.create_csidriver(admin, DRIVER)
    yield bed


def _name(prefix: str) -> str:
    return f"csie-{prefix}-{uuid.uuid4().hex[:5]}"


@pytest.mark.asyncio(loop_scope="session")
async def test_grown_volume_is_expanded_on_the_node_and_the_claim_finished(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    assert bed.stack is not None
    pv_name, claim, name = _name("pv"), _name("claim"), _name("pod")
    provisioned = await csistack.provision(admin, bed.stack, pv_name, capacity_bytes=MI)
    volume_id = provisioned.volume_id
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }
    claim_path = paths.api_path("persistentvolumeclaims", namespace=NS, name=claim)
    await admin.create(paths.api_path("persistentvolumeclaims", namespace=NS), body)

    async def bound() -> bool:
        obj = await admin.get(claim_path)
        return (obj.get("status") or {}).get("phase") == "Bound"

    await eventually(bound, timeout=60, what=f"claim {claim} Bound", agent=bed.agent)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "command": ["sleep", "3600"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    await admin.create(paths.pods(NS), pod)

    async def running() -> Obj | None:
        got: Obj = await admin.get(paths.pod(NS, name))
        return got if running_id(got, "main") else None

    created: Obj = await eventually(running, timeout=90, what=f"{name} running", agent=bed.agent)

    def expands() -> list[Obj]:
        return [
            c.get("Request") or {}
            for c in csistack.driver_calls(bed.testbed.layout, DRIVER.name)
            if c.get("Method") == EXPAND and (c.get("Request") or {}).get("volume_id") == volume_id
        ]

    assert (await admin.get(claim_path))["status"]["capacity"]["storage"] == str(MI)  # as the PV says it
    # The resizer's part (ControllerExpandVolume done, the node's turn).
    await admin.patch(paths.api_path("persistentvolumes", name=pv_name), {"spec": {"capacity": {"storage": "2Mi"}}})
    resizer = {
        "status": {
            "allocatedResources": {"storage": "2Mi"},
            "allocatedResourceStatuses": {"storage": "NodeResizePending"},
        }
    }
    await admin.patch(claim_path, resizer, patch_type="merge", subresource="status")

    async def finished() -> Obj | None:
        obj: Obj = await admin.get(claim_path)
        status = obj.get("status") or {}
        done = status.get("capacity", {}).get("storage") == "2Mi" and not status.get("allocatedResourceStatuses")
        return obj if done else None

    await eventually(finished, timeout=60, what="the claim's status finished at 2Mi", agent=bed.agent)
    (request,) = expands()
    uid = created["metadata"]["uid"]
    root = bed.testbed.layout.kubelet_root.resolve()
    assert request["volume_path"] == str(root / "pods" / uid / "volumes" / "kubernetes.io~csi" / "data" / "mount")
    assert request["staging_target_path"] == csiutil.device_mount_path(str(root), DRIVER.name, volume_id)
    assert int(request["capacity_range"]["required_bytes"]) == 2 * MI
    expected = f'MountVolume.NodeExpandVolume succeeded for volume "{pv_name}" {settings.node_name}'
    assert [e["message"] for e in await events(admin, created, "FileSystemResizeSuccessful")] == [expected]
    await asyncio.sleep(6)  # a resync later: done once
    assert len(expands()) == 1
    await admin.delete(paths.pod(NS, name))
