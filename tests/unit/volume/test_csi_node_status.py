"""node.status.volumesInUse from the volume manager's attachable CSI volumes, and the FailedMount texts of the CSI
steps through the volume manager."""

from __future__ import annotations

from typing import Any

from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.volume.csierrors import MOUNT_DEVICE, MountOperationError, event_message
from nodeagent.volume.errors import SetUpError
from tests.unit.fakeclock import FakeClock
from tests.unit.nodestatus.test_manager import CONFIG, FACTS, NAME, NODE_STATUS, Api, Health


async def test_volumes_in_use_are_reported_and_removed_when_none_is_left() -> None:
    api = Api()
    in_use: list[str] = ["kubernetes.io/csi/d^vol-2", "kubernetes.io/csi/d^vol-1"]
    clock = FakeClock()
    async with api.client() as client:
        manager = NodeStatusManager(
            client,
            node_name=NAME,
            config=CONFIG,
            facts=FACTS,
            runtime_health=Health(),
            clock=clock,
            volumes_in_use=lambda: list(in_use),
        )
        await manager.register()
        await manager.sync_node_status()
        in_use.clear()
        await manager.sync_node_status()
    patches: list[dict[str, Any]] = api.bodies("PATCH", NODE_STATUS)
    assert patches[0]["status"]["volumesInUse"] == ["kubernetes.io/csi/d^vol-1", "kubernetes.io/csi/d^vol-2"]
    # The change alone is worth a patch, and it removes the field (a strategic merge patch's null).
    assert len(patches) == 2
    assert "volumesInUse" in patches[1]["status"]
    assert patches[1]["status"]["volumesInUse"] is None


def test_event_messages_name_the_step_and_upstreams_volume() -> None:
    assert event_message(SetUpError('configmap "x" not found'), "cfg") == (
        'MountVolume.SetUp failed for volume "cfg" : configmap "x" not found'
    )
    error = MountOperationError("rpc error: code = Internal desc = no", operation=MOUNT_DEVICE, spec_name="pv-1")
    assert event_message(error, "data") == (
        'MountVolume.MountDevice failed for volume "pv-1" : rpc error: code = Internal desc = no'
    )
