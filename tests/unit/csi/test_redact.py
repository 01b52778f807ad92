"""Requests for the log: every csi_secret field stripped, at any depth; the rest kept."""

from __future__ import annotations

import json

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from csi.redact import STRIPPED, strip_secrets
from csi.v1 import csi_pb2


def test_secrets_are_stripped_and_the_rest_kept() -> None:
    request = csi_pb2.NodeStageVolumeRequest(
        volume_id="vol-1", staging_target_path="/stage", secrets={"password": "hunter2"}, volume_context={"a": "b"}
    )
    text = strip_secrets(request)
    assert "hunter2" not in text and "password" not in text
    assert json.loads(text) == {
        "volume_id": "vol-1",
        "staging_target_path": "/stage",
        "secrets": STRIPPED,
        "volume_context": {"a": "b"},
    }


def test_a_message_without_secrets_is_unchanged() -> None:
    request = csi_pb2.NodeUnpublishVolumeRequest(volume_id="vol-1", target_path="/t")
    assert json.loads(strip_secrets(request)) == {"volume_id": "vol-1", "target_path": "/t"}


def test_nested_and_repeated_messages_are_walked() -> None:
    # No spec message nests a secret today, so a made-up descriptor checks the walk itself.
    pool_file = descriptor_pb2.FileDescriptorProto(name="redact_test.proto", package="redacttest", syntax="proto3")
    secret_options = descriptor_pb2.FieldOptions()
    secret_options.Extensions[csi_pb2.csi_secret] = True
    inner = pool_file.message_type.add(name="Inner")
    inner.field.add(name="token", number=1, type=9, label=1, options=secret_options)
    inner.field.add(name="plain", number=2, type=9, label=1)
    outer = pool_file.message_type.add(name="Outer")
    outer.field.add(name="one", number=1, type=11, label=1, type_name=".redacttest.Inner")
    outer.field.add(name="many", number=2, type=11, label=3, type_name=".redacttest.Inner")

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(pool_file.SerializeToString())
    outer_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("redacttest.Outer"))
    message = outer_cls()
    message.one.token = "t1"
    message.one.plain = "p1"
    message.many.add(token="t2", plain="p2")
    assert json.loads(strip_secrets(message)) == {
        "one": {"token": STRIPPED, "plain": "p1"},
        "many": [{"token": STRIPPED, "plain": "p2"}],
    }
