"""Online node expansion on the real testbed: the e2e suite's CSI mock driver with EXPAND_VOLUME
(--node-expand-required). The module proxy serves no external-resizer, so the test plays its part as the resizer
writes it for a driver that needs node expansion: the PV's capacity grows, the claim's status gets
allocatedResources and allocatedResourceStatuses[storage] = NodeResizePending. At the pod's next resync the agent
calls NodeExpandVolume and finishes the claim's status as upstream's kubelet does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed.csistack import DriverSpec
from nodeagent.testbed.layout import Settings
from nodeagent.volume import csiutil
from tests.integration import csikit
from tests.integration.agentproc import NS, events, eventually
from tests.integration.csikit import MI, Bed, Obj

EXPAND = "/csi.v1.Node/NodeExpandVolume"
DRIVER = DriverSpec(name="expand.csi-mock.nodeagent.test", attach_required=False, mock_args=("--node-expand-required",))
PREFIX = "csie"


bed = csikit.module_bed("csi-expand", prefix=PREFIX, drivers=(DRIVER,), syncFrequency="5s")


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    yield await csikit.start_drivers(bed, admin, settings, DRIVER)


@pytest.mark.asyncio(loop_scope="session")
async def test_grown_volume_is_expanded_on_the_node_and_the_claim_finished(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    made = await csikit.claim_pod(admin, bed, settings, DRIVER.name, PREFIX, capacity_bytes=MI)
    pv_name, volume_id, name = made.pv_name, made.volume_id, made.pod["metadata"]["name"]
    claim_path = csikit.claim_path(made.claim)
    created = await csikit.running(admin, bed.agent, name)

    def expands() -> list[Obj]:
        return bed.requests(DRIVER.name, volume_id, EXPAND)

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
