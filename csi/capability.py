"""Building a VolumeCapability from what Kubernetes says of a volume, and reading plugin capabilities.

Pure functions, as upstream's kubelet does it in pkg/volume/csi/csi_client.go: the PV's access mode becomes a CSI
access mode (two tables, depending on whether the node plugin has SINGLE_NODE_MULTI_WRITER), fsType "block" asks
for a raw block device, anything else for a mount with the PV's mount options and, when the driver applies it, the
pod's fsGroup as volume_mount_group.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from csi.v1 import csi_pb2

_Mode = csi_pb2.VolumeCapability.AccessMode.Mode

# As upstream: the fsType name that stands for a raw block volume (volumeMode: Block).
FS_TYPE_BLOCK = "block"

# asCSIAccessModeV1: a driver without SINGLE_NODE_MULTI_WRITER sees ReadWriteOncePod as plain single-node writer.
_ACCESS_MODES: dict[str, _Mode.ValueType] = {
    "ReadWriteOnce": _Mode.SINGLE_NODE_WRITER,
    "ReadOnlyMany": _Mode.MULTI_NODE_READER_ONLY,
    "ReadWriteMany": _Mode.MULTI_NODE_MULTI_WRITER,
    "ReadWriteOncePod": _Mode.SINGLE_NODE_WRITER,
}
# asSingleNodeMultiWriterCapableCSIAccessModeV1: such a driver can tell ReadWriteOnce (several pods of the node)
# from ReadWriteOncePod (one pod).
_ACCESS_MODES_SINGLE_NODE_MULTI_WRITER: dict[str, _Mode.ValueType] = {
    "ReadWriteOnce": _Mode.SINGLE_NODE_MULTI_WRITER,
    "ReadOnlyMany": _Mode.MULTI_NODE_READER_ONLY,
    "ReadWriteMany": _Mode.MULTI_NODE_MULTI_WRITER,
    "ReadWriteOncePod": _Mode.SINGLE_NODE_SINGLE_WRITER,
}


def access_mode(k8s_access_mode: str, *, single_node_multi_writer: bool = False) -> _Mode.ValueType:
    """The CSI access mode of a Kubernetes one (`ReadWriteOnce`, ...); UNKNOWN for anything else, as upstream."""
    table = _ACCESS_MODES_SINGLE_NODE_MULTI_WRITER if single_node_multi_writer else _ACCESS_MODES
    return table.get(k8s_access_mode, _Mode.UNKNOWN)


def volume_capability(
    k8s_access_mode: str,
    *,
    fs_type: str = "",
    mount_flags: Sequence[str] = (),
    fs_group: int | None = None,
    single_node_multi_writer: bool = False,
) -> csi_pb2.VolumeCapability:
    """The VolumeCapability the kubelet sends in NodeStage/NodePublish/NodeExpand for such a volume.

    `fs_group` is set only for drivers with VOLUME_MOUNT_GROUP (the caller checks, as upstream's caller does).
    """
    capability = csi_pb2.VolumeCapability(
        access_mode=csi_pb2.VolumeCapability.AccessMode(
            mode=access_mode(k8s_access_mode, single_node_multi_writer=single_node_multi_writer)
        )
    )
    if fs_type == FS_TYPE_BLOCK:
        capability.block.SetInParent()
    else:
        capability.mount.fs_type = fs_type
        capability.mount.mount_flags.extend(mount_flags)
        if fs_group is not None:
            capability.mount.volume_mount_group = str(fs_group)
    return capability


def node_rpc_types(
    capabilities: Iterable[csi_pb2.NodeServiceCapability],
) -> frozenset[csi_pb2.NodeServiceCapability.RPC.Type.ValueType]:
    """The RPC capabilities of a NodeGetCapabilities answer (entries without an rpc are skipped, as upstream)."""
    return frozenset(cap.rpc.type for cap in capabilities if cap.HasField("rpc"))


def controller_rpc_types(
    capabilities: Iterable[csi_pb2.ControllerServiceCapability],
) -> frozenset[csi_pb2.ControllerServiceCapability.RPC.Type.ValueType]:
    """The RPC capabilities of a ControllerGetCapabilities answer."""
    return frozenset(cap.rpc.type for cap in capabilities if cap.HasField("rpc"))


def plugin_service_types(
    capabilities: Iterable[csi_pb2.PluginCapability],
) -> frozenset[csi_pb2.PluginCapability.Service.Type.ValueType]:
    """The services a GetPluginCapabilities answer announces (CONTROLLER_SERVICE, VOLUME_ACCESSIBILITY_CONSTRAINTS)."""
    return frozenset(cap.service.type for cap in capabilities if cap.HasField("service"))
