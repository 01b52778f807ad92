"""The e2e suite's busybox and nonewprivs images hold what upstream's hold: docker-library's busybox:1.37.0 rootfs
(every applet in /bin, /usr/bin/env, buildroot's users) and, for nonewprivs, nnp setuid root at /usr/local/bin.

Any busybox binary stands in for the vanilla one `nodeagent testbed install` builds (the layout is under test here);
tests/integration/test_e2e_images.py runs the real images in pods. The layout is read from the files (index →
manifest → config → layer), not through images.load_image, so the module is not its own oracle.
"""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.testbed import images
from nodeagent.testbed.versions import NONROOT_USER
from tests.unit.testbed.ocilayout import read_layout

STAND_IN = images.BUSYBOX_BINARY


def _busybox(tmp: Path) -> Path:
    binary = tmp / "busybox-1.37.0" / "busybox"
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(STAND_IN, binary)
    return binary


def _nnp(tmp: Path, data: bytes = b"\x7fELF nnp, not really: the image only carries it") -> Path:
    binary = tmp / "nonewprivs" / "nnp"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_bytes(data)
    return binary


@pytest.fixture(scope="module")
def busybox_image(tmp_path_factory: pytest.TempPathFactory) -> images.OCIImage:
    root = tmp_path_factory.mktemp("e2e-busybox")
    return images.build_e2e_busybox_image(root / "layout", _busybox(root))


@pytest.fixture(scope="module")
def nonewprivs_image(tmp_path_factory: pytest.TempPathFactory) -> images.OCIImage:
    root = tmp_path_factory.mktemp("nonewprivs")
    return images.build_nonewprivs_image(root / "layout", _nnp(root), _busybox(root))


def test_busybox_config_is_docker_librarys(busybox_image: images.OCIImage) -> None:
    config, _, _ = read_layout(busybox_image.layout)
    assert config["os"] == "linux"
    assert config["architecture"] == images.host_architecture()
    assert config["config"] == {"Cmd": ["sh"], "Env": [images.DEFAULT_PATH]}


def test_busybox_has_every_applet_in_bin_and_usr_bin_env(busybox_image: images.OCIImage) -> None:
    _, members, read = read_layout(busybox_image.layout)
    assert read("bin/busybox") == STAND_IN.read_bytes()
    assert members["bin/busybox"].mode == 0o755
    applets = images._busybox_applets(STAND_IN)
    links = {name.removeprefix("bin/") for name, m in members.items() if name.startswith("bin/") and m.issym()}
    assert links == set(applets) - {"busybox"}
    assert {members[f"bin/{name}"].linkname for name in links} == {"busybox"}
    assert members["usr/bin/env"].issym() and members["usr/bin/env"].linkname == "../../bin/env"
    # Nothing of the testbed's own busybox image (Debian's): no httpd index page in /var/www.
    assert "var/www/index.html" not in members


def test_busybox_users_are_buildroots_with_root_locked(busybox_image: images.OCIImage) -> None:
    _, members, read = read_layout(busybox_image.layout)
    passwd = {line.split(":")[0]: line.split(":") for line in read("etc/passwd").decode().splitlines()}
    group = {line.split(":")[0]: line.split(":") for line in read("etc/group").decode().splitlines()}
    shadow = {line.split(":")[0]: line.split(":") for line in read("etc/shadow").decode().splitlines()}
    assert passwd["root"][2:] == ["0", "0", "root", "/root", "/bin/sh"]
    assert passwd["nobody"][2:4] == ["65534", "65534"]
    assert passwd["www-data"][2:6] == ["33", "33", "www-data", "/var/www"]
    assert group["wheel"][2:] == ["10", "root"]
    assert group["nobody"][2] == "65534"
    assert set(shadow) == set(passwd)
    assert shadow["root"][1] == "*"  # CVE-2019-5021: no empty root password
    assert members["etc/shadow"].mode == 0o600
    assert members["etc/passwd"].mode == 0o644


@pytest.mark.parametrize(
    ("path", "mode"),
    [("tmp", 0o1777), ("root", 0o700), ("home", 0o755), ("dev", 0o755), ("usr/sbin", 0o755), ("var/spool/mail", 0o755),
     ("var/www", 0o755)],
)  # fmt: skip
def test_busybox_directories_of_the_device_table_and_the_homes(
    busybox_image: images.OCIImage, path: str, mode: int
) -> None:
    _, members, _ = read_layout(busybox_image.layout)
    assert members[path].isdir()
    assert members[path].mode == mode


@pytest.mark.parametrize("fixture", ["busybox_image", "nonewprivs_image"])
def test_every_parent_is_a_directory_and_entries_are_root_owned(fixture: str, request: pytest.FixtureRequest) -> None:
    image: images.OCIImage = request.getfixturevalue(fixture)
    _, members, _ = read_layout(image.layout)
    for name in members:
        for parent in Path(name).parents:
            if str(parent) != ".":
                assert members[str(parent)].isdir(), (name, parent)
    assert {(m.uid, m.gid) for m in members.values()} == {(0, 0)}


