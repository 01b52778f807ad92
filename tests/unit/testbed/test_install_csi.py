"""The installer's CSI steps (`--with-csi`) and the one helper every build in the release's module goes through:
what it runs (with a fake `go` that records its argv and writes the -o file), where the binary lands, and what it
leaves behind. The real builds run in `nodeagent testbed install --with-csi`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodeagent.testbed import install, versions

FAKE_GO = """#!/bin/sh
printf '%s\\n' "$*" >> "$GO_CALLS"
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then echo built > "$2"; fi
  shift
done
"""


@pytest.fixture
def go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    binary = tmp_path / "go"
    binary.write_text(FAKE_GO)
    binary.chmod(0o755)
    monkeypatch.setenv("GO_CALLS", str(tmp_path / "calls"))
    return binary


def _source(go: Path, tmp_path: Path) -> install.KubernetesSource:
    return install.KubernetesSource(go=str(go), env={"GO_CALLS": os.environ["GO_CALLS"]}, dir=tmp_path, gomod=tmp_path)


def _module(tmp_path: Path) -> Path:
    module = tmp_path / "build"
    module.mkdir()
    (module / "go.mod").write_text("module nodeagent.local/kubernetes-build\n")
    return module


@pytest.mark.parametrize(
    ("kwargs", "calls"),
    [
        pytest.param(
            {"package": "k8s.io/kubernetes/cmd/kubelet", "ldflags": "-X a=b"},
            [
                "get k8s.io/kubernetes/cmd/kubelet@v1.34.4",
                "build -trimpath -ldflags -s -w -X a=b -o {out} k8s.io/kubernetes/cmd/kubelet",
            ],
            id="release-command",
        ),
        pytest.param(
            {"package": "k8s.io/kubernetes/test/images/nonewprivs"},
            [
                "get k8s.io/kubernetes/test/images/nonewprivs@v1.34.4",
                "build -trimpath -ldflags -s -w -o {out} k8s.io/kubernetes/test/images/nonewprivs",
            ],
            id="no-extra-ldflags",
        ),
        pytest.param(
            {"package": "", "get": ("k8s.io/kubernetes/a", "k8s.io/kubernetes/b"), "main_source": True},
            [
                "get k8s.io/kubernetes/a@v1.34.4 k8s.io/kubernetes/b@v1.34.4",
                "build -trimpath -ldflags -s -w -o {out} ./cmd",
            ],
            id="own-main-on-release-packages",
        ),
        pytest.param(
            {"package": "", "get": (), "main_source": True},
            ["build -trimpath -ldflags -s -w -o {out} ./cmd"],
            id="own-main-nothing-to-get",
        ),
    ],
)
def test_build_in_release_module(go: Path, tmp_path: Path, kwargs: dict[str, object], calls: list[str]) -> None:
    main = tmp_path / "main.go"
    main.write_text("package main\n")
    if kwargs.pop("main_source", False):
        kwargs["main_source"] = main
    binary = tmp_path / "cache" / "prog-1" / "prog"
    work = tmp_path / "cache" / "prog-1.build"
    took = install.build_in_release_module(
        _source(go, tmp_path),
        _module(tmp_path),
        binary,
        work=work,
        **kwargs,  # type: ignore[arg-type]
    )
    assert took >= 0
    assert (tmp_path / "calls").read_text().splitlines() == [c.format(out=work / "prog") for c in calls]
    assert binary.read_text() == "built\n"
    assert not work.exists()  # the module copy goes once the binary is in place


def test_build_in_release_module_puts_files_beside(go: Path, tmp_path: Path) -> None:
    cert = tmp_path / "localhost.crt"
    cert.write_text("cert")
    binary = tmp_path / "cache" / "agnhost"
    install.build_in_release_module(
        _source(go, tmp_path), _module(tmp_path), binary, package="p", work=tmp_path / "w", beside={"x.crt": cert}
    )
    assert (binary.parent / "x.crt").read_text() == "cert"


@pytest.mark.parametrize(
    ("with_csi", "expected"),
    [
        pytest.param(False, [], id="default-no-csi"),
        # Last: the mock driver and the registrar are built in the control plane's build module.
        pytest.param(True, ["build_csi_mock", "build_csi_registrar", "build_csi_attacher"], id="with-csi"),
    ],
)
def test_install_steps_with_csi(with_csi: bool, expected: list[str]) -> None:
    names = [step.__name__ for step in install.install_steps(with_csi=with_csi)]
    base = [step.__name__ for step in install.install_steps()]
    assert names == base + expected


def test_csi_binaries_are_keyed_by_their_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path))
    mock, registrar = versions.csi_mock_path(), versions.csi_registrar_path()
    assert mock.parent.parent == registrar.parent.parent == tmp_path / f"kubernetes-{versions.KUBERNETES_VERSION}"
    assert mock.parent.name.startswith("csi-mock-") and registrar.parent.name.startswith("csi-registrar-")
    assert versions.csi_attacher_path() == tmp_path / "external-attacher-v4.13.0" / "csi-attacher"
    # A copy of the registrar's source with one more line would be another cache entry.
    edited = tmp_path / "main.go"
    edited.write_text(versions.CSI_REGISTRAR_SOURCE.read_text() + "// edited\n")
    monkeypatch.setattr(versions, "CSI_REGISTRAR_SOURCE", edited)
    assert versions.csi_registrar_path() != registrar


def test_cached_csi_steps_build_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path))
    lines: list[str] = []
    for path in (versions.csi_mock_path(), versions.csi_registrar_path(), versions.csi_attacher_path()):
        path.parent.mkdir(parents=True)
        path.write_text("cached")
    for step in install.CSI_STEPS:
        step(install.Progress(write=lines.append))
    assert all(line.endswith(": cached") for line in lines), json.dumps(lines)
