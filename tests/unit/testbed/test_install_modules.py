"""What the installer's builds from the k8s.io/kubernetes release share: the control plane's build module (checked
before anything is downloaded), the fresh copy of it that agnhost and nnp are built in, and manifest.go read from the
release's files. `go mod download` itself runs in `nodeagent testbed install`."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.testbed import install, versions


@pytest.mark.parametrize(
    ("module_files", "leftovers", "expected"),
    [
        pytest.param({"go.mod": "mod", "go.sum": "sum"}, {}, {"go.mod": "mod", "go.sum": "sum"}, id="mod-and-sum"),
        pytest.param({"go.mod": "mod"}, {}, {"go.mod": "mod"}, id="no-sum-yet"),
        # What a build that failed half-way left (a partial binary, an older go.sum) is gone.
        pytest.param(
            {"go.mod": "mod"}, {"go.sum": "stale", "nnp": "partial"}, {"go.mod": "mod"}, id="leftovers-removed"
        ),
    ],
)
def test_fresh_module_copy(
    tmp_path: Path, module_files: dict[str, str], leftovers: dict[str, str], expected: dict[str, str]
) -> None:
    module, work = tmp_path / "build", tmp_path / "nnp.build"
    module.mkdir()
    (module / "main.go").write_text("not copied")
    for name, text in module_files.items():
        (module / name).write_text(text)
    if leftovers:
        work.mkdir()
        for name, text in leftovers.items():
            (work / name).write_text(text)
    assert install.fresh_module_copy(module, work) == work
    assert {p.name: p.read_text() for p in work.iterdir()} == expected
    assert {p.name: p.read_text() for p in module.iterdir()} == {**module_files, "main.go": "not copied"}


@pytest.mark.parametrize("with_gomod", [True, False], ids=["present", "missing"])
def test_control_plane_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_gomod: bool) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path))
    module = versions.kubernetes_bin_dir().parent / "build"
    assert module.is_relative_to(tmp_path)
    if with_gomod:
        module.mkdir(parents=True)
        (module / "go.mod").write_text("module nodeagent.local/kubernetes-build\n")
        assert install.control_plane_module("agnhost") == module
    else:
        with pytest.raises(install.InstallError, match=rf"^agnhost is built in .*{module}/go.mod is missing$"):
            install.control_plane_module("agnhost")


def test_kubernetes_source_reads_manifest_go_from_the_release(tmp_path: Path) -> None:
    manifest = tmp_path / "test/utils/image/manifest.go"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('\tconfigs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.56"}\n')
    source = install.KubernetesSource(go="go", env={}, dir=tmp_path, gomod=tmp_path / "v1.34.4.mod")
    assert install.manifest_image_tag(source.manifest_go(), "agnhost") == "2.56"