def test_nonewprivs_is_nnp_setuid_root_as_its_command(nonewprivs_image: images.OCIImage) -> None:
    config, members, read = read_layout(nonewprivs_image.layout)
    assert config["config"] == {"Cmd": ["nnp"], "Env": [images.DEFAULT_PATH]}
    nnp = members["usr/local/bin/nnp"]
    assert nnp.isfile() and (nnp.uid, nnp.gid) == (0, 0)
    assert nnp.mode == 0o6755  # upstream's `chmod +s`: set-user-ID and set-group-ID
    assert read("usr/local/bin/nnp").startswith(b"\x7fELF nnp")
    assert members["usr/local"].isdir() and members["usr/local/bin"].isdir()
    # On the busybox rootfs, as upstream's on alpine: a shell is there.
    assert members["bin/sh"].linkname == "busybox"


def test_nonroot_is_the_e2e_busybox_with_upstreams_user(tmp_path: Path) -> None:
    """manifest.go's e2e-test-images/nonroot:1.4 is `USER 1234` on a base with `id` (the runAsNonRoot specs run
    `id -u` in it without a runAsUser and expect 1234)."""
    busybox = _busybox(tmp_path)
    image = images.build_nonroot_image(tmp_path / "layout", busybox, user=NONROOT_USER)
    config, members, _ = read_layout(image.layout)
    assert NONROOT_USER == "1234"
    assert config["config"] == {"Cmd": ["sh"], "Env": [images.DEFAULT_PATH], "User": "1234"}
    assert members["bin/id"].issym() and members["bin/id"].linkname == "busybox"
    other = images.build_nonroot_image(tmp_path / "other", busybox, user="4321")
    assert other.manifest_digest != image.manifest_digest


def test_rebuilds_are_identical_and_each_input_changes_the_digest(tmp_path: Path) -> None:
    busybox, nnp = _busybox(tmp_path), _nnp(tmp_path)
    first = images.build_nonewprivs_image(tmp_path / "one", nnp, busybox)
    assert images.build_nonewprivs_image(tmp_path / "two", nnp, busybox).manifest_digest == first.manifest_digest
    assert images.build_nonewprivs_image(tmp_path / "one", nnp, busybox) == first  # the cached layout, reused
    nnp.write_bytes(b"another nnp")
    new_nnp = images.build_nonewprivs_image(tmp_path / "one", nnp, busybox)
    assert new_nnp.manifest_digest != first.manifest_digest
    assert read_layout(new_nnp.layout)[2]("usr/local/bin/nnp") == b"another nnp"
    shell = images.build_e2e_busybox_image(tmp_path / "bb", busybox)
    with busybox.open("ab") as grown:
        grown.write(b"\0")  # still runs (`--list`), another digest
    rebuilt = images.build_e2e_busybox_image(tmp_path / "bb", busybox)
    assert rebuilt.manifest_digest != shell.manifest_digest


@pytest.mark.parametrize(
    ("build", "remove", "message"),
    [
        ("busybox", "busybox", "busybox.*nodeagent testbed install` builds BusyBox"),
        ("nonewprivs", "busybox", "busybox.*nodeagent testbed install` builds BusyBox"),
        ("nonewprivs", "nnp", "nnp.*nodeagent testbed install` builds nnp"),
        ("agnhost", "busybox", "busybox.*nodeagent testbed install` builds BusyBox"),
    ],
)
def test_missing_inputs_say_how_to_get_them(tmp_path: Path, build: str, remove: str, message: str) -> None:
    busybox, nnp = _busybox(tmp_path), _nnp(tmp_path)
    agnhost = tmp_path / "agnhost" / "agnhost"
    agnhost.parent.mkdir()
    for name in ("agnhost", "localhost.crt", "localhost.key"):
        (agnhost.parent / name).write_bytes(b"x")
    {"busybox": busybox, "nnp": nnp}[remove].unlink()
    builders: dict[str, Callable[[], images.OCIImage]] = {
        "busybox": lambda: images.build_e2e_busybox_image(tmp_path / "layout", busybox),
        "nonewprivs": lambda: images.build_nonewprivs_image(tmp_path / "layout", nnp, busybox),
        "agnhost": lambda: images.build_agnhost_image(tmp_path / "layout", agnhost, busybox),
    }
    with pytest.raises(images.ImageBuildError, match=message):
        builders[build]()
    assert not (tmp_path / "layout").exists()


@pytest.mark.parametrize(
    ("applets", "error"),
    [
        (images.BUSYBOX_REQUIRED_APPLETS, None),
        ((*images.BUSYBOX_REQUIRED_APPLETS, "busybox", "linuxrc"), None),  # busybox itself is no link
        (
            tuple(a for a in images.BUSYBOX_REQUIRED_APPLETS if a != "nc"),
            "/x/busybox lacks applets the tests need: nc$",
        ),
        ((), "lacks applets the tests need: \\[, cat, date, echo, env, .*, wget$"),
    ],
)
def test_e2e_busybox_rootfs(applets: tuple[str, ...], error: str | None) -> None:
    if error is not None:
        with pytest.raises(images.ImageBuildError, match=error):
            images.e2e_busybox_rootfs(b"bb", applets, source=Path("/x/busybox"))
        return
    entries = {e.path: e for e in images.e2e_busybox_rootfs(b"bb", applets, source=Path("/x/busybox"))}
    assert entries["bin/busybox"].data == b"bb"
    assert {p for p, e in entries.items() if e.kind == tarfile.SYMTYPE and p.startswith("bin/")} == {
        f"bin/{a}" for a in set(applets) - {"busybox"}
    }
    assert entries["usr/bin/env"].target == "../../bin/env"
