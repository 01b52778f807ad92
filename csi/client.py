"""The gRPC client of one CSI plugin: `CSIClient` (identity, node, controller over one channel) and `connect`.

As upstream's kubelet (pkg/volume/csi/csi_client.go) does:
- every call has a deadline, by default the kubelet's csiTimeout (2 minutes), overridable per call;
- requests lacking what the spec requires (a volume id, a target path) are refused before anything is sent, with
  upstream's messages, as `RequestError`;
- answers the kubelet cannot use (stats without usage, a volume without id) are refused with `InvalidResponseError`;
- gRPC errors become `csi.errors` classes, raised `from` the gRPC error, keeping the driver's message;
- requests and answers are logged at debug level with the spec's secret fields stripped (`csi.redact`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

import grpc
from google.protobuf.message import Message

from csi.channel import open_channel
from csi.errors import InvalidResponseError, RequestError, from_rpc_error
from csi.redact import strip_secrets
from csi.v1 import csi_pb2, csi_pb2_grpc

if TYPE_CHECKING:
    from csi.service import ControllerService, IdentityService, NodeService

logger = logging.getLogger(__name__)

# As upstream's kubelet: csiTimeout, the deadline of its CSI calls (pkg/volume/csi).
DEFAULT_TIMEOUT = 120.0

_IDENTITY = "/csi.v1.Identity/"
_NODE = "/csi.v1.Node/"
_CONTROLLER = "/csi.v1.Controller/"

_Req = TypeVar("_Req", bound=Message)
_Resp = TypeVar("_Resp", bound=Message)


async def _call(
    method: str, stub: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp], request: _Req, timeout: float
) -> _Resp:
    """One unary call with a deadline of `timeout` seconds, its gRPC failure mapped to a CSIError."""
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("csi call method=%s request=%s", method, strip_secrets(request))
    try:
        response = await stub(request, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        logger.debug("csi call failed method=%s code=%s message=%r", method, exc.code().name, exc.details())
        raise from_rpc_error(method, exc) from exc
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("csi call done method=%s response=%s", method, strip_secrets(response))
    return response


def _require(method: str, **fields: str) -> None:
    """RequestError for the first empty field, worded as upstream's client (`missing volume id`)."""
    for name, value in fields.items():
        if not value:
            raise RequestError(method, None, f"missing {name.replace('_', ' ')}")


