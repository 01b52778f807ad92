"""A double of a driver's registration sidecar: pluginregistration v1 served on a unix socket with grpc.aio.

It answers GetInfo with the configured PluginInfo and queues every RegistrationStatus it is sent, so tests await
the kubelet side's verdict instead of sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import grpc

from csi.registration.v1 import api_pb2, api_pb2_grpc


class Registrar(api_pb2_grpc.RegistrationServicer):
    def __init__(
        self,
        socket: Path,
        *,
        name: str = "mock.csi.test",
        plugin_type: str = "CSIPlugin",
        endpoint: str = "/csi/csi.sock",
        versions: Sequence[str] = ("1.0.0",),
    ) -> None:
        self.socket = socket
        self.info = api_pb2.PluginInfo(type=plugin_type, name=name, endpoint=endpoint, supported_versions=versions)
        self.statuses: asyncio.Queue[api_pb2.RegistrationStatus] = asyncio.Queue()
        self.get_info_calls = 0
        self._server: grpc.aio.Server | None = None

    async def GetInfo(self, request: api_pb2.InfoRequest, context: object) -> api_pb2.PluginInfo:
        del request, context
        self.get_info_calls += 1
        return self.info

    async def NotifyRegistrationStatus(
        self, request: api_pb2.RegistrationStatus, context: object
    ) -> api_pb2.RegistrationStatusResponse:
        del context
        self.statuses.put_nowait(request)
        return api_pb2.RegistrationStatusResponse()

    async def start(self) -> None:
        self._server = grpc.aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        await self._server.start()

    async def stop(self, *, remove: bool = True) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        if remove:
            self.socket.unlink(missing_ok=True)

    async def status(self, timeout: float = 10.0) -> api_pb2.RegistrationStatus:
        return await asyncio.wait_for(self.statuses.get(), timeout)
