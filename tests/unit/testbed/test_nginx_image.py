"""The e2e nginx image holds what upstream's nginx:1.14-alpine based one does, from Debian's nginx: nginx with its
libraries, the official image's configs, nginx-common's mime.types and welcome page, on the e2e busybox rootfs; the
installer reads both nginx tags from manifest.go.

Stand-ins here (the layout is under test, not nginx): /bin/true as the unpacked nginx (a dynamic program, so ldd
lists libraries for it), Debian's busybox-static as the vanilla BusyBox. tests/integration/test_nginx_image.py runs
the real image in a pod. The layout is read from the files, not through images.load_image.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeagent.testbed import images, install, nginximage
from tests.unit.testbed.ocilayout import read_layout

STAND_IN_NGINX = Path("/bin/true")


def _inputs(tmp: Path) -> tuple[Path, Path]:
    """An unpacked-nginx root as the installer leaves it, and a busybox."""
    root = tmp / "nginx-root"
    (root / "usr/sbin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(STAND_IN_NGINX, root / "usr/sbin/nginx")
    (root / "etc/nginx").mkdir(parents=True, exist_ok=True)
    (root / "etc/nginx/mime.types").write_bytes(b"types {\n    text/html html;\n}\n")
    (root / "usr/share/nginx/html").mkdir(parents=True, exist_ok=True)
    (root / "usr/share/nginx/html/index.html").write_bytes(b"<h1>Welcome to nginx!</h1>\n")
    busybox = tmp / "busybox-1.37.0" / "busybox"
    busybox.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(images.BUSYBOX_BINARY, busybox)
    return root, busybox


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> images.OCIImage:
    tmp = tmp_path_factory.mktemp("nginx")
    root, busybox = _inputs(tmp)
    return nginximage.build_nginx_image(tmp / "layout", root, busybox)


def test_config_is_the_official_images_command_port_and_stop_signal(built: images.OCIImage) -> None:
    config, _, _ = read_layout(built.layout)
    assert config["os"] == "linux"
    assert config["architecture"] == images.host_architecture()
    assert config["config"]["Cmd"] == ["nginx", "-g", "daemon off;"]
    assert config["config"]["ExposedPorts"] == {"80/tcp": {}}
    assert config["config"]["StopSignal"] == "SIGTERM"
    assert "Entrypoint" not in config["config"]
    assert "User" not in config["config"]  # the master runs as root, its workers as nginx
    [path] = [env for env in config["config"]["Env"] if env.startswith("PATH=")]
    assert "/usr/sbin" in path.split("=", 1)[1].split(":")


def test_layer_has_nginx_and_every_library_ldd_lists(built: images.OCIImage) -> None:
    _, members, read = read_layout(built.layout)
    assert read("usr/sbin/nginx") == STAND_IN_NGINX.read_bytes()
    assert members["usr/sbin/nginx"].mode == 0o755
    libraries = images.host_program_files({"x": STAND_IN_NGINX})
    del libraries["x"]
    assert libraries  # /bin/true is dynamic: at least libc and the loader
    for path, source in libraries.items():
        assert read(path) == source.read_bytes(), path


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("etc/nginx/mime.types", b"types {\n    text/html html;\n}\n"),
        ("usr/share/nginx/html/index.html", b"<h1>Welcome to nginx!</h1>\n"),
        ("etc/nginx/nginx.conf", nginximage.NGINX_CONF),
        ("etc/nginx/conf.d/default.conf", nginximage.NGINX_DEFAULT_CONF),
    ],
)
def test_layer_has_the_configs_and_nginx_commons_files(built: images.OCIImage, path: str, expected: bytes) -> None:
    _, members, read = read_layout(built.layout)
    assert read(path) == expected
    assert members[path].mode == 0o644


@pytest.mark.parametrize(
    "directive",
    [
        b"user  nginx;",
        b"pid        /run/nginx.pid;",
        b"include       /etc/nginx/mime.types;",
        b"include /etc/nginx/conf.d/*.conf;",
        b"listen       80;",
        b"root   /usr/share/nginx/html;",
        b"index  index.html index.htm;",
    ],
)
def test_configs_serve_the_html_directory_on_port_80(directive: bytes) -> None:
    assert directive in nginximage.NGINX_CONF + nginximage.NGINX_DEFAULT_CONF


def test_logs_are_the_containers_and_nginxs_directories_exist(built: images.OCIImage) -> None:
    _, members, _ = read_layout(built.layout)
    assert members["var/log/nginx/access.log"].issym()
    assert members["var/log/nginx/access.log"].linkname == "/dev/stdout"
    assert members["var/log/nginx/error.log"].linkname == "/dev/stderr"
    for path in ("run", "var/lib/nginx", "var/cache/nginx", "var/log/nginx", "etc/nginx/conf.d"):
        assert members[path].isdir(), path


def test_rootfs_is_the_e2e_busybox_with_the_nginx_user_added(built: images.OCIImage) -> None:
    _, members, read = read_layout(built.layout)
    assert read("bin/busybox") == images.BUSYBOX_BINARY.read_bytes()
    for applet in ("sh", "sleep", "nc", "wget"):
        assert members[f"bin/{applet}"].linkname == "busybox", applet
    assert read("etc/passwd") == images.E2E_BUSYBOX_PASSWD + b"nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n"
    assert read("etc/group") == images.E2E_BUSYBOX_GROUP + b"nginx:x:101:nginx\n"


def test_every_parent_is_a_directory_and_entries_are_root_owned(built: images.OCIImage) -> None:
    _, members, _ = read_layout(built.layout)
    for name, member in members.items():
        assert (member.uid, member.gid) == (0, 0), name
        parent = str(Path(name).parent)
        if parent != ".":
            assert members[parent].isdir(), name


def test_rebuilds_are_identical_and_each_input_changes_the_digest(tmp_path: Path) -> None:
    root, busybox = _inputs(tmp_path)
    first = nginximage.build_nginx_image(tmp_path / "one", root, busybox)
    assert nginximage.build_nginx_image(tmp_path / "two", root, busybox).manifest_digest == first.manifest_digest
    assert nginximage.build_nginx_image(tmp_path / "one", root, busybox) == first  # the cached layout, reused
    digests = {first.manifest_digest}
    for path in ("usr/share/nginx/html/index.html", "etc/nginx/mime.types", "usr/sbin/nginx"):
        with (root / path).open("ab") as grown:
            grown.write(b"\n")
        rebuilt = nginximage.build_nginx_image(tmp_path / "one", root, busybox)
        assert rebuilt.manifest_digest not in digests, path
        digests.add(rebuilt.manifest_digest)
        assert read_layout(rebuilt.layout)[2](path) == (root / path).read_bytes()


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        ("usr/sbin/nginx", "usr/sbin/nginx missing: `nodeagent testbed install` unpacks Debian's nginx"),
        ("etc/nginx/mime.types", "mime.types missing: `nodeagent testbed install` unpacks"),
        ("usr/share/nginx/html/index.html", "index.html missing: `nodeagent testbed install` unpacks"),
        ("busybox", "busybox.*nodeagent testbed install` builds BusyBox"),
    ],
)
def test_missing_inputs_say_how_to_get_them(tmp_path: Path, remove: str, message: str) -> None:
    root, busybox = _inputs(tmp_path)
    (busybox if remove == "busybox" else root / remove).unlink()
    with pytest.raises(images.ImageBuildError, match=message):
        nginximage.build_nginx_image(tmp_path / "layout", root, busybox)
    assert not (tmp_path / "layout").exists()


MANIFEST_GO = """
	configs[AgnhostPrivate] = Config{list.PrivateRegistry, "agnhost", "2.6"}
	configs[Nginx] = Config{list.PromoterE2eRegistry, "nginx", "1.14-4"}
	configs[NginxNew] = Config{list.PromoterE2eRegistry, "nginx", "1.15-4"}
	configs[NginxPrivate] = Config{list.PrivateRegistry, "nginx", "9.9"}
	configs[Nonewprivs] = Config{list.PromoterE2eRegistry, "nonewprivs", "1.3"}
"""


@pytest.mark.parametrize(
    ("name", "tags"),
    [
        ("nginx", ["1.14-4", "1.15-4"]),  # both, in order; not the private registry's
        ("nonewprivs", ["1.3"]),
        ("nginx-new", []),
        ("ngin", []),  # a prefix is not a name
        ("agnhost", []),  # only a private registry's
    ],
)
def test_manifest_image_tags(name: str, tags: list[str]) -> None:
    assert install.manifest_image_tags(MANIFEST_GO, name) == tags
