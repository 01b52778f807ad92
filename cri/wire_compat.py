"""Comparing two compiled runtime.v1 protos for wire compatibility.

The project writes its own CRI proto; what must not drift from upstream is what goes on the wire. Both protos are
compiled to `FileDescriptorProto`s and compared structurally, so comments, order and layout may differ freely:

- `incompatibilities(ours, upstream)`: everything ours defines (messages, nested messages, enums, fields, enum values,
  services, rpcs) must exist upstream with the same number, type, type name, label, oneof, map-ness and streaming;
- `missing(ours, upstream, services)`: every rpc of the named upstream services must exist in ours, with every
  field and enum value of every message and enum it reaches.

Both return readable lines, one per difference, empty when all is well.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from google.protobuf import descriptor_pb2

_Field = descriptor_pb2.FieldDescriptorProto
_Message = descriptor_pb2.DescriptorProto
_Enum = descriptor_pb2.EnumDescriptorProto
_Service = descriptor_pb2.ServiceDescriptorProto

_TYPE_NAMES = {number: name.removeprefix("TYPE_").lower() for name, number in _Field.Type.items()}
_LABEL_NAMES = {number: name.removeprefix("LABEL_").lower() for name, number in _Field.Label.items()}


class _Index:
    """Every message, enum and service of one file by full name (`.runtime.v1.SecurityProfile.ProfileType`)."""

    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        self.package = file.package
        self.messages: dict[str, _Message] = {}
        self.enums: dict[str, _Enum] = {}
        scope = f".{file.package}" if file.package else ""
        for message in file.message_type:
            self._add_message(scope, message)
        for enum in file.enum_type:
            self.enums[f"{scope}.{enum.name}"] = enum
        self.services = {f"{scope}.{service.name}": service for service in file.service}

    def _add_message(self, scope: str, message: _Message) -> None:
        name = f"{scope}.{message.name}"
        self.messages[name] = message
        for nested in message.nested_type:
            self._add_message(name, nested)
        for enum in message.enum_type:
            self.enums[f"{name}.{enum.name}"] = enum


def _oneof(message: _Message, field: _Field) -> str | None:
    if not field.HasField("oneof_index"):
        return None
    return message.oneof_decl[field.oneof_index].name


def _describe(message: _Message, field: _Field) -> dict[str, object]:
    """What of a field goes on the wire or shapes the generated API."""
    return {
        "number": field.number,
        "type": _TYPE_NAMES.get(field.type, str(field.type)),
        "type_name": field.type_name or None,
        "label": _LABEL_NAMES.get(field.label, str(field.label)),
        "oneof": _oneof(message, field),
        "proto3_optional": field.proto3_optional,
    }


def _field_differences(where: str, ours: _Message, theirs: _Message) -> Iterator[str]:
    upstream_fields = {field.name: field for field in theirs.field}
    upstream_numbers = {field.number: field.name for field in theirs.field}
    for field in ours.field:
        other = upstream_fields.get(field.name)
        if other is None:
            taken = upstream_numbers.get(field.number)
            hint = f" (upstream uses number {field.number} for {taken!r})" if taken else ""
            yield f"{where}.{field.name}: field does not exist upstream{hint}"
            continue
        mine, upstream = _describe(ours, field), _describe(theirs, other)
        for key, value in mine.items():
            if value != upstream[key]:
                yield f"{where}.{field.name}: {key} is {value!r} in ours, {upstream[key]!r} upstream"


def _enum_differences(where: str, ours: _Enum, theirs: _Enum) -> Iterator[str]:
    upstream_values = {value.name: value.number for value in theirs.value}
    for value in ours.value:
        if value.name not in upstream_values:
            yield f"{where}.{value.name}: enum value does not exist upstream"
        elif value.number != upstream_values[value.name]:
            yield f"{where}.{value.name}: number is {value.number} in ours, {upstream_values[value.name]} upstream"


def _method_differences(where: str, ours: _Service, theirs: _Service) -> Iterator[str]:
    upstream_methods = {method.name: method for method in theirs.method}
    for method in ours.method:
        other = upstream_methods.get(method.name)
        if other is None:
            yield f"{where}/{method.name}: rpc does not exist upstream"
            continue
        for key in ("input_type", "output_type", "client_streaming", "server_streaming"):
            mine, upstream = getattr(method, key), getattr(other, key)
            if mine != upstream:
                yield f"{where}/{method.name}: {key} is {mine!r} in ours, {upstream!r} upstream"


def incompatibilities(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> list[str]:
    """Where something ours defines is absent upstream or differs from upstream's definition."""
    mine, theirs = _Index(ours), _Index(upstream)
    found: list[str] = []
    if mine.package != theirs.package:
        found.append(f"package is {mine.package!r} in ours, {theirs.package!r} upstream")
    for name, message in mine.messages.items():
        other = theirs.messages.get(name)
        if other is None:
            found.append(f"{name}: message does not exist upstream")
            continue
        if message.options.map_entry != other.options.map_entry:
            mine_map, their_map = message.options.map_entry, other.options.map_entry
            found.append(f"{name}: map entry is {mine_map} in ours, {their_map} upstream")
        found.extend(_field_differences(name, message, other))
    for name, enum in mine.enums.items():
        other_enum = theirs.enums.get(name)
        if other_enum is None:
            found.append(f"{name}: enum does not exist upstream")
            continue
        found.extend(_enum_differences(name, enum, other_enum))
    for name, service in mine.services.items():
        other_service = theirs.services.get(name)
        if other_service is None:
            found.append(f"{name}: service does not exist upstream")
            continue
        found.extend(_method_differences(name, service, other_service))
    return found


