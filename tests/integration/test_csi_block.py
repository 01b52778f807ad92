"""Block CSI volumes and volume modes on the real testbed (the e2e suite's CSI mock driver, the real PV binder).

- a Block PV used as a device (volumeDevices): staged to volumeDevices/staging/<pv>, published to
  volumeDevices/publish/<pv>/<pod uid>, mapped by the pod's symlink and given to the container as its CRI device.
  The mock only makes directories, so the test makes a loop device and the driver publishes it (its --faults-file
  "device" hook makes the target that device's node, as a real driver's bind mount would): what the container
  writes to /dev/xvda is read back from the loop device on the host. The delete unpublishes and unstages;
- a Filesystem PV used as a device, and a Block PV mounted as a filesystem: upstream's populator messages
  ("volume data has volumeMode X, but is specified in volumeDevices/volumeMounts").
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import csistack
from nodeagent.testbed.csistack import DriverSpec
from nodeagent.testbed.layout import Settings
from tests.integration import csikit
from tests.integration.agentproc import NS, eventually
from tests.integration.csikit import MI, PUBLISH, STAGE, UNPUBLISH, UNSTAGE, Bed, Obj

DRIVER = DriverSpec(name="block.csi-mock.nodeagent.test", attach_required=False)
MARKER = b"nodeagent-block-volume"
PREFIX = "csib"
METHODS = (STAGE, PUBLISH, UNPUBLISH, UNSTAGE)


bed = csikit.module_bed("csi-block", prefix=PREFIX, drivers=(DRIVER,))


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    yield await csikit.start_drivers(bed, admin, settings, DRIVER)


async def _bound_claim(admin: KubeClient, bed: Bed, mode: str) -> tuple[str, str, str]:
    """A PV of `mode` (made as external-provisioner would) and a claim of that mode bound to it; (claim, PV name,
    volume id)."""
    pv_name = csikit.name(PREFIX, "pv")
    volume = await csistack.create_volume(
        bed.stacks[DRIVER.name].socket,
        pv_name,
        capacity_bytes=1 << 20,
        access_modes=("ReadWriteOnce",),
        fs_type="ext4",
    )
    pv = csistack.persistent_volume(pv_name, driver=DRIVER.name, volume_handle=volume.volume_id, capacity_bytes=1 << 20)
    pv["spec"]["volumeMode"] = mode
    await admin.create(paths.api_path("persistentvolumes"), pv)
    claim = csikit.name(PREFIX, "claim")
    await csikit.bound_claim(admin, bed.agent, claim, pv_name, mode=mode)
    return claim, pv_name, volume.volume_id


def _pod(settings: Settings, claim: str, *, device: bool) -> Obj:
    volume = csikit.claim_volume(claim)
    name = csikit.name(PREFIX, "pod")
    return csikit.volume_pod(settings, name, volume, device="/dev/xvda" if device else None)


async def _waits_with(admin: KubeClient, bed: Bed, pod: Obj, expected: str) -> None:
    await csikit.wait_failed_mount(admin, bed.agent, pod, expected)
    current = await admin.get(paths.pod(NS, pod["metadata"]["name"]))
    statuses = (current.get("status") or {}).get("containerStatuses") or []
    assert all("running" not in (s.get("state") or {}) for s in statuses), statuses
    assert (current.get("status") or {}).get("phase") == "Pending"


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[str]:
    """A 16 MiB loop device of a file of the test's own, detached (by its name) and removed at the end."""
    image = tmp_path / "block.img"
    with image.open("wb") as f:
        f.truncate(16 * MI)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "--detach", device], check=False)
        image.unlink(missing_ok=True)


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("restart", [False, True], ids=["running", "agent-restarted"])
async def test_block_claim_is_mapped_as_the_containers_device(
    ready: Bed, admin: KubeClient, settings: Settings, loop_device: str, restart: bool
) -> None:
    bed = ready
    layout = bed.testbed.layout
    csistack.set_faults(layout, DRIVER.name, {"NodePublishVolume": {"device": loop_device}})
    try:
        claim, pv_name, volume_id = await _bound_claim(admin, bed, "Block")
        body = _pod(settings, claim, device=True)
        body["spec"]["containers"][0]["command"] = [
            "sh",
            "-c",
            f"test -b /dev/xvda && printf {MARKER.decode()} > /dev/xvda && sync && sleep 3600",
        ]
        await admin.create(paths.pods(NS), body)
        pod = await csikit.running(admin, bed.agent, body["metadata"]["name"])
        uid = pod["metadata"]["uid"]
        root = layout.kubelet_root.resolve()
        devices = root / "plugins" / "kubernetes.io" / "csi" / "volumeDevices"
        staging, publish = devices / "staging" / pv_name, devices / "publish" / pv_name / uid
        await bed.calls_are(DRIVER.name, volume_id, METHODS, [STAGE, PUBLISH])
        stage = bed.requests(DRIVER.name, volume_id, STAGE)[0]
        request = bed.requests(DRIVER.name, volume_id, PUBLISH)[0]
        assert stage["staging_target_path"] == str(staging)
        assert (request["target_path"], request["staging_target_path"]) == (str(publish), str(staging))
        assert "Block" in json.dumps(request["volume_capability"])  # a block capability, not a mount
        link = root / "pods" / uid / "volumeDevices" / "kubernetes.io~csi" / pv_name
        assert os.readlink(link) == str(publish)

        async def written() -> bool:
            return await asyncio.to_thread(_read_device, loop_device, len(MARKER)) == MARKER

        # the container wrote to the loop device through its /dev/xvda
        await eventually(written, timeout=30, what="the container's bytes on the loop device", agent=bed.agent)
        if restart:
            # killed and restarted: the mapped device is found on disk (reconstructed), and not set up again
            offset = bed.kill()
            bed.restart()

            async def synced() -> bool:
                text = await asyncio.to_thread(csikit.read_from, bed.agent.log, offset)
                return f"csi volume published already pod_uid={uid} volume=data" in text

            await eventually(synced, timeout=60, what="the restarted agent's sync of the pod", agent=bed.agent)
            assert bed.calls(DRIVER.name, volume_id, *METHODS) == [STAGE, PUBLISH]
        await csikit.delete_pod(admin, bed.agent, body["metadata"]["name"], timeout=60)
        await bed.calls_are(DRIVER.name, volume_id, METHODS, [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])
        # the symlink, the device the driver published, the staging directory, the data/vol_data.json: all gone
        left = [p for p in (link, publish, staging, devices / pv_name) if await asyncio.to_thread(os.path.lexists, p)]
        assert left == []
    finally:
        csistack.set_faults(layout, DRIVER.name, {})


def _read_device(device: str, size: int) -> bytes:
    with open(device, "rb") as f:
        return f.read(size)


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize(
    ("mode", "device", "field"),
    [("Filesystem", True, "volumeDevices"), ("Block", False, "volumeMounts")],
)
async def test_mode_mismatch_waits_with_upstreams_message(
    ready: Bed, admin: KubeClient, settings: Settings, mode: str, device: bool, field: str
) -> None:
    bed = ready
    claim, _, volume_id = await _bound_claim(admin, bed, mode)
    pod = await admin.create(paths.pods(NS), _pod(settings, claim, device=device))
    expected = (
        f'MountVolume.SetUp failed for volume "data" : volume data has volumeMode {mode}, but is specified in {field}'
    )
    await _waits_with(admin, bed, pod, expected)
    assert bed.calls(DRIVER.name, volume_id, *METHODS) == []
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"], timeout=60)
