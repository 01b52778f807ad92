"""CSI and plugin-registration answers: generated protobuf messages (every field of its type, enums including
values the proto does not name, nested messages, maps) fed to the code that reads them. The CSI client's answer
handling (`csi.client`, with a stub that returns the message instead of a channel): GetPluginInfo, Probe,
NodeGetInfo, NodeGetCapabilities, NodeGetVolumeStats, NodeExpandVolume, CreateVolume, ControllerPublishVolume; what
the agent makes of them: `csihandler.node_get_info` (NodeGetInfo → DriverNodeInfo), `nodeinfo` (the Node patch, the
CSINode entry), `csi.capability.node_rpc_types`, `volume.csiutil.volume_stats`. The registration GetInfo answer
(name, endpoint, versions) through `CSIRegistrationHandler.validate_plugin` and `register_plugin`, whose version
rule is `csi.registration.versions`. Documented errors: `CSIError` (InvalidResponseError), `HandlerError`,
`NodeInfoError`, `VolumeStatsResponseError`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

import csi.client
from csi.capability import node_rpc_types
from csi.client import RemoteController, RemoteIdentity, RemoteNode
from csi.errors import CSIError
from csi.registration.handler import HandlerError
from csi.registration.v1 import api_pb2 as registration_pb2
from csi.v1 import csi_pb2
from nodeagent.pluginmanager import csihandler
from nodeagent.pluginmanager.csihandler import CSIRegistrationHandler
from nodeagent.pluginmanager.nodeinfo import (
    DriverNodeInfo,
    NodeInfoError,
    driver_entry,
    install_patch,
    installed_drivers,
    uninstall_patch,
)
from nodeagent.pluginmanager.registry import CSIDriverRegistry
from nodeagent.volume.csiutil import VolumeStatsResponseError, volume_stats
from tests.fuzz.engine import Target
from tests.fuzz.strategies import strings

_INT_BOUNDS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([low, high, 0, 1, -1 if low < 0 else 2]), st.integers(low, high))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.type in _INT_BOUNDS:
        return _ints(*_INT_BOUNDS[field.type])
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=32 if field.type == FieldDescriptor.TYPE_FLOAT else 64)
    if field.type == FieldDescriptor.TYPE_STRING:
        return strings
    if field.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=16)
    if field.type == FieldDescriptor.TYPE_ENUM:
        # Open enums (proto3): a number the proto does not name arrives as is.
        assert field.enum_type is not None
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), _ints(-(2**31), 2**31 - 1))
    raise AssertionError(field.type)


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of that type, every field set or not, nested up to 4 levels."""
    cls: Callable[..., Message] = csi_pb2.__dict__.get(descriptor.name) or _lookup(descriptor)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        for field in descriptor.fields:
            if not draw(st.booleans()):
                continue
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                key_field, value_field = (
                    field.message_type.fields_by_name["key"],
                    field.message_type.fields_by_name["value"],
                )
                entries = draw(st.dictionaries(_scalar(key_field), _value(value_field, depth), max_size=3))
                target = getattr(message, field.name)
                for key, value in entries.items():
                    if value_field.message_type is not None:
                        target[key].CopyFrom(value)
                    else:
                        target[key] = value
            elif field.is_repeated:
                getattr(message, field.name).extend(draw(st.lists(_value(field, depth), max_size=3)))
            elif field.message_type is not None:
                if depth < 4:
                    getattr(message, field.name).CopyFrom(draw(messages(field.message_type, depth + 1)))
            else:
                setattr(message, field.name, draw(_scalar(field)))
        return message

    return build()


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None:
        return messages(field.message_type, depth + 1) if depth < 4 else st.builds(_lookup(field.message_type))
    return _scalar(field)


def _lookup(descriptor: Descriptor) -> Callable[..., Message]:
    from google.protobuf import message_factory  # noqa: PLC0415

    return message_factory.GetMessageClass(descriptor)


class _Stub:
    """Every RPC answers with the generated message."""

    def __init__(self, answer: Message) -> None:
        self._answer = answer

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async def call(request: Message, *, timeout: float) -> Message:
            return self._answer

        return call


def _client(cls: Any, answer: Message) -> Any:
    service = cls.__new__(cls)
    service.timeout = 1.0
    service._stub = _Stub(answer)
    return service


