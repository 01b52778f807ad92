"""Our csi.v1 proto against the CSI spec's own, github.com/container-storage-interface/spec at csi.SPEC_VERSION.

The spec's module is fetched at test time with `go mod download` into the Go module cache (nothing of it is
committed), as the CRI wire test does (tests/protooracle.py). Both protos are compiled with grpc_tools' protoc and
compared structurally by cri.wire_compat, so comments and layout may differ while package, names, numbers, types,
labels, oneofs, maps and rpcs may not. On top of that, the spec's annotations must match too: `csi_secret` decides
what csi.redact strips from logs, and the alpha_* marks say which parts a plugin may lack.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

import csi
from cri import wire_compat
from tests.protooracle import compile_proto, download_module, unresolved_imports

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_MODULE = "github.com/container-storage-interface/spec"
UPSTREAM_PROTO = "csi.proto"
OUR_PROTO = "csi/v1/csi.proto"
SERVICES = ("Identity", "Controller", "GroupController", "Node")


@pytest.fixture(scope="module")
def upstream_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return download_module(UPSTREAM_MODULE, csi.SPEC_VERSION, tmp_path_factory.mktemp("csi-spec-oracle"))


@pytest.fixture(scope="module")
def upstream(upstream_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_proto(upstream_dir, UPSTREAM_PROTO, tmp_path_factory.mktemp("upstream") / "csi.pb")


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_proto(REPO, OUR_PROTO, tmp_path_factory.mktemp("ours") / "csi.pb")


def _options(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[str, bytes]]:
    """Every element's options by full name, serialized: the spec's extensions stay unknown fields on both sides,
    so equal bytes mean equal annotations."""

    def message(scope: str, msg: descriptor_pb2.DescriptorProto) -> Iterator[tuple[str, bytes]]:
        name = f"{scope}.{msg.name}"
        yield name, msg.options.SerializeToString(deterministic=True)
        for field in msg.field:
            yield f"{name}.{field.name}", field.options.SerializeToString(deterministic=True)
        for nested in msg.nested_type:
            yield from message(name, nested)
        for enum in msg.enum_type:
            yield from enum_options(name, enum)

    def enum_options(scope: str, enum: descriptor_pb2.EnumDescriptorProto) -> Iterator[tuple[str, bytes]]:
        name = f"{scope}.{enum.name}"
        yield name, enum.options.SerializeToString(deterministic=True)
        for value in enum.value:
            yield f"{name}.{value.name}", value.options.SerializeToString(deterministic=True)

    scope = f".{file.package}"
    for msg in file.message_type:
        yield from message(scope, msg)
    for enum in file.enum_type:
        yield from enum_options(scope, enum)
    for service in file.service:
        yield f"{scope}.{service.name}", service.options.SerializeToString(deterministic=True)
        for method in service.method:
            yield f"{scope}.{service.name}/{method.name}", method.options.SerializeToString(deterministic=True)


def _extensions(file: descriptor_pb2.FileDescriptorProto) -> dict[str, tuple[str, int, int]]:
    return {ext.name: (ext.extendee, ext.number, ext.type) for ext in file.extension}


def test_upstream_imports_are_resolvable(upstream_dir: Path) -> None:
    unresolved = unresolved_imports(upstream_dir, UPSTREAM_PROTO)
    assert not unresolved, (
        f"the spec's {UPSTREAM_PROTO} at {csi.SPEC_VERSION} imports unresolvable protos: {unresolved}"
    )


def test_everything_ours_defines_is_identical_upstream(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    differences = wire_compat.incompatibilities(ours, upstream)
    assert not differences, (
        f"{OUR_PROTO} is not wire-compatible with {UPSTREAM_MODULE}@{csi.SPEC_VERSION}:\n  " + "\n  ".join(differences)
    )


def test_ours_has_every_upstream_rpc_and_all_they_reach(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    absent = wire_compat.missing(ours, upstream, SERVICES)
    assert not absent, f"{OUR_PROTO} lacks parts of {UPSTREAM_MODULE}@{csi.SPEC_VERSION}:\n  " + "\n  ".join(absent)


def test_the_spec_annotations_are_the_same(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    assert _extensions(ours) == _extensions(upstream)
    mine, theirs = dict(_options(ours)), dict(_options(upstream))
    assert mine.keys() == theirs.keys()
    differing = sorted(name for name in mine if mine[name] != theirs[name])
    assert not differing, f"{OUR_PROTO} annotates these differently from the spec (csi_secret, alpha_*): {differing}"
    # Not vacuous: the spec marks secrets and alpha parts, and both files carry the marks.
    assert sum(1 for value in theirs.values() if value) > 50


def test_the_comparison_covers_the_whole_upstream_api(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    # Guards against a comparison that passes by looking at nothing: both files hold the full spec.
    assert [service.name for service in upstream.service] == ["Identity", "Controller", "GroupController", "Node"]
    assert {service.name for service in ours.service} == set(SERVICES)
    assert len(ours.message_type) == len(upstream.message_type) > 60
    assert len(ours.enum_type) == len(upstream.enum_type)
    assert sum(len(s.method) for s in ours.service) == sum(len(s.method) for s in upstream.service)
