"""The proto comparator reports what breaks the wire, so the upstream compatibility test can fail.

Our own compiled proto plays both sides: one copy is deliberately changed and compared with the untouched one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.protobuf import descriptor_pb2

from cri import wire_compat
from cri.v1 import api_pb2

FileProto = descriptor_pb2.FileDescriptorProto
SERVICES = ("RuntimeService", "ImageService")


def ours() -> FileProto:
    proto = FileProto()
    api_pb2.DESCRIPTOR.CopyToProto(proto)
    return proto


def message(proto: FileProto, name: str) -> descriptor_pb2.DescriptorProto:
    (found,) = [m for m in proto.message_type if m.name == name]
    return found


def field(proto: FileProto, message_name: str, field_name: str) -> descriptor_pb2.FieldDescriptorProto:
    (found,) = [f for f in message(proto, message_name).field if f.name == field_name]
    return found


def enum(proto: FileProto, name: str) -> descriptor_pb2.EnumDescriptorProto:
    (found,) = [e for e in proto.enum_type if e.name == name]
    return found


def rpc(proto: FileProto, service: str, name: str) -> descriptor_pb2.MethodDescriptorProto:
    (svc,) = [s for s in proto.service if s.name == service]
    (found,) = [m for m in svc.method if m.name == name]
    return found


def _renumber(p: FileProto) -> None:
    field(p, "Mount", "uidMappings").number = 60


def _retype(p: FileProto) -> None:
    field(p, "VersionResponse", "runtime_name").type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES


def _relabel(p: FileProto) -> None:
    field(p, "DNSConfig", "servers").label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL


def _retarget(p: FileProto) -> None:
    field(p, "ContainerConfig", "image").type_name = ".runtime.v1.ImageFilter"


def _into_oneof(p: FileProto) -> None:
    spec = message(p, "ImageSpec")
    spec.oneof_decl.add(name="kind")
    field(p, "ImageSpec", "image").oneof_index = 0


def _renumber_nested_enum(p: FileProto) -> None:
    (profile_type,) = message(p, "SecurityProfile").enum_type
    profile_type.value[2].number = 7


def _renumber_enum_value(p: FileProto) -> None:
    enum(p, "ContainerState").value[1].number = 5


def _extra_message(p: FileProto) -> None:
    p.message_type.add(name="NodeagentOnly")


def _extra_field(p: FileProto) -> None:
    message(p, "PodIP").field.add(name="prefix", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)


def _stream_flag(p: FileProto) -> None:
    rpc(p, "RuntimeService", "GetContainerEvents").server_streaming = False


def _rpc_output(p: FileProto) -> None:
    rpc(p, "ImageService", "PullImage").output_type = ".runtime.v1.ImageStatusResponse"


def _map_entry(p: FileProto) -> None:
    (labels,) = [n for n in message(p, "PodSandboxConfig").nested_type if n.name == "LabelsEntry"]
    labels.options.map_entry = False


CHANGES: list[tuple[Callable[[FileProto], None], str]] = [
    (_renumber, "runtime.v1.Mount.uidMappings: number is 60 in ours, 6 upstream"),
    (_retype, "runtime.v1.VersionResponse.runtime_name: type is 'bytes' in ours, 'string' upstream"),
    (_relabel, "runtime.v1.DNSConfig.servers: label is 'optional' in ours, 'repeated' upstream"),
    (
        _retarget,
        "runtime.v1.ContainerConfig.image: type_name is '.runtime.v1.ImageFilter' in ours, '.runtime.v1.ImageSpec'",
    ),
    (_into_oneof, "runtime.v1.ImageSpec.image: oneof is 'kind' in ours, None upstream"),
    (_renumber_nested_enum, "runtime.v1.SecurityProfile.ProfileType.Localhost: number is 7 in ours, 2 upstream"),
    (_renumber_enum_value, "runtime.v1.ContainerState.CONTAINER_RUNNING: number is 5 in ours, 1 upstream"),
    (_extra_message, "runtime.v1.NodeagentOnly: message does not exist upstream"),
    (_extra_field, "runtime.v1.PodIP.prefix: field does not exist upstream"),
    (_stream_flag, "runtime.v1.RuntimeService/GetContainerEvents: server_streaming is False in ours, True upstream"),
    (_rpc_output, "runtime.v1.ImageService/PullImage: output_type is '.runtime.v1.ImageStatusResponse' in ours"),
    (_map_entry, "runtime.v1.PodSandboxConfig.LabelsEntry: map entry is False in ours, True upstream"),
]


def test_identical_protos_have_no_differences() -> None:
    assert wire_compat.incompatibilities(ours(), ours()) == []
    assert wire_compat.missing(ours(), ours(), SERVICES) == []


@pytest.mark.parametrize(("change", "expected"), CHANGES, ids=[change.__name__ for change, _ in CHANGES])
def test_each_incompatible_change_is_reported(change: Callable[[FileProto], None], expected: str) -> None:
    changed = ours()
    change(changed)
    found = wire_compat.incompatibilities(changed, ours())
    assert len(found) == 1, found
    assert expected in found[0]


def _drop_rpc(p: FileProto) -> None:
    (svc,) = [s for s in p.service if s.name == "RuntimeService"]
    kept = [m for m in svc.method if m.name != "ReopenContainerLog"]
    del svc.method[:]
    svc.method.extend(kept)


def _drop_reachable_field(p: FileProto) -> None:
    # LinuxContainerUser is reached only through ContainerStatus.user: deep in the graph.
    msg = message(p, "LinuxContainerUser")
    kept = [f for f in msg.field if f.name != "supplemental_groups"]
    del msg.field[:]
    msg.field.extend(kept)


def _drop_enum_value(p: FileProto) -> None:
    values = enum(p, "Signal").value
    kept = [v for v in values if v.name != "SIGRTMAX"]
    del values[:]
    values.extend(kept)


def _drop_message(p: FileProto) -> None:
    kept = [m for m in p.message_type if m.name != "PsiData"]
    del p.message_type[:]
    p.message_type.extend(kept)


OMISSIONS: list[tuple[Callable[[FileProto], None], str]] = [
    (_drop_rpc, "runtime.v1.RuntimeService/ReopenContainerLog: rpc missing in ours"),
    (_drop_reachable_field, "runtime.v1.LinuxContainerUser.supplemental_groups: field missing in ours"),
    (_drop_enum_value, "runtime.v1.Signal.SIGRTMAX: enum value missing in ours"),
    (_drop_message, "runtime.v1.PsiData: message missing in ours"),
]


@pytest.mark.parametrize(("omit", "expected"), OMISSIONS, ids=[omit.__name__ for omit, _ in OMISSIONS])
def test_each_omission_from_the_services_is_reported(omit: Callable[[FileProto], None], expected: str) -> None:
    smaller = ours()
    omit(smaller)
    assert expected in "\n".join(wire_compat.missing(smaller, ours(), SERVICES))
    # Leaving things out is not an incompatibility in itself (a message that remains may point at a missing one).
    assert all("does not exist upstream" not in line for line in wire_compat.incompatibilities(smaller, ours()))
