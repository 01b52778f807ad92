"""The committed stubs in csi/v1 are exactly what scripts/gen-csi.sh makes of csi/v1/csi.proto.

A proto edit without regeneration, or a hand edit of a generated file, fails here. The fix is to run
scripts/gen-csi.sh (with the pinned grpcio-tools and mypy-protobuf of pyproject.toml).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from csi.v1 import csi_pb2

REPO = Path(__file__).resolve().parents[3]
GENERATED = ("__init__.py", "csi_pb2.py", "csi_pb2.pyi", "csi_pb2_grpc.py", "csi_pb2_grpc.pyi")


def _generate(repo: Path, out: Path) -> Path:
    subprocess.run(
        ["bash", str(repo / "scripts" / "gen-csi.sh"), str(out)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return out / "csi" / "v1"


def _differing(generated: Path) -> list[str]:
    committed = REPO / "csi" / "v1"
    return [name for name in GENERATED if (generated / name).read_bytes() != (committed / name).read_bytes()]


def test_committed_stubs_equal_a_fresh_generation(tmp_path: Path) -> None:
    generated = _generate(REPO, tmp_path)
    assert sorted(path.name for path in generated.iterdir()) == sorted(GENERATED)
    differing = _differing(generated)
    assert not differing, f"csi/v1 stubs are stale or hand-edited: {differing}; run scripts/gen-csi.sh"


def test_a_proto_edit_without_regeneration_is_caught(tmp_path: Path) -> None:
    edited_repo = tmp_path / "repo"
    (edited_repo / "scripts").mkdir(parents=True)
    (edited_repo / "csi" / "v1").mkdir(parents=True)
    for script in ("gen-csi.sh", "gen-proto.sh"):  # the wrapper and the shared generator it runs
        shutil.copy(REPO / "scripts" / script, edited_repo / "scripts" / script)
    proto = (REPO / "csi" / "v1" / "csi.proto").read_text()
    edited = proto.replace("  string vendor_version = 2;\n", "  string vendor_version = 4;\n")
    assert edited != proto
    (edited_repo / "csi" / "v1" / "csi.proto").write_text(edited)
    generated = _generate(edited_repo, tmp_path / "out")
    assert "csi_pb2.py" in _differing(generated)


def test_the_stubs_hold_the_three_services_the_kubelet_uses() -> None:
    services = csi_pb2.DESCRIPTOR.services_by_name
    assert {"Identity", "Node", "Controller"} <= set(services)
    assert "NodeStageVolume" in services["Node"].methods_by_name
    assert csi_pb2.DESCRIPTOR.package == "csi.v1"
