"""The CSI client: which RPC each method calls, the request it builds, its deadline, how it unwraps answers.

All against a scripted driver behind a real unix socket (tests/unit/csi/scripted.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi.capability import volume_capability
from csi.client import DEFAULT_TIMEOUT, CSIClient, connect
from csi.errors import (
    DeadlineExceededError,
    InvalidResponseError,
    RequestError,
    UnavailableError,
    UnimplementedError,
    is_final,
)
from csi.v1 import csi_pb2
from tests.unit.csi.scripted import HANG, ScriptedDriver

TIMEOUT = 5.0  # the plugin fixture's default deadline
RWO = volume_capability("ReadWriteOnce", fs_type="ext4", mount_flags=["noatime"])

Invoke = Callable[[CSIClient], Awaitable[Any]]

# Every client method, with the service and RPC it must call.
CALLS: list[tuple[str, str, Invoke]] = [
    ("Identity", "GetPluginInfo", lambda c: c.identity.get_plugin_info()),
    ("Identity", "GetPluginCapabilities", lambda c: c.identity.get_plugin_capabilities()),
    ("Identity", "Probe", lambda c: c.identity.probe()),
    ("Node", "NodeGetInfo", lambda c: c.node.node_get_info()),
    ("Node", "NodeGetCapabilities", lambda c: c.node.node_get_capabilities()),
    ("Node", "NodeStageVolume", lambda c: c.node.node_stage_volume("v1", "/stage", RWO)),
    ("Node", "NodeUnstageVolume", lambda c: c.node.node_unstage_volume("v1", "/stage")),
    ("Node", "NodePublishVolume", lambda c: c.node.node_publish_volume("v1", "/target", RWO)),
    ("Node", "NodeUnpublishVolume", lambda c: c.node.node_unpublish_volume("v1", "/target")),
    ("Node", "NodeGetVolumeStats", lambda c: c.node.node_get_volume_stats("v1", "/target")),
    ("Node", "NodeExpandVolume", lambda c: c.node.node_expand_volume("v1", "/target", 1 << 30, RWO)),
    ("Controller", "ControllerGetCapabilities", lambda c: c.controller.controller_get_capabilities()),
    ("Controller", "CreateVolume", lambda c: c.controller.create_volume("pvc-1", [RWO])),
    ("Controller", "DeleteVolume", lambda c: c.controller.delete_volume("v1")),
    ("Controller", "ControllerPublishVolume", lambda c: c.controller.controller_publish_volume("v1", "n1", RWO)),
    ("Controller", "ControllerUnpublishVolume", lambda c: c.controller.controller_unpublish_volume("v1", "n1")),
]

# Answers that pass the client's checks, for the RPCs that check.
VALID_ANSWERS: dict[str, Any] = {
    "GetPluginInfo": csi_pb2.GetPluginInfoResponse(name="csi.example.com"),
    "NodeGetVolumeStats": csi_pb2.NodeGetVolumeStatsResponse(
        usage=[csi_pb2.VolumeUsage(unit=csi_pb2.VolumeUsage.BYTES)]
    ),
    "CreateVolume": csi_pb2.CreateVolumeResponse(volume=csi_pb2.Volume(volume_id="v1")),
}


def _ids(calls: list[tuple[str, str, Invoke]]) -> list[str]:
    return [rpc for _, rpc, _ in calls]


@pytest.mark.parametrize(("service", "rpc", "invoke"), CALLS, ids=_ids(CALLS))
async def test_each_method_calls_its_rpc_with_the_default_deadline(
    service: str, rpc: str, invoke: Invoke, driver: ScriptedDriver, plugin: CSIClient
) -> None:
    driver.script.update(VALID_ANSWERS)
    await invoke(plugin)
    assert [call.rpc for call in driver.calls] == [rpc]
    assert rpc in csi_pb2.DESCRIPTOR.services_by_name[service].methods_by_name
    # gRPC rounds the deadline it sends up a little: approx, not an exact bound.
    assert driver.calls[0].time_remaining == pytest.approx(TIMEOUT, abs=0.5)


async def test_per_call_timeout_overrides_the_default(driver: ScriptedDriver, plugin: CSIClient) -> None:
    await plugin.node.node_unpublish_volume("v1", "/target", timeout=1.5)
    assert driver.calls[0].time_remaining == pytest.approx(1.5, abs=0.5)


def test_default_deadline_is_the_kubelets_csi_timeout() -> None:
    assert DEFAULT_TIMEOUT == 120.0  # upstream's csiTimeout, 2 minutes


async def test_a_call_past_its_deadline_is_deadline_exceeded_and_not_final(
    driver: ScriptedDriver, plugin: CSIClient
) -> None:
    driver.script["NodePublishVolume"] = HANG
    with pytest.raises(DeadlineExceededError) as caught:
        await plugin.node.node_publish_volume("v1", "/target", RWO, timeout=0.2)
    assert caught.value.method == "/csi.v1.Node/NodePublishVolume"
    assert not is_final(caught.value)  # the driver may still be mounting: the volume's state is uncertain


async def test_stage_request_carries_every_field(driver: ScriptedDriver, plugin: CSIClient) -> None:
    await plugin.node.node_stage_volume(
        "vol-1",
        "/var/lib/kubelet/plugins/kubernetes.io/csi/d/abc/globalmount",
        RWO,
        publish_context={"device": "/dev/x"},
        volume_context={"k": "v"},
        secrets={"password": "s3cret"},
    )
    (call,) = driver.calls_of("NodeStageVolume")
    assert isinstance(call.request, csi_pb2.NodeStageVolumeRequest)
    assert call.request == csi_pb2.NodeStageVolumeRequest(
        volume_id="vol-1",
        staging_target_path="/var/lib/kubelet/plugins/kubernetes.io/csi/d/abc/globalmount",
        volume_capability=RWO,
        publish_context={"device": "/dev/x"},
        volume_context={"k": "v"},
        secrets={"password": "s3cret"},
    )


@pytest.mark.parametrize(
    ("staging", "readonly"),
    [("", False), ("/stage", True)],
    ids=["without-stage-unstage", "staged-readonly"],
)
async def test_publish_request(staging: str, readonly: bool, driver: ScriptedDriver, plugin: CSIClient) -> None:
    await plugin.node.node_publish_volume(
        "vol-1", "/pods/u/volumes/kubernetes.io~csi/pv/mount", RWO, staging_target_path=staging, readonly=readonly
    )
    (call,) = driver.calls_of("NodePublishVolume")
    assert isinstance(call.request, csi_pb2.NodePublishVolumeRequest)
    assert call.request.staging_target_path == staging
    assert call.request.readonly is readonly
    assert call.request.target_path == "/pods/u/volumes/kubernetes.io~csi/pv/mount"
    assert call.request.volume_capability.mount.mount_flags == ["noatime"]
    assert not call.request.secrets and not call.request.publish_context


async def test_expand_sends_the_size_and_returns_the_new_capacity(driver: ScriptedDriver, plugin: CSIClient) -> None:
    driver.script["NodeExpandVolume"] = csi_pb2.NodeExpandVolumeResponse(capacity_bytes=2 << 30)
    capacity = await plugin.node.node_expand_volume("vol-1", "/target", 2 << 30, RWO, staging_target_path="/stage")
    assert capacity == 2 << 30
    (call,) = driver.calls_of("NodeExpandVolume")
    assert isinstance(call.request, csi_pb2.NodeExpandVolumeRequest)
    assert call.request.capacity_range.required_bytes == 2 << 30
    assert call.request.staging_target_path == "/stage"


@pytest.mark.parametrize(
    ("answer", "ready"),
    [
        (csi_pb2.ProbeResponse(), True),  # the spec: unset means ready
        (csi_pb2.ProbeResponse(ready={"value": True}), True),
        (csi_pb2.ProbeResponse(ready={"value": False}), False),
    ],
    ids=["unset", "true", "false"],
)
async def test_probe(answer: csi_pb2.ProbeResponse, ready: bool, driver: ScriptedDriver, plugin: CSIClient) -> None:
    driver.script["Probe"] = answer
    assert await plugin.identity.probe() is ready


async def test_controller_publish_returns_the_publish_context(driver: ScriptedDriver, plugin: CSIClient) -> None:
    driver.script["ControllerPublishVolume"] = csi_pb2.ControllerPublishVolumeResponse(publish_context={"lun": "3"})
    context = await plugin.controller.controller_publish_volume("vol-1", "node-a", RWO, readonly=True)
    assert context == {"lun": "3"}
    (call,) = driver.calls_of("ControllerPublishVolume")
    assert isinstance(call.request, csi_pb2.ControllerPublishVolumeRequest)
    assert (call.request.node_id, call.request.readonly) == ("node-a", True)


async def test_create_volume_request_and_answer(driver: ScriptedDriver, plugin: CSIClient) -> None:
    driver.script["CreateVolume"] = csi_pb2.CreateVolumeResponse(
        volume=csi_pb2.Volume(volume_id="v-9", capacity_bytes=1 << 20)
    )
    volume = await plugin.controller.create_volume("pvc-1", [RWO], required_bytes=1 << 20, parameters={"a": "b"})
    assert (volume.volume_id, volume.capacity_bytes) == ("v-9", 1 << 20)
    (call,) = driver.calls_of("CreateVolume")
    assert isinstance(call.request, csi_pb2.CreateVolumeRequest)
    assert call.request.capacity_range.required_bytes == 1 << 20
    assert dict(call.request.parameters) == {"a": "b"}
    assert not call.request.HasField("accessibility_requirements")


async def test_create_volume_without_size_sends_no_capacity_range(driver: ScriptedDriver, plugin: CSIClient) -> None:
    driver.script.update(VALID_ANSWERS)
    await plugin.controller.create_volume("pvc-1", [RWO])
    (call,) = driver.calls_of("CreateVolume")
    assert isinstance(call.request, csi_pb2.CreateVolumeRequest)
    assert not call.request.HasField("capacity_range")


# Requests the spec does not allow: refused before anything is sent, with upstream's wording.
INVALID_REQUESTS: list[tuple[str, Invoke, str]] = [
    ("stage-no-volume", lambda c: c.node.node_stage_volume("", "/stage", RWO), "missing volume id"),
    ("stage-no-path", lambda c: c.node.node_stage_volume("v1", "", RWO), "missing staging target path"),
    ("unstage-no-path", lambda c: c.node.node_unstage_volume("v1", ""), "missing staging target path"),
    ("publish-no-target", lambda c: c.node.node_publish_volume("v1", "", RWO), "missing target path"),
    ("unpublish-no-volume", lambda c: c.node.node_unpublish_volume("", "/t"), "missing volume id"),
    ("stats-no-path", lambda c: c.node.node_get_volume_stats("v1", ""), "missing target path"),
    ("expand-no-path", lambda c: c.node.node_expand_volume("v1", "", 1, RWO), "missing volume path"),
    ("expand-negative", lambda c: c.node.node_expand_volume("v1", "/t", -1, RWO), "size can not be less than 0"),
    ("create-no-name", lambda c: c.controller.create_volume("", [RWO]), "missing name"),
    ("create-no-capability", lambda c: c.controller.create_volume("pvc", []), "missing volume capabilities"),
    ("cpublish-no-node", lambda c: c.controller.controller_publish_volume("v1", "", RWO), "missing node id"),
]


@pytest.mark.parametrize(
    ("invoke", "message"), [(i, m) for _, i, m in INVALID_REQUESTS], ids=[n for n, *_ in INVALID_REQUESTS]
)
async def test_invalid_requests_are_not_sent(
    invoke: Invoke, message: str, driver: ScriptedDriver, plugin: CSIClient
) -> None:
    with pytest.raises(RequestError) as caught:
        await invoke(plugin)
    assert caught.value.message == message
    assert caught.value.code is None
    assert is_final(caught.value)
    assert driver.calls == []


# Answers the kubelet cannot use.
INVALID_ANSWERS: list[tuple[str, Any, Invoke]] = [
    ("GetPluginInfo", csi_pb2.GetPluginInfoResponse(vendor_version="1"), lambda c: c.identity.get_plugin_info()),
    ("NodeGetVolumeStats", csi_pb2.NodeGetVolumeStatsResponse(), lambda c: c.node.node_get_volume_stats("v", "/t")),
    ("CreateVolume", csi_pb2.CreateVolumeResponse(), lambda c: c.controller.create_volume("pvc", [RWO])),
]


@pytest.mark.parametrize(("rpc", "answer", "invoke"), INVALID_ANSWERS, ids=[rpc for rpc, *_ in INVALID_ANSWERS])
async def test_unusable_answers_are_refused(
    rpc: str, answer: Any, invoke: Invoke, driver: ScriptedDriver, plugin: CSIClient
) -> None:
    driver.script[rpc] = answer
    with pytest.raises(InvalidResponseError) as caught:
        await invoke(plugin)
    assert caught.value.method.endswith("/" + rpc)


async def test_secrets_never_reach_the_log(
    driver: ScriptedDriver, plugin: CSIClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="csi.client"):
        await plugin.node.node_publish_volume("vol-1", "/target", RWO, secrets={"password": "hunter2"})
    assert "method=/csi.v1.Node/NodePublishVolume" in caplog.text
    assert "vol-1" in caplog.text  # the request is logged...
    assert "hunter2" not in caplog.text  # ...without the secret
    (call,) = driver.calls_of("NodePublishVolume")
    assert isinstance(call.request, csi_pb2.NodePublishVolumeRequest)
    assert call.request.secrets["password"] == "hunter2"  # while the driver gets it


async def test_a_driver_that_is_not_there_is_unavailable(csi_socket_dir: Path) -> None:
    async with connect(f"unix://{csi_socket_dir}/absent.sock", timeout=2.0) as absent:
        with pytest.raises(UnavailableError) as caught:
            await absent.identity.probe()
    assert caught.value.code is grpc.StatusCode.UNAVAILABLE
    assert not is_final(caught.value)


async def test_a_node_only_driver_answers_controller_calls_unimplemented(csi_socket_dir: Path) -> None:
    node_only = ScriptedDriver(csi_socket_dir / "node.sock", services=("Identity", "Node"))
    await node_only.start()
    try:
        async with connect(node_only.endpoint, timeout=2.0) as client:
            with pytest.raises(UnimplementedError) as caught:
                await client.controller.controller_get_capabilities()
    finally:
        await node_only.stop()
    assert caught.value.method == "/csi.v1.Controller/ControllerGetCapabilities"
    assert is_final(caught.value)
