"""The kubernetes.io/csi plugin against a fake NodeService (the same csi.service.NodeService Protocol the gRPC client
implements; the real contract is the testbed's mock driver in tests/integration/test_csi_volumes.py)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi.errors import CSIError, FailedPreconditionError, NotFoundError, UnavailableError, UnknownCSIError
from csi.service import NodeService
from csi.v1 import csi_pb2
from nodeagent.kube.errors import Forbidden
from nodeagent.volume import csiutil
from nodeagent.volume.csi import CSIPlugin, DriverClients
from nodeagent.volume.csierrors import MountOperationError, event_message
from nodeagent.volume.errors import SetUpError, TearDownError
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.mounter import MountInfo
from nodeagent.volume.plugin import VolumeHost
from nodeagent.volumemanager import VolumeManager
from tests.unit.fakeclock import FakeClock
from tests.unit.volume.fakes import FakeMounter, exists, read_text, real, write_text

_RPC = csi_pb2.NodeServiceCapability.RPC
DRIVER = "mock.csi.test"
NODE = "node-1"
ENDPOINT = "/plugins/mock/csi.sock"


def _caps(*types: int) -> list[csi_pb2.NodeServiceCapability]:
    return [csi_pb2.NodeServiceCapability(rpc=_RPC(type=t)) for t in types]  # type: ignore[arg-type]


@dataclass
class FakeNode:
    """Records every call; `fail[method]` holds errors raised by the next calls of that method, in order."""

    caps: set[int] = field(default_factory=lambda: {_RPC.STAGE_UNSTAGE_VOLUME})
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fail: dict[str, list[CSIError]] = field(default_factory=dict)
    make_target: bool = True

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls if m != "NodeGetCapabilities"]

    def args(self, method: str) -> list[dict[str, Any]]:
        return [a for m, a in self.calls if m == method]

    def _call(self, method: str, **args: Any) -> None:
        self.calls.append((method, args))
        errors = self.fail.get(method)
        if errors:
            raise errors.pop(0)

    async def node_get_info(self, *, timeout: float | None = None) -> csi_pb2.NodeGetInfoResponse:
        self._call("NodeGetInfo")
        return csi_pb2.NodeGetInfoResponse(node_id=NODE)

    async def node_get_capabilities(self, *, timeout: float | None = None) -> list[csi_pb2.NodeServiceCapability]:
        self._call("NodeGetCapabilities")
        return _caps(*self.caps)

    async def node_stage_volume(
        self,
        volume_id: str,
        staging_target_path: str,
        volume_capability: csi_pb2.VolumeCapability,
        *,
        publish_context: Mapping[str, str] | None = None,
        volume_context: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        self._call(
            "NodeStageVolume",
            volume_id=volume_id,
            staging_target_path=staging_target_path,
            capability=volume_capability,
            publish_context=dict(publish_context or {}),
            volume_context=dict(volume_context or {}),
            secrets=dict(secrets or {}),
        )

    async def node_unstage_volume(
        self, volume_id: str, staging_target_path: str, *, timeout: float | None = None
    ) -> None:
        self._call("NodeUnstageVolume", volume_id=volume_id, staging_target_path=staging_target_path)

    async def node_publish_volume(
        self,
        volume_id: str,
        target_path: str,
        volume_capability: csi_pb2.VolumeCapability,
        *,
        staging_target_path: str = "",
        readonly: bool = False,
        publish_context: Mapping[str, str] | None = None,
        volume_context: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        self._call(
            "NodePublishVolume",
            volume_id=volume_id,
            target_path=target_path,
            capability=volume_capability,
            staging_target_path=staging_target_path,
            readonly=readonly,
            publish_context=dict(publish_context or {}),
            volume_context=dict(volume_context or {}),
            secrets=dict(secrets or {}),
        )
        if self.make_target:  # as the mock driver: it makes the target directory itself
            os.makedirs(target_path, exist_ok=True)

    async def node_unpublish_volume(self, volume_id: str, target_path: str, *, timeout: float | None = None) -> None:
        self._call("NodeUnpublishVolume", volume_id=volume_id, target_path=target_path)

    async def node_get_volume_stats(
        self, volume_id: str, volume_path: str, *, staging_target_path: str = "", timeout: float | None = None
    ) -> csi_pb2.NodeGetVolumeStatsResponse:
        self._call(
            "NodeGetVolumeStats",
            volume_id=volume_id,
            volume_path=volume_path,
            staging_target_path=staging_target_path,
        )
        return csi_pb2.NodeGetVolumeStatsResponse(
            usage=[
                csi_pb2.VolumeUsage(unit=csi_pb2.VolumeUsage.BYTES, available=70, total=100, used=30),
                csi_pb2.VolumeUsage(unit=csi_pb2.VolumeUsage.INODES, available=9, total=10, used=1),
            ],
            volume_condition=csi_pb2.VolumeCondition(abnormal=True, message="degraded"),
        )

    async def node_expand_volume(
        self,
        volume_id: str,
        volume_path: str,
        required_bytes: int,
        volume_capability: csi_pb2.VolumeCapability,
        *,
        staging_target_path: str = "",
        secrets: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> int:
        self._call("NodeExpandVolume", volume_id=volume_id)
        return required_bytes


_fake_conforms: type[NodeService] = FakeNode


class Registry:
    def __init__(self, drivers: Mapping[str, str] | None = None) -> None:
        self.drivers = dict(drivers if drivers is not None else {DRIVER: ENDPOINT})

    def endpoint(self, driver: str) -> str | None:
        return self.drivers.get(driver)


class Store:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.gets: list[tuple[str, str, str, str]] = []
        self.forbidden = False

    def put(self, group: str, resource: str, namespace: str, obj: dict[str, Any]) -> None:
        self.objects[(group, resource, namespace, obj["metadata"]["name"])] = obj

    async def get(self, group: str, resource: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.gets.append((group, resource, namespace, name))
        if self.forbidden:
            raise Forbidden(403, "Forbidden", "no relationship found between node and this object")
        return self.objects.get((group, resource, namespace, name))


def pod(uid: str = "u1", name: str = "web", volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {
            "serviceAccountName": "builder",
            "containers": [{"name": "app", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": volumes or [{"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}],
        },
    }


PVC_VOLUME: dict[str, Any] = {"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}


def pvc(name: str = "claim", pv: str = "pv-1", uid: str = "claim-uid", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid, **meta},
        "spec": {"volumeName": pv},
        "status": {"phase": "Bound"},
    }


def pv(name: str = "pv-1", handle: str = "vol-1", claim_uid: str = "claim-uid", **csi: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",  # the apiserver's default
            "mountOptions": ["noatime"],
            "claimRef": {"uid": claim_uid, "name": "claim", "namespace": "default"},
            "csi": {"driver": DRIVER, "volumeHandle": handle, "fsType": "ext4", **csi},
        },
    }


def csidriver(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": DRIVER}, "spec": {"attachRequired": False, "podInfoOnMount": True, **spec}}


@dataclass
class Env:
    root: str
    node: FakeNode
    store: Store
    registry: Registry
    clock: FakeClock
    mounter: FakeMounter

    def plugin(self) -> CSIPlugin:
        host = VolumeHost(PodDirs(self.root), self.mounter)
        clients = DriverClients(self.registry, lambda endpoint: self.node)
        return CSIPlugin(host, clients, get=self.store.get, node_name=NODE, clock=self.clock, attach_poll=1.0)

    def staging(self, handle: str = "vol-1") -> str:
        return csiutil.device_mount_path(self.root, DRIVER, handle)

    def target(self, uid: str = "u1", name: str = "data") -> str:
        return os.path.join(self.root, "pods", uid, "volumes", "kubernetes.io~csi", name, "mount")


@pytest.fixture
def env(tmp_path: Path) -> Env:
    store = Store()
    store.put("", "persistentvolumeclaims", "default", pvc())
    store.put("", "persistentvolumes", "", pv())
    store.put("storage.k8s.io", "csidrivers", "", csidriver())
    return Env(str(tmp_path), FakeNode(), store, Registry(), FakeClock(), FakeMounter())


async def test_claim_is_staged_once_then_published(env: Env) -> None:
    plugin = env.plugin()
    path = await plugin.set_up(pod(), PVC_VOLUME)
    assert path == env.target()
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume"]
    stage = env.node.args("NodeStageVolume")[0]
    publish = env.node.args("NodePublishVolume")[0]
    assert stage["volume_id"] == "vol-1"
    assert stage["staging_target_path"] == env.staging()
    assert "/plugins/kubernetes.io/csi/mock.csi.test/" in env.staging()
    assert env.staging().endswith(csiutil.sha256_hex("vol-1") + "/globalmount")
    assert publish["staging_target_path"] == env.staging()
    assert publish["target_path"] == env.target()
    assert publish["readonly"] is False
    capability = publish["capability"]
    assert capability.access_mode.mode == csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    assert capability.mount.fs_type == "ext4"
    assert list(capability.mount.mount_flags) == ["noatime"]
    assert publish["volume_context"] == {
        "csi.storage.k8s.io/pod.name": "web",
        "csi.storage.k8s.io/pod.namespace": "default",
        "csi.storage.k8s.io/pod.uid": "u1",
        "csi.storage.k8s.io/serviceAccount.name": "builder",
        "csi.storage.k8s.io/ephemeral": "false",
    }
    data = json.loads(read_text(os.path.dirname(env.target()), "vol_data.json"))
    assert data == {
        "specVolID": "pv-1",
        "volumeHandle": "vol-1",
        "driverName": DRIVER,
        "nodeName": NODE,
        "attachmentID": csiutil.attachment_name("vol-1", DRIVER, NODE),
        "volumeLifecycleMode": "Persistent",
    }
    device = json.loads(read_text(os.path.dirname(env.staging()), "vol_data.json"))
    assert device == {"volumeHandle": "vol-1", "driverName": DRIVER}
    # A resync sets it up again: nothing is called.
    await plugin.set_up(pod(), PVC_VOLUME)
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume"]


async def test_second_pod_publishes_only_and_the_last_unpublish_unstages(env: Env) -> None:
    plugin = env.plugin()
    await plugin.set_up(pod("u1"), PVC_VOLUME)
    await plugin.set_up(pod("u2", "web2"), PVC_VOLUME)
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]
    await plugin.tear_down("u1", "data")
    assert env.node.methods()[3:] == ["NodeUnpublishVolume"]
    assert not exists(os.path.dirname(env.target("u1")))
    assert exists(env.staging())
    await plugin.tear_down("u2", "data")
    assert env.node.methods()[4:] == ["NodeUnpublishVolume", "NodeUnstageVolume"]
    assert env.node.args("NodeUnstageVolume")[0] == {"volume_id": "vol-1", "staging_target_path": env.staging()}
    assert not exists(os.path.dirname(env.staging()))
    assert not exists(os.path.dirname(env.target("u2")))


async def test_driver_without_stage_unstage_is_only_published(env: Env) -> None:
    env.node.caps = set()
    plugin = env.plugin()
    await plugin.set_up(pod(), PVC_VOLUME)
    assert env.node.methods() == ["NodePublishVolume"]
    assert env.node.args("NodePublishVolume")[0]["staging_target_path"] == ""
    await plugin.tear_down("u1", "data")
    assert env.node.methods() == ["NodePublishVolume", "NodeUnpublishVolume"]


async def test_single_node_multi_writer_driver_gets_its_access_mode(env: Env) -> None:
    env.node.caps = {_RPC.STAGE_UNSTAGE_VOLUME, _RPC.SINGLE_NODE_MULTI_WRITER}
    await env.plugin().set_up(pod(), PVC_VOLUME)
    mode = env.node.args("NodePublishVolume")[0]["capability"].access_mode.mode
    assert mode == csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_MULTI_WRITER


async def test_unregistered_driver_fails_mount_device_with_upstreams_message_then_works(env: Env) -> None:
    env.registry.drivers.clear()
    plugin = env.plugin()
    with pytest.raises(MountOperationError) as failure:
        await plugin.set_up(pod(), PVC_VOLUME)
    assert event_message(failure.value, "data") == (
        'MountVolume.MountDevice failed for volume "pv-1" : kubernetes.io/csi: attacher.MountDevice failed to create '
        f"newCsiDriverClient: driver name {DRIVER} not found in the list of registered CSI drivers"
    )
    assert env.node.calls == []
    env.registry.drivers[DRIVER] = ENDPOINT  # the driver registers: the retry works
    await plugin.set_up(pod(), PVC_VOLUME)
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume"]


async def test_inline_volume_of_an_unregistered_driver_fails_set_up(env: Env) -> None:
    env.registry.drivers.clear()
    volume = {"name": "data", "csi": {"driver": DRIVER}}
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(volumeLifecycleModes=["Ephemeral"]))
    with pytest.raises(MountOperationError) as failure:
        await env.plugin().set_up(pod(volumes=[volume]), volume)
    assert event_message(failure.value, "data") == (
        'MountVolume.SetUp failed for volume "data" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: '
        f"driver name {DRIVER} not found in the list of registered CSI drivers"
    )


@pytest.mark.parametrize(
    "error",
    [
        UnknownCSIError("/csi.v1.Node/NodePublishVolume", grpc.StatusCode.INTERNAL, "disk on fire"),
        UnavailableError("/csi.v1.Node/NodePublishVolume", grpc.StatusCode.UNAVAILABLE, "driver gone"),
    ],
)
async def test_publish_error_carries_the_drivers_message(env: Env, error: CSIError) -> None:
    env.node.fail["NodePublishVolume"] = [error]
    plugin = env.plugin()
    with pytest.raises(MountOperationError) as failure:
        await plugin.set_up(pod(), PVC_VOLUME)
    code = "Internal" if error.code is grpc.StatusCode.INTERNAL else "Unavailable"
    assert event_message(failure.value, "data") == (
        f'MountVolume.SetUp failed for volume "pv-1" : rpc error: code = {code} desc = {error.message}'
    )
    # The volume is staged: uncertain either way, its vol_data.json kept, so a tear down can unstage it.
    assert failure.value.uncertain is True
    assert exists(os.path.dirname(env.target()), "vol_data.json")
    await plugin.set_up(pod(), PVC_VOLUME)  # the retry publishes, without staging again
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]


@pytest.mark.parametrize(
    ("error", "uncertain"),
    [
        (UnknownCSIError("/csi.v1.Node/NodePublishVolume", grpc.StatusCode.INTERNAL, "disk on fire"), False),
        (UnavailableError("/csi.v1.Node/NodePublishVolume", grpc.StatusCode.UNAVAILABLE, "driver gone"), True),
    ],
)
async def test_publish_error_without_staging(env: Env, error: CSIError, uncertain: bool) -> None:
    env.node.caps = set()
    env.node.fail["NodePublishVolume"] = [error]
    with pytest.raises(MountOperationError) as failure:
        await env.plugin().set_up(pod(), PVC_VOLUME)
    # A publish that surely failed leaves nothing; one that may still run keeps vol_data.json for the tear down.
    assert failure.value.uncertain is uncertain
    assert exists(os.path.dirname(env.target()), "vol_data.json") is uncertain


async def test_stage_error_is_a_mount_device_failure(env: Env) -> None:
    env.node.fail["NodeStageVolume"] = [
        UnknownCSIError("/csi.v1.Node/NodeStageVolume", grpc.StatusCode.INTERNAL, "format failed")
    ]
    plugin = env.plugin()
    with pytest.raises(MountOperationError) as failure:
        await plugin.set_up(pod(), PVC_VOLUME)
    assert event_message(failure.value, "data") == (
        'MountVolume.MountDevice failed for volume "pv-1" : rpc error: code = Internal desc = format failed'
    )
    assert not exists(os.path.dirname(env.staging()))
    await plugin.set_up(pod(), PVC_VOLUME)
    assert env.node.methods() == ["NodeStageVolume", "NodeStageVolume", "NodePublishVolume"]


async def test_publish_refused_as_not_staged_stages_again_on_the_retry(env: Env) -> None:
    plugin = env.plugin()
    await plugin.set_up(pod("u1"), PVC_VOLUME)
    env.node.fail["NodePublishVolume"] = [
        FailedPreconditionError("/csi.v1.Node/NodePublishVolume", grpc.StatusCode.FAILED_PRECONDITION, "not staged")
    ]
    with pytest.raises(MountOperationError):
        await plugin.set_up(pod("u2", "web2"), PVC_VOLUME)
    await plugin.set_up(pod("u2", "web2"), PVC_VOLUME)
    assert env.node.methods() == [
        "NodeStageVolume",
        "NodePublishVolume",
        "NodePublishVolume",
        "NodeStageVolume",
        "NodePublishVolume",
    ]


async def test_restart_reconstructs_without_staging_or_publishing_again(env: Env) -> None:
    await env.plugin().set_up(pod(), PVC_VOLUME)
    restarted = env.plugin()
    assert await asyncio.to_thread(restarted.reconstruct, "u1", "data") == env.target()
    await restarted.set_up(pod(), PVC_VOLUME)
    await restarted.tear_down("u1", "data")
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"]


async def test_killed_after_stage_publishes_without_staging_again(env: Env) -> None:
    env.node.fail["NodePublishVolume"] = [
        UnavailableError("/csi.v1.Node/NodePublishVolume", grpc.StatusCode.UNAVAILABLE, "agent killed")
    ]
    with pytest.raises(MountOperationError):
        await env.plugin().set_up(pod(), PVC_VOLUME)
    env.node.make_target = False
    restarted = env.plugin()
    assert await asyncio.to_thread(restarted.reconstruct, "u1", "data") is None  # never published
    env.node.make_target = True
    await restarted.set_up(pod(), PVC_VOLUME)
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]


async def test_tear_down_retries_while_the_driver_is_away(env: Env) -> None:
    plugin = env.plugin()
    await plugin.set_up(pod(), PVC_VOLUME)
    env.registry.drivers.clear()
    with pytest.raises(TearDownError, match="not found in the list of registered CSI drivers"):
        await plugin.tear_down("u1", "data")
    env.registry.drivers[DRIVER] = ENDPOINT
    env.node.fail["NodeUnpublishVolume"] = [
        UnavailableError("/csi.v1.Node/NodeUnpublishVolume", grpc.StatusCode.UNAVAILABLE, "restarting")
    ]
    with pytest.raises(TearDownError, match=r"mounter\.TearDownAt failed: rpc error: code = Unavailable"):
        await plugin.tear_down("u1", "data")
    await plugin.tear_down("u1", "data")
    assert env.node.methods()[-3:] == ["NodeUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"]
    assert not exists(os.path.dirname(env.target()))


async def test_tear_down_of_a_volume_never_handed_to_a_driver_removes_directories(env: Env) -> None:
    plugin = env.plugin()
    os.makedirs(env.target())
    await plugin.tear_down("u1", "data")
    assert env.node.calls == []
    assert not exists(os.path.dirname(env.target()))


async def test_read_only_claim_and_publish_secrets(env: Env) -> None:
    env.store.put(
        "",
        "persistentvolumes",
        "",
        pv(
            nodePublishSecretRef={"name": "creds", "namespace": "vault"},
            nodeStageSecretRef={"name": "st", "namespace": "vault"},
        ),
    )
    env.store.put(
        "", "secrets", "vault", {"metadata": {"name": "creds"}, "data": {"user": base64.b64encode(b"me").decode()}}
    )
    env.store.put(
        "", "secrets", "vault", {"metadata": {"name": "st"}, "data": {"key": base64.b64encode(b"k").decode()}}
    )
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "claim", "readOnly": True}}
    await env.plugin().set_up(pod(volumes=[volume]), volume)
    assert env.node.args("NodeStageVolume")[0]["secrets"] == {"key": "k"}
    publish = env.node.args("NodePublishVolume")[0]
    assert publish["secrets"] == {"user": "me"}
    assert publish["readonly"] is True


async def test_missing_publish_secret(env: Env) -> None:
    env.store.put("", "persistentvolumes", "", pv(nodePublishSecretRef={"name": "creds", "namespace": "vault"}))
    with pytest.raises(MountOperationError) as failure:
        await env.plugin().set_up(pod(), PVC_VOLUME)
    assert str(failure.value) == (
        "fetching NodePublishSecretRef vault/creds failed: kubernetes.io/csi: failed to find the secret creds in the "
        'namespace vault with error: secrets "creds" not found'
    )


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (
            None,
            "error processing PVC default/claim: failed to fetch PVC from API server: "
            'persistentvolumeclaims "claim" not found',
        ),
        (
            {"metadata": {"name": "claim", "uid": "c"}, "spec": {}, "status": {"phase": "Pending"}},
            'error processing PVC default/claim: PVC default/claim has non-bound phase ("Pending") or empty '
            'pvc.Spec.VolumeName ("")',
        ),
        (
            {"metadata": {"name": "claim", "uid": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
            "can't start pod because PVC default/claim is being deleted",
        ),
        (
            pvc(uid="other"),
            "error processing PVC default/claim: found PV object pv-1 but its pv.Spec.ClaimRef.UID (claim-uid) does "
            "not point to claim.UID (other)",
        ),
    ],
)
async def test_claim_not_usable(env: Env, claim: dict[str, Any] | None, message: str) -> None:
    env.store.objects.pop(("", "persistentvolumeclaims", "default", "claim"))
    if claim is not None:
        env.store.put("", "persistentvolumeclaims", "default", claim)
    with pytest.raises(SetUpError) as failure:
        await env.plugin().set_up(pod(), PVC_VOLUME)
    assert str(failure.value) == message
    assert env.node.calls == []


async def test_api_failure_is_a_set_up_error(env: Env) -> None:
    env.store.forbidden = True
    with pytest.raises(SetUpError, match="Forbidden"):
        await env.plugin().set_up(pod(), PVC_VOLUME)


async def test_attach_required_waits_for_the_volume_attachment_and_passes_its_metadata(env: Env) -> None:
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(attachRequired=True))
    plugin = env.plugin()
    task = asyncio.create_task(plugin.set_up(pod(), PVC_VOLUME))
    await env.clock.advance(0)
    assert plugin.volumes_in_use() == [f"kubernetes.io/csi/{DRIVER}^vol-1"]
    assert env.node.calls == []
    name = csiutil.attachment_name("vol-1", DRIVER, NODE)
    assert name == "csi-" + csiutil.sha256_hex(f"vol-1{DRIVER}{NODE}")
    env.store.put(
        "storage.k8s.io", "volumeattachments", "", {"metadata": {"name": name}, "status": {"attached": False}}
    )
    await env.clock.advance(1.0)
    assert not task.done()
    env.store.put(
        "storage.k8s.io",
        "volumeattachments",
        "",
        {"metadata": {"name": name}, "status": {"attached": True, "attachmentMetadata": {"device": "/dev/mock"}}},
    )
    await env.clock.advance(1.0)
    await task
    assert env.node.args("NodeStageVolume")[0]["publish_context"] == {"device": "/dev/mock"}
    assert env.node.args("NodePublishVolume")[0]["publish_context"] == {"device": "/dev/mock"}
    await plugin.tear_down("u1", "data")
    assert plugin.volumes_in_use() == []


async def test_attach_error_fails_wait_for_attach(env: Env) -> None:
    env.store.objects.pop(("storage.k8s.io", "csidrivers", "", DRIVER))  # no CSIDriver: attach required
    name = csiutil.attachment_name("vol-1", DRIVER, NODE)
    env.store.put(
        "storage.k8s.io",
        "volumeattachments",
        "",
        {"metadata": {"name": name}, "status": {"attached": False, "attachError": {"message": "no such disk"}}},
    )
    plugin = env.plugin()
    with pytest.raises(MountOperationError) as failure:
        await plugin.set_up(pod(), PVC_VOLUME)
    assert event_message(failure.value, "data") == 'MountVolume.WaitForAttach failed for volume "pv-1" : no such disk'
    assert plugin.volumes_in_use() == []


async def test_not_attachable_volume_is_not_in_use(env: Env) -> None:
    plugin = env.plugin()
    await plugin.set_up(pod(), PVC_VOLUME)
    assert plugin.volumes_in_use() == []


async def test_inline_ephemeral_volume_is_published_without_staging(env: Env) -> None:
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(volumeLifecycleModes=["Persistent", "Ephemeral"]))
    volume = {"name": "scratch", "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1Mi"}, "readOnly": True}}
    plugin = env.plugin()
    await plugin.set_up(pod(volumes=[volume]), volume)
    assert env.node.methods() == ["NodePublishVolume"]
    publish = env.node.args("NodePublishVolume")[0]
    assert publish["volume_id"] == "csi-" + csiutil.sha256_hex("u1scratch")
    assert publish["staging_target_path"] == ""
    assert publish["readonly"] is True
    assert publish["volume_context"]["size"] == "1Mi"
    assert publish["volume_context"]["csi.storage.k8s.io/ephemeral"] == "true"
    data = json.loads(read_text(os.path.dirname(env.target(name="scratch")), "vol_data.json"))
    assert data["volumeLifecycleMode"] == "Ephemeral"
    assert data["specVolID"] == "scratch"
    await plugin.tear_down("u1", "scratch")
    assert env.node.methods() == ["NodePublishVolume", "NodeUnpublishVolume"]


async def test_inline_volume_of_a_persistent_only_driver_is_refused(env: Env) -> None:
    volume = {"name": "scratch", "csi": {"driver": DRIVER}}
    with pytest.raises(MountOperationError) as failure:
        await env.plugin().set_up(pod(volumes=[volume]), volume)
    assert event_message(failure.value, "scratch") == (
        'MountVolume.SetUp failed for volume "scratch" : kubernetes.io/csi: mounter.SetupAt failed to check volume '
        'lifecycle mode: volume mode "Ephemeral" not supported by driver mock.csi.test (only supports ["Persistent"])'
    )
    assert env.node.calls == []


async def test_generic_ephemeral_volume_uses_the_pods_claim(env: Env) -> None:
    volume = {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    owner = [{"kind": "Pod", "name": "web", "uid": "u1", "controller": True}]
    env.store.put("", "persistentvolumeclaims", "default", pvc("web-data", ownerReferences=owner))
    await env.plugin().set_up(pod(volumes=[volume]), volume)
    assert ("", "persistentvolumeclaims", "default", "web-data") in env.store.gets
    assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume"]


async def test_generic_ephemeral_claim_not_owned_by_the_pod(env: Env) -> None:
    volume = {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    owner = [{"kind": "Pod", "name": "web", "uid": "someone-else", "controller": True}]
    env.store.put("", "persistentvolumeclaims", "default", pvc("web-data", ownerReferences=owner))
    with pytest.raises(SetUpError) as failure:
        await env.plugin().set_up(pod(volumes=[volume]), volume)
    assert str(failure.value) == "PVC default/web-data was not created for pod default/web (pod is not owner)"


async def test_fs_group_is_applied_by_the_kubelet_for_rwo_with_fstype(env: Env) -> None:
    p = pod()
    p["spec"]["securityContext"] = {"fsGroup": os.getgid()}
    await env.plugin().set_up(p, PVC_VOLUME)
    assert os.stat(env.target()).st_mode & 0o2000  # setgid: the walk ran
    assert not env.node.args("NodePublishVolume")[0]["capability"].mount.volume_mount_group


@pytest.mark.parametrize(("policy", "walked"), [("OnRootMismatch", False), ("Always", True)])
async def test_fs_group_change_policy_reaches_the_walk(env: Env, policy: str, walked: bool) -> None:
    # As upstream's csi_mounter: the pod's fsGroupChangePolicy goes to the ownership change; with OnRootMismatch a
    # volume whose root already has the group, setgid and rwx for the group is not walked (a file inside that has
    # another group keeps it).
    group = 4321
    target = env.target()
    os.makedirs(target)
    os.chown(target, -1, group)
    os.chmod(target, 0o2770)
    inner = os.path.join(target, "data")
    Path(inner).write_text("x")  # noqa: ASYNC240
    os.chown(inner, -1, 1234)
    p = pod()
    p["spec"]["securityContext"] = {"fsGroup": group, "fsGroupChangePolicy": policy}
    await env.plugin().set_up(p, PVC_VOLUME)
    assert (os.stat(inner).st_gid == group) is walked


async def test_volume_mount_group_driver_gets_the_fs_group_instead(env: Env) -> None:
    env.node.caps = {_RPC.STAGE_UNSTAGE_VOLUME, _RPC.VOLUME_MOUNT_GROUP}
    p = pod()
    p["spec"]["securityContext"] = {"fsGroup": 1234}
    await env.plugin().set_up(p, PVC_VOLUME)
    assert env.node.args("NodeStageVolume")[0]["capability"].mount.volume_mount_group == "1234"
    assert env.node.args("NodePublishVolume")[0]["capability"].mount.volume_mount_group == "1234"
    assert not os.stat(env.target()).st_mode & 0o2000


async def test_through_the_volume_manager_a_missing_driver_waits_then_mounts_and_unmounts(env: Env) -> None:
    events: list[tuple[str, str, str]] = []
    env.registry.drivers.clear()
    manager = VolumeManager(
        [env.plugin()],
        dirs=PodDirs(env.root),
        mounter=env.mounter,
        clock=env.clock,
        events=lambda p, t, r, m: events.append((t, r, m)),
    )
    await manager.start()
    runner = asyncio.create_task(manager.run())
    try:
        waiting = asyncio.create_task(manager.wait_for_attach_and_mount(pod()))
        for _ in range(200):
            if events:
                break
            await asyncio.sleep(0.005)  # the set up's file work runs in threads
        assert events == [
            (
                "Warning",
                "FailedMount",
                'MountVolume.MountDevice failed for volume "pv-1" : kubernetes.io/csi: attacher.MountDevice failed to '
                f"create newCsiDriverClient: driver name {DRIVER} not found in the list of registered CSI drivers",
            )
        ]
        assert not waiting.done()
        env.registry.drivers[DRIVER] = ENDPOINT
        await env.clock.advance(0.6)  # the first back-off (0.5 s) is over: retried
        await asyncio.wait_for(waiting, 5)
        assert manager.mounted_volumes("u1")["data"].host_path == env.target()
        assert env.node.methods() == ["NodeStageVolume", "NodePublishVolume"]
        await asyncio.wait_for(manager.unmount_pod("u1"), 5)
        assert env.node.methods()[2:] == ["NodeUnpublishVolume", "NodeUnstageVolume"]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_volume_stats_from_the_driver(env: Env) -> None:
    plugin = env.plugin()
    assert await plugin.volume_stats("u1", "data") is None  # not published
    await plugin.set_up(pod(), PVC_VOLUME)
    assert await plugin.volume_stats("u1", "data") is None  # no GET_VOLUME_STATS
    env.node.caps = {_RPC.STAGE_UNSTAGE_VOLUME, _RPC.GET_VOLUME_STATS}
    assert plugin.measured_volumes("u1") == ["data"] and plugin.measured_volumes("u2") == []
    stats = await plugin.volume_stats("u1", "data")
    assert stats == csiutil.VolumeStats(70, 100, 30, 9, 10, 1)  # no condition without the CSIVolumeHealth gate
    # as upstream: the volume path only, no staging path
    call = env.node.args("NodeGetVolumeStats")[0]
    assert (call["volume_path"], call["staging_target_path"]) == (env.target(), "")
    # the gate alone is not enough: the driver must have VOLUME_CONDITION
    assert (await plugin.volume_stats("u1", "data", volume_health=True)) == stats
    env.node.caps.add(_RPC.VOLUME_CONDITION)
    stats = await plugin.volume_stats("u1", "data", volume_health=True)
    assert stats == csiutil.VolumeStats(70, 100, 30, 9, 10, 1, abnormal=True, message="degraded")
    # a failing driver, or one gone from the registry: nothing to report (upstream skips the volume)
    env.node.fail["NodeGetVolumeStats"] = [NotFoundError("NodeGetVolumeStats", None, "gone")]
    assert await plugin.volume_stats("u1", "data") is None
    env.registry.drivers.clear()
    assert await plugin.volume_stats("u1", "data") is None


async def test_target_is_made_when_the_driver_mounts_nothing_there(env: Env) -> None:
    env.node.make_target = False
    plugin = env.plugin()
    await plugin.set_up(pod(), PVC_VOLUME)
    assert exists(env.target())
    assert await asyncio.to_thread(env.plugin().reconstruct, "u1", "data") == env.target()


async def test_uncertain_publish_of_a_pod_that_goes_away_is_torn_down(env: Env) -> None:
    manager = VolumeManager([env.plugin()], dirs=PodDirs(env.root), mounter=env.mounter, clock=env.clock)
    await manager.start()
    runner = asyncio.create_task(manager.run())
    try:
        env.node.fail["NodePublishVolume"] = [
            UnavailableError("/csi.v1.Node/NodePublishVolume", grpc.StatusCode.UNAVAILABLE, "driver killed")
        ]
        waiting = asyncio.create_task(manager.wait_for_attach_and_mount(pod()))
        for _ in range(400):
            if manager.actual.get(("u1", "data")) is not None:
                break
            await asyncio.sleep(0.005)  # the set up's file work runs in threads
        recorded = manager.actual.get(("u1", "data"))
        assert recorded is not None and recorded.uncertain
        assert ("u1", "data") not in manager.actual  # not set up: the pod keeps waiting
        assert not waiting.done()
        assert manager.mounted_volumes("u1") == {}
        waiting.cancel()
        await asyncio.wait_for(manager.unmount_pod("u1"), 5)
        assert env.node.methods() == [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
        ]
        assert not exists(os.path.dirname(env.target()))
        assert not exists(os.path.dirname(env.staging()))
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_files_left_in_an_unmounted_target_go_and_a_retry_does_not_unpublish_twice(env: Env) -> None:
    plugin = env.plugin()
    await plugin.set_up(pod(), PVC_VOLUME)
    write_text("from the container", env.target(), "written")  # a driver that mounted nothing there
    env.node.fail["NodeUnstageVolume"] = [
        UnavailableError("/csi.v1.Node/NodeUnstageVolume", grpc.StatusCode.UNAVAILABLE, "restarting")
    ]
    with pytest.raises(TearDownError, match=r"attacher\.UnmountDevice failed"):
        await plugin.tear_down("u1", "data")
    await plugin.tear_down("u1", "data")
    assert env.node.methods() == [
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeUnstageVolume",
        "NodeUnstageVolume",
    ]
    assert not exists(os.path.dirname(env.target()))


async def test_a_target_still_mounted_after_unpublish_is_left_for_the_retry(env: Env) -> None:
    plugin = env.plugin()
    await plugin.set_up(pod(), PVC_VOLUME)
    env.mounter.table.append(MountInfo(real(env.target()), "ext4", "/dev/mock"))
    with pytest.raises(TearDownError, match="still mounted"):
        await plugin.tear_down("u1", "data")
    assert exists(env.target())


async def test_the_attach_wait_looks_again_soon_then_backs_off(env: Env) -> None:
    """The attacher usually attaches within ~0.1 s: the wait looks every 50 ms for the first 2 s, then backs off,
    doubling up to the poll period (a flat 0.5 s poll added half a second to every attachable pod start in
    benchmarks/csi.py)."""
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(attachRequired=True))
    name = csiutil.attachment_name("vol-1", DRIVER, NODE)
    env.store.put(
        "storage.k8s.io", "volumeattachments", "", {"metadata": {"name": name}, "status": {"attached": False}}
    )
    looks: list[float] = []
    fetch = env.store.get

    async def counting(group: str, resource: str, namespace: str, obj: str) -> Any:
        if resource == "volumeattachments":
            looks.append(env.clock.monotonic())
        return await fetch(group, resource, namespace, obj)

    env.store.get = counting  # type: ignore[method-assign]
    task = asyncio.create_task(env.plugin().set_up(pod(), PVC_VOLUME))
    await env.clock.advance(0)
    for _ in range(360):  # 3.6 s in small steps, so each sleep ends on time
        await env.clock.advance(0.01)
    env.store.put(
        "storage.k8s.io",
        "volumeattachments",
        "",
        {"metadata": {"name": name}, "status": {"attached": True, "attachmentMetadata": {"device": "/dev/mock"}}},
    )
    await env.clock.advance(2.0)
    await task
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(looks)]
    # The clock moves in 10 ms steps; the period caps the back-off (1 s in these tests).
    fast = list(itertools.takewhile(lambda gap: gap == pytest.approx(0.05, abs=0.015), gaps))
    assert len(fast) in (40, 41)  # 2 s of 50 ms looks (the last one may fall a float's width short of 2 s)
    assert gaps[len(fast) : len(fast) + 4] == pytest.approx([0.1, 0.2, 0.4, 0.8], abs=0.015)
    assert all(gap >= 1.0 for gap in gaps[len(fast) + 4 :])  # the period caps it (the last gap spans the jump)


async def test_a_volume_attachment_the_node_may_not_read_yet_is_waited_for(env: Env) -> None:
    """The node authorizer answers 403 for a VolumeAttachment not (yet) in the node's graph: not attached yet, not a
    failed set-up (which cost every attachable pod a 0.5 s back-off)."""
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(attachRequired=True))
    name = csiutil.attachment_name("vol-1", DRIVER, NODE)
    fetch = env.store.get

    async def graph(group: str, resource: str, namespace: str, obj: str) -> Any:
        if resource == "volumeattachments" and (group, resource, namespace, obj) not in env.store.objects:
            raise Forbidden(403, "Forbidden", "no relationship found between node and this object")
        return await fetch(group, resource, namespace, obj)

    env.store.get = graph  # type: ignore[method-assign]
    task = asyncio.create_task(env.plugin().set_up(pod(), PVC_VOLUME))
    for _ in range(30):
        await env.clock.advance(0.01)
    assert not task.done()
    env.store.put(
        "storage.k8s.io",
        "volumeattachments",
        "",
        {"metadata": {"name": name}, "status": {"attached": True, "attachmentMetadata": {"device": "/dev/mock"}}},
    )
    for _ in range(50):
        await env.clock.advance(0.01)
    await task
    assert env.node.args("NodeStageVolume")[0]["publish_context"] == {"device": "/dev/mock"}
