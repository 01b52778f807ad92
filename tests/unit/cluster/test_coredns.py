"""CoreDNS for kubeadm's addon (testbed/coredns.py): which version, how it is built, and its image."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.testbed import coredns, install
from nodeagent.testbed.images import ImageBuildError
from nodeagent.testbed.versions import cache_root
from tests.unit.testbed.ocilayout import read_layout

SERVED = ["v1.14.3", "v1.14.4", "v1.14.5", "v1.14.6", "v1.14.7", "v1.15.0"]


@pytest.mark.parametrize(
    ("wanted", "served", "chosen"),
    [
        # This machine's module proxy: kubeadm's v1.12.1 is not served, v1.14.3 is the nearest newer release.
        ("v1.12.1", SERVED, "v1.14.3"),
        ("v1.14.5", SERVED, "v1.14.5"),
        ("v1.14.4", ["v1.15.0", "v1.14.3", "v1.14.10"], "v1.14.10"),
        # Nothing newer: the newest older one.
        ("v1.16.0", SERVED, "v1.15.0"),
        # Pre-releases and junk are never picked.
        ("v1.12.1", ["v1.13.0-rc.1", "v1.14.0"], "v1.14.0"),
    ],
)
def test_nearest_served(wanted: str, served: list[str], chosen: str) -> None:
    assert coredns.nearest_served(wanted, served) == chosen


def test_nearest_served_with_no_release_is_an_error() -> None:
    with pytest.raises(ValueError, match="no release"):
        coredns.nearest_served("v1.12.1", ["v1.13.0-rc.1"])


def test_the_built_version_is_the_nearest_served_to_kubeadms() -> None:
    assert coredns.KUBEADM_COREDNS_VERSION == "v1.12.1"
    assert coredns.nearest_served(coredns.KUBEADM_COREDNS_VERSION, SERVED) == coredns.COREDNS_VERSION


def test_build_argv_is_a_static_stamped_go_install_of_the_module() -> None:
    argv = coredns.coredns_build_argv("/usr/local/go/bin/go", "v1.14.3")
    assert argv[:3] == ["/usr/local/go/bin/go", "install", "-trimpath"]
    assert argv[-1] == "github.com/coredns/coredns@v1.14.3"
    ldflags = argv[argv.index("-ldflags") + 1]
    assert "-s -w" in ldflags
    assert "-X github.com/coredns/coredns/coremain.GitCommit=v1.14.3" in ldflags


def test_the_binary_is_cached_by_version() -> None:
    assert coredns.coredns_path() == cache_root() / "coredns-v1.14.3" / "coredns"


def test_every_install_builds_coredns_once_for_the_testbed_and_kubeadm() -> None:
    for options in ({}, {"with_kubeadm": True}, {"with_kubelet": True, "with_csi": True, "with_kubeadm": True}):
        names = [step.__name__ for step in install.install_steps(**options)]
        assert names.count("build_coredns") == 1, options
        assert names.index("build_coredns") == names.index("build_metrics_server") + 1, options


def test_a_cached_binary_is_not_rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    binary = tmp_path / "coredns-v1.14.3" / "coredns"
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF coredns")
    monkeypatch.setattr(coredns, "coredns_path", lambda: binary)

    def no_build(*args: object, **kwargs: object) -> str:
        raise AssertionError("go install ran with the binary cached")

    monkeypatch.setattr(coredns, "_run", no_build)
    lines: list[str] = []
    assert coredns.build_coredns(install.Progress(write=lines.append)) == binary
    assert lines == ["[nodeagent install] coredns v1.14.3: cached"]


def test_image_is_the_static_binary_at_root_as_its_entrypoint(tmp_path: Path) -> None:
    binary = tmp_path / "coredns"
    binary.write_bytes(b"\x7fELF static coredns")
    image = coredns.build_coredns_image(tmp_path / "layout", binary)
    config, members, read = read_layout(tmp_path / "layout")
    assert config["config"]["Entrypoint"] == ["/coredns"]
    # No user: root in the container, with only the Deployment's NET_BIND_SERVICE (see the module's docstring).
    assert "User" not in config["config"]
    assert set(config["config"]["ExposedPorts"]) == {"53/tcp", "53/udp"}
    assert read("coredns") == binary.read_bytes()
    assert members["coredns"].mode == 0o755
    assert members["tmp"].isdir()
    # Deterministic: the same binary gives the same digest; another binary another one.
    assert coredns.build_coredns_image(tmp_path / "again", binary).manifest_digest == image.manifest_digest
    binary.write_bytes(b"\x7fELF static other")
    assert coredns.build_coredns_image(tmp_path / "other", binary).manifest_digest != image.manifest_digest


def test_image_without_the_binary_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match="builds CoreDNS"):
        coredns.build_coredns_image(tmp_path / "layout", tmp_path / "missing")
