"""What the kubelet needs from a CSI plugin: the `IdentityService`, `NodeService` and `ControllerService` protocols.

Snake_case async methods that take the request's fields rather than request messages, and unwrap answers the way
upstream's kubelet does (pkg/volume/csi/csi_client.go): `probe` returns readiness, `controller_publish_volume` the
publish context, `node_expand_volume` the new capacity. Types are the generated csi.v1 messages. Maps default to
empty; `volume_capability` is built with `csi.capability.volume_capability`.

Each method takes a keyword-only `timeout` in seconds that overrides the implementation's default for that one call.
Failures raise `csi.errors.CSIError` subclasses; `csi.errors.is_final` tells whether the operation may still run.
The gRPC client (`csi.client`) implements these; so can fakes in tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from csi.v1 import csi_pb2


class IdentityService(Protocol):
    """Every plugin's identity (spec: service Identity)."""

    async def get_plugin_info(self, *, timeout: float | None = None) -> csi_pb2.GetPluginInfoResponse:
        """Name (non-empty, checked) and vendor version."""
        ...

    async def get_plugin_capabilities(self, *, timeout: float | None = None) -> list[csi_pb2.PluginCapability]: ...

    async def probe(self, *, timeout: float | None = None) -> bool:
        """Whether the plugin is ready; an answer without `ready` means ready, as the spec says."""
        ...


class NodeService(Protocol):
    """The node plugin (spec: service Node), what the kubelet calls itself."""

    async def node_get_info(self, *, timeout: float | None = None) -> csi_pb2.NodeGetInfoResponse: ...

    async def node_get_capabilities(self, *, timeout: float | None = None) -> list[csi_pb2.NodeServiceCapability]: ...

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
    ) -> None: ...

    async def node_unstage_volume(
        self, volume_id: str, staging_target_path: str, *, timeout: float | None = None
    ) -> None: ...

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
        """`staging_target_path` is sent only when set (plugins without STAGE_UNSTAGE_VOLUME get none)."""
        ...

    async def node_unpublish_volume(
        self, volume_id: str, target_path: str, *, timeout: float | None = None
    ) -> None: ...

    async def node_get_volume_stats(
        self, volume_id: str, volume_path: str, *, staging_target_path: str = "", timeout: float | None = None
    ) -> csi_pb2.NodeGetVolumeStatsResponse:
        """The usage (at least one entry, checked) and, for VOLUME_CONDITION plugins, the volume's condition."""
        ...

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
        """Returns the capacity the plugin reports after the expansion (0: not reported)."""
        ...


class ControllerService(Protocol):
    """The controller plugin (spec: service Controller): what the testbed uses to provision and attach by hand."""

    async def controller_get_capabilities(
        self, *, timeout: float | None = None
    ) -> list[csi_pb2.ControllerServiceCapability]: ...

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
        """The created volume (with a non-empty volume_id, checked); the same name again is idempotent."""
        ...

    async def delete_volume(
        self, volume_id: str, *, secrets: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> None: ...

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
        """The publish context, for NodeStage/NodePublish."""
        ...

    async def controller_unpublish_volume(
        self, volume_id: str, node_id: str, *, secrets: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> None: ...
