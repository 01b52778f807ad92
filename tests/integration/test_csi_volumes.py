"""CSI volumes on the real testbed: the agent (`nodeagent run`) stages and publishes through the e2e suite's CSI
mock driver (nodeagent/testbed/csistack.py: the driver, its registration sidecar, the external-attacher), with the
real attach-detach, PV binder and ephemeral-volume controllers. The driver's own call log is the witness.

- a claim bound to a PV of a driver without attach: Running with one NodeStageVolume and one NodePublishVolume,
  the container sees the published directory; the delete unpublishes, then unstages, and leaves no directory;
- the same with attachRequired: the attach-detach controller's VolumeAttachment is attached before the stage, its
  publish context reaches the driver, node.status.volumesInUse lists the volume while it is used, and the
  controller detaches it (deletes the VolumeAttachment) after the unmount;
- an inline ephemeral volume: published without a stage, with the pod's handle and csi.storage.k8s.io/ephemeral;
- a generic ephemeral volume: its claim is made by the controller, mounted, and deleted with the pod;
- a pod of a driver that is not registered waits with upstream's FailedMount message, and runs once it registers;
- the agent killed while a pod runs is restarted: it reconstructs the volume and calls the driver for nothing more;
- a pod deleted while the agent is down: the restarted agent unpublishes and unstages its volume.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from cri.client import connect as cri_connect
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import csistack
from nodeagent.testbed.csistack import ATTACH, NO_ATTACH, DriverSpec
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.volume import csiutil
from tests.integration import csikit
from tests.integration.agentproc import NS, eventually, running_id
from tests.integration.csikit import PUBLISH, STAGE, UNPUBLISH, UNSTAGE, Bed, Obj

STORAGE = csistack.STORAGE
PREFIX = "csi"
# A driver started only once a pod waits for it.
LATE = DriverSpec(name="late.csi-mock.nodeagent.test", attach_required=False)
WRITE = ("sh", "-c", "echo hello > /data/written; sleep 3600")


bed = csikit.module_bed("csi", prefix=PREFIX, drivers=(ATTACH, NO_ATTACH, LATE))


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    yield await csikit.start_drivers(bed, admin, settings, ATTACH, NO_ATTACH)


def _name(what: str) -> str:
    return csikit.name(PREFIX, what)


def _pod(settings: Settings, name: str, volume: Obj) -> Obj:
    return csikit.volume_pod(settings, name, volume, command=WRITE)


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _target(root: Path, uid: str, volume: str) -> str:
    return os.path.join(_real(root), "pods", uid, "volumes", "kubernetes.io~csi", volume, "mount")


async def _claim_pod(admin: KubeClient, bed: Bed, settings: Settings, spec: DriverSpec) -> tuple[Obj, str, str]:
    """A PV made as external-provisioner would, a claim bound to it, a pod using it; (pod, volume id, PV name)."""
    made = await csikit.claim_pod(admin, bed, settings, spec.name, PREFIX, command=WRITE)
    return await csikit.running(admin, bed.agent, made.pod["metadata"]["name"]), made.volume_id, made.pv_name


@pytest.mark.asyncio(loop_scope="session")
async def test_claim_without_attach_is_staged_once_published_and_torn_down(
    ready: Bed, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    bed = ready
    driver = NO_ATTACH.name
    pod, volume_id, _ = await _claim_pod(admin, bed, settings, NO_ATTACH)
    uid = pod["metadata"]["uid"]
    methods = (STAGE, PUBLISH, UNPUBLISH, UNSTAGE)
    await bed.calls_are(driver, volume_id, methods, [STAGE, PUBLISH])
    staging = csiutil.device_mount_path(_real(testbed.layout.kubelet_root), driver, volume_id)
    target = _target(testbed.layout.kubelet_root, uid, "data")
    stage = bed.requests(driver, volume_id, STAGE)[0]
    publish = bed.requests(driver, volume_id, PUBLISH)[0]
    assert stage["staging_target_path"] == staging
    assert (publish["target_path"], publish["staging_target_path"]) == (target, staging)
    assert publish["volume_context"]["csi.storage.k8s.io/pod.uid"] == uid  # podInfoOnMount
    assert publish["volume_context"]["csi.storage.k8s.io/ephemeral"] == "false"
    # The container writes into the published directory.
    await eventually(
        lambda: asyncio.to_thread(os.path.exists, os.path.join(target, "written")),
        timeout=30,
        what="the container's file in the target",
        agent=bed.agent,
    )
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"])
    await bed.calls_are(driver, volume_id, methods, [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])
    assert not await asyncio.to_thread(os.path.exists, os.path.dirname(target))
    assert not await asyncio.to_thread(os.path.exists, os.path.dirname(staging))


@pytest.mark.asyncio(loop_scope="session")
async def test_claim_with_attach_waits_for_the_attachment_and_is_detached_after_the_unmount(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    driver = ATTACH.name
    pod, volume_id, _ = await _claim_pod(admin, bed, settings, ATTACH)
    attachment = csiutil.attachment_name(volume_id, driver, settings.node_name)
    va = await admin.get(paths.api_path("volumeattachments", group=STORAGE, name=attachment))
    assert va["status"]["attached"] is True
    metadata = va["status"].get("attachmentMetadata") or {}
    stage = bed.requests(driver, volume_id, STAGE)[0]
    assert metadata and stage.get("publish_context") == metadata
    unique = csiutil.unique_volume_name(driver, volume_id)

    async def in_use() -> bool:
        node = await admin.get(paths.node(settings.node_name))
        return unique in ((node.get("status") or {}).get("volumesInUse") or [])

    await eventually(in_use, timeout=30, what=f"{unique} in volumesInUse", agent=bed.agent)
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"])
    methods = (STAGE, PUBLISH, UNPUBLISH, UNSTAGE)
    await bed.calls_are(driver, volume_id, methods, [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])

    async def not_in_use() -> bool:
        return not await in_use()

    await eventually(not_in_use, timeout=30, what=f"{unique} out of volumesInUse", agent=bed.agent)
    # The claim still exists, but no pod uses it on the node: the controller detaches.
    await csikit.wait_gone(
        admin, bed.agent, paths.api_path("volumeattachments", group=STORAGE, name=attachment), "detached"
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_inline_ephemeral_volume_is_published_without_a_stage(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    driver = NO_ATTACH.name
    name = _name("inline")
    volume = {"name": "scratch", "csi": {"driver": driver, "volumeAttributes": {"purpose": "test"}}}
    await admin.create(paths.pods(NS), _pod(settings, name, volume))
    pod = await csikit.running(admin, bed.agent, name)
    handle = csiutil.ephemeral_volume_handle(pod["metadata"]["uid"], "scratch")
    await bed.calls_are(driver, handle, (STAGE, PUBLISH, UNPUBLISH), [PUBLISH])
    context = bed.requests(driver, handle, PUBLISH)[0]["volume_context"]
    assert (context["purpose"], context["csi.storage.k8s.io/ephemeral"]) == ("test", "true")
    await csikit.delete_pod(admin, bed.agent, name)
    await bed.calls_are(driver, handle, (STAGE, PUBLISH, UNPUBLISH), [PUBLISH, UNPUBLISH])


@pytest.mark.asyncio(loop_scope="session")
async def test_generic_ephemeral_volume_is_mounted_and_its_claim_goes_with_the_pod(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    driver = NO_ATTACH.name
    name = _name("generic")
    claim = f"{name}-data"
    # No provisioner is served here: a PV made for the claim the controller will make, pre-bound to its name.
    stack = bed.stacks[driver]
    created = await csistack.create_volume(
        stack.socket, _name("vol"), capacity_bytes=1 << 20, access_modes=("ReadWriteOnce",), fs_type="ext4"
    )
    pv = csistack.persistent_volume(
        _name("pv"), driver=driver, volume_handle=created.volume_id, capacity_bytes=created.capacity_bytes or 1 << 20
    )
    pv["spec"]["claimRef"] = {"namespace": NS, "name": claim}
    await admin.create(paths.api_path("persistentvolumes"), pv)
    template = {
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Mi"}},
        }
    }
    await admin.create(
        paths.pods(NS), _pod(settings, name, {"name": "data", "ephemeral": {"volumeClaimTemplate": template}})
    )
    pod = await csikit.running(admin, bed.agent, name)
    obj = await admin.get(csikit.claim_path(claim))
    assert obj["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    volume_id = created.volume_id
    await bed.calls_are(driver, volume_id, (STAGE, PUBLISH), [STAGE, PUBLISH])
    await csikit.delete_pod(admin, bed.agent, name)
    await bed.calls_are(driver, volume_id, (STAGE, PUBLISH, UNPUBLISH, UNSTAGE), [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])
    await csikit.wait_gone(admin, bed.agent, csikit.claim_path(claim), "claim deleted")


@pytest.mark.asyncio(loop_scope="session")
async def test_unregistered_driver_waits_with_upstreams_message_then_runs(
    ready: Bed, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    bed = ready
    driver = LATE.name
    pv_name = _name("pv")
    # The mock driver always has volume "1": no CreateVolume needed while it is not running.
    pv = csistack.persistent_volume(pv_name, driver=driver, volume_handle="1", capacity_bytes=1 << 20)
    await admin.create(paths.api_path("persistentvolumes"), pv)
    claim = _name("claim")
    await csikit.bound_claim(admin, bed.agent, claim, pv_name)
    await csistack.create_csidriver(admin, LATE)
    name = _name("late")
    created = await admin.create(paths.pods(NS), _pod(settings, name, csikit.claim_volume(claim)))
    expected = (
        f'MountVolume.MountDevice failed for volume "{pv_name}" : kubernetes.io/csi: attacher.MountDevice failed to '
        f"create newCsiDriverClient: driver name {driver} not found in the list of registered CSI drivers"
    )
    await csikit.wait_failed_mount(admin, bed.agent, created, expected)
    bed.stacks[driver] = await csistack.start_driver(testbed.layout, LATE)
    await csikit.running(admin, bed.agent, name)
    await bed.calls_are(driver, "1", (STAGE, PUBLISH), [STAGE, PUBLISH])
    await csikit.delete_pod(admin, bed.agent, name)
    await bed.calls_are(driver, "1", (STAGE, PUBLISH, UNPUBLISH, UNSTAGE), [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])


@pytest.mark.asyncio(loop_scope="session")
async def test_agent_killed_and_restarted_calls_the_driver_for_nothing_more(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    driver = NO_ATTACH.name
    pod, volume_id, _ = await _claim_pod(admin, bed, settings, NO_ATTACH)
    methods = (STAGE, PUBLISH, UNPUBLISH, UNSTAGE)
    await bed.calls_are(driver, volume_id, methods, [STAGE, PUBLISH])
    offset = bed.kill()
    bed.restart()
    uid = pod["metadata"]["uid"]
    # Either line says the restarted agent's first sync of the pod set its volume up (again).
    lines = (
        f"csi volume published already pod_uid={uid} volume=data",
        f"MountVolume.SetUp succeeded pod_uid={uid} volume=data",
    )

    async def synced() -> bool:
        text = await asyncio.to_thread(csikit.read_from, bed.agent.log, offset)
        return "reconstructed_volumes=" in text and any(line in text for line in lines)

    await eventually(synced, timeout=60, what="the restarted agent's first sync of the pod", agent=bed.agent)
    # It found the volume on disk: no driver call.
    assert bed.calls(driver, volume_id, *methods) == [STAGE, PUBLISH]
    again = await csikit.running(admin, bed.agent, pod["metadata"]["name"])
    assert running_id(again, "main") == running_id(pod, "main")
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"])
    await bed.calls_are(driver, volume_id, methods, [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])


@pytest.mark.asyncio(loop_scope="session")
async def test_containers_see_the_published_directory(
    ready: Bed, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    bed = ready
    pod, _, _ = await _claim_pod(admin, bed, settings, NO_ATTACH)
    async with cri_connect(f"unix://{testbed.layout.containerd_socket}", timeout=30) as cri:
        response = await cri.runtime.exec_sync(running_id(pod, "main"), ["cat", "/data/written"], 10)
    assert (response.exit_code, response.stdout.decode().strip()) == (0, "hello")
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"])


@pytest.mark.asyncio(loop_scope="session")
async def test_pod_deleted_while_the_agent_is_down_is_unpublished_and_unstaged_after_its_restart(
    ready: Bed, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    bed = ready
    driver = NO_ATTACH.name
    pod, volume_id, _ = await _claim_pod(admin, bed, settings, NO_ATTACH)
    methods = (STAGE, PUBLISH, UNPUBLISH, UNSTAGE)
    await bed.calls_are(driver, volume_id, methods, [STAGE, PUBLISH])
    bed.kill()
    # Gone from the apiserver at once (no kubelet to confirm): the restarted agent never hears of it.
    await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
    bed.restart()
    await bed.calls_are(driver, volume_id, methods, [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])
    target = _target(testbed.layout.kubelet_root, pod["metadata"]["uid"], "data")
    assert not await asyncio.to_thread(os.path.exists, os.path.dirname(target))
