"""Registering and deregistering one plugin socket, as upstream's operation_generator.go does.

Register: dial the socket (10 s), GetInfo (1 s), pick the handler by the plugin's type, validate, record the plugin
as registered, let the handler register it, and tell the plugin the outcome with NotifyRegistrationStatus (5 s).
The texts of `RegistrationError` and of the status sent to the plugin are upstream's ("RegisterPlugin error -- ...").

The plugin is recorded as registered before the handler's register runs, as upstream, so that a socket removed
meanwhile is deregistered. It follows that a handler whose register fails is not asked again for the same socket:
upstream relies on the registrar (node-driver-registrar) exiting on a failed status, and its restart recreating
the socket.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import NoReturn

import grpc

from csi.registration.handler import HandlerError, PluginHandler
from csi.registration.reconcile import DesiredPlugin, RegisteredPlugin
from csi.registration.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

DIAL_TIMEOUT = 10.0
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0


class RegistrationError(Exception):
    """One registration attempt failed; the watcher retries it after a backoff (unless the plugin was recorded)."""


def go_error(exc: BaseException) -> str:
    """A gRPC failure as Go's grpc prints it (`rpc error: code = Unavailable desc = ...`), other errors as is."""
    if isinstance(exc, grpc.aio.AioRpcError):
        code = "".join(part.capitalize() for part in exc.code().name.split("_"))
        return f"rpc error: code = {code} desc = {exc.details()}"
    if isinstance(exc, TimeoutError):
        return "context deadline exceeded"
    return str(exc)


async def _send(
    client: api_pb2_grpc.RegistrationAsyncStub, registered: bool, error: str, timeout: float
) -> grpc.aio.AioRpcError | None:
    """NotifyRegistrationStatus; the RPC's failure, or None when the plugin got the status."""
    try:
        await client.NotifyRegistrationStatus(
            api_pb2.RegistrationStatus(plugin_registered=registered, error=error), timeout=timeout
        )
    except grpc.aio.AioRpcError as exc:
        return exc
    return None


async def _refuse(client: api_pb2_grpc.RegistrationAsyncStub, socket_path: str, error: str, timeout: float) -> NoReturn:
    """Tell the plugin it is not registered, and fail the attempt with the same text (upstream's notifyPlugin)."""
    failure = await _send(client, False, error, timeout)
    if failure is not None:
        raise RegistrationError(
            f"RegisterPlugin error -- failed to send error at socket {socket_path}, err: {error}: {go_error(failure)}"
        ) from failure
    raise RegistrationError(error)


async def register(
    plugin: DesiredPlugin,
    handlers: Mapping[str, PluginHandler],
    record: Callable[[RegisteredPlugin], None],
    *,
    dial_timeout: float = DIAL_TIMEOUT,
    get_info_timeout: float = GET_INFO_TIMEOUT,
    notify_timeout: float = NOTIFY_TIMEOUT,
) -> RegisteredPlugin:
    socket_path = plugin.socket_path
    # A connection of its own, as Go's dial: from grpc's shared subchannel pool, a socket replaced in place (renamed
    # over) while another channel still held the old one was reached through the old connection, its old server.
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(f"unix://{socket_path}", options=options) as channel:
        try:
            async with asyncio.timeout(dial_timeout):
                await channel.channel_ready()
        except TimeoutError as exc:
            raise RegistrationError(
                f"RegisterPlugin error -- dial failed at socket {socket_path}, err: failed to dial socket "
                f"{socket_path}, err: context deadline exceeded"
            ) from exc
        client = api_pb2_grpc.RegistrationStub(channel)
        try:
            info = await client.GetInfo(api_pb2.InfoRequest(), timeout=get_info_timeout)
        except grpc.aio.AioRpcError as exc:
            raise RegistrationError(
                f"RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {socket_path}, "
                f"err: {go_error(exc)}"
            ) from exc
        name, versions = info.name, list(info.supported_versions)
        handler = handlers.get(info.type)
        if handler is None:
            await _refuse(
                client,
                socket_path,
                f"RegisterPlugin error -- no handler registered for plugin type: {info.type} at socket {socket_path}",
                notify_timeout,
            )
        # As upstream: a plugin that names no endpoint serves its own API on the registration socket.
        endpoint = info.endpoint or socket_path
        try:
            await handler.validate_plugin(name, endpoint, versions)
        except HandlerError as exc:
            log.warning("plugin validation failed socket=%s plugin=%s error=%s", socket_path, name, exc)
            message = f"RegisterPlugin error -- plugin validation failed with err: {exc}"
            failure = await _send(client, False, message, notify_timeout)
            if failure is not None:
                raise RegistrationError(
                    f"RegisterPlugin error -- failed to send error at socket {socket_path}, "
                    f"err: {message}: {go_error(failure)}"
                ) from failure
            raise RegistrationError("RegisterPlugin error -- pluginHandler.ValidatePluginFunc failed") from exc
        registered = RegisteredPlugin(socket_path, plugin.generation, info.type, name, endpoint)
        record(registered)
        try:
            await handler.register_plugin(name, endpoint, versions)
        except HandlerError as exc:
            message = f"RegisterPlugin error -- plugin registration failed with err: {exc}"
            failure = await _send(client, False, message, notify_timeout)
            suffix = "" if failure is None else f": {go_error(failure)}"
            raise RegistrationError(message + suffix) from exc
        # Sent after the handler's register, so that a plugin told "registered" is registered.
        failure = await _send(client, True, "", notify_timeout)
        if failure is not None:
            raise RegistrationError(
                f"RegisterPlugin error -- failed to send registration status at socket {socket_path}, "
                f"err: {go_error(failure)}"
            ) from failure
        return registered


async def deregister(plugin: RegisteredPlugin, handler: PluginHandler | None, forget: Callable[[str], None]) -> None:
    """Forget the plugin first (so a new socket at the path registers), then tell its handler (upstream's order)."""
    forget(plugin.socket_path)
    if handler is None:
        raise RegistrationError(f"UnregisterPlugin error -- failed to get plugin handler for {plugin.socket_path}")
    await handler.deregister_plugin(plugin.name, plugin.endpoint)
