"""CSI messages as one-line JSON for logs, with the spec's secret fields stripped.

The spec marks every field that may carry credentials with the `csi_secret` option; as upstream's kubelet logs
requests through protosanitizer.StripSecrets, such a field is shown as "***stripped***" whatever it holds, at any
depth. The rest is the message's JSON form with proto field names.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from csi.v1 import csi_pb2

STRIPPED = "***stripped***"


def _is_secret(field: FieldDescriptor) -> bool:
    return bool(field.GetOptions().Extensions[csi_pb2.csi_secret])


def _strip(descriptor: Any, value: dict[str, Any]) -> dict[str, Any]:
    # `descriptor` is a Descriptor; typed Any since upb's and the stubs' Descriptor classes differ.
    for field in descriptor.fields:
        if field.name not in value:
            continue
        if _is_secret(field):
            value[field.name] = STRIPPED
            continue
        nested = field.message_type
        if nested is None or nested.GetOptions().map_entry:
            continue  # scalars, and the spec's maps, which are all string to string
        if field.is_repeated:
            value[field.name] = [_strip(nested, item) for item in value[field.name]]
        elif isinstance(value[field.name], dict):
            value[field.name] = _strip(nested, value[field.name])
    return value


def strip_secrets(message: Message) -> str:
    """`message` as compact JSON, every csi_secret field replaced by "***stripped***"."""
    as_dict = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return json.dumps(_strip(message.DESCRIPTOR, as_dict), separators=(",", ":"), sort_keys=True)
