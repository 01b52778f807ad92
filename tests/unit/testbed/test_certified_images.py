"""The certified suite's own images hold what their specs use, in upstream's places; the installer checks their
tags against manifest.go and builds their parts only with `--with-certified`.

Stand-ins here (the layouts are under test, not the programs): /bin/true for Apache, its modules and the dnsutils
(dynamic programs, so ldd lists libraries for them), small files for the static binaries, Debian's busybox-static
as the vanilla BusyBox. tests/integration/test_certified_images.py runs the real images in pods.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeagent import cli
from nodeagent.conformance.images import ImageRef, certified_targets
from nodeagent.testbed import certifiedbuild, certifiedimages, images, install
from tests.unit.testbed.ocilayout import read_layout

STAND_IN = Path("/bin/true")
REGISTRY = "127.0.0.1:5000"


def _busybox(tmp: Path) -> Path:
    busybox = tmp / "busybox-1.37.0" / "busybox"
    busybox.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(images.BUSYBOX_BINARY, busybox)
    return busybox


@pytest.fixture(scope="module")
def httpd(tmp_path_factory: pytest.TempPathFactory) -> images.OCIImage:
    tmp = tmp_path_factory.mktemp("httpd")
    modules = tmp / "modules"
    modules.mkdir()
    for name in certifiedimages.HTTPD_MODULES:
        shutil.copy2(STAND_IN, modules / f"mod_{name}.so")
    mime = tmp / "mime.types"
    mime.write_bytes(b"text/html html\n")
    return certifiedimages.build_httpd_image(
        tmp / "layout", _busybox(tmp), binary=STAND_IN, module_dir=modules, mime_types=mime
    )


def test_httpd_is_laid_out_as_the_official_image(httpd: images.OCIImage) -> None:
    config, members, read = read_layout(httpd.layout)
    assert config["config"]["Cmd"] == ["httpd-foreground"]
    assert config["config"]["ExposedPorts"] == {"80/tcp": {}}
    assert config["config"]["WorkingDir"] == "/usr/local/apache2"
    [path] = [env for env in config["config"]["Env"] if env.startswith("PATH=")]
    assert path.split("=", 1)[1].split(":")[0] == "/usr/local/apache2/bin"
    assert read("usr/local/apache2/bin/httpd") == STAND_IN.read_bytes()
    assert members["usr/local/apache2/bin/httpd-foreground"].mode == 0o755
    assert b"exec httpd -DFOREGROUND" in read("usr/local/apache2/bin/httpd-foreground")
    # The StatefulSet specs probe GET /index.html and move this very file away to break the probe.
    assert read("usr/local/apache2/htdocs/index.html") == b"<html><body><h1>It works!</h1></body></html>\n"
    assert read("usr/local/apache2/conf/mime.types") == b"text/html html\n"
    assert members["usr/local/apache2/logs"].isdir()
    assert members["etc/apache2/apache2.conf"].linkname == "/usr/local/apache2/conf/httpd.conf"
    for name in certifiedimages.HTTPD_MODULES:
        assert f"usr/local/apache2/modules/mod_{name}.so" in members
    assert members["bin/mv"].issym()  # `mv -v ... /tmp/` in the probe-breaking exec
    assert members["tmp"].mode == 0o1777


def test_httpd_conf_sets_the_server_root_before_loading_modules_and_logs_to_the_container() -> None:
    conf = certifiedimages.HTTPD_CONF.decode()
    lines = conf.splitlines()
    assert lines[0] == 'ServerRoot "/usr/local/apache2"'
    assert all(line.startswith("LoadModule") for line in lines[1 : 1 + len(certifiedimages.HTTPD_MODULES)])
    for directive in ("Listen 80", "User daemon", "Group daemon", "ErrorLog /proc/self/fd/2"):
        assert directive in lines
    assert "CustomLog /proc/self/fd/1 common" in lines
    assert 'DocumentRoot "/usr/local/apache2/htdocs"' in lines


def test_httpd_and_jessie_carry_libgcc_s_beside_libc(httpd: images.OCIImage) -> None:
    _, members, _ = read_layout(httpd.layout)
    [libc] = [name for name in members if name.endswith("/libc.so.6")]
    assert str(Path(libc).parent / "libgcc_s.so.1") in members


def test_with_libgcc_s_adds_it_only_when_libc_is_there(tmp_path: Path) -> None:
    assert certifiedimages.with_libgcc_s({"bin/x": STAND_IN}) == {"bin/x": STAND_IN}
    (tmp_path / "libc.so.6").write_bytes(b"c")
    with pytest.raises(images.ImageBuildError, match=r"libgcc_s\.so\.1"):
        certifiedimages.with_libgcc_s({"lib/libc.so.6": tmp_path / "libc.so.6"})
    (tmp_path / "libgcc_s.so.1").write_bytes(b"g")
    found = certifiedimages.with_libgcc_s({"lib/libc.so.6": tmp_path / "libc.so.6"})
    assert found["lib/libgcc_s.so.1"] == tmp_path / "libgcc_s.so.1"


def test_jessie_has_dig_nslookup_host_getent_bash_and_nsswitch(tmp_path: Path) -> None:
    programs = {path: STAND_IN for path in certifiedimages.DNSUTILS_PROGRAMS}
    built = certifiedimages.build_jessie_dnsutils_image(tmp_path / "layout", _busybox(tmp_path), programs=programs)
    config, members, read = read_layout(built.layout)
    assert config["config"]["Cmd"] == ["bash"]
    for path in ("usr/bin/dig", "usr/bin/nslookup", "usr/bin/host", "usr/bin/getent", "bin/bash"):
        assert members[path].isfile(), path
        assert members[path].mode == 0o755
    assert b"hosts: files dns" in read("etc/nsswitch.conf")
    for applet in ("sh", "seq", "test", "sleep", "echo"):  # the probe loop's shell parts
        assert members[f"bin/{applet}"].issym(), applet


def test_a_missing_part_names_the_install_option(tmp_path: Path) -> None:
    with pytest.raises(images.ImageBuildError, match="--with-certified"):
        certifiedimages.build_jessie_dnsutils_image(
            tmp_path / "l", _busybox(tmp_path), programs={"usr/bin/dig": tmp_path / "absent"}
        )
    with pytest.raises(images.ImageBuildError, match="--with-certified"):
        certifiedimages.build_etcd_image(tmp_path / "e", tmp_path / "absent")
    with pytest.raises(images.ImageBuildError, match="--with-certified"):
        certifiedimages.build_sample_apiserver_image(tmp_path / "s", tmp_path / "absent", _busybox(tmp_path))


def test_etcd_and_sample_apiserver_where_their_specs_run_them(tmp_path: Path) -> None:
    binaries = tmp_path / "etcd"
    binaries.mkdir()
    for name in certifiedimages.ETCD_BINARIES:
        (binaries / name).write_bytes(name.encode())
    config, members, read = read_layout(certifiedimages.build_etcd_image(tmp_path / "e", binaries).layout)
    assert read("usr/local/bin/etcd") == b"etcd"  # the aggregator spec's command: /usr/local/bin/etcd
    assert read("usr/local/bin/etcdctl") == b"etcdctl"
    assert members["usr/local/bin/etcd"].mode == 0o755
    assert config["config"]["WorkingDir"] == "/"
    assert "Entrypoint" not in config["config"]
    server = tmp_path / "sample-apiserver"
    server.write_bytes(b"server")
    built = certifiedimages.build_sample_apiserver_image(tmp_path / "s", server, _busybox(tmp_path))
    config, members, read = read_layout(built.layout)
    assert config["config"]["Entrypoint"] == ["/sample-apiserver"]  # the spec gives Args only
    assert read("sample-apiserver") == b"server"


def test_nautilus_is_its_base_plus_the_two_files_with_test_webserver(tmp_path: Path) -> None:
    busybox = _busybox(tmp_path)
    base = images.build_nonroot_image(tmp_path / "base", busybox, user="1000")
    sources = {"nautilus.jpg": tmp_path / "n.jpg", "data.json": tmp_path / "d.json"}
    sources["nautilus.jpg"].write_bytes(b"\xff\xd8jpeg")
    sources["data.json"].write_bytes(b'{"image": "nautilus.jpg"}\n')
    built = certifiedimages.build_nautilus_image(tmp_path / "n", base, sources)
    config, members, read = read_layout(built.layout)
    _, base_members, base_read = read_layout(base.layout)
    assert config["config"]["Cmd"] == ["test-webserver"]
    assert config["config"]["User"] == "1000"  # the rest of the base's config is kept
    assert read("data.json") == b'{"image": "nautilus.jpg"}\n'
    assert read("nautilus.jpg") == b"\xff\xd8jpeg"
    assert set(members) == set(base_members) | {"data.json", "nautilus.jpg"}
    assert read("bin/busybox") == base_read("bin/busybox")
    assert members["tmp"].mode == base_members["tmp"].mode == 0o1777


def test_agnhost_dns_is_its_base_plus_the_dns_tools_with_shared_libraries_once(tmp_path: Path) -> None:
    # A base that already holds libc and friends (as agnhost holds bash's and curl's): no path twice.
    programs = {path: STAND_IN for path in certifiedimages.DNSUTILS_PROGRAMS}
    base = certifiedimages.build_jessie_dnsutils_image(tmp_path / "base", _busybox(tmp_path), programs=programs)
    dns = {path: STAND_IN for path in certifiedimages.AGNHOST_DNS_PROGRAMS}
    built = certifiedimages.build_agnhost_dns_image(tmp_path / "agnhost", base, programs=dns)
    config, members, read = read_layout(built.layout)
    base_config, base_members, _ = read_layout(base.layout)
    assert config["config"] == base_config["config"]
    assert set(members) >= set(base_members)
    assert sorted(certifiedimages.AGNHOST_DNS_PROGRAMS) == [
        "usr/bin/dig",
        "usr/bin/getent",
        "usr/bin/host",
        "usr/bin/nslookup",
    ]
    for path in certifiedimages.AGNHOST_DNS_PROGRAMS:
        assert read(path) == STAND_IN.read_bytes()
    assert b"hosts: files dns" in read("etc/nsswitch.conf")


MANIFEST = """
	configs[APIServer] = Config{list.PromoterE2eRegistry, "sample-apiserver", "1.29.2"}
	configs[Etcd] = Config{list.GcEtcdRegistry, "etcd", "3.6.4-0"}
	configs[Httpd] = Config{list.PromoterE2eRegistry, "httpd", "2.4.38-4"}
	configs[HttpdNew] = Config{list.PromoterE2eRegistry, "httpd", "2.4.39-4"}
	configs[JessieDnsutils] = Config{list.PromoterE2eRegistry, "jessie-dnsutils", "1.7"}
	configs[Nautilus] = Config{list.PromoterE2eRegistry, "nautilus", "1.7"}
