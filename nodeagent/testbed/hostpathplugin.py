"""The image the e2e suite's DRA specs run their proxy pods in: `registry.k8s.io/sig-storage/hostpathplugin:v1.7.3`
(test/e2e/testing-manifests/dra/dra-test-driver-proxy.yaml of the release), as the testbed builds it.

Those specs run the DRA test driver's kubelet plugin inside e2e.test and reach the node through that pod: they exec
`/hostpathplugin --endpoint=<socket> --proxy-endpoint=tcp://:<port>` in it (hostpathplugin's proxy mode), port-forward
to the port, and write CDI specs with `sh`, `base64`, `mkdir` and `rm` (test/e2e/storage/drivers/proxy/io.go).
The Go module proxy refuses github.com/kubernetes-csi/csi-driver-host-path (403 "This module version is not
available" for v1.7.3, the tag the manifest names, and for v1.16.1, the one the CSI manifests name), so the testbed
builds `hostpathproxy/main.go`, the proxy mode alone, on the standard library (in a copy of the control plane's
build module, as the CSI mock), and puts it at /hostpathplugin on the vanilla busybox rootfs. The image's CSI driver
(what the CSI hostpath specs use, under v1.16.1) is not in it, so it is pushed under the DRA manifest's tag only.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from nodeagent.testbed import images
from nodeagent.testbed.images import DEFAULT_PATH, OCIImage, TarEntry, host_architecture, sha256_digest
from nodeagent.testbed.install import Progress, build_in_release_module, control_plane_module, kubernetes_source
from nodeagent.testbed.versions import KUBERNETES_VERSION, cache_root

SOURCE = Path(__file__).with_name("hostpathproxy") / "main.go"
REPOSITORY = "sig-storage/hostpathplugin"
TAG = "v1.7.3"  # test/e2e/testing-manifests/dra/dra-test-driver-proxy.yaml at KUBERNETES_VERSION
UPSTREAM_IMAGE = f"registry.k8s.io/{REPOSITORY}:{TAG}"
BINARY_PATH = "hostpathplugin"  # in the image: the specs exec /hostpathplugin


def binary_path() -> Path:
    """The proxy, keyed by the release's build module it is built in and by its main.go, so an edit rebuilds it."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"hostpath-proxy-{digest}" / "hostpathplugin"


def build_binary(progress: Progress) -> Path:
    binary = binary_path()
    if binary.exists():
        progress.step("hostpathplugin proxy: cached")
        return binary
    module = control_plane_module("hostpathplugin proxy")
    progress.step("hostpathplugin proxy: go build")
    took = build_in_release_module(
        kubernetes_source(),
        module,
        binary,
        package="",
        get=(),
        main_source=SOURCE,
        work=binary.parent.with_name(binary.parent.name + ".build"),
    )
    progress.step(f"hostpathplugin proxy: built in {took:.0f}s")
    return binary


def build_image(dest: Path, binary: Path, busybox: Path) -> OCIImage:
    """/hostpathplugin on the vanilla busybox rootfs (sh and the applets the specs exec)."""
    if not binary.is_file():
        raise images.ImageBuildError(f"{binary} is missing: build_binary builds it")
    proxy = binary.read_bytes()
    shell = images._vanilla_busybox(busybox)  # the e2e rootfs helpers images.py shares
    inputs = {
        "image": "hostpathplugin-proxy",
        "binary": sha256_digest(proxy),
        "busybox": sha256_digest(shell),
        "architecture": host_architecture(),
    }

    def files() -> list[TarEntry]:
        entries = images.e2e_busybox_rootfs(shell, images._busybox_applets(busybox), source=busybox)
        entries.append(TarEntry.file(BINARY_PATH, proxy, mode=0o755))
        return images.with_parent_directories(entries)

    config = {"Entrypoint": [f"/{BINARY_PATH}"], "Env": [DEFAULT_PATH]}
    return images._build(dest, inputs, files, config)