class _Service:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    def _deadline(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout


class RemoteIdentity(_Service):
    """`csi.service.IdentityService` over a grpc.aio channel."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(timeout)
        self._stub = csi_pb2_grpc.IdentityStub(channel)

    async def get_plugin_info(self, *, timeout: float | None = None) -> csi_pb2.GetPluginInfoResponse:
        method = _IDENTITY + "GetPluginInfo"
        resp = await _call(method, self._stub.GetPluginInfo, csi_pb2.GetPluginInfoRequest(), self._deadline(timeout))
        if not resp.name:
            raise InvalidResponseError(method, None, "plugin name is empty")
        return resp

    async def get_plugin_capabilities(self, *, timeout: float | None = None) -> list[csi_pb2.PluginCapability]:
        method = _IDENTITY + "GetPluginCapabilities"
        request = csi_pb2.GetPluginCapabilitiesRequest()
        resp = await _call(method, self._stub.GetPluginCapabilities, request, self._deadline(timeout))
        return list(resp.capabilities)

    async def probe(self, *, timeout: float | None = None) -> bool:
        resp = await _call(_IDENTITY + "Probe", self._stub.Probe, csi_pb2.ProbeRequest(), self._deadline(timeout))
        # The spec: an unset `ready` means ready (a plugin that has nothing to wait for need not say so).
        return resp.ready.value if resp.HasField("ready") else True


class RemoteNode(_Service):
    """`csi.service.NodeService` over a grpc.aio channel."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(timeout)
        self._stub = csi_pb2_grpc.NodeStub(channel)

    async def node_get_info(self, *, timeout: float | None = None) -> csi_pb2.NodeGetInfoResponse:
        method = _NODE + "NodeGetInfo"
        return await _call(method, self._stub.NodeGetInfo, csi_pb2.NodeGetInfoRequest(), self._deadline(timeout))

    async def node_get_capabilities(self, *, timeout: float | None = None) -> list[csi_pb2.NodeServiceCapability]:
        method = _NODE + "NodeGetCapabilities"
        request = csi_pb2.NodeGetCapabilitiesRequest()
        resp = await _call(method, self._stub.NodeGetCapabilities, request, self._deadline(timeout))
        return list(resp.capabilities)

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
        method = _NODE + "NodeStageVolume"
        _require(method, volume_id=volume_id, staging_target_path=staging_target_path)
        request = csi_pb2.NodeStageVolumeRequest(
            volume_id=volume_id,
            staging_target_path=staging_target_path,
            volume_capability=volume_capability,
            publish_context=publish_context or {},
            volume_context=volume_context or {},
            secrets=secrets or {},
        )
        await _call(method, self._stub.NodeStageVolume, request, self._deadline(timeout))

    async def node_unstage_volume(
        self, volume_id: str, staging_target_path: str, *, timeout: float | None = None
    ) -> None:
        method = _NODE + "NodeUnstageVolume"
        _require(method, volume_id=volume_id, staging_target_path=staging_target_path)
        request = csi_pb2.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=staging_target_path)
        await _call(method, self._stub.NodeUnstageVolume, request, self._deadline(timeout))

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
        method = _NODE + "NodePublishVolume"
        _require(method, volume_id=volume_id, target_path=target_path)
        request = csi_pb2.NodePublishVolumeRequest(
            volume_id=volume_id,
            target_path=target_path,
            staging_target_path=staging_target_path,
            volume_capability=volume_capability,
            readonly=readonly,
            publish_context=publish_context or {},
            volume_context=volume_context or {},
            secrets=secrets or {},
        )
        await _call(method, self._stub.NodePublishVolume, request, self._deadline(timeout))

    async def node_unpublish_volume(self, volume_id: str, target_path: str, *, timeout: float | None = None) -> None:
        method = _NODE + "NodeUnpublishVolume"
        _require(method, volume_id=volume_id, target_path=target_path)
        request = csi_pb2.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target_path)
        await _call(method, self._stub.NodeUnpublishVolume, request, self._deadline(timeout))

    async def node_get_volume_stats(
        self, volume_id: str, volume_path: str, *, staging_target_path: str = "", timeout: float | None = None
    ) -> csi_pb2.NodeGetVolumeStatsResponse:
        method = _NODE + "NodeGetVolumeStats"
        # Upstream names the volume path "target path" in this message.
        _require(method, volume_id=volume_id, target_path=volume_path)
        request = csi_pb2.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=volume_path, staging_target_path=staging_target_path
        )
        resp = await _call(method, self._stub.NodeGetVolumeStats, request, self._deadline(timeout))
        if not resp.usage:
            raise InvalidResponseError(method, None, "failed to get usage from response. usage is nil")
        return resp

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
        method = _NODE + "NodeExpandVolume"
        _require(method, volume_id=volume_id, volume_path=volume_path)
        if required_bytes < 0:
            raise RequestError(method, None, "size can not be less than 0")
        request = csi_pb2.NodeExpandVolumeRequest(
            volume_id=volume_id,
            volume_path=volume_path,
            capacity_range=csi_pb2.CapacityRange(required_bytes=required_bytes),
            staging_target_path=staging_target_path,
            volume_capability=volume_capability,
            secrets=secrets or {},
        )
        resp = await _call(method, self._stub.NodeExpandVolume, request, self._deadline(timeout))
        return resp.capacity_bytes


