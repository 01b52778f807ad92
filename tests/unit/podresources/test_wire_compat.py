"""Our podresources v1 proto against upstream's, k8s.io/kubelet at the release of KUBERNETES_VERSION: same wire.

k8s.io/kubelet is a staging module of k8s.io/kubernetes, released as v0.X.Y beside v1.X.Y; the control plane build
already put it in the Go module cache, so `go mod download` finds it there (nothing of it is committed). Both protos
are compiled with grpc_tools' protoc and compared structurally by cri.wire_compat (a generic descriptor comparison),
so comments and layout may differ while package, names, numbers, types, labels and streaming may not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from cri import wire_compat
from nodeagent.testbed.versions import KUBERNETES_VERSION
from tests.protooracle import compile_proto, download_module

REPO = Path(__file__).resolve().parents[3]
UPSTREAM_MODULE = "k8s.io/kubelet"
UPSTREAM_VERSION = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
UPSTREAM_PROTO = "pkg/apis/podresources/v1/api.proto"
OUR_PROTO = "nodeagent/podresources/v1/api.proto"
SERVICES = ("PodResourcesLister",)


@pytest.fixture(scope="module")
def upstream_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return download_module(UPSTREAM_MODULE, UPSTREAM_VERSION, tmp_path_factory.mktemp("kubelet-oracle"))


@pytest.fixture(scope="module")
def upstream(upstream_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_proto(upstream_dir, UPSTREAM_PROTO, tmp_path_factory.mktemp("upstream") / "api.pb")


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_proto(REPO, OUR_PROTO, tmp_path_factory.mktemp("ours") / "api.pb")


def test_the_package_is_upstreams(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    # The gRPC method path (/v1.PodResourcesLister/List) is built from the package.
    assert ours.package == upstream.package == "v1"


def test_everything_ours_defines_is_identical_upstream(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    differences = wire_compat.incompatibilities(ours, upstream)
    assert not differences, (
        f"{OUR_PROTO} is not wire-compatible with {UPSTREAM_MODULE}@{UPSTREAM_VERSION}:\n  " + "\n  ".join(differences)
    )


def test_ours_has_every_upstream_rpc_and_all_they_reach(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    absent = wire_compat.missing(ours, upstream, SERVICES)
    assert not absent, f"{OUR_PROTO} lacks parts of {UPSTREAM_MODULE}@{UPSTREAM_VERSION}:\n  " + "\n  ".join(absent)


def test_the_comparison_covers_the_whole_upstream_api(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    # Guards against a comparison that passes by looking at nothing: both files hold the full API.
    assert [service.name for service in upstream.service] == list(SERVICES)
    assert sorted(m.name for m in ours.message_type) == sorted(m.name for m in upstream.message_type)
    assert sum(len(s.method) for s in ours.service) == sum(len(s.method) for s in upstream.service) == 3


def test_a_renumbered_field_is_caught(upstream: descriptor_pb2.FileDescriptorProto, tmp_path: Path) -> None:
    # The comparison can fail: the same proto with one field renumbered is reported.
    edited_root = tmp_path / "edited"
    (edited_root / Path(OUR_PROTO).parent).mkdir(parents=True)
    proto = (REPO / OUR_PROTO).read_text()
    edited = proto.replace("string pod_name = 1;", "string pod_name = 3;")
    assert edited != proto
    (edited_root / OUR_PROTO).write_text(edited)
    differences = wire_compat.incompatibilities(compile_proto(edited_root, OUR_PROTO, tmp_path / "e.pb"), upstream)
    assert any("pod_name" in line for line in differences), differences
