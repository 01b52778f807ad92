"""DRA drivers' kubelet plugins: the DRAPlugin handler of the plugin watcher and the gRPC client of each plugin, as
upstream's DRAPluginManager (pkg/kubelet/cm/dra/plugin).

- A driver's plugin registers through `<root-dir>/plugins_registry` with type "DRAPlugin", its driver name, its
  DRAPlugin endpoint, and as "versions" the gRPC services it serves ("v1.DRAPlugin", "v1beta1.DRAPlugin"). The first
  of them that the agent supports is used for every call (both have the same messages, so one set of stubs serves
  both method paths). No known service, or an endpoint already registered for the driver, refuses the plugin with
  upstream's message, which the driver sees in its registration status.
- Several plugins of one driver may be registered (a rolling update): calls go to the latest.
- ResourceSlices: at start, those of this node are deleted (no driver is usable before it registers again, so none
  of its devices should be offered meanwhile); when the last plugin of a driver goes away, that driver's slices of
  this node are deleted after 30 s unless a plugin registers again (upstream's wiping delay). Deletes are retried with
  upstream's backoff (1 s doubling, at most 5 min).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from csi.registration.handler import HandlerError
from nodeagent.dra.v1 import api_pb2
from nodeagent.grpctarget import new_client_error
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import KubeError, NotFound
from nodeagent.kube.request import ApiRequest
from nodeagent.prober.probe import go_quote

log = logging.getLogger(__name__)

V1_SERVICE = "v1.DRAPlugin"
V1BETA1_SERVICE = "v1beta1.DRAPlugin"
# Upstream's servicesSupportedByKubelet, in order of preference.
SUPPORTED_SERVICES = (V1_SERVICE, V1BETA1_SERVICE)
_PACKAGES = {V1_SERVICE: "k8s.io.kubelet.pkg.apis.dra.v1", V1BETA1_SERVICE: "k8s.io.kubelet.pkg.apis.dra.v1beta1"}
# Upstream's defaultClientCallTimeout.
CLIENT_CALL_TIMEOUT = 45.0
# Upstream's defaultWipingDelay.
WIPING_DELAY = 30.0
WIPE_BACKOFF_FIRST = 1.0
WIPE_BACKOFF_CAP = 300.0


class PluginError(Exception):
    """A driver's plugin cannot be reached or answered with a gRPC error; the message is upstream's."""


def rpc_error_text(exc: grpc.aio.AioRpcError) -> str:
    """As Go's status error prints: `rpc error: code = Unavailable desc = ...`."""
    name = "".join(part.capitalize() for part in exc.code().name.split("_"))
    return f"rpc error: code = {name} desc = {exc.details() or ''}"


def _go_quoted(values: Sequence[str]) -> str:
    # Go's %q of a []string.
    return "[" + " ".join(f'"{value}"' for value in values) + "]"


def choose_service(versions: Sequence[str]) -> str:
    """Upstream's validateSupportedServices; raises HandlerError with its text."""
    if not versions:
        raise HandlerError("empty list of supported gRPC services (aka supported versions)")
    for service in versions:
        if service in SUPPORTED_SERVICES:
            return service
    raise HandlerError(
        f"none of services supported by the plugin ({_go_quoted(versions)}) are supported by the kubelet "
        f"({_go_quoted(SUPPORTED_SERVICES)})"
    )