"""


def test_manifest_tags_read_any_registry_field() -> None:
    assert certifiedbuild.manifest_tags(MANIFEST, "etcd") == ["3.6.4-0"]
    assert certifiedbuild.manifest_tags(MANIFEST, "httpd") == ["2.4.38-4", "2.4.39-4"]
    assert certifiedbuild.manifest_tags(MANIFEST, "kitten") == []


def test_the_pinned_tags_are_the_manifests() -> None:
    assert certifiedbuild.tag_mismatches(MANIFEST, certifiedbuild.expected_tags()) == []
    moved = MANIFEST.replace('"3.6.4-0"', '"3.6.5-0"')
    assert certifiedbuild.tag_mismatches(moved, certifiedbuild.expected_tags()) == [
        "etcd 3.6.5-0 (the testbed pushes 3.6.4-0)"
    ]


def test_etcd_is_built_in_a_module_requiring_both_commands_at_the_release() -> None:
    gomod = certifiedbuild.etcd_go_mod("v3.6.4")
    assert "require go.etcd.io/etcd/server/v3 v3.6.4\n" in gomod
    assert "require go.etcd.io/etcd/etcdctl/v3 v3.6.4\n" in gomod
    assert "-X go.etcd.io/etcd/api/v3/version.GitSHA=v3.6.4" in certifiedbuild.etcd_ldflags("v3.6.4")


def test_certified_parts_are_installed_only_when_asked() -> None:
    plain = install.install_steps()
    for step in certifiedbuild.CERTIFIED_STEPS:
        assert step not in plain
    asked = install.install_steps(with_certified=True)
    assert asked[-len(certifiedbuild.CERTIFIED_STEPS) :] == list(certifiedbuild.CERTIFIED_STEPS)


def test_certified_targets_are_the_suites_refs_of_the_testbeds_registry() -> None:
    needed = [
        ImageRef(REGISTRY, "e2e-test-images/httpd", "2.4.38-4"),
        ImageRef(REGISTRY, "e2e-test-images/httpd", "2.4.39-4"),
        ImageRef(REGISTRY, "etcd", "3.6.4-0"),
        ImageRef(REGISTRY, "e2e-test-images/agnhost", "2.56"),
        ImageRef("registry.k8s.io", "e2e-test-images/nautilus", "1.7"),
        ImageRef(REGISTRY, "e2e-test-images/nautilus", "1.7"),
    ]
    targets = certified_targets(needed, REGISTRY)
    # agnhost too: the certified step pushes the one with the DNS tools over the testbed's.
    assert sorted(targets) == ["agnhost-dns", "etcd", "httpd", "nautilus"]
    assert [ref.tag for ref in targets["httpd"]] == ["2.4.38-4", "2.4.39-4"]
    assert targets["nautilus"] == [ImageRef(REGISTRY, "e2e-test-images/nautilus", "1.7")]
    assert set(certifiedimages.certified_repositories().values()) == set(certifiedimages.certified_builders())


async def test_the_install_option_reaches_the_installer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []
    monkeypatch.setattr(install, "install", lambda **kwargs: calls.append(kwargs))
    args = cli.build_parser().parse_args(["testbed", "install", "--with-certified"])
    assert await cli._testbed(args) == 0
    assert calls == [
        {"with_kubelet": False, "with_csi": False, "with_kubeadm": False, "with_certified": True, "with_kwok": False}
    ]
