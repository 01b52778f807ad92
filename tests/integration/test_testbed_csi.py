"""The testbed's CSI stack (nodeagent/testbed/csistack.py) on the real testbed, without nodeagent.

Both attach modes come up as host processes on the testbed: the driver answers Identity and Node calls on
<kubelet root>/plugins/<driver>/csi.sock, the registration sidecar serves GetInfo on plugins_registry/<driver>-reg.sock
and exits when told the registration failed, and the external-attacher turns a VolumeAttachment for a volume
provisioned with CreateVolume into ControllerPublishVolume (attached=true, the driver's publish context) and its
deletion into ControllerUnpublishVolume. Stopping the stack leaves no process and no socket. With the upstream
kubelet as the node, the registrar's socket registers the driver for real: the kubelet's plugin watcher finds it,
writes the CSINode entry and the nodeid annotation, and takes them back when the sidecar stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
import pytest_asyncio

from csi.capability import volume_capability
from csi.client import connect
from csi.errors import CSIError
from csi.registration.v1 import api_pb2, api_pb2_grpc
from csi.v1 import csi_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import csistack, processes
from nodeagent.testbed.csistack import ATTACH, NO_ATTACH, DriverStack
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.processes import tail
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.upstreamkubelet import start_kubelet, stop_kubelet
from tests.integration.agentproc import clean_up

Obj = dict[str, Any]
STORAGE = csistack.STORAGE


async def _eventually(check: Callable[[], Awaitable[Any]], what: str, log: Path, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout:.0f}s: {what}\n--- {log} ---\n{tail(log, 40)}")
        await asyncio.sleep(0.2)


@pytest_asyncio.fixture(loop_scope="session")
async def stacks(testbed: Testbed) -> AsyncIterator[dict[str, DriverStack]]:
    started: dict[str, DriverStack] = {}
    try:
        for spec in (ATTACH, NO_ATTACH):
            started[spec.name] = await csistack.start_driver(testbed.layout, spec)
        yield started
    finally:
        for spec in (ATTACH, NO_ATTACH):
            csistack.stop_driver(testbed.layout, spec.name)


@pytest.mark.asyncio(loop_scope="session")
async def test_driver_answers_identity_and_node_calls(testbed: Testbed, stacks: dict[str, DriverStack]) -> None:
    for spec in (ATTACH, NO_ATTACH):
        stack = stacks[spec.name]
        assert stack.socket == testbed.layout.kubelet_root / "plugins" / spec.name / "csi.sock"
        async with connect(str(stack.socket), timeout=5) as plugin:
            assert await plugin.identity.probe() is True
            info = await plugin.identity.get_plugin_info()
            assert (info.name, info.vendor_version) == (spec.name, csistack.MOCK_VENDOR_VERSION)
            assert (await plugin.node.node_get_info()).node_id == spec.name
            node_rpcs = {c.rpc.type for c in await plugin.node.node_get_capabilities()}
            assert csi_pb2.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME in node_rpcs
            controller_rpcs = {c.rpc.type for c in await plugin.controller.controller_get_capabilities()}
            publish = csi_pb2.ControllerServiceCapability.RPC.PUBLISH_UNPUBLISH_VOLUME
            assert (publish in controller_rpcs) is spec.attach_required
        # Every call is in the driver's call log, the registrar's GetPluginInfo (its name lookup) first among them.
        methods = [c["Method"] for c in csistack.driver_calls(testbed.layout, spec.name)]
        assert "/csi.v1.Identity/GetPluginInfo" in methods
        assert "/csi.v1.Node/NodeGetInfo" in methods
        # Only the attachRequired driver has an attacher, which asked for the controller capabilities.
        assert (stack.attacher is not None) is spec.attach_required


@pytest.mark.asyncio(loop_scope="session")
async def test_registration_socket_answers_get_info(testbed: Testbed, stacks: dict[str, DriverStack]) -> None:
    for spec in (ATTACH, NO_ATTACH):
        stack = stacks[spec.name]
        assert stack.registration_socket == testbed.layout.kubelet_root / "plugins_registry" / f"{spec.name}-reg.sock"
        assert stack.registration_socket.is_socket()
        async with grpc.aio.insecure_channel(f"unix://{stack.registration_socket}") as channel:
            info = await api_pb2_grpc.RegistrationStub(channel).GetInfo(api_pb2.InfoRequest(), timeout=5)
        assert info.type == "CSIPlugin"
        assert info.name == spec.name
        assert info.endpoint == str(stack.socket)
        assert list(info.supported_versions) == ["1.0.0"]


def _volume_attachment(name: str, driver: str, node: str, pv: str) -> Obj:
    return {
        "apiVersion": f"{STORAGE}/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": driver, "nodeName": node, "source": {"persistentVolumeName": pv}},
    }


def _csinode(node: str, driver: str) -> Obj:
    # What the kubelet's plugin manager writes on registration; here by hand, for a node no kubelet runs.
    return {
        "apiVersion": f"{STORAGE}/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": driver, "nodeID": driver, "topologyKeys": None}]},
    }


async def _gone(admin: KubeClient, path: str) -> bool:
    try:
        await admin.get(path)
    except NotFound:
        return True
    return False


async def _force_delete(admin: KubeClient, path: str) -> None:
    """Delete, and drop the finalizers (the attacher's) should its owner be gone: the test leaves nothing behind."""
    with contextlib.suppress(NotFound):
        await admin.delete(path)
        await admin.patch(path, {"metadata": {"finalizers": None}}, patch_type="merge")


@pytest.mark.asyncio(loop_scope="session")
async def test_attacher_attaches_and_detaches_a_volume_attachment(
    testbed: Testbed, admin: KubeClient, stacks: dict[str, DriverStack]
) -> None:
    lay = testbed.layout
    attacher = stacks[ATTACH.name].attacher
    assert attacher is not None
    suffix = uuid.uuid4().hex[:8]
    node, pv_name, va_name = f"csi-stack-node-{suffix}", f"csi-stack-pv-{suffix}", f"csi-stack-va-{suffix}"
    csidriver = paths.api_path("csidrivers", group=STORAGE, name=ATTACH.name)
    csinode = paths.api_path("csinodes", group=STORAGE, name=node)
    pv_path = paths.api_path("persistentvolumes", name=pv_name)
    va_path = paths.api_path("volumeattachments", group=STORAGE, name=va_name)
    try:
        created = await csistack.create_csidriver(admin, ATTACH)
        assert created["spec"]["attachRequired"] is True
        assert created["spec"]["podInfoOnMount"] is True
        assert created["spec"]["volumeLifecycleModes"] == ["Persistent", "Ephemeral"]
        await admin.create(paths.api_path("csinodes", group=STORAGE), _csinode(node, ATTACH.name))
        volume = await csistack.provision(admin, stacks[ATTACH.name], pv_name, capacity_bytes=1 << 30)
        assert volume.volume_id not in csistack.BUILTIN_VOLUMES  # a new volume, made by CreateVolume
        pv = await admin.get(pv_path)
        assert pv["spec"]["csi"]["driver"] == ATTACH.name
        assert pv["spec"]["csi"]["volumeHandle"] == volume.volume_id
        assert pv["spec"]["csi"]["fsType"] == "ext4"
        assert pv["spec"]["csi"]["volumeAttributes"] == volume.volume_context
        await admin.create(
            paths.api_path("volumeattachments", group=STORAGE), _volume_attachment(va_name, ATTACH.name, node, pv_name)
        )

        async def attached() -> Obj | None:
            va = await admin.get(va_path)
            return va if (va.get("status") or {}).get("attached") is True else None

        va = await _eventually(attached, f"VolumeAttachment {va_name} attached", attacher.log_path)
        # The mock's ControllerPublishVolume publish context, which the kubelet passes to NodeStageVolume.
        assert va["status"]["attachmentMetadata"] == {"device": "/dev/mock", "readonly": "false"}
        # Only this test's volume: the driver's log spans the session (other tests use the same driver).
        publishes = [
            c
            for c in csistack.driver_calls(lay, ATTACH.name)
            if c["Method"] == "/csi.v1.Controller/ControllerPublishVolume"
            and c["Request"].get("volume_id") == volume.volume_id
        ]
        # Once or twice: the attacher may process the VolumeAttachment again on the informer event of its own
        # finalizer patch, before its cache shows attached=true, and calls the (idempotent) publish again.
        assert 1 <= len(publishes) <= 2, json.dumps(publishes)
        assert {(c["Request"]["volume_id"], c["Request"]["node_id"], c["Error"]) for c in publishes} == {
            (volume.volume_id, ATTACH.name, "")
        }

        await admin.delete(va_path)
        await _eventually(
            lambda: _gone(admin, va_path), f"VolumeAttachment {va_name} detached and gone", attacher.log_path
        )
        methods = [
            c["Method"]
            for c in csistack.driver_calls(lay, ATTACH.name)
            if c["Request"].get("volume_id") == volume.volume_id
        ]
        assert "/csi.v1.Controller/ControllerUnpublishVolume" in methods
    finally:
        for path in (va_path, pv_path, csinode, csidriver):
            await _force_delete(admin, path)


@pytest.mark.asyncio(loop_scope="session")
async def test_no_attach_csidriver_object(admin: KubeClient) -> None:
    path = paths.api_path("csidrivers", group=STORAGE, name=NO_ATTACH.name)
    try:
        created = await csistack.create_csidriver(admin, NO_ATTACH)
        assert created["spec"]["attachRequired"] is False
        assert created["spec"]["volumeLifecycleModes"] == ["Persistent", "Ephemeral"]
    finally:
        await csistack.delete_csidriver(admin, NO_ATTACH.name)
    assert await _gone(admin, path)


async def _stage(socket: Path, volume_id: str, staging: Path) -> grpc.StatusCode | None:
    """NodeStageVolume's status code: OK, or the driver's error code."""
    try:
        async with connect(str(socket), timeout=5) as plugin:
            await plugin.node.node_stage_volume(
                volume_id, str(staging), volume_capability("ReadWriteOnce", fs_type="ext4")
            )
    except CSIError as exc:
        return exc.code
    return grpc.StatusCode.OK


@pytest.mark.asyncio(loop_scope="session")
async def test_driver_restart_keeps_the_volumes_it_made(testbed: Testbed, stacks: dict[str, DriverStack]) -> None:
    lay = testbed.layout
    stack = stacks[NO_ATTACH.name]
    staging = lay.root / f"csi-staging-{uuid.uuid4().hex[:8]}"
    made = await csistack.create_volume(
        stack.socket, f"restart-{uuid.uuid4().hex[:8]}", capacity_bytes=1 << 20, access_modes=["ReadWriteOnce"],
        fs_type="ext4",
    )  # fmt: skip
    restarted = await csistack.restart_driver(lay, stack)
    assert not stack.mock.alive()
    assert restarted.mock.pid != stack.mock.pid and restarted.mock.alive()
    assert restarted.registrar == stack.registrar and stack.registrar.alive()  # the sidecar is not restarted
    # The volume made before the kill is known under its ID; one never made is not (the mock checks IDs).
    assert await _stage(restarted.socket, made.volume_id, staging) == grpc.StatusCode.OK
    assert await _stage(restarted.socket, "999999", staging) == grpc.StatusCode.NOT_FOUND
    assert not staging.exists()  # the mock stages nothing on disk

    # The attacher goes with its driver and is started again with it.
    attach = stacks[ATTACH.name]
    assert attach.attacher is not None
    again = await csistack.restart_driver(lay, attach)
    assert again.attacher is not None and again.attacher.alive() and again.attacher.pid != attach.attacher.pid
    assert not attach.attacher.alive()


@pytest.mark.asyncio(loop_scope="session")
async def test_registrar_exits_on_failed_registration_and_stop_leaves_nothing(
    testbed: Testbed, stacks: dict[str, DriverStack]
) -> None:
    lay = testbed.layout
    stack = stacks[NO_ATTACH.name]
    async with grpc.aio.insecure_channel(f"unix://{stack.registration_socket}") as channel:
        # As node-driver-registrar: told the kubelet refused it, the sidecar exits (and is restarted by its owner).
        with contextlib.suppress(grpc.aio.AioRpcError):
            await api_pb2_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                api_pb2.RegistrationStatus(plugin_registered=False, error="refused by the test"), timeout=5
            )

    async def exited() -> bool:
        return not stack.registrar.alive()

    await _eventually(exited, "registrar exited after a failed registration", stack.registrar.log_path, timeout=10)
    assert "registration failed" in stack.registrar.log_path.read_text()

    for spec in (ATTACH, NO_ATTACH):
        running = stacks[spec.name]
        csistack.stop_driver(lay, spec.name)
        for proc in (running.mock, running.registrar, running.attacher):
            if proc is not None:
                assert not proc.alive(), proc.name
                assert processes.load(lay.pids, proc.name) is None
        assert not running.socket.exists()
        assert not running.registration_socket.exists()
    assert csistack.started_drivers(lay) == []


