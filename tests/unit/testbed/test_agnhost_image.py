"""The agnhost image holds what upstream's Dockerfile puts there, plus busybox, bash, curl and OpenBSD's nc with their
libraries;
the installer reads agnhost's tag from upstream's manifest.go.

The layout is read directly from the files (index → manifest → config → layer), not through images.load_image, so
the module is not its own oracle. That the programs run is shown in tests/integration/test_agnhost.py, in a pod.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from nodeagent.testbed import images, install
from tests.unit.testbed.ocilayout import read_layout

# The image's base is the vanilla BusyBox `nodeagent testbed install` builds; any busybox binary stands in for it here
# (the layout is under test, not BusyBox: tests/integration/test_e2e_images.py runs the real one in a pod).
BUSYBOX = images.BUSYBOX_BINARY


def _agnhost_dir(root: Path, binary: bytes = b"\x7fELF agnhost, not really: the image only carries it") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agnhost").write_bytes(binary)
    (root / "localhost.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nporter\n")
    (root / "localhost.key").write_bytes(b"-----BEGIN RSA PRIVATE KEY-----\nporter\n")
    return root / "agnhost"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> images.OCIImage:
    root = tmp_path_factory.mktemp("agnhost")
    return images.build_agnhost_image(root / "layout", _agnhost_dir(root / "bin"), BUSYBOX)


def test_config_is_upstreams_entrypoint_cmd_and_ports(built: images.OCIImage) -> None:
    config, _, _ = read_layout(built.layout)
    assert config["os"] == "linux"
    assert config["architecture"] == images.host_architecture()
    assert config["config"]["Entrypoint"] == ["/agnhost"]
    assert config["config"]["Cmd"] == ["pause"]
    assert set(config["config"]["ExposedPorts"]) == {"80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp"}
    assert "User" not in config["config"]  # root, as upstream's image
    assert any(env.startswith("PATH=") and "/usr/bin" in env for env in config["config"]["Env"])


def test_layer_holds_agnhost_its_link_uploads_and_porters_files(built: images.OCIImage, tmp_path: Path) -> None:
    _, members, read = read_layout(built.layout)
    assert members["agnhost"].isfile() and members["agnhost"].mode == 0o755
    assert read("agnhost").startswith(b"\x7fELF agnhost")
    assert members["agnhost-2"].issym() and members["agnhost-2"].linkname == "agnhost"
    assert members["uploads"].isdir()
    assert read("localhost.crt").startswith(b"-----BEGIN CERTIFICATE-----")
    assert read("localhost.key").startswith(b"-----BEGIN RSA PRIVATE KEY-----")


def test_layer_has_the_users_and_groups_upstreams_image_defines(built: images.OCIImage) -> None:
    _, _, read = read_layout(built.layout)
    passwd = {line.split(":")[0]: line.split(":") for line in read("etc/passwd").decode().splitlines()}
    group = {line.split(":")[0]: line.split(":") for line in read("etc/group").decode().splitlines()}
    assert passwd["root"][2:4] == ["0", "0"]
    assert passwd["user-defined-in-image"][2:4] == ["1000", "1000"]
    assert group["group-defined-in-image"][2:] == ["50000", "user-defined-in-image"]
    assert group["user-defined-in-image"][2] == "1000"


def test_layer_has_busybox_bash_curl_and_their_libraries(built: images.OCIImage) -> None:
    _, members, read = read_layout(built.layout)
    assert read("bin/busybox") == BUSYBOX.read_bytes()
    for applet in images.BUSYBOX_REQUIRED_APPLETS:
        if f"bin/{applet}" not in images.AGNHOST_REPLACED_APPLETS:
            assert members[f"bin/{applet}"].linkname == "busybox", applet
    # The base's rootfs (docker-library's layout), without its shadow: the image's own users replace the base's.
    assert members["usr/bin/env"].linkname == "../../bin/env"
    assert members["tmp"].mode == 0o1777
    assert "etc/shadow" not in members
    assert read("bin/bash") == Path("/bin/bash").read_bytes()
    assert read("usr/bin/curl") == Path("/usr/bin/curl").read_bytes()
    libraries = [name for name in members if ".so" in name]
    assert any(name.endswith("/libc.so.6") for name in libraries)
    assert any(name.endswith("/libcurl.so.4") for name in libraries)
    assert any(name.endswith("/libtinfo.so.6") for name in libraries)
    # The program interpreter bash names (PT_INTERP) is in the image, at that path.
    interpreter = next(name for name in libraries if "/ld-linux" in name)
    assert f"/{interpreter}".encode() in Path("/bin/bash").read_bytes()


def test_nc_is_openbsds_at_usr_bin_and_busyboxs_nc_is_gone(built: images.OCIImage) -> None:
    """The Services specs run `nc -v -t -w 2` and `nc -v -u -w 2`, the HostPort spec `nc -vuz`: OpenBSD's nc's
    options (BusyBox's has no -t). PATH finds /usr/bin/nc; no /bin/nc is left to be BusyBox's."""
    _, members, read = read_layout(built.layout)
    assert members["usr/bin/nc"].isfile() and members["usr/bin/nc"].mode == 0o755
    assert read("usr/bin/nc") == Path("/bin/nc.openbsd").read_bytes()
    assert "bin/nc" not in members
    libraries = [name for name in members if ".so" in name]
    assert any(name.endswith("/libbsd.so.0") for name in libraries)


def test_netcat_openbsd_is_an_install_package() -> None:
    """The image takes nc from the host: the install step installs it, as it does curl."""
    assert "netcat-openbsd" in install.BOOKWORM_PACKAGES


def test_every_parent_is_a_directory_entry_and_entries_are_root_owned(built: images.OCIImage) -> None:
    _, members, _ = read_layout(built.layout)
    for name in members:
        for parent in Path(name).parents:
            if str(parent) != ".":
                assert members[str(parent)].isdir(), (name, parent)
    assert {(m.uid, m.gid) for m in members.values()} == {(0, 0)}
    names = list(members)
    assert [n.split("/") for n in names] == sorted(n.split("/") for n in names)


def test_rebuilding_gives_the_same_digest_and_a_new_binary_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bash only: the build is what is under test here, not the size of curl's libraries.
    monkeypatch.setattr(images, "AGNHOST_HOST_PROGRAMS", {"bin/bash": Path("/bin/bash")})
    binary = _agnhost_dir(tmp_path / "bin")
    first = images.build_agnhost_image(tmp_path / "one", binary, BUSYBOX)
    again = images.build_agnhost_image(tmp_path / "two", binary, BUSYBOX)
    assert again.manifest_digest == first.manifest_digest
    assert images.build_agnhost_image(tmp_path / "one", binary, BUSYBOX) == first  # the cached layout, reused
    binary.write_bytes(b"a new build of agnhost")
    new_binary = images.build_agnhost_image(tmp_path / "one", binary, BUSYBOX)
    assert new_binary.manifest_digest != first.manifest_digest
    (binary.parent / "localhost.crt").write_bytes(b"another certificate")
    new_certificate = images.build_agnhost_image(tmp_path / "one", binary, BUSYBOX)
    assert new_certificate.manifest_digest not in (first.manifest_digest, new_binary.manifest_digest)
    assert read_layout(new_certificate.layout)[2]("localhost.crt") == b"another certificate"


@pytest.mark.parametrize("remove", ["agnhost", "localhost.crt", "localhost.key"])
def test_missing_inputs_say_how_to_get_them(tmp_path: Path, remove: str) -> None:
    binary = _agnhost_dir(tmp_path / "bin")
    (binary.parent / remove).unlink()
    with pytest.raises(images.ImageBuildError, match=f"{remove}.*nodeagent testbed install"):
        images.build_agnhost_image(tmp_path / "layout", binary, BUSYBOX)
    assert not (tmp_path / "layout").exists()


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        pytest.param(
            "\tlinux-vdso.so.1 (0x00007ffd)\n"
            "\tlibtinfo.so.6 => /lib/x86_64-linux-gnu/libtinfo.so.6 (0x00007f25059a8000)\n"
            "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f25057c6000)\n"
            "\t/lib64/ld-linux-x86-64.so.2 (0x00007f2505b2e000)\n",
            ["/lib/x86_64-linux-gnu/libtinfo.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"],
            id="bash-on-debian",
        ),
        pytest.param("\tstatically linked\n", [], id="static"),
        pytest.param("", [], id="empty"),
        pytest.param(
            "\tlinux-vdso.so.1 =>  (0x00007fff)\n\tlibz.so.1 => /usr/lib/libz.so.1 (0x1)\n",
            ["/usr/lib/libz.so.1"],
            id="vdso-with-arrow",
        ),
    ],
)
def test_parse_ldd(output: str, expected: list[str]) -> None:
    assert images.parse_ldd(output) == expected


def test_parse_ldd_refuses_a_library_not_found() -> None:
    with pytest.raises(images.ImageBuildError, match=r"libmissing\.so\.1 not found"):
        images.parse_ldd("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n\tlibmissing.so.1 => not found\n")


@pytest.mark.parametrize(
    ("paths", "expected_dirs"),
    [
        (["a"], []),
        (["usr/bin/curl"], ["usr", "usr/bin"]),
        (["lib/x/libc.so.6", "lib/x/libz.so.1", "lib64/ld.so"], ["lib", "lib/x", "lib64"]),
        (["bin", "bin/sh"], []),  # bin is already an entry (a directory here): not added twice
    ],
)
def test_with_parent_directories(paths: list[str], expected_dirs: list[str]) -> None:
    entries = [images.TarEntry.directory(p) if p == "bin" else images.TarEntry.file(p, b"", mode=0o644) for p in paths]
    out = images.with_parent_directories(entries)
    assert out[: len(entries)] == entries
    added = out[len(entries) :]
    assert [e.path for e in added] == expected_dirs
    assert all(e.kind == tarfile.DIRTYPE and e.mode == 0o755 for e in added)


MANIFEST_GO = """
	configs[AuthenticatedAlpine] = Config{list.GcEtcdRegistry, "authenticated-alpine", "3.7"}
	configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.56"}
	configs[AgnhostPrivate] = Config{list.PrivateRegistry, "agnhost", "2.6"}
	configs[BusyBox] = Config{list.PromoterE2eRegistry, "busybox", "1.37.0-1"}
	configs[Nginx] = Config{list.PromoterE2eRegistry, "nginx", "1.14-4"}
	configs[NginxNew] = Config{list.PromoterE2eRegistry, "nginx", "1.15-4"}
	configs[Nonewprivs] = Config{list.PromoterE2eRegistry, "nonewprivs", "1.3"}
"""


@pytest.mark.parametrize(
    ("name", "tag"),
    [
        ("agnhost", "2.56"),  # the promoter registry's, not the private registry's 2.6
        ("busybox", "1.37.0-1"),
        ("nginx", "1.14-4"),  # the first one named so
        ("nonewprivs", "1.3"),
        ("nonewpriv", None),  # a prefix is not a name
        ("authenticated-alpine", None),  # not from the e2e registry
        ("missing", None),
    ],
)
def test_manifest_image_tag(name: str, tag: str | None) -> None:
    assert install.manifest_image_tag(MANIFEST_GO, name) == tag