@dataclass
class DRAPlugin:
    """One registered plugin of a driver: a channel made at registration, used for every call."""

    driver_name: str
    endpoint: str
    service: str
    timeout: float = CLIENT_CALL_TIMEOUT
    _channel: grpc.aio.Channel | None = field(default=None, repr=False)

    def _method(self, name: str) -> str:
        return f"/{_PACKAGES[self.service]}.DRAPlugin/{name}"

    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(f"unix:{self.endpoint}")
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close(None)

    async def node_prepare_resources(
        self, request: api_pb2.NodePrepareResourcesRequest
    ) -> api_pb2.NodePrepareResourcesResponse:
        call = self.channel().unary_unary(
            self._method("NodePrepareResources"),
            request_serializer=api_pb2.NodePrepareResourcesRequest.SerializeToString,
            response_deserializer=api_pb2.NodePrepareResourcesResponse.FromString,
        )
        try:
            response: api_pb2.NodePrepareResourcesResponse = await call(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise PluginError(rpc_error_text(exc)) from exc
        return response

    async def node_unprepare_resources(
        self, request: api_pb2.NodeUnprepareResourcesRequest
    ) -> api_pb2.NodeUnprepareResourcesResponse:
        call = self.channel().unary_unary(
            self._method("NodeUnprepareResources"),
            request_serializer=api_pb2.NodeUnprepareResourcesRequest.SerializeToString,
            response_deserializer=api_pb2.NodeUnprepareResourcesResponse.FromString,
        )
        try:
            response: api_pb2.NodeUnprepareResourcesResponse = await call(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise PluginError(rpc_error_text(exc)) from exc
        return response


# Deletes this node's ResourceSlices, of one driver or ("") of all; raises KubeError.
SliceWiper = Callable[[str], Awaitable[None]]


def resource_slice_wiper(client: KubeClient, node_name: str) -> SliceWiper:
    """DeleteCollection of resource.k8s.io/v1 ResourceSlices by field selector, as the Node authorizer allows a
    node for its own slices (spec.nodeName=<node>)."""

    async def wipe(driver: str) -> None:
        selector = f"spec.nodeName={node_name}" + (f",spec.driver={driver}" if driver else "")
        path = paths.api_path("resourceslices", group="resource.k8s.io", version="v1")
        await client.send(ApiRequest("DELETE", path, params=(("fieldSelector", selector),)))

    return wipe


class DRAPluginManager:
    """The "DRAPlugin" handler of the plugin watcher (csi.registration.handler.PluginHandler) and the store of
    registered plugins. `run` does the start-up wipe and the delayed wipes; without it nothing is wiped."""

    def __init__(
        self,
        wipe: SliceWiper | None = None,
        *,
        wiping_delay: float = WIPING_DELAY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store: dict[str, list[DRAPlugin]] = {}
        self._wipe = wipe
        self._wiping_delay = wiping_delay
        self._sleep = sleep
        self._pending_wipes: dict[str, asyncio.Task[None]] = {}
        self._running = False

    # --- PluginHandler -------------------------------------------------------------------------------------------

    async def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        try:
            choose_service(versions)
        except HandlerError as exc:
            raise HandlerError(
                f"invalid supported gRPC versions of DRA driver plugin {name} at endpoint {endpoint}: {exc}"
            ) from exc

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        try:
            service = choose_service(versions)
        except HandlerError as exc:
            raise HandlerError(
                f"invalid supported gRPC versions of DRA driver plugin {name} at endpoint {endpoint}: {exc}"
            ) from exc
        plugins = self._store.get(name, [])
        if any(plugin.endpoint == endpoint for plugin in plugins):
            raise HandlerError(f"endpoint {endpoint} already registered for DRA driver plugin {name}")
        # As upstream, the endpoint is whatever the plugin says (absolute, relative to the kubelet's working
        # directory, outside the plugins directory): only a target its gRPC cannot parse is refused.
        unparsable = new_client_error(f"unix:{endpoint}")
        if unparsable is not None:
            raise HandlerError(
                f"create gRPC connection to DRA driver {name} plugin at endpoint {endpoint}: {unparsable}"
            )
        plugin = DRAPlugin(name, endpoint, service)
        # Connect now, not at the first call, as upstream's conn.Connect(): an unusable endpoint shows early.
        plugin.channel().get_state(try_to_connect=True)
        plugins.append(plugin)
        self._store[name] = plugins
        log.info(
            "DRA plugin registered driver=%s endpoint=%s service=%s plugins=%d",
            name,
            go_quote(endpoint),
            service,
            len(plugins),
        )
        self._sync(name)

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        plugins = self._store.get(name, [])
        gone = [plugin for plugin in plugins if plugin.endpoint == endpoint]
        if not gone:
            return
        self._store[name] = [plugin for plugin in plugins if plugin.endpoint != endpoint]
        if not self._store[name]:
            del self._store[name]
        log.info(
            "DRA plugin deregistered driver=%s endpoint=%s plugins=%d",
            name,
            go_quote(endpoint),
            len(self._store.get(name, [])),
        )
        for plugin in gone:
            await plugin.close()
        self._sync(name)

    # --- for the manager -------------------------------------------------------------------------------------------

    def get_plugin(self, driver_name: str) -> DRAPlugin:
        """The latest plugin of the driver; PluginError with upstream's text when there is none."""
        if not driver_name:
            raise PluginError("DRA driver name is empty")
        plugins = self._store.get(driver_name)
        if not plugins:
            raise PluginError(f"DRA driver {driver_name} is not registered")
        return plugins[-1]

    def registered(self) -> dict[str, list[str]]:
        """Driver name -> endpoints, oldest first."""
        return {name: [plugin.endpoint for plugin in plugins] for name, plugins in self._store.items()}

    # --- ResourceSlice wiping -----------------------------------------------------------------------------------------

    def _sync(self, driver: str) -> None:
        if self._wipe is None or not self._running:
            return
        if self._store.get(driver):
            pending = self._pending_wipes.pop(driver, None)
            if pending is not None:
                pending.cancel()
                log.info("ResourceSlice wipe cancelled driver=%s", driver)
            return
        if driver not in self._pending_wipes:
            log.info(
                "ResourceSlices of a driver without plugins wiped later driver=%s delay=%.0fs",
                driver,
                self._wiping_delay,
            )
            task = asyncio.create_task(self._wipe_later(driver), name=f"dra-wipe:{driver}")
            self._pending_wipes[driver] = task

    async def _wipe_later(self, driver: str) -> None:
        try:
            await self._sleep(self._wiping_delay)
            await self._wipe_with_backoff(driver)
        finally:
            if self._pending_wipes.get(driver) is asyncio.current_task():
                del self._pending_wipes[driver]

    async def _wipe_with_backoff(self, driver: str) -> None:
        assert self._wipe is not None
        delay = WIPE_BACKOFF_FIRST
        while True:
            try:
                await self._wipe(driver)
                log.info("ResourceSlices deleted driver=%s", driver or "<all>")
                return
            except NotFound:
                return
            except KubeError as exc:
                log.info("deleting ResourceSlices failed, retrying driver=%s error=%s", driver or "<all>", exc)
            await self._sleep(delay)
            delay = min(delay * 2, WIPE_BACKOFF_CAP)

    async def run(self) -> None:
        """The start-up wipe of every driver's slices of this node, then the delayed wipes, until cancelled."""
        self._running = True
        try:
            if self._wipe is not None:
                await self._wipe_with_backoff("")
                # Drivers that registered during the start-up wipe publish again themselves; those that left
                # meanwhile get their delayed wipe now.
            await asyncio.Event().wait()
        finally:
            self._running = False
            pending = list(self._pending_wipes.values())
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for plugins in self._store.values():
                for plugin in plugins:
                    with contextlib.suppress(Exception):
                        await plugin.close()
