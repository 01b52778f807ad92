"""VolumeCapability from Kubernetes' view of a volume, and capability sets, as upstream's kubelet builds them."""

from __future__ import annotations

import pytest

from csi.capability import (
    access_mode,
    controller_rpc_types,
    node_rpc_types,
    plugin_service_types,
    volume_capability,
)
from csi.v1 import csi_pb2

Mode = csi_pb2.VolumeCapability.AccessMode

# (k8s access mode, driver has SINGLE_NODE_MULTI_WRITER, CSI mode): upstream's asCSIAccessModeV1 and
# asSingleNodeMultiWriterCapableCSIAccessModeV1.
ACCESS_MODES = [
    ("ReadWriteOnce", False, Mode.SINGLE_NODE_WRITER),
    ("ReadOnlyMany", False, Mode.MULTI_NODE_READER_ONLY),
    ("ReadWriteMany", False, Mode.MULTI_NODE_MULTI_WRITER),
    ("ReadWriteOncePod", False, Mode.SINGLE_NODE_WRITER),
    ("", False, Mode.UNKNOWN),
    ("ReadWriteOnce", True, Mode.SINGLE_NODE_MULTI_WRITER),
    ("ReadOnlyMany", True, Mode.MULTI_NODE_READER_ONLY),
    ("ReadWriteMany", True, Mode.MULTI_NODE_MULTI_WRITER),
    ("ReadWriteOncePod", True, Mode.SINGLE_NODE_SINGLE_WRITER),
    ("Bogus", True, Mode.UNKNOWN),
]


@pytest.mark.parametrize(("k8s", "multi_writer", "expected"), ACCESS_MODES)
def test_access_mode(k8s: str, multi_writer: bool, expected: int) -> None:
    assert access_mode(k8s, single_node_multi_writer=multi_writer) == expected


def test_mount_capability_carries_fs_type_flags_and_fs_group() -> None:
    capability = volume_capability("ReadWriteOnce", fs_type="ext4", mount_flags=["ro", "noatime"], fs_group=2000)
    assert capability.WhichOneof("access_type") == "mount"
    assert capability.mount == csi_pb2.VolumeCapability.MountVolume(
        fs_type="ext4", mount_flags=["ro", "noatime"], volume_mount_group="2000"
    )
    assert capability.access_mode.mode == Mode.SINGLE_NODE_WRITER


def test_mount_capability_without_fs_type_or_group_is_still_a_mount() -> None:
    capability = volume_capability("ReadWriteMany")
    assert capability.WhichOneof("access_type") == "mount"
    assert capability.mount == csi_pb2.VolumeCapability.MountVolume()


def test_block_fs_type_asks_for_a_raw_device() -> None:
    capability = volume_capability("ReadWriteOnce", fs_type="block", mount_flags=["ignored"], fs_group=1)
    assert capability.WhichOneof("access_type") == "block"
    assert capability.access_mode.mode == Mode.SINGLE_NODE_WRITER


def test_capability_sets() -> None:
    rpc = csi_pb2.NodeServiceCapability.RPC
    node = [
        csi_pb2.NodeServiceCapability(rpc=rpc(type=rpc.STAGE_UNSTAGE_VOLUME)),
        csi_pb2.NodeServiceCapability(),  # no rpc: skipped, as upstream
        csi_pb2.NodeServiceCapability(rpc=rpc(type=rpc.GET_VOLUME_STATS)),
    ]
    assert node_rpc_types(node) == {rpc.STAGE_UNSTAGE_VOLUME, rpc.GET_VOLUME_STATS}
    crpc = csi_pb2.ControllerServiceCapability.RPC
    controller = [csi_pb2.ControllerServiceCapability(rpc=crpc(type=crpc.PUBLISH_UNPUBLISH_VOLUME))]
    assert controller_rpc_types(controller) == {crpc.PUBLISH_UNPUBLISH_VOLUME}
    service = csi_pb2.PluginCapability.Service
    plugin = [
        csi_pb2.PluginCapability(service=service(type=service.CONTROLLER_SERVICE)),
        csi_pb2.PluginCapability(volume_expansion=csi_pb2.PluginCapability.VolumeExpansion(type=1)),
    ]
    assert plugin_service_types(plugin) == {service.CONTROLLER_SERVICE}