async def _csinode_driver(admin: KubeClient, node: str, driver: str) -> Obj | None:
    try:
        csinode = await admin.get(paths.api_path("csinodes", group=STORAGE, name=node))
    except NotFound:
        return None
    return next((d for d in csinode["spec"].get("drivers") or [] if d["name"] == driver), None)


@pytest.mark.asyncio(loop_scope="session")
async def test_upstream_kubelet_registers_the_driver_through_the_sidecar(
    testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> None:
    """The sidecar against the real plugin watcher: what nodeagent's plugin manager is held to."""
    lay, node = testbed.layout, settings.node_name
    await clean_up(testbed, settings)  # a node of nobody's: the kubelet registers it afresh
    kubelet = await start_kubelet(testbed, tmp_path / "kubelet.log")
    try:
        stack = await csistack.start_driver(lay, NO_ATTACH, kubelet_root=kubelet.root_dir)
        try:
            assert stack.registration_socket == kubelet.root_dir / "plugins_registry" / f"{NO_ATTACH.name}-reg.sock"
            entry = await _eventually(
                lambda: _csinode_driver(admin, node, NO_ATTACH.name), "CSINode entry of the driver", kubelet.log
            )
            assert entry["nodeID"] == NO_ATTACH.name  # NodeGetInfo's answer
            annotations = (await admin.get(paths.node(node)))["metadata"]["annotations"]
            assert json.loads(annotations["csi.volume.kubernetes.io/nodeid"]) == {NO_ATTACH.name: NO_ATTACH.name}
            registrar_log = stack.registrar.log_path.read_text()
            assert '"NotifyRegistrationStatus" registered=true' in registrar_log
            methods = [c["Method"] for c in csistack.driver_calls(lay, NO_ATTACH.name)]
            assert "/csi.v1.Node/NodeGetInfo" in methods  # the kubelet's, on the endpoint GetInfo gave it
        finally:
            csistack.stop_driver(lay, NO_ATTACH.name)

        async def deregistered() -> bool:
            return await _csinode_driver(admin, node, NO_ATTACH.name) is None

        await _eventually(deregistered, "driver gone from CSINode once its sidecar stopped", kubelet.log)
    finally:
        await stop_kubelet(kubelet)
        with contextlib.suppress(NotFound):
            await admin.delete(paths.api_path("csinodes", group=STORAGE, name=node))
        await clean_up(testbed, settings)
