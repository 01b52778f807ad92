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
import contextlib
import json
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
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
DRIVER = DriverSpec(name="block.csi-mock.nodeagent.test", attach_required=False)
MI = 1 << 20
NODE = "/csi.v1.Node/"
STAGE, UNSTAGE = NODE + "NodeStageVolume", NODE + "NodeUnstageVolume"
PUBLISH, UNPUBLISH = NODE + "NodePublishVolume", NODE + "NodeUnpublishVolume"
MARKER = b"nodeagent-block-volume"


class Bed:
    def __init__(self, testbed: Testbed, agent: Agent, config: Path) -> None:
        self.testbed = testbed
        self.agent = agent
        self.config = config
        self.stack: DriverStack | None = None

    def restart(self) -> None:
        self.agent = start_agent(self.testbed, self.agent.log, config=self.config)


@pytest.fixture(scope="module")
def bed(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    config = agent_config(testbed, tmp_path_factory.mktemp("csi-block") / "nodeagent.yaml")
    holder = Bed(testbed, start_agent(testbed, testbed.layout.logs / "agent-csi-block.log", config=config), config)
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
            if pod["metadata"]["name"].startswith("csib-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
        for claim in (await admin.list(paths.api_path("persistentvolumeclaims", namespace=NS)))["items"]:
            if claim["metadata"]["name"].startswith("csib-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(
                        paths.api_path("persistentvolumeclaims", namespace=NS, name=claim["metadata"]["name"])
                    )
        for pv in (await admin.list(paths.api_path("persistentvolumes")))["items"]:
            if pv["metadata"]["name"].startswith("csib-"):
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
    return f"csib-{prefix}-{uuid.uuid4().hex[:5]}"


async def _bound_claim(admin: KubeClient, bed: Bed, mode: str) -> tuple[str, str, str]:
    """A PV of `mode` (made as external-provisioner would) and a claim of that mode bound to it; (claim, PV name,
    volume id)."""
    assert bed.stack is not None
    pv_name = _name("pv")
    volume = await csistack.create_volume(
        bed.stack.socket, pv_name, capacity_bytes=1 << 20, access_modes=("ReadWriteOnce",), fs_type="ext4"
    )
    pv = csistack.persistent_volume(pv_name, driver=DRIVER.name, volume_handle=volume.volume_id, capacity_bytes=1 << 20)
    pv["spec"]["volumeMode"] = mode
    await admin.create(paths.api_path("persistentvolumes"), pv)
    claim = _name("claim")
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "volumeMode": mode,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }
    await admin.create(paths.api_path("persistentvolumeclaims", namespace=NS), body)

    async def bound() -> bool:
        obj = await admin.get(paths.api_path("persistentvolumeclaims", namespace=NS, name=claim))
        return (obj.get("status") or {}).get("phase") == "Bound"

    await eventually(bound, timeout=60, what=f"claim {claim} Bound", agent=bed.agent)
    return claim, pv_name, volume.volume_id


def _pod(settings: Settings, name: str, claim: str, *, device: bool) -> Obj:
    container: Obj = {"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}
    if device:
        container["volumeDevices"] = [{"name": "data", "devicePath": "/dev/xvda"}]
    else:
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


async def _waits_with(admin: KubeClient, bed: Bed, pod: Obj, expected: str) -> None:
    async def failed_mount() -> bool:
        return any(e.get("message") == expected for e in await events(admin, pod, "FailedMount"))

    try:
        await eventually(failed_mount, timeout=60, what=f"FailedMount {expected!r}", agent=bed.agent)
    except AssertionError as exc:
        seen = [e.get("message") for e in await events(admin, pod, "FailedMount")]
        raise AssertionError(f"{exc}\nFailedMount events: {seen}") from None
    current = await admin.get(paths.pod(NS, pod["metadata"]["name"]))
    statuses = (current.get("status") or {}).get("containerStatuses") or []
    assert all("running" not in (s.get("state") or {}) for s in statuses), statuses
    assert (current.get("status") or {}).get("phase") == "Pending"


def _driver_calls(bed: Bed, volume_id: str) -> list[str]:
    methods = (STAGE, PUBLISH, UNPUBLISH, UNSTAGE)
    return [
        str(call["Method"])
        for call in csistack.driver_calls(bed.testbed.layout, DRIVER.name)
        if call.get("Method") in methods and (call.get("Request") or {}).get("volume_id") == volume_id
    ]


async def _delete_pod(admin: KubeClient, bed: Bed, name: str) -> None:
    await admin.delete(paths.pod(NS, name))

    async def gone() -> bool:
        try:
            await admin.get(paths.pod(NS, name))
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=60, what=f"pod {name} deleted", agent=bed.agent)


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
        body = _pod(settings, _name("pod"), claim, device=True)
        body["spec"]["containers"][0]["command"] = [
            "sh",
            "-c",
            f"test -b /dev/xvda && printf {MARKER.decode()} > /dev/xvda && sync && sleep 3600",
        ]
        await admin.create(paths.pods(NS), body)
        pod = await _running(admin, bed, body["metadata"]["name"])
        uid = pod["metadata"]["uid"]
        root = layout.kubelet_root.resolve()
        devices = root / "plugins" / "kubernetes.io" / "csi" / "volumeDevices"
        staging, publish = devices / "staging" / pv_name, devices / "publish" / pv_name / uid
        await _calls_are(bed, volume_id, [STAGE, PUBLISH])
        stage = _requests(bed, volume_id, STAGE)[0]
        request = _requests(bed, volume_id, PUBLISH)[0]
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
            bed.agent.proc.send_signal(signal.SIGKILL)
            bed.agent.proc.wait(10)
            offset = bed.agent.log.stat().st_size
            bed.restart()

            async def synced() -> bool:
                text = await asyncio.to_thread(_read_from, bed.agent.log, offset)
                return f"csi volume published already pod_uid={uid} volume=data" in text

            await eventually(synced, timeout=60, what="the restarted agent's sync of the pod", agent=bed.agent)
            assert _driver_calls(bed, volume_id) == [STAGE, PUBLISH]
        await _delete_pod(admin, bed, body["metadata"]["name"])
        await _calls_are(bed, volume_id, [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])
        # the symlink, the device the driver published, the staging directory, the data/vol_data.json: all gone
        left = [p for p in (link, publish, staging, devices / pv_name) if await asyncio.to_thread(os.path.lexists, p)]
        assert left == []
    finally:
        csistack.set_faults(layout, DRIVER.name, {})


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _read_device(device: str, size: int) -> bytes:
    with open(device, "rb") as f:
        return f.read(size)


def _requests(bed: Bed, volume_id: str, method: str) -> list[Obj]:
    return [
        call.get("Request") or {}
        for call in csistack.driver_calls(bed.testbed.layout, DRIVER.name)
        if call.get("Method") == method and (call.get("Request") or {}).get("volume_id") == volume_id
    ]


async def _calls_are(bed: Bed, volume_id: str, expected: list[str]) -> None:
    async def check() -> bool:
        return _driver_calls(bed, volume_id) == expected

    try:
        await eventually(check, timeout=30, what=f"driver calls {expected}", agent=bed.agent)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ncalls: {_driver_calls(bed, volume_id)}") from None


async def _running(admin: KubeClient, bed: Bed, name: str) -> Obj:
    async def running() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        return pod if running_id(pod, "main") else None

    try:
        got: Obj = await eventually(running, timeout=90, what=f"{name} running", agent=bed.agent)
    except AssertionError as exc:
        pod = await admin.get(paths.pod(NS, name))
        raise AssertionError(f"{exc}\nstatus: {pod.get('status')}") from None
    return got


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
    pod = await admin.create(paths.pods(NS), _pod(settings, _name("pod"), claim, device=device))
    expected = (
        f'MountVolume.SetUp failed for volume "data" : volume data has volumeMode {mode}, but is specified in {field}'
    )
    await _waits_with(admin, bed, pod, expected)
    assert _driver_calls(bed, volume_id) == []
    await _delete_pod(admin, bed, pod["metadata"]["name"])
