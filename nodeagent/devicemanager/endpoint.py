"""The kubelet's client of one device plugin (upstream: plugin/v1beta1/client.go and endpoint.go): the gRPC channel
to the plugin's socket, its options, the ListAndWatch stream that feeds the manager, and the calls made for
containers (GetPreferredAllocation, Allocate, PreStartContainer)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import grpc

from nodeagent.devicemanager.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

# upstream KubeletPreStartContainerRPCTimeoutInSecs
PRE_START_CONTAINER_TIMEOUT = 30.0
# upstream's dial: blocking, 10 s.
DIAL_TIMEOUT = 10.0


class PluginCallError(Exception):
    """A call to a device plugin failed; the text is Go's ("rpc error: code = ... desc = ..."), as upstream's
    messages quote it."""


def rpc_error_text(exc: grpc.aio.AioRpcError) -> str:
    return f"rpc error: code = {_code_name(exc.code())} desc = {exc.details() or ''}"


def _code_name(code: grpc.StatusCode) -> str:
    # Go's codes.Code String(): CamelCase ("DeadlineExceeded"), not Python's DEADLINE_EXCEEDED.
    return "".join(part.capitalize() for part in code.name.split("_"))


class PluginEndpoint:
    """One registered plugin. `connect()` dials and reads the options; `run()` follows ListAndWatch until the
    stream ends (the plugin went away) or `close()`."""

    def __init__(
        self,
        resource: str,
        socket_path: str,
        *,
        on_devices: Callable[[str, Sequence[api_pb2.Device]], None],
        dial_timeout: float = DIAL_TIMEOUT,
    ) -> None:
        self.resource = resource
        self._dial_timeout = dial_timeout
        self.socket_path = socket_path
        self.options = api_pb2.DevicePluginOptions()
        self._on_devices = on_devices
        self._channel: grpc.aio.Channel | None = None
        self._stub: api_pb2_grpc.DevicePluginAsyncStub | None = None
        # When the plugin was last seen going away (upstream stopTime); None while connected.
        self.stopped_at: float | None = None

    async def connect(self) -> None:
        """Dials the plugin and asks its options; PluginCallError when either fails."""
        channel = grpc.aio.insecure_channel(
            f"unix://{self.socket_path}", options=[("grpc.default_authority", "localhost")]
        )
        try:
            await asyncio.wait_for(channel.channel_ready(), self._dial_timeout)
        except TimeoutError as exc:
            await channel.close(None)
            # Upstream's words exactly: the path is not in them (its log line names it).
            raise PluginCallError("failed to dial device plugin: context deadline exceeded") from exc
        stub = api_pb2_grpc.DevicePluginStub(channel)
        try:
            self.options = await stub.GetDevicePluginOptions(api_pb2.Empty())
        except grpc.aio.AioRpcError as exc:
            await channel.close(None)
            raise PluginCallError(f"failed to get device plugin options: {rpc_error_text(exc)}") from exc
        self._channel, self._stub = channel, stub

    def _api(self) -> api_pb2_grpc.DevicePluginAsyncStub:
        if self._stub is None:
            raise PluginCallError(f"device plugin {self.resource} is not connected")
        return self._stub

    async def run(self) -> None:
        """Feeds every ListAndWatch answer to the manager; returns when the stream ends."""
        try:
            stream = self._api().ListAndWatch(api_pb2.Empty())
            async for response in stream:
                log.info("device plugin state pushed resource=%s devices=%d", self.resource, len(response.devices))
                self._on_devices(self.resource, list(response.devices))
        except grpc.aio.AioRpcError as exc:
            log.error("ListAndWatch ended unexpectedly resource=%s error=%s", self.resource, rpc_error_text(exc))
        except PluginCallError as exc:
            log.error("ListAndWatch not started resource=%s error=%s", self.resource, exc)
        else:
            log.error("ListAndWatch ended unexpectedly resource=%s error=EOF", self.resource)

    async def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close(None)

    async def allocate(self, device_ids: Sequence[str]) -> api_pb2.AllocateResponse:
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(device_ids))]
        )
        try:
            return await self._api().Allocate(request)
        except grpc.aio.AioRpcError as exc:
            raise PluginCallError(rpc_error_text(exc)) from exc

    async def pre_start_container(self, device_ids: Sequence[str]) -> None:
        try:
            await self._api().PreStartContainer(
                api_pb2.PreStartContainerRequest(devices_ids=list(device_ids)), timeout=PRE_START_CONTAINER_TIMEOUT
            )
        except grpc.aio.AioRpcError as exc:
            raise PluginCallError(rpc_error_text(exc)) from exc

    async def get_preferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> api_pb2.PreferredAllocationResponse:
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        try:
            return await self._api().GetPreferredAllocation(request)
        except grpc.aio.AioRpcError as exc:
            raise PluginCallError(rpc_error_text(exc)) from exc
