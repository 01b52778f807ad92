"""Block CSI volumes (upstream pkg/volume/csi/csi_block.go and kubelet_pods.go makeBlockVolumes): where a claim of
volumeMode Block used in a container's volumeDevices is staged, published and mapped, and the CRI devices a container
gets for it. Pure paths and decisions; the kubernetes.io/csi plugin (csi.py) runs the calls.

Under --root-dir, as upstream lays them out (<pv> is the PV's name, upstream's specName):

    plugins/kubernetes.io/csi/volumeDevices/staging/<pv>              NodeStageVolume's staging path (a directory)
    plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<pod uid>    NodePublishVolume's target (the driver's device)
    plugins/kubernetes.io/csi/volumeDevices/<pv>/data/vol_data.json   what the tear down needs
    pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>                   symlink to the published device: the container's
                                                                      CRI Device host path
    pods/<uid>/volumes/kubernetes.io~csi/<volume>/vol_data.json       ours, not upstream's: the pod volume's record
                                                                      (with volumeMode Block), which restart
                                                                      reconstruction and the tear down read

Where this differs from upstream: no bind mount of the device under volumeDevices/<pv>/dev/<pod uid> and no loop
device holding it open (upstream's MapBlockVolume reference counting); the symlink alone maps it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from cri.v1 import api_pb2
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.volume.csiutil import CSI_PLUGIN_NAME

BLOCK = "Block"
VOLUME_MODE_KEY = "volumeMode"  # in the pod volume's record (ours)
ESCAPED_PLUGIN = "kubernetes.io~csi"
# As upstream's makeBlockVolumes: read, write and mknod; a read-only claim reads only.
PERMISSIONS = "mrw"
READ_ONLY_PERMISSIONS = "r"


def devices_dir(root_dir: str) -> str:
    """upstream GetVolumeDevicePluginDir(kubernetes.io/csi)."""
    return posixpath.join(root_dir, "plugins", CSI_PLUGIN_NAME, "volumeDevices")


def staging_path(root_dir: str, spec_name: str) -> str:
    return posixpath.join(devices_dir(root_dir), "staging", spec_name)


def publish_dir(root_dir: str, spec_name: str) -> str:
    return posixpath.join(devices_dir(root_dir), "publish", spec_name)


def publish_path(root_dir: str, spec_name: str, pod_uid: str) -> str:
    return posixpath.join(publish_dir(root_dir, spec_name), pod_uid)


def data_dir(root_dir: str, spec_name: str) -> str:
    """Where the block volume's vol_data.json lives (upstream getVolumeDeviceDataDir)."""
    return posixpath.join(devices_dir(root_dir), spec_name, "data")


def volume_plugin_dir(root_dir: str, spec_name: str) -> str:
    return posixpath.join(devices_dir(root_dir), spec_name)


def pod_device_dir(root_dir: str, pod_uid: str) -> str:
    """upstream GetPodVolumeDeviceDir(uid, kubernetes.io~csi)."""
    return posixpath.join(root_dir, "pods", pod_uid, "volumeDevices", ESCAPED_PLUGIN)


def pod_device_path(root_dir: str, pod_uid: str, spec_name: str) -> str:
    """The symlink to the published device (upstream GetPodDeviceMapPath: the directory and the spec name)."""
    return posixpath.join(pod_device_dir(root_dir, pod_uid), spec_name)


def claim_read_only(pod: Mapping[str, Any], volume_name: str) -> bool:
    """upstream vol.ReadOnly of a block volume: the pod's persistentVolumeClaim.readOnly."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == volume_name:
            return bool((volume.get("persistentVolumeClaim") or {}).get("readOnly") or False)
    return False


def container_devices(
    pod: Mapping[str, Any], container: Mapping[str, Any], mapped: Mapping[str, str]
) -> list[api_pb2.Device]:
    """The CRI devices of a container's volumeDevices, from `mapped` (pod volume name -> the symlink of its mapped
    device). As upstream makeBlockVolumes: an absolute devicePath and a mapped volume, else
    CreateContainerConfigError."""
    devices: list[api_pb2.Device] = []
    for entry in container.get("volumeDevices") or []:
        name = str(entry.get("name", ""))
        device_path = str(entry.get("devicePath", ""))
        if not posixpath.isabs(device_path):
            raise CreateContainerConfigError(f"error DevicePath `{device_path}` must be an absolute path")
        host_path = mapped.get(name)
        if host_path is None:
            raise CreateContainerConfigError(
                f'cannot find volume "{name}" to pass into container "{container.get("name", "")}"'
            )
        permissions = READ_ONLY_PERMISSIONS if claim_read_only(pod, name) else PERMISSIONS
        devices.append(api_pb2.Device(container_path=device_path, host_path=host_path, permissions=permissions))
    return devices


def mapped_names(volumes: Sequence[tuple[str, str]]) -> dict[str, str]:
    """(pod volume name, host path) pairs of the pod's set-up volumes -> those that are mapped block devices."""
    return {name: path for name, path in volumes if f"/volumeDevices/{ESCAPED_PLUGIN}/" in path}
