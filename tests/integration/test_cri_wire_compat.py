"""Our runtime.v1 proto against upstream's, k8s.io/cri-api at the pinned CRI_API_VERSION: the same wire, every RPC.

Upstream's module is fetched at test time with `go mod download` into the Go module cache (nothing of it is
committed). Both protos are compiled with grpc_tools' protoc to descriptors and compared structurally by
cri.wire_compat, so comments and layout may differ while names, numbers, types, labels and streaming may not.

Upstream's api.proto imports nothing at v0.34.4 (the gogo options of older releases are gone); should a later pin
import a proto that neither the module nor grpc_tools provides, the first test says which.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from cri import wire_compat
from nodeagent.testbed.versions import CRI_API_VERSION
from tests.protooracle import compile_proto, download_module, unresolved_imports

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_MODULE = "k8s.io/cri-api"
UPSTREAM_PROTO = "pkg/apis/runtime/v1/api.proto"
OUR_PROTO = "cri/v1/api.proto"
SERVICES = ("RuntimeService", "ImageService")


@pytest.fixture(scope="module")
def upstream_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return download_module(UPSTREAM_MODULE, CRI_API_VERSION, tmp_path_factory.mktemp("cri-api-oracle"))


@pytest.fixture(scope="module")
def upstream(upstream_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_proto(upstream_dir, UPSTREAM_PROTO, tmp_path_factory.mktemp("upstream") / "api.pb")


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_proto(REPO, OUR_PROTO, tmp_path_factory.mktemp("ours") / "api.pb")


def test_upstream_imports_are_resolvable(upstream_dir: Path) -> None:
    unresolved = unresolved_imports(upstream_dir, UPSTREAM_PROTO)
    assert not unresolved, (
        f"upstream {UPSTREAM_PROTO} at {CRI_API_VERSION} imports protos this test cannot resolve: {unresolved}; "
        "add their include path (or strip their options) before comparing"
    )


def test_everything_ours_defines_is_identical_upstream(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    differences = wire_compat.incompatibilities(ours, upstream)
    assert not differences, (
        f"{OUR_PROTO} is not wire-compatible with {UPSTREAM_MODULE}@{CRI_API_VERSION}:\n  " + "\n  ".join(differences)
    )


def test_ours_has_every_upstream_rpc_and_all_they_reach(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    absent = wire_compat.missing(ours, upstream, SERVICES)
    assert not absent, (
        f"{OUR_PROTO} lacks parts of {UPSTREAM_MODULE}@{CRI_API_VERSION} {', '.join(SERVICES)}:\n  "
        + "\n  ".join(absent)
    )


def test_the_comparison_covers_the_whole_upstream_api(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    # Guards against a comparison that passes by looking at nothing: both files hold the full API.
    assert [service.name for service in upstream.service] == list(SERVICES)
    assert len(ours.message_type) == len(upstream.message_type)
    assert len(ours.enum_type) == len(upstream.enum_type)
    assert sum(len(s.method) for s in ours.service) == sum(len(s.method) for s in upstream.service)
