"""The CSIPlugin handler of the plugin watcher, as upstream's csi.RegistrationHandler (pkg/volume/csi/csi_plugin.go).

- validate: the driver's highest supported CSI version (csi.registration.versions, upstream's rule) must exist, and
  must be higher than that of a driver of the same name that is already registered;
- register: record the driver (name -> endpoint, version) in the registry, call NodeGetInfo on its endpoint, and
  write the node's CSI facts (`nodeinfo.NodeInfoManager.install_driver`); a failure of either takes the driver
  out of the registry again;
- deregister: take the driver out of the registry and its facts out of the API.

Messages are upstream's, prefixed "kubernetes.io/csi: " as its log() helper does; the driver's registrar sees the
validation and registration ones in its registration status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from csi.errors import CSIError
from csi.registration.handler import HandlerError
from csi.registration.versions import VersionError, highest_supported_version
from nodeagent.grpctarget import dial_context_error
from nodeagent.pluginmanager.nodeinfo import DriverNodeInfo, NodeInfoError
from nodeagent.pluginmanager.registry import CSIDriverRegistry, RegisteredDriver

log = logging.getLogger(__name__)

CSI_PLUGIN_NAME = "kubernetes.io/csi"
# As upstream's csiTimeout: the deadline of NodeGetInfo during registration.
CSI_TIMEOUT = 120.0

# endpoint -> what the driver's NodeGetInfo says (csi.client in production, a double in unit tests).
NodeInfoGetter = Callable[[str], Awaitable[DriverNodeInfo]]


class NodeInfoWriter(Protocol):
    async def install_driver(self, driver: str, info: DriverNodeInfo) -> None: ...

    async def uninstall_driver(self, driver: str) -> None: ...


def _log(message: str) -> str:
    return f"{CSI_PLUGIN_NAME}: {message}"


async def node_get_info(endpoint: str) -> DriverNodeInfo:
    """NodeGetInfo through csi.client (imported here: only a node with CSI drivers needs the CSI stubs)."""
    from csi.client import connect  # noqa: PLC0415

    async with connect(endpoint, timeout=CSI_TIMEOUT) as plugin:
        response = await plugin.node.node_get_info()
    return DriverNodeInfo(
        node_id=response.node_id,
        max_volumes_per_node=response.max_volumes_per_node,
        topology=dict(response.accessible_topology.segments) if response.HasField("accessible_topology") else {},
    )


class CSIRegistrationHandler:
    def __init__(self, registry: CSIDriverRegistry, node_info: NodeInfoWriter, get_info: NodeInfoGetter) -> None:
        self._registry = registry
        self._node_info = node_info
        self._get_info = get_info

    def _highest(self, caller: str, name: str, versions: Sequence[str]) -> RegisteredDriver:
        if not versions:
            raise HandlerError(
                _log(f'{caller} for CSI driver "{name}" failed. Plugin returned an empty list for supported versions')
            )
        try:
            highest = highest_supported_version(versions)
        except VersionError as exc:
            quoted = "[" + " ".join(f'"{version}"' for version in versions) + "]"
            raise HandlerError(
                _log(
                    f'{caller} for CSI driver "{name}" failed. None of the versions specified {quoted} are '
                    f"supported. err={exc}"
                )
            ) from exc
        existing = self._registry.get(name)
        if existing is not None and not existing.highest_supported_version.less_than(highest):
            raise HandlerError(
                _log(
                    f'{caller} for CSI driver "{name}" failed. Another driver with the same name is already '
                    f'registered with a higher supported version: "{existing.highest_supported_version}"'
                )
            )
        return RegisteredDriver(name, "", highest)

    async def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        log.info("validating CSI driver driver=%s endpoint=%s versions=%s", name, endpoint, ",".join(versions))
        try:
            self._highest("ValidatePlugin", name, versions)
        except HandlerError as exc:
            raise HandlerError(f"validation failed for CSI Driver {name} at endpoint {endpoint}: {exc}") from exc

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        log.info("registering CSI driver driver=%s endpoint=%s", name, endpoint)
        highest = self._highest("RegisterPlugin", name, versions).highest_supported_version
        # Recorded before NodeGetInfo, as upstream: the volume plugin may dial the driver from now on.
        self._registry.set(RegisteredDriver(name, endpoint, highest))
        # Upstream's CSI client dials the endpoint with grpc-go, which refuses a target it cannot parse (a control
        # character, a bad %-escape) before any dial; the endpoint is otherwise taken as it is, in any directory.
        unparsable = dial_context_error(endpoint)
        if unparsable is not None:
            await self._unregister(name)
            raise HandlerError(unparsable)
        try:
            info = await self._get_info(endpoint)
            await self._node_info.install_driver(name, info)
        except (CSIError, NodeInfoError) as exc:
            await self._unregister(name)
            raise HandlerError(str(exc)) from exc
        log.info(
            "CSI driver registered driver=%s endpoint=%s node_id=%s max_volumes=%d topology=%s",
            name,
            endpoint,
            info.node_id,
            info.max_volumes_per_node,
            ",".join(f"{key}={value}" for key, value in sorted(info.topology.items())),
        )

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        log.info("deregistering CSI driver driver=%s endpoint=%s", name, endpoint)
        await self._unregister(name)

    async def _unregister(self, name: str) -> None:
        self._registry.delete(name)
        try:
            await self._node_info.uninstall_driver(name)
        except NodeInfoError as exc:
            log.error("%s", _log(f"Error uninstalling CSI driver: {exc}"))