def _reachable(index: _Index, roots: Iterable[str]) -> tuple[list[str], list[str]]:
    """Messages and enums reachable from `roots` through fields and nesting, in a stable order."""
    messages: list[str] = []
    enums: list[str] = []
    stack = list(roots)
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in index.enums:
            enums.append(name)
            continue
        message = index.messages.get(name)
        if message is None:
            continue
        messages.append(name)
        stack.extend(field.type_name for field in message.field if field.type_name)
        stack.extend(f"{name}.{nested.name}" for nested in message.nested_type)
        stack.extend(f"{name}.{enum.name}" for enum in message.enum_type)
    return sorted(messages), sorted(enums)


def missing(
    ours: descriptor_pb2.FileDescriptorProto,
    upstream: descriptor_pb2.FileDescriptorProto,
    services: Iterable[str],
) -> list[str]:
    """What of upstream's `services` (short names) ours lacks: rpcs, and fields and enum values they reach."""
    mine, theirs = _Index(ours), _Index(upstream)
    scope = f".{upstream.package}" if upstream.package else ""
    found: list[str] = []
    roots: list[str] = []
    for short in services:
        name = f"{scope}.{short}"
        service = theirs.services.get(name)
        if service is None:
            found.append(f"{name}: service does not exist upstream")
            continue
        own_methods = {method.name for method in mine.services[name].method} if name in mine.services else set()
        if name not in mine.services:
            found.append(f"{name}: service missing in ours")
        for method in service.method:
            if method.name not in own_methods:
                found.append(f"{name}/{method.name}: rpc missing in ours")
            roots.extend((method.input_type, method.output_type))
    messages, enums = _reachable(theirs, roots)
    for message_name in messages:
        own = mine.messages.get(message_name)
        if own is None:
            found.append(f"{message_name}: message missing in ours")
            continue
        own_fields = {field.name for field in own.field}
        found.extend(
            f"{message_name}.{field.name}: field missing in ours"
            for field in theirs.messages[message_name].field
            if field.name not in own_fields
        )
    for enum_name in enums:
        own_enum = mine.enums.get(enum_name)
        if own_enum is None:
            found.append(f"{enum_name}: enum missing in ours")
            continue
        own_values = {value.name for value in own_enum.value}
        found.extend(
            f"{enum_name}.{value.name}: enum value missing in ours"
            for value in theirs.enums[enum_name].value
            if value.name not in own_values
        )
    return found
