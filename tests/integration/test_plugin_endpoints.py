"""Plugins whose endpoints leave the plugin directories, on the real agent (docs/devices.md, "Endpoints outside the
plugin directories"; every row was seen on the upstream kubelet v1.34.4 too).

A Python device plugin registers on the agent's `device-plugins/kubelet.sock` with an absolute endpoint (dialed
under the directory, as Go's filepath.Join makes it, never at the absolute path) and with a NUL in it (refused at
once with grpc-go's net/url error); a DRA registration socket linked into `plugins_registry` from outside registers,
one whose endpoint holds a NUL is told upstream's refusal. A pod keeps running and the Node stays Ready throughout.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi.registration.v1 import api_pb2 as reg_pb2
from csi.registration.v1 import api_pb2_grpc as reg_grpc
from nodeagent.devicemanager.v1beta1 import api_pb2 as dp_pb2
from nodeagent.devicemanager.v1beta1 import api_pb2_grpc as dp_grpc
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

RESOURCE = "endpoints.nodeagent.test/dev"
POD = "endpoints-canary"


class DevicePlugin(dp_grpc.DevicePluginServicer):
    """Counts the agent's calls; one healthy device."""

    def __init__(self) -> None:
        self.calls = 0

    async def GetDevicePluginOptions(self, request: dp_pb2.Empty, context: Any) -> dp_pb2.DevicePluginOptions:
        self.calls += 1
        return dp_pb2.DevicePluginOptions()

    async def ListAndWatch(self, request: dp_pb2.Empty, context: Any) -> AsyncIterator[dp_pb2.ListAndWatchResponse]:
        yield dp_pb2.ListAndWatchResponse(devices=[dp_pb2.Device(ID="d1", health="Healthy")])
        await asyncio.Event().wait()

    async def GetPreferredAllocation(
        self, request: dp_pb2.PreferredAllocationRequest, context: Any
    ) -> dp_pb2.PreferredAllocationResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not asked for")
        raise AssertionError  # abort raised

    async def Allocate(self, request: dp_pb2.AllocateRequest, context: Any) -> dp_pb2.AllocateResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no pod asks for it")
        raise AssertionError

    async def PreStartContainer(
        self, request: dp_pb2.PreStartContainerRequest, context: Any
    ) -> dp_pb2.PreStartContainerResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not asked for")
        raise AssertionError


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, info: reg_pb2.PluginInfo) -> None:
        self.info = info
        self.statuses: asyncio.Queue[reg_pb2.RegistrationStatus] = asyncio.Queue()

    async def GetInfo(self, request: reg_pb2.InfoRequest, context: Any) -> reg_pb2.PluginInfo:
        return self.info

    async def NotifyRegistrationStatus(
        self, request: reg_pb2.RegistrationStatus, context: Any
    ) -> reg_pb2.RegistrationStatusResponse:
        self.statuses.put_nowait(request)
        return reg_pb2.RegistrationStatusResponse()


