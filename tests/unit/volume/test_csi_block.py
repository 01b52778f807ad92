"""Block CSI volumes (csiblock): a Block claim used in volumeDevices is staged to volumeDevices/staging/<pv>,
published to volumeDevices/publish/<pv>/<pod uid>, mapped by the pod's symlink, handed to the container as a CRI
device, torn down in the reverse order, and found again after a restart."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from csi.v1 import csi_pb2
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.volume import csiblock
from nodeagent.volume.csierrors import MountOperationError, event_message
from tests.unit.volume.test_csi_plugin import DRIVER, PVC_VOLUME, Env, env, pod, pv

__all__ = ["env"]  # the fixture, imported for the tests below


def _device_pod(uid: str = "u1", read_only: bool = False) -> dict[str, Any]:
    obj = pod(uid=uid)
    obj["spec"]["containers"] = [{"name": "app", "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}]}]
    obj["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] = read_only
    return obj


def _tree(top: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), top) for d, dirs, files in os.walk(top) for n in dirs + files)


@pytest.fixture
def block_env(env: Env) -> Env:
    obj = pv()
    obj["spec"]["volumeMode"] = "Block"
    env.store.put("", "persistentvolumes", "", obj)
    return env


def test_paths_as_upstream() -> None:
    assert csiblock.staging_path("/r", "pv-1") == "/r/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1"
    assert csiblock.publish_path("/r", "pv-1", "u1") == "/r/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/u1"
    assert csiblock.data_dir("/r", "pv-1") == "/r/plugins/kubernetes.io/csi/volumeDevices/pv-1/data"
    assert csiblock.pod_device_path("/r", "u1", "pv-1") == "/r/pods/u1/volumeDevices/kubernetes.io~csi/pv-1"


@pytest.mark.parametrize(
    ("read_only", "devices", "mapped", "expected"),
    [
        (False, [{"name": "data", "devicePath": "/dev/xvda"}], {"data": "/l"}, [("/dev/xvda", "/l", "mrw")]),
        (True, [{"name": "data", "devicePath": "/dev/xvda"}], {"data": "/l"}, [("/dev/xvda", "/l", "r")]),
        (False, [{"name": "data", "devicePath": "dev/xvda"}], {"data": "/l"}, "error DevicePath `dev/xvda` must be"),
        (False, [{"name": "data", "devicePath": "/dev/x"}], {}, 'cannot find volume "data" to pass into container'),
    ],
)
def test_container_devices(
    read_only: bool, devices: list[dict[str, str]], mapped: dict[str, str], expected: list[tuple[str, str, str]] | str
) -> None:
    container = {"name": "app", "volumeDevices": devices}
    if isinstance(expected, str):
        with pytest.raises(CreateContainerConfigError, match=expected):
            csiblock.container_devices(_device_pod(read_only=read_only), container, mapped)
        return
    got = csiblock.container_devices(_device_pod(read_only=read_only), container, mapped)
    assert [(d.container_path, d.host_path, d.permissions) for d in got] == expected


def test_mapped_names_are_the_device_symlinks() -> None:
    pairs = [("data", "/r/pods/u1/volumeDevices/kubernetes.io~csi/pv-1"), ("cfg", "/r/pods/u1/volumes/x~y/cfg")]
    assert csiblock.mapped_names(pairs) == {"data": "/r/pods/u1/volumeDevices/kubernetes.io~csi/pv-1"}


async def test_block_claim_is_staged_published_mapped_and_torn_down(block_env: Env) -> None:
    env = block_env
    plugin = env.plugin()
    path = await plugin.set_up(_device_pod(), PVC_VOLUME)
    link = csiblock.pod_device_path(env.root, "u1", "pv-1")
    publish = csiblock.publish_path(env.root, "pv-1", "u1")
    staging = csiblock.staging_path(env.root, "pv-1")
    assert path == link
    assert await asyncio.to_thread(os.readlink, link) == publish
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume"]
    (stage,) = env.node.args("NodeStageVolume")
    (published,) = env.node.args("NodePublishVolume")
    assert stage["staging_target_path"] == staging and stage["capability"].HasField("block")
    assert (published["target_path"], published["staging_target_path"]) == (publish, staging)
    assert published["capability"].HasField("block")
    assert published["capability"].access_mode.mode == csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    assert await plugin.set_up(_device_pod(), PVC_VOLUME) == link  # a resync: nothing again
    assert len(env.node.calls) == 3  # NodeGetCapabilities, the stage and the publish
    # a second pod: published and mapped, not staged again
    await plugin.set_up(_device_pod("u2"), PVC_VOLUME)
    assert env.node.methods()[2:] == ["NodePublishVolume"]
    await plugin.tear_down("u1", "data")
    assert env.node.methods()[3:] == ["NodeUnpublishVolume"]
    assert env.node.args("NodeUnpublishVolume")[0]["target_path"] == publish
    assert not await asyncio.to_thread(os.path.lexists, link)
    await plugin.tear_down("u2", "data")
    assert env.node.methods()[4:] == ["NodeUnpublishVolume", "NodeUnstageVolume"]
    assert env.node.args("NodeUnstageVolume")[0]["staging_target_path"] == staging
    devices_dir = csiblock.devices_dir(env.root)
    # the driver removes its publish paths (this fake does not, so they stay, as upstream leaves them): the rest goes
    assert await asyncio.to_thread(_tree, devices_dir) == [
        "publish",
        "publish/pv-1",
        "publish/pv-1/u1",
        "publish/pv-1/u2",
        "staging",  # the parents stay, as upstream's
    ]


async def test_restart_reconstructs_the_mapped_device(block_env: Env) -> None:
    env = block_env
    await env.plugin().set_up(_device_pod(), PVC_VOLUME)
    restarted = env.plugin()
    link = csiblock.pod_device_path(env.root, "u1", "pv-1")
    assert await asyncio.to_thread(restarted.reconstruct, "u1", "data") == link
    assert await restarted.set_up(_device_pod(), PVC_VOLUME) == link
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume"]
    await restarted.tear_down("u1", "data")
    assert env.node.methods()[2:] == ["NodeUnpublishVolume", "NodeUnstageVolume"]


async def test_unregistered_driver_fails_set_up_device(block_env: Env) -> None:
    env = block_env
    env.registry.drivers.clear()
    with pytest.raises(MountOperationError) as failure:
        await env.plugin().set_up(_device_pod(), PVC_VOLUME)
    assert event_message(failure.value, "data") == (
        'MapVolume.SetUpDevice failed for volume "pv-1" : kubernetes.io/csi: blockMapper.SetUpDevice failed to get '
        f"CSI client: driver name {DRIVER} not found in the list of registered CSI drivers"
    )
