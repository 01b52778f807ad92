"""A device plugin double for unit tests: a real grpc.aio DevicePlugin server on a unix socket in the test's
device-plugins directory, which registers itself on the kubelet's socket as a real plugin does.

It records every Allocate, PreStartContainer and GetPreferredAllocation it gets, answers Allocate from
`allocate_response` (or with `allocate_error`), and pushes a new device list to ListAndWatch on `set_devices`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from nodeagent.devicemanager.v1beta1 import api_pb2, api_pb2_grpc


def devices(*ids: str, health: str = "Healthy") -> list[api_pb2.Device]:
    return [api_pb2.Device(ID=i, health=health) for i in ids]


class FakePlugin(api_pb2_grpc.DevicePluginServicer):
    def __init__(
        self,
        plugin_dir: Path,
        *,
        resource: str = "example.com/dev",
        endpoint: str = "fake.sock",
        initial: Sequence[api_pb2.Device] = (),
        pre_start_required: bool = False,
        preferred_available: bool = False,
        socket: Path | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resource = resource
        self.endpoint = endpoint
        # Where it listens: by default `endpoint` in the plugin directory; elsewhere for a plugin whose registered
        # endpoint the kubelet resolves to another path.
        self.socket = socket if socket is not None else plugin_dir / endpoint
        self.options_calls = 0
        self.options = api_pb2.DevicePluginOptions(
            pre_start_required=pre_start_required, get_preferred_allocation_available=preferred_available
        )
        self._devices = list(initial)
        self._updates: asyncio.Queue[list[api_pb2.Device]] = asyncio.Queue()
        self.allocate_calls: list[list[str]] = []
        self.pre_start_calls: list[list[str]] = []
        self.preferred_calls: list[api_pb2.ContainerPreferredAllocationRequest] = []
        self.preferred: list[str] = []
        self.allocate_error: str | None = None
        self.pushed: asyncio.Queue[int] = asyncio.Queue()
        self._server: grpc.aio.Server | None = None

    async def GetDevicePluginOptions(self, request: api_pb2.Empty, context: Any) -> api_pb2.DevicePluginOptions:
        self.options_calls += 1
        return self.options

    async def ListAndWatch(self, request: api_pb2.Empty, context: Any) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        current = self._devices
        while True:
            yield api_pb2.ListAndWatchResponse(devices=current)
            self.pushed.put_nowait(len(current))
            current = await self._updates.get()

    async def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Any
    ) -> api_pb2.PreferredAllocationResponse:
        self.preferred_calls.extend(request.container_requests)
        return api_pb2.PreferredAllocationResponse(
            container_responses=[api_pb2.ContainerPreferredAllocationResponse(deviceIDs=self.preferred)]
        )

    async def Allocate(self, request: api_pb2.AllocateRequest, context: Any) -> api_pb2.AllocateResponse:
        if self.allocate_error is not None:
            await context.abort(grpc.StatusCode.INTERNAL, self.allocate_error)
        responses = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            self.allocate_calls.append(ids)
            responses.append(self.allocate_response(ids))
        return api_pb2.AllocateResponse(container_responses=responses)

    def allocate_response(self, ids: Sequence[str]) -> api_pb2.ContainerAllocateResponse:
        return api_pb2.ContainerAllocateResponse(
            envs={"FAKE_DEVICES": ",".join(ids)},
            devices=[
                api_pb2.DeviceSpec(container_path=f"/dev/fake-{i}", host_path="/dev/null", permissions="rw")
                for i in ids
            ],
            mounts=[api_pb2.Mount(container_path="/fake", host_path=str(self.plugin_dir), read_only=True)],
            annotations={"fake.example.com/devices": ",".join(ids)},
            cdi_devices=[api_pb2.CDIDevice(name=f"example.com/dev={i}") for i in ids],
        )

    async def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        self.pre_start_calls.append(list(request.devices_ids))
        return api_pb2.PreStartContainerResponse()

    def set_devices(self, new: Sequence[api_pb2.Device]) -> None:
        self._devices = list(new)
        self._updates.put_nowait(list(new))

    async def wait_pushed(self, timeout: float = 5.0) -> int:
        return await asyncio.wait_for(self.pushed.get(), timeout)

    async def serve(self) -> None:
        self._server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        await self._server.start()

    async def register(self, *, version: str = "v1beta1", resource: str | None = None) -> None:
        """Registers on kubelet.sock; raises grpc.aio.AioRpcError when refused."""
        async with grpc.aio.insecure_channel(f"unix://{self.plugin_dir / 'kubelet.sock'}") as channel:
            stub = api_pb2_grpc.RegistrationStub(channel)
            await stub.Register(
                api_pb2.RegisterRequest(
                    version=version,
                    endpoint=self.endpoint,
                    resource_name=resource if resource is not None else self.resource,
                    options=self.options,
                )
            )

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        self.socket.unlink(missing_ok=True)
