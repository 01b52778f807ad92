"""Our copies of k8s.io/kubelet's protos against upstream's, at the release of KUBERNETES_VERSION: same wire. One
table for the four: plugin registration, device plugin v1beta1, PodResources v1 and the DRA plugin v1.

k8s.io/kubelet is a staging module of k8s.io/kubernetes, released as v0.X.Y beside v1.X.Y; the control plane build
already put it in the Go module cache, so `go mod download` finds it there (nothing of it is committed). Both protos
are compiled with grpc_tools' protoc and compared structurally by cri.wire_compat (a generic descriptor comparison),
so comments and layout may differ while package, names, numbers, types, labels and streaming may not. A proto that
imports gogoproto only for Go code generation options is compiled from a copy without those lines (they change
nothing on the wire). Each case also proves the comparison can fail: its proto with one field renumbered is caught.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from cri import wire_compat
from nodeagent.testbed.versions import KUBERNETES_VERSION
from tests.protooracle import compile_proto, download_module

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_MODULE = "k8s.io/kubelet"
UPSTREAM_VERSION = "v0." + KUBERNETES_VERSION.removeprefix("v1.")


@dataclass(frozen=True)
class Proto:
    upstream: str  # path in k8s.io/kubelet
    ours: str  # path in this repository
    package: str  # the gRPC method paths are built from it
    services: tuple[str, ...]
    methods: int
    renumbered: tuple[str, str, str]  # a field line, the same renumbered, the field's name
    gogo: bool = False

    def __str__(self) -> str:
        return self.ours


PROTOS = [
    Proto(
        "pkg/apis/pluginregistration/v1/api.proto",
        "csi/registration/v1/api.proto",
        "pluginregistration",  # /pluginregistration.Registration/GetInfo
        ("Registration",),
        2,
        ("bool plugin_registered = 1;", "bool plugin_registered = 3;", "plugin_registered"),
    ),
    Proto(
        "pkg/apis/deviceplugin/v1beta1/api.proto",
        "nodeagent/devicemanager/v1beta1/api.proto",
        "v1beta1",  # /v1beta1.Registration/Register
        ("Registration", "DevicePlugin"),
        6,
        ("bool pre_start_required = 1;", "bool pre_start_required = 3;", "pre_start_required"),
    ),
    Proto(
        "pkg/apis/podresources/v1/api.proto",
        "nodeagent/podresources/v1/api.proto",
        "v1",  # /v1.PodResourcesLister/List
        ("PodResourcesLister",),
        3,
        ("string pod_name = 1;", "string pod_name = 3;", "pod_name"),
    ),
    Proto(
        "pkg/apis/dra/v1/api.proto",
        "nodeagent/dra/v1/api.proto",
        "k8s.io.kubelet.pkg.apis.dra.v1",  # /k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources
        ("DRAPlugin",),
        2,
        ("repeated string cdi_device_ids = 4;", "repeated string cdi_device_ids = 5;", "cdi_device_ids"),
        gogo=True,
    ),
]


def without_gogo(text: str) -> str:
    """The proto without its gogoproto import, file options and field options."""
    text = re.sub(r'^import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n', "", text, flags=re.MULTILINE)
    text = re.sub(r"^option \(gogoproto\.[^;]*;\n", "", text, flags=re.MULTILINE)
    return re.sub(r"\s*\[\(gogoproto\.[^\]]*\]", "", text)


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return download_module(UPSTREAM_MODULE, UPSTREAM_VERSION, tmp_path_factory.mktemp("kubelet-oracle"))


def _compile(root: Path, path: str, tmp: Path, *, text: str | None = None) -> descriptor_pb2.FileDescriptorProto:
    """`path` under `root` compiled; with `text`, that text in its place (a copy under `tmp`)."""
    tmp.mkdir(parents=True)
    if text is not None:
        (tmp / "src" / Path(path).parent).mkdir(parents=True)
        (tmp / "src" / path).write_text(text)
        root = tmp / "src"
    return compile_proto(root, path, tmp / "api.pb")


@pytest.mark.parametrize("proto", PROTOS, ids=str)
def test_our_proto_has_upstreams_wire(proto: Proto, module_dir: Path, tmp_path: Path) -> None:
    source = (module_dir / proto.upstream).read_text()
    upstream = _compile(
        module_dir, proto.upstream, tmp_path / "upstream", text=without_gogo(source) if proto.gogo else None
    )
    ours = _compile(REPO, proto.ours, tmp_path / "ours")
    what = f"{proto.ours} against {UPSTREAM_MODULE}@{UPSTREAM_VERSION}"
    assert ours.package == upstream.package == proto.package

    differences = wire_compat.incompatibilities(ours, upstream)
    assert not differences, f"{what}, not wire-compatible:\n  " + "\n  ".join(differences)
    absent = wire_compat.missing(ours, upstream, proto.services)
    assert not absent, f"{what}, parts missing:\n  " + "\n  ".join(absent)

    # Guards against a comparison that passes by looking at nothing: both files hold the full API.
    assert [service.name for service in upstream.service] == list(proto.services)
    assert sorted(m.name for m in ours.message_type) == sorted(m.name for m in upstream.message_type)
    assert sum(len(s.method) for s in ours.service) == sum(len(s.method) for s in upstream.service) == proto.methods

    # The comparison can fail: the same proto with one field renumbered is reported.
    line, renumbered, field = proto.renumbered
    text = (REPO / proto.ours).read_text()
    assert line in text
    edited = _compile(REPO, proto.ours, tmp_path / "edited", text=text.replace(line, renumbered))
    caught = wire_compat.incompatibilities(edited, upstream)
    assert any(field in entry for entry in caught), caught
