"""The committed stubs in nodeagent/podresources/v1 are what scripts/gen-podresources.sh makes of the proto.

A proto edit without regeneration, or a hand edit of a generated file, fails here. The fix is to run
scripts/gen-podresources.sh (with the pinned grpcio-tools and mypy-protobuf of pyproject.toml).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = "gen-podresources.sh"
PACKAGE = Path("nodeagent", "podresources", "v1")
GENERATED = ("__init__.py", "api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


def _generate(repo: Path, out: Path) -> Path:
    subprocess.run(
        ["bash", str(repo / "scripts" / SCRIPT), str(out)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return out / PACKAGE


def _differing(generated: Path) -> list[str]:
    committed = REPO / PACKAGE
    return [name for name in GENERATED if (generated / name).read_bytes() != (committed / name).read_bytes()]


def test_committed_stubs_equal_a_fresh_generation(tmp_path: Path) -> None:
    generated = _generate(REPO, tmp_path)
    assert sorted(path.name for path in generated.iterdir()) == sorted(GENERATED)
    differing = _differing(generated)
    assert not differing, f"{PACKAGE} stubs are stale or hand-edited: {differing}; run scripts/{SCRIPT}"


def test_a_proto_edit_without_regeneration_is_caught(tmp_path: Path) -> None:
    edited_repo = tmp_path / "repo"
    (edited_repo / "scripts").mkdir(parents=True)
    (edited_repo / PACKAGE).mkdir(parents=True)
    for script in (SCRIPT, "gen-proto.sh"):  # the wrapper and the shared generator it runs
        shutil.copy(REPO / "scripts" / script, edited_repo / "scripts" / script)
    proto = (REPO / PACKAGE / "api.proto").read_text()
    edited = proto.replace("    string pod_name = 1;\n", "    string pod_name = 5;\n")
    assert edited != proto
    (edited_repo / PACKAGE / "api.proto").write_text(edited)
    generated = _generate(edited_repo, tmp_path / "out")
    assert "api_pb2.py" in _differing(generated)
