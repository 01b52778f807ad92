"""Upstream protos as test oracles: fetch a Go module with `go mod download`, compile a proto to its descriptor.

Shared by the wire-compatibility tests of our own protos (cri/v1, csi/v1): upstream's module lands in the Go module
cache at test time (nothing of it is committed), both protos are compiled with grpc_tools' protoc, and the
descriptors are compared by cri.wire_compat.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

# google/protobuf/*.proto as grpc_tools ships them: what upstream protos import besides their own files.
WELL_KNOWN = Path(str(resources.files("grpc_tools") / "_proto"))


def download_module(module: str, version: str, work: Path) -> Path:
    """The directory of `module@version` in the Go module cache, fetched if need be; fails the test if it cannot."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        pytest.fail(f"`go` is needed to fetch {module} (nodeagent testbed install provides it)")
    subprocess.run([go, "mod", "init", "nodeagent.local/proto-oracle"], cwd=work, check=True, capture_output=True)
    fetched = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=work,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if fetched.returncode != 0:
        pytest.fail(f"go mod download {module}@{version} failed:\n{fetched.stdout}{fetched.stderr}")
    return Path(json.loads(fetched.stdout)["Dir"])


def imports(proto: Path) -> list[str]:
    """The files `proto` imports, as written in its import statements."""
    return re.findall(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;', proto.read_text(), re.MULTILINE)


def unresolved_imports(include: Path, proto: str) -> list[str]:
    """Imports of `include/proto` that neither `include` nor grpc_tools' well-known protos provide."""
    return [
        name for name in imports(include / proto) if not (include / name).exists() and not (WELL_KNOWN / name).exists()
    ]


def compile_proto(include: Path, proto: str, out: Path) -> descriptor_pb2.FileDescriptorProto:
    """The descriptor of `proto` (a path relative to `include`), compiled by protoc into the file `out`."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{include}",
            f"-I{WELL_KNOWN}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            proto,
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"protoc failed on {include / proto}:\n{result.stderr}"
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    (compiled,) = [file for file in files if file.name == proto]
    return compiled