async def _serve(servicer: Any, add: Any, socket: Path) -> grpc.aio.Server:
    server = grpc.aio.server()
    add(servicer, server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    return server


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-plugin-endpoints.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


@pytest.fixture
def outside() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ep-", dir="/tmp"))  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _pod_running(admin: KubeClient) -> bool:
    pod = await admin.get(paths.pod(NS, POD))
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and "running" in (statuses[0].get("state") or {}) and statuses[0]["restartCount"] == 0


async def test_endpoints_outside_the_plugin_directories(
    testbed: Testbed, settings: Settings, admin: KubeClient, agent: Agent, outside: Path
) -> None:
    root = testbed.layout.kubelet_root
    plugin_dir, registry = root / "device-plugins", root / "plugins_registry"
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    await admin.create(
        paths.pods(NS),
        {
            "metadata": {"name": POD},
            "spec": {
                "nodeName": settings.node_name,
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}
                ],
            },
        },
    )
    await eventually(lambda: _pod_running(admin), timeout=90, what="the pod running", agent=agent)

    # Device plugin, absolute endpoint: the agent dials <dir>/<the path>, not the path.
    absolute = outside / "dp.sock"
    under = Path(str(plugin_dir) + str(absolute))
    under.parent.mkdir(parents=True, exist_ok=True)
    decoy, plugin = DevicePlugin(), DevicePlugin()
    servers: list[grpc.aio.Server] = []
    try:
        servers += [
            await _serve(decoy, dp_grpc.add_DevicePluginServicer_to_server, absolute),
            await _serve(plugin, dp_grpc.add_DevicePluginServicer_to_server, under),
        ]
        nul_plugin = DevicePlugin()
        servers.append(await _serve(nul_plugin, dp_grpc.add_DevicePluginServicer_to_server, plugin_dir / "ep.sock"))
        async with grpc.aio.insecure_channel(f"unix://{plugin_dir / 'kubelet.sock'}") as channel:
            stub = dp_grpc.RegistrationStub(channel)
            await stub.Register(
                dp_pb2.RegisterRequest(version="v1beta1", endpoint=str(absolute), resource_name=RESOURCE)
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Register(
                    dp_pb2.RegisterRequest(version="v1beta1", endpoint="ep.sock\x00x", resource_name=RESOURCE + "2")
                )
        assert (plugin.calls, decoy.calls, nul_plugin.calls) == (1, 0, 0)
        assert refused.value.code() == grpc.StatusCode.UNKNOWN
        assert refused.value.details() == (
            f'failed to dial device plugin: parse "passthrough:///{plugin_dir}/ep.sock\\x00x": '
            "net/url: invalid control character in URL"
        )

        async def advertised() -> bool:
            status = (await admin.get(paths.node(settings.node_name))).get("status") or {}
            return (status.get("allocatable") or {}).get(RESOURCE) == "1" and RESOURCE + "2" not in (
                status.get("capacity") or {}
            )

        await eventually(advertised, timeout=30, what=f"{RESOURCE} on the Node", agent=agent)

        # DRA: a registration socket outside plugins_registry, linked into it, registers; a NUL in the endpoint is
        # refused with upstream's words.
        linked = Registration(
            reg_pb2.PluginInfo(
                type="DRAPlugin", name="linked.nodeagent.test", endpoint=str(outside / "dra.sock"),
                supported_versions=["v1.DRAPlugin"],
            )
        )  # fmt: skip
        nul = Registration(
            reg_pb2.PluginInfo(
                type="DRAPlugin", name="nul.nodeagent.test", endpoint="/x\x00y", supported_versions=["v1.DRAPlugin"]
            )
        )
        servers.append(await _serve(linked, reg_grpc.add_RegistrationServicer_to_server, outside / "reg.sock"))
        os.symlink(outside / "reg.sock", registry / "linked-reg.sock")
        servers.append(await _serve(nul, reg_grpc.add_RegistrationServicer_to_server, registry / "nul-reg.sock"))
        status = await asyncio.wait_for(linked.statuses.get(), 30)
        assert (status.plugin_registered, status.error) == (True, "")
        status = await asyncio.wait_for(nul.statuses.get(), 30)
        assert not status.plugin_registered
        assert status.error == (
            "RegisterPlugin error -- plugin registration failed with err: create gRPC connection to DRA driver "
            'nul.nodeagent.test plugin at endpoint /x\x00y: parse "dns:///unix:/x\\x00y": net/url: invalid control '
            "character in URL"
        )

        assert await node_ready(admin, settings.node_name)
        assert await _pod_running(admin)
        assert agent.proc.poll() is None
    finally:
        for server in servers:
            await server.stop(None)
        for path in (registry / "linked-reg.sock", registry / "nul-reg.sock", plugin_dir / "ep.sock"):
            path.unlink(missing_ok=True)
        shutil.rmtree(plugin_dir / under.relative_to(plugin_dir).parts[0], ignore_errors=True)
