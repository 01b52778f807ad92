"""The e2e builds: go.mod reading (replace lines carried over, the ginkgo version looked up), the two suite targets'
paths and modules, the cache check, and the commands a cold build runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeagent.conformance import build
from nodeagent.conformance.build import (
    E2E,
    E2E_NODE,
    GoTestTarget,
    e2e_gomod,
    replace_lines,
    required_version,
    version_ldflags,
)
from nodeagent.conformance.errors import BuildError
from nodeagent.conformance.progress import Progress

CONTROL_PLANE_GOMOD = """module nodeagent.local/kubernetes-build

go 1.24.0

require k8s.io/kubernetes v1.34.4

require (
\tgithub.com/onsi/ginkgo/v2 v2.21.0 // indirect
\tgithub.com/onsi/gomega v1.35.1 // indirect
)

replace (
\tk8s.io/api => k8s.io/api v0.34.4
\tk8s.io/client-go   =>   k8s.io/client-go v0.34.4 // spaces vary
)

replace example.com/single v1.0.0 => example.com/fork v1.0.1
"""


@pytest.mark.parametrize(
    ("gomod", "expected"),
    [
        (
            CONTROL_PLANE_GOMOD,
            [
                "k8s.io/api => k8s.io/api v0.34.4",
                "k8s.io/client-go => k8s.io/client-go v0.34.4",
                "example.com/single v1.0.0 => example.com/fork v1.0.1",
            ],
        ),
        ("module x\n\nrequire k8s.io/kubernetes v1.34.4\n", []),
        ("replace (\n)\n", []),
        ("// replace a => b\nreplace (\n\t// k8s.io/x => k8s.io/x v0.1.0\n)\n", []),
    ],
)
def test_replace_lines(gomod: str, expected: list[str]) -> None:
    assert replace_lines(gomod) == expected


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("github.com/onsi/ginkgo/v2", "v2.21.0"),
        ("github.com/onsi/gomega", "v1.35.1"),
        ("k8s.io/kubernetes", "v1.34.4"),
        ("github.com/onsi/ginkgo", None),  # a prefix of another module is not that module
        ("k8s.io/api", None),  # named only in replace
    ],
)
def test_required_version(module: str, expected: str | None) -> None:
    assert required_version(CONTROL_PLANE_GOMOD, module) == expected


def test_e2e_gomod_carries_the_replace_lines_and_the_release() -> None:
    text = e2e_gomod(["k8s.io/api => k8s.io/api v0.34.4"])
    assert "require k8s.io/kubernetes v1.34.4\n" in text
    assert replace_lines(text) == ["k8s.io/api => k8s.io/api v0.34.4"]
    assert text.startswith("module nodeagent.local/kubernetes-e2e-build\n")


def test_version_ldflags_stamp_the_release() -> None:
    flags = version_ldflags()
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in flags
    assert "-X k8s.io/component-base/version.gitMinor=34" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMajor=1" in flags


def test_the_node_suite_is_built_beside_the_cluster_suite_in_the_versioned_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path))
    release = tmp_path / "kubernetes-v1.34.4"
    assert (E2E.name, E2E_NODE.name) == ("e2e.test", "e2e_node.test")
    assert E2E.binary_path() == release / "e2e" / "e2e.test"
    assert E2E_NODE.binary_path() == release / "e2e" / "e2e_node.test"
    assert E2E.work_dir() == release / "build-e2e"
    assert E2E_NODE.work_dir() == release / "build-e2e-node"  # a module of its own: go get rewrites go.mod
    assert E2E_NODE.package == "k8s.io/kubernetes/test/e2e_node"


def test_each_suite_module_has_its_own_name() -> None:
    text = e2e_gomod(["k8s.io/api => k8s.io/api v0.34.4"], E2E_NODE.module)
    assert text.startswith("module nodeagent.local/kubernetes-e2e-node-build\n")
    assert "require k8s.io/kubernetes v1.34.4\n" in text
    assert replace_lines(text) == ["k8s.io/api => k8s.io/api v0.34.4"]
    assert E2E.module != E2E_NODE.module


def _target(tmp_path: Path) -> GoTestTarget:
    return GoTestTarget(
        "k8s.io/kubernetes/test/e2e_node", "example.local/m", "build-x", lambda: tmp_path / "e2e" / "e2e_node.test"
    )


def test_a_cached_binary_is_not_rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = _target(tmp_path)
    target.binary_path().parent.mkdir()
    target.binary_path().write_bytes(b"\x7fELF")

    def no_go() -> str:
        raise AssertionError("a cached binary must not reach the Go toolchain")

    monkeypatch.setattr(build, "_go", no_go)
    lines: list[str] = []
    assert build.build_go_test(target, Progress(write=lines.append)) == target.binary_path()
    assert lines == [f"[nodeagent conformance] e2e_node.test v1.34.4: cached in {target.binary_path()}"]


def _fake_toolchain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, calls: list[list[str]]) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path))
    build_dir = tmp_path / "kubernetes-v1.34.4" / "build"
    build_dir.mkdir(parents=True)
    (build_dir / "go.mod").write_text(CONTROL_PLANE_GOMOD)
    (build_dir / "go.sum").write_text("k8s.io/api v0.34.4 h1:x=\n")
    monkeypatch.setattr(build, "_go", lambda: "/go/bin/go")

    def run(argv: Sequence[str], *, cwd: Path, env: dict[str, str], step: str, progress: Progress) -> str:
        calls.append(list(argv))
        if "-o" in argv:
            Path(argv[list(argv).index("-o") + 1]).write_bytes(b"\x7fELF")
        return ""

    monkeypatch.setattr(build, "_run", run)


def test_a_cold_build_resolves_the_release_then_compiles_niced_into_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[list[str]] = []
    _fake_toolchain(monkeypatch, tmp_path, calls)
    binary = build.build_e2e_node(Progress(write=lambda _line: None))
    work = tmp_path / "kubernetes-v1.34.4" / "build-e2e-node"
    assert binary == tmp_path / "kubernetes-v1.34.4" / "e2e" / "e2e_node.test"
    assert binary.read_bytes() == b"\x7fELF"
    assert not (work / "e2e_node.test").exists()  # renamed into place, whole
    gomod = (work / "go.mod").read_text()
    assert gomod.startswith("module nodeagent.local/kubernetes-e2e-node-build\n")
    assert len(replace_lines(gomod)) == 3
    assert (work / "go.sum").read_text() == "k8s.io/api v0.34.4 h1:x=\n"
    get, test = calls
    assert get[-4:] == ["10", "/go/bin/go", "get", "k8s.io/kubernetes/test/e2e_node@v1.34.4"]
    assert get[1] == "-n" and get[0].endswith("nice")
    assert test[-2:] == [str(work / "e2e_node.test"), "k8s.io/kubernetes/test/e2e_node"]
    assert test[3:7] == ["/go/bin/go", "test", "-c", "-trimpath"]
    # a second call: cached, no Go command
    assert build.build_e2e_node(Progress(write=lambda _line: None)) == binary
    assert len(calls) == 2


def test_a_build_without_the_control_plane_module_says_what_to_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "_go", lambda: "/go/bin/go")
    with pytest.raises(BuildError, match="nodeagent testbed install"):
        build.build_e2e_node(Progress(write=lambda _line: None))
