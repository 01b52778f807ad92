"""The control-plane image recipes (testbed/controlplaneimages.py): entrypoints, files, deterministic digests."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.testbed import controlplaneimages as cpi
from nodeagent.testbed.images import ImageBuildError
from tests.unit.testbed.ocilayout import read_layout


@pytest.mark.parametrize(
    ("output", "tag"),
    [
        ("etcd Version: 3.5.16\nGit SHA: Not provided\nGo Version: go1.24.0\n", "3.5.16-0"),
        ("etcd Version: 3.6.5\n", "3.6.5-0"),
    ],
)
def test_etcd_image_tag(output: str, tag: str) -> None:
    assert cpi.etcd_image_tag(output) == tag


def test_etcd_image_tag_without_a_version_is_an_error() -> None:
    with pytest.raises(ImageBuildError, match="cannot read the etcd version"):
        cpi.etcd_image_tag("usage: etcd [flags]")


@pytest.mark.parametrize("name", ["kube-apiserver", "kube-controller-manager", "kube-scheduler"])
def test_a_release_binary_image_is_the_binary_at_usr_local_bin(tmp_path: Path, name: str) -> None:
    binary = tmp_path / name
    binary.write_bytes(b"\x7fELF static " + name.encode())
    image = cpi.build_kubernetes_image(tmp_path / "layout", name, binary)
    config, members, read = read_layout(tmp_path / "layout")
    assert config["config"]["Entrypoint"] == [f"/usr/local/bin/{name}"]
    assert "/usr/local/bin" in config["config"]["Env"][0]
    assert read(f"usr/local/bin/{name}") == binary.read_bytes()
    assert members[f"usr/local/bin/{name}"].mode == 0o755
    assert "tmp" in members
    # Deterministic: the same inputs built elsewhere give the same manifest digest; another binary another one.
    again = cpi.build_kubernetes_image(tmp_path / "again", name, binary)
    assert again.manifest_digest == image.manifest_digest
    binary.write_bytes(b"\x7fELF static other")
    assert cpi.build_kubernetes_image(tmp_path / "other", name, binary).manifest_digest != image.manifest_digest


def test_kube_proxy_carries_iptables(tmp_path: Path) -> None:
    if not cpi.XTABLES.exists():
        pytest.fail(f"{cpi.XTABLES} is missing: the testbed installs iptables (nft) with Debian")
    binary = tmp_path / "kube-proxy"
    binary.write_bytes(b"\x7fELF kube-proxy")
    cpi.build_kubernetes_image(tmp_path / "layout", "kube-proxy", binary)
    _config, members, _read = read_layout(tmp_path / "layout")
    assert "usr/local/bin/kube-proxy" in members
    xtables = cpi.XTABLES.as_posix().lstrip("/")
    assert xtables in members
    for applet in cpi.IPTABLES_APPLETS:
        assert members[f"usr/sbin/{applet}"].issym() and members[f"usr/sbin/{applet}"].linkname == cpi.XTABLES.name
    # Its shared libraries, at their host paths (no ld.so.cache in the image).
    assert any(name.startswith(("lib/", "usr/lib/", "lib64/")) and ".so" in name for name in members)
    # The extensions iptables dlopens (kube-proxy's first rule matches -m conntrack), and what they link.
    extensions = cpi.xtables_extensions()
    assert any(path.endswith("/xtables/libxt_conntrack.so") for path in extensions)
    assert set(extensions) <= set(members)
    assert any("libnetfilter_conntrack.so" in name for name in members)


def test_xtables_extensions_are_found_under_the_libdir(tmp_path: Path) -> None:
    libdir = tmp_path / "usr" / "lib" / "x86_64-linux-gnu" / "xtables"
    libdir.mkdir(parents=True)
    for name in ("libxt_conntrack.so", "libxt_comment.so"):
        (libdir / name).write_bytes(b"\x7fELF")
    (libdir / "README").write_text("not an extension")
    assert cpi.xtables_extensions(tmp_path) == {
        "usr/lib/x86_64-linux-gnu/xtables/libxt_comment.so": libdir / "libxt_comment.so",
        "usr/lib/x86_64-linux-gnu/xtables/libxt_conntrack.so": libdir / "libxt_conntrack.so",
    }


def test_no_xtables_extensions_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match="no iptables extensions"):
        cpi.xtables_extensions(tmp_path)


def test_etcd_image_holds_the_program_and_its_libraries(tmp_path: Path) -> None:
    # /bin/true stands in for Debian's etcd: a dynamically linked program of the host.
    cpi.build_etcd_image(tmp_path / "layout", Path("/bin/true"))
    config, members, read = read_layout(tmp_path / "layout")
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/etcd"]
    assert read("usr/local/bin/etcd") == Path("/bin/true").read_bytes()
    assert any("libc.so" in name for name in members)
