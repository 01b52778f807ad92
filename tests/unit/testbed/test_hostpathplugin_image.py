"""The DRA specs' proxy image (testbed/hostpathplugin.py): /hostpathplugin on the e2e busybox rootfs, with what the
specs exec in it (test/e2e/dra/utils/deploy.go and test/e2e/storage/drivers/proxy/io.go: sh, base64, mkdir, rm,
and `sleep` in the manifest's command). Any binary stands in for the proxy; the layout is read from the files."""

from __future__ import annotations

import shutil
from pathlib import Path

from nodeagent.testbed import hostpathplugin, images
from tests.unit.testbed.ocilayout import read_layout


def test_the_proxy_image_holds_hostpathplugin_and_the_applets_the_specs_exec(tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"
    shutil.copy2(images.BUSYBOX_BINARY, busybox)
    proxy = tmp_path / "hostpathplugin"
    proxy.write_bytes(b"\x7fELF proxy, not really")
    image = hostpathplugin.build_image(tmp_path / "layout", proxy, busybox)
    config, members, read = read_layout(image.layout)
    assert config["config"] == {"Entrypoint": ["/hostpathplugin"], "Env": [images.DEFAULT_PATH]}
    assert read("hostpathplugin") == proxy.read_bytes()
    assert members["hostpathplugin"].mode == 0o755
    for applet in ("sh", "base64", "mkdir", "rm", "sleep"):
        assert members[f"bin/{applet}"].linkname == "busybox", applet


def test_the_proxy_is_pushed_under_the_dra_manifests_tag() -> None:
    manifest = Path(__file__).parents[3] / "nodeagent/testbed/hostpathproxy/main.go"
    assert manifest.is_file()
    assert hostpathplugin.UPSTREAM_IMAGE == "registry.k8s.io/sig-storage/hostpathplugin:v1.7.3"