class RemoteController(_Service):
    """`csi.service.ControllerService` over a grpc.aio channel."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(timeout)
        self._stub = csi_pb2_grpc.ControllerStub(channel)

    async def controller_get_capabilities(
        self, *, timeout: float | None = None
    ) -> list[csi_pb2.ControllerServiceCapability]:
        method = _CONTROLLER + "ControllerGetCapabilities"
        request = csi_pb2.ControllerGetCapabilitiesRequest()
        resp = await _call(method, self._stub.ControllerGetCapabilities, request, self._deadline(timeout))
        return list(resp.capabilities)

    async def create_volume(
        self,
        name: str,
        volume_capabilities: Sequence[csi_pb2.VolumeCapability],
        *,
        required_bytes: int = 0,
        limit_bytes: int = 0,
        parameters: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        accessibility_requirements: csi_pb2.TopologyRequirement | None = None,
        timeout: float | None = None,
    ) -> csi_pb2.Volume:
        method = _CONTROLLER + "CreateVolume"
        _require(method, name=name)
        if not volume_capabilities:
            raise RequestError(method, None, "missing volume capabilities")
        request = csi_pb2.CreateVolumeRequest(
            name=name,
            volume_capabilities=volume_capabilities,
            parameters=parameters or {},
            secrets=secrets or {},
            accessibility_requirements=accessibility_requirements,
        )
        if required_bytes or limit_bytes:
            request.capacity_range.CopyFrom(
                csi_pb2.CapacityRange(required_bytes=required_bytes, limit_bytes=limit_bytes)
            )
        resp = await _call(method, self._stub.CreateVolume, request, self._deadline(timeout))
        if not resp.volume.volume_id:
            raise InvalidResponseError(method, None, f"volume {name!r} created without a volume id")
        return resp.volume

    async def delete_volume(
        self, volume_id: str, *, secrets: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> None:
        method = _CONTROLLER + "DeleteVolume"
        _require(method, volume_id=volume_id)
        request = csi_pb2.DeleteVolumeRequest(volume_id=volume_id, secrets=secrets or {})
        await _call(method, self._stub.DeleteVolume, request, self._deadline(timeout))

    async def controller_publish_volume(
        self,
        volume_id: str,
        node_id: str,
        volume_capability: csi_pb2.VolumeCapability,
        *,
        readonly: bool = False,
        volume_context: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, str]:
        method = _CONTROLLER + "ControllerPublishVolume"
        _require(method, volume_id=volume_id, node_id=node_id)
        request = csi_pb2.ControllerPublishVolumeRequest(
            volume_id=volume_id,
            node_id=node_id,
            volume_capability=volume_capability,
            readonly=readonly,
            volume_context=volume_context or {},
            secrets=secrets or {},
        )
        resp = await _call(method, self._stub.ControllerPublishVolume, request, self._deadline(timeout))
        return dict(resp.publish_context)

    async def controller_unpublish_volume(
        self, volume_id: str, node_id: str, *, secrets: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> None:
        method = _CONTROLLER + "ControllerUnpublishVolume"
        # The spec allows an empty node id here: unpublish from every node.
        _require(method, volume_id=volume_id)
        request = csi_pb2.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=node_id, secrets=secrets or {})
        await _call(method, self._stub.ControllerUnpublishVolume, request, self._deadline(timeout))


class CSIClient:
    """The three services of one plugin over one channel. An async context manager: leaving it closes the channel."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._channel = channel
        self.identity = RemoteIdentity(channel, timeout=timeout)
        self.node = RemoteNode(channel, timeout=timeout)
        self.controller = RemoteController(channel, timeout=timeout)

    async def close(self) -> None:
        await self._channel.close(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def connect(endpoint: str, *, timeout: float = DEFAULT_TIMEOUT) -> CSIClient:
    """A client of the plugin at `endpoint` (`unix:///path` or `/path`): `async with connect(...) as plugin:`.

    `timeout` is the default deadline of each call in seconds. Nothing is dialled until the first call, so a plugin
    that is not up yet fails that call with `UnavailableError`; call from a running event loop.
    """
    channel = open_channel(endpoint)
    logger.debug("csi client endpoint=%s timeout=%s", endpoint, timeout)
    return CSIClient(channel, timeout=timeout)


if TYPE_CHECKING:
    # mypy proves here that the clients implement the protocols.
    _identity_conforms: type[IdentityService] = RemoteIdentity
    _node_conforms: type[NodeService] = RemoteNode
    _controller_conforms: type[ControllerService] = RemoteController
