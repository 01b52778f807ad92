"""Our DRA kubelet plugin proto (dra v1) against upstream's, k8s.io/kubelet at the release of KUBERNETES_VERSION:
same wire.

k8s.io/kubelet is a staging module of k8s.io/kubernetes, released as v0.X.Y beside v1.X.Y; the control plane build
already put it in the Go module cache, so `go mod download` finds it there (nothing of it is committed). Upstream's
proto imports gogoproto only for Go code generation options: those lines are dropped from a copy before protoc
compiles it (they change nothing on the wire). Both are compared structurally by cri.wire_compat.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from cri import wire_compat
from nodeagent.testbed.versions import KUBERNETES_VERSION
from tests.protooracle import compile_proto, download_module

REPO = Path(__file__).resolve().parents[3]
UPSTREAM_MODULE = "k8s.io/kubelet"
UPSTREAM_VERSION = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
UPSTREAM_PROTO = "pkg/apis/dra/v1/api.proto"
OUR_PROTO = "nodeagent/dra/v1/api.proto"
SERVICES = ("DRAPlugin",)


def without_gogo(text: str) -> str:
    """The proto without its gogoproto import, file options and field options."""
    text = re.sub(r'^import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n', "", text, flags=re.MULTILINE)
    text = re.sub(r"^option \(gogoproto\.[^;]*;\n", "", text, flags=re.MULTILINE)
    return re.sub(r"\s*\[\(gogoproto\.[^\]]*\]", "", text)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    module = download_module(UPSTREAM_MODULE, UPSTREAM_VERSION, tmp_path_factory.mktemp("kubelet-oracle"))
    root = tmp_path_factory.mktemp("upstream")
    (root / Path(UPSTREAM_PROTO).parent).mkdir(parents=True)
    (root / UPSTREAM_PROTO).write_text(without_gogo((module / UPSTREAM_PROTO).read_text()))
    return compile_proto(root, UPSTREAM_PROTO, root / "api.pb")


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return compile_proto(REPO, OUR_PROTO, tmp_path_factory.mktemp("ours") / "api.pb")


def test_the_package_is_upstreams(
    ours: descriptor_pb2.FileDescriptorProto, upstream: descriptor_pb2.FileDescriptorProto
) -> None:
    # The gRPC method path (/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources) is built from it.
    assert ours.package == upstream.package == "k8s.io.kubelet.pkg.apis.dra.v1"


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
    assert [service.name for service in upstream.service] == list(SERVICES)
    assert sorted(m.name for m in ours.message_type) == sorted(m.name for m in upstream.message_type)
    assert sum(len(s.method) for s in ours.service) == sum(len(s.method) for s in upstream.service) == 2


def test_a_renumbered_field_is_caught(upstream: descriptor_pb2.FileDescriptorProto, tmp_path: Path) -> None:
    edited_root = tmp_path / "edited"
    (edited_root / Path(OUR_PROTO).parent).mkdir(parents=True)
    proto = (REPO / OUR_PROTO).read_text()
    edited = proto.replace("repeated string cdi_device_ids = 4;", "repeated string cdi_device_ids = 5;")
    assert edited != proto
    (edited_root / OUR_PROTO).write_text(edited)
    differences = wire_compat.incompatibilities(compile_proto(edited_root, OUR_PROTO, tmp_path / "e.pb"), upstream)
    assert any("cdi_device_ids" in line for line in differences), differences