class _FakeClient:
    def __init__(self, answer: Message) -> None:
        self.node = _client(RemoteNode, answer)

    async def __aenter__(self) -> _FakeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _NodeInfoWriter:
    def __init__(self) -> None:
        self.node: dict[str, Any] = {"metadata": {"name": "node", "labels": {"topology.x/zone": "a"}}}
        self.csinode: dict[str, Any] = {"spec": {"drivers": [{"name": "other", "nodeID": "n"}]}}

    async def install_driver(self, driver: str, info: DriverNodeInfo) -> None:
        install_patch(self.node, driver, info.node_id, info.topology)
        installed_drivers(self.csinode, driver, info)
        driver_entry(driver, info)

    async def uninstall_driver(self, driver: str) -> None:
        uninstall_patch(self.node, driver)


_LOOP = asyncio.new_event_loop()
_RESPONSES: list[Any] = [
    csi_pb2.GetPluginInfoResponse,
    csi_pb2.ProbeResponse,
    csi_pb2.NodeGetInfoResponse,
    csi_pb2.NodeGetCapabilitiesResponse,
    csi_pb2.NodeGetVolumeStatsResponse,
    csi_pb2.NodeExpandVolumeResponse,
    csi_pb2.CreateVolumeResponse,
    csi_pb2.ControllerPublishVolumeResponse,
    registration_pb2.PluginInfo,
]
strategy = st.one_of(
    *(messages(cls.DESCRIPTOR) for cls in _RESPONSES),
    st.builds(
        lambda name, endpoint, versions: registration_pb2.PluginInfo(
            type="CSIPlugin", name=name, endpoint=endpoint, supported_versions=versions
        ),
        strings,
        strings,
        st.lists(
            st.one_of(st.sampled_from(["1.0.0", "1.9.0", "v1", "1", "2.0.0", "01.0", "1.a", "1.0.0-rc1"]), strings)
        ),
    ),
)


async def _interpret(answer: Message) -> None:
    capability = csi_pb2.VolumeCapability(mount=csi_pb2.VolumeCapability.MountVolume())
    if isinstance(answer, csi_pb2.GetPluginInfoResponse):
        await _client(RemoteIdentity, answer).get_plugin_info()
    elif isinstance(answer, csi_pb2.ProbeResponse):
        await _client(RemoteIdentity, answer).probe()
    elif isinstance(answer, csi_pb2.NodeGetInfoResponse):
        original = csi.client.connect
        csi.client.connect = lambda endpoint, timeout=0.0: _FakeClient(answer)  # type: ignore[assignment, misc]
        try:
            info = await csihandler.node_get_info("/run/csi.sock")
        finally:
            csi.client.connect = original
        await _NodeInfoWriter().install_driver("fuzz.csi.k8s.io", info)
    elif isinstance(answer, csi_pb2.NodeGetCapabilitiesResponse):
        node_rpc_types(await _client(RemoteNode, answer).node_get_capabilities())
    elif isinstance(answer, csi_pb2.NodeGetVolumeStatsResponse):
        await _client(RemoteNode, answer).node_get_volume_stats("v", "/p")
        volume_stats(answer, with_condition=True)
        volume_stats(answer)
    elif isinstance(answer, csi_pb2.NodeExpandVolumeResponse):
        await _client(RemoteNode, answer).node_expand_volume("v", "/p", 1, capability)
    elif isinstance(answer, csi_pb2.CreateVolumeResponse):
        await _client(RemoteController, answer).create_volume("v", [capability])
    elif isinstance(answer, csi_pb2.ControllerPublishVolumeResponse):
        await _client(RemoteController, answer).controller_publish_volume("v", "node", capability)
    elif isinstance(answer, registration_pb2.PluginInfo):
        registry = CSIDriverRegistry()

        async def get_info(endpoint: str) -> DriverNodeInfo:
            return DriverNodeInfo(node_id="n", max_volumes_per_node=0, topology={})

        handler = CSIRegistrationHandler(registry, _NodeInfoWriter(), get_info)
        endpoint = answer.endpoint or "/var/lib/kubelet/plugins_registry/fuzz.sock"
        versions = list(answer.supported_versions)
        try:
            await handler.validate_plugin(answer.name, endpoint, versions)
        except HandlerError:
            return
        await handler.register_plugin(answer.name, endpoint, versions)
        # A second registration of the same name is judged against the first.
        with contextlib.suppress(HandlerError):
            await handler.validate_plugin(answer.name, endpoint, versions)


def run(answer: Message) -> None:
    _LOOP.run_until_complete(_interpret(answer))


TARGET = Target("csi", strategy, run, (CSIError, HandlerError, NodeInfoError, VolumeStatsResponseError), __doc__ or "")
