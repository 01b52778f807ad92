"""The committed gRPC stubs are exactly what their scripts/gen-*.sh make of the protos.

A proto edit without regeneration, or a hand edit of a generated file, fails here. The fix is to run the named
script (with the pinned grpcio-tools and mypy-protobuf of pyproject.toml). One table for every proto the repo
carries: CRI, CSI, plugin registration, the device plugin API, PodResources and DRA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from csi.v1 import csi_pb2

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Stubs:
    script: str  # scripts/<script>, a wrapper of the shared gen-proto.sh
    package: Path  # where the proto and its stubs live
    stem: str  # <stem>.proto -> <stem>_pb2.py ...
    field: str  # a field line of the proto, renumbered by the edit test
    renumbered: str

    @property
    def generated(self) -> tuple[str, ...]:
        return (
            "__init__.py",
            *(f"{self.stem}{suffix}" for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")),
        )


STUBS = [
    Stubs("gen-cri.sh", Path("cri", "v1"), "api", "    string localhost_ref = 2;\n", "    string localhost_ref = 3;\n"),
    Stubs("gen-csi.sh", Path("csi", "v1"), "csi", "  string vendor_version = 2;\n", "  string vendor_version = 4;\n"),
    Stubs(
        "gen-pluginregistration.sh",
        Path("csi", "registration", "v1"),
        "api",
        "    string endpoint = 3;\n",
        "    string endpoint = 5;\n",
    ),
    Stubs(
        "gen-deviceplugin.sh",
        Path("nodeagent", "devicemanager", "v1beta1"),
        "api",
        "    string resource_name = 3;\n",
        "    string resource_name = 5;\n",
    ),
    Stubs(
        "gen-podresources.sh",
        Path("nodeagent", "podresources", "v1"),
        "api",
        "    string pod_name = 1;\n",
        "    string pod_name = 5;\n",
    ),
    Stubs(
        "gen-dra.sh",
        Path("nodeagent", "dra", "v1"),
        "api",
        "    string pool_name = 2;\n",
        "    string pool_name = 5;\n",
    ),
]
IDS = [stubs.script for stubs in STUBS]


def _generate(stubs: Stubs, repo: Path, out: Path) -> Path:
    subprocess.run(
        ["bash", str(repo / "scripts" / stubs.script), str(out)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return out / stubs.package


def _differing(stubs: Stubs, generated: Path) -> list[str]:
    committed = REPO / stubs.package
    return [name for name in stubs.generated if (generated / name).read_bytes() != (committed / name).read_bytes()]


@pytest.mark.parametrize("stubs", STUBS, ids=IDS)
def test_committed_stubs_equal_a_fresh_generation(stubs: Stubs, tmp_path: Path) -> None:
    generated = _generate(stubs, REPO, tmp_path)
    assert sorted(path.name for path in generated.iterdir()) == sorted(stubs.generated)
    differing = _differing(stubs, generated)
    assert not differing, f"{stubs.package} stubs are stale or hand-edited: {differing}; run scripts/{stubs.script}"


@pytest.mark.parametrize("stubs", STUBS, ids=IDS)
def test_a_proto_edit_without_regeneration_is_caught(stubs: Stubs, tmp_path: Path) -> None:
    edited_repo = tmp_path / "repo"
    (edited_repo / "scripts").mkdir(parents=True)
    (edited_repo / stubs.package).mkdir(parents=True)
    for script in (stubs.script, "gen-proto.sh"):  # the wrapper and the shared generator it runs
        shutil.copy(REPO / "scripts" / script, edited_repo / "scripts" / script)
    proto_name = f"{stubs.stem}.proto"
    proto = (REPO / stubs.package / proto_name).read_text()
    edited = proto.replace(stubs.field, stubs.renumbered)
    assert edited != proto
    (edited_repo / stubs.package / proto_name).write_text(edited)
    generated = _generate(stubs, edited_repo, tmp_path / "out")
    assert f"{stubs.stem}_pb2.py" in _differing(stubs, generated)


def test_the_csi_stubs_hold_the_three_services_the_kubelet_uses() -> None:
    services = csi_pb2.DESCRIPTOR.services_by_name
    assert {"Identity", "Node", "Controller"} <= set(services)
    assert "NodeStageVolume" in services["Node"].methods_by_name
    assert csi_pb2.DESCRIPTOR.package == "csi.v1"
