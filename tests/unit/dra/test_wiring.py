"""The DRA manager's seams: the runtime manager prepares a pod's claims before its sandbox (a failure is upstream's
FailedPrepareDynamicResources event and nothing is created), and a container's CDI devices reach its
CreateContainer config after a device plugin's; against the scripted CRI runtime on a real socket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.dra import DRAManager, DRAPluginManager
from nodeagent.dra import crioptions as dra_options
from nodeagent.dra.claiminfo import CHECKPOINT_NAME, ClaimInfo, Device, write_checkpoint
from nodeagent.kuberuntime.actions import RuntimePodStatus
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from tests.unit.cri.conftest import client, runtime, socket_dir
from tests.unit.cri.scripted import ScriptedRuntime

__all__ = ["client", "runtime", "socket_dir"]

POD: dict[str, Any] = {
    "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"},
    "spec": {
        "resourceClaims": [{"name": "accel", "resourceClaimName": "shared"}],
        "containers": [
            {"name": "app", "image": "busybox:1.36", "resources": {"claims": [{"name": "accel"}]}},
            {"name": "plain", "image": "busybox:1.36"},
        ],
    },
}


def _manager(
    client: CRIClient, events: list[tuple[str, str, str]], prepared: list[str], failure: str | None
) -> RuntimeManager:
    def record(pod_: Any, type_: str, reason: str, message: str, field_path: str) -> None:
        events.append((type_, reason, message))

    async def prepare(pod: Any) -> str | None:
        prepared.append(pod["metadata"]["uid"])
        return failure

    return RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="127.0.0.1"),
        events=record,
        prepare_resources=prepare,
    )


async def test_a_failed_prepare_creates_nothing(runtime: ScriptedRuntime, client: CRIClient) -> None:
    events: list[tuple[str, str, str]] = []
    prepared: list[str] = []
    manager = _manager(client, events, prepared, "prepare dynamic resources: DRA driver d is not registered")
    result = await manager.sync_pod(POD, RuntimePodStatus(uid="u-1", name="web", namespace="ns"))
    assert prepared == ["u-1"]
    assert events == [
        (
            "Warning",
            "FailedPrepareDynamicResources",
            "Failed to prepare dynamic resources: prepare dynamic resources: DRA driver d is not registered",
        )
    ]
    assert runtime.calls_of("RunPodSandbox") == []
    assert result.retry_after is not None


async def test_a_prepared_pod_gets_its_sandbox(runtime: ScriptedRuntime, client: CRIClient) -> None:
    events: list[tuple[str, str, str]] = []
    prepared: list[str] = []
    runtime.script["RunPodSandbox"] = api_pb2.RunPodSandboxResponse(pod_sandbox_id="s1")
    manager = _manager(client, events, prepared, None)
    await manager.sync_pod(POD, RuntimePodStatus(uid="u-1", name="web", namespace="ns"))
    assert prepared == ["u-1"]
    assert len(runtime.calls_of("RunPodSandbox")) == 1
    assert not [e for e in events if e[1] == "FailedPrepareDynamicResources"]


async def test_the_container_hook_adds_the_claims_cdi_devices(tmp_path: Path) -> None:
    write_checkpoint(
        str(tmp_path / CHECKPOINT_NAME),
        [ClaimInfo("cu", "shared", "ns", {"u-1"}, {"d.example": [Device("p", "dev-0", (), ("d.example/dev=x",))]})],
    )
    manager = DRAManager(None, str(tmp_path), DRAPluginManager())

    async def device_plugin(pod: Any, container: Any, config: api_pb2.ContainerConfig) -> None:
        config.CDI_devices.append(api_pb2.CDIDevice(name="vendor.example/gpu=0"))

    hook = dra_options.chain([device_plugin, dra_options.container_resources(manager)])
    app, plain = api_pb2.ContainerConfig(), api_pb2.ContainerConfig()
    await hook(POD, POD["spec"]["containers"][0], app)
    await hook(POD, POD["spec"]["containers"][1], plain)
    assert [d.name for d in app.CDI_devices] == ["vendor.example/gpu=0", "d.example/dev=x"]
    assert [d.name for d in plain.CDI_devices] == ["vendor.example/gpu=0"]
    other = {**POD, "metadata": {**POD["metadata"], "namespace": "elsewhere"}}
    with pytest.raises(CreateContainerConfigError, match="unable to get claim info for ResourceClaim shared"):
        await hook(other, POD["spec"]["containers"][0], api_pb2.ContainerConfig())
