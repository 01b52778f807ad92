"""`nodeagent testbed install --with-certified`: what the certified suite's own images are made of.

The certified suite (focus `[Conformance]`, 424 specs) pulls five images the [NodeConformance] set never does
(docs/conformance.md lists which specs pull which). Their parts are built or installed only when asked for, so a
plain install (and CI's cold one) does not grow:

- sample-apiserver from `k8s.io/sample-apiserver` at SAMPLE_APISERVER_VERSION, the release manifest.go's tag names,
  in a copy of the module with its own go.mod and go.sum (-mod=readonly), as csi-attacher is: `go install
  pkg@version` refuses a module whose go.mod has `replace` lines, and this one's has;
- etcd and etcdctl from `go.etcd.io/etcd` at ETCD_E2E_VERSION, in a module of their own that requires them: their
  go.mod files replace the other etcd modules by relative paths, which only a checkout of the whole repository has;
  static, as upstream's release build (CGO off);
- Debian bookworm's apache2-bin (the httpd images) and bind9-dnsutils (dig, nslookup and host for jessie-dnsutils),
  installed on the host: neither starts a daemon, and the image builders copy the programs with the libraries `ldd`
  finds for them, as the agnhost image's bash and curl.

The nautilus image needs nothing beyond agnhost and two files of the release's test/images/nautilus, which are
copied into the cache.

Each step checks first that test/utils/image/manifest.go of KUBERNETES_VERSION still names the tag the testbed
pushes; a release whose suite expects others needs versions.py bumped.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from nodeagent.testbed.install import (
    InstallError,
    KubernetesSource,
    Progress,
    _go_env,
    _run,
    install_debian_packages,
    kubernetes_source,
)
from nodeagent.testbed.versions import (
    ETCD_E2E_TAG,
    ETCD_E2E_VERSION,
    HTTPD_IMAGE_TAGS,
    JESSIE_DNSUTILS_TAG,
    KUBERNETES_VERSION,
    NAUTILUS_TAG,
    SAMPLE_APISERVER_TAG,
    SAMPLE_APISERVER_VERSION,
    cache_root,
    etcd_e2e_dir,
    nautilus_dir,
    sample_apiserver_path,
)

SAMPLE_APISERVER_MODULE = "k8s.io/sample-apiserver"
ETCD_PACKAGES = {"etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3"}
# Debian packages installed for the images' programs (package -> version prefix, as install.BOOKWORM_PACKAGES).
# media-types: /etc/mime.types, which the httpd image carries as its conf/mime.types.
CERTIFIED_PACKAGES: dict[str, str] = {"apache2-bin": "2.4.", "bind9-dnsutils": "", "media-types": ""}
# Where upstream's nautilus image takes its two files from (COPY html/nautilus.jpg, html/data.json).
NAUTILUS_FILES = ("nautilus.jpg", "data.json")


def manifest_tags(manifest_go: str, name: str) -> list[str]:
    """Every tag manifest.go gives an image named `name`, whatever its registry field (etcd's is GcEtcdRegistry)."""
    pattern = r'configs\[\w+\]\s*=\s*Config\{\s*list\.\w+\s*,\s*"' + re.escape(name) + r'"\s*,\s*"([^"]+)"'
    return re.findall(pattern, manifest_go)


def expected_tags() -> dict[str, tuple[str, ...]]:
    """The manifest image name -> the tags the testbed pushes it under."""
    return {
        "sample-apiserver": (SAMPLE_APISERVER_TAG,),
        "etcd": (ETCD_E2E_TAG,),
        "httpd": HTTPD_IMAGE_TAGS,
        "jessie-dnsutils": (JESSIE_DNSUTILS_TAG,),
        "nautilus": (NAUTILUS_TAG,),
    }


def tag_mismatches(manifest_go: str, expected: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per image whose manifest.go tags are not the testbed's; empty when all match."""
    wrong = []
    for name, tags in sorted(expected.items()):
        found = manifest_tags(manifest_go, name)
        if sorted(found) != sorted(tags):
            wrong.append(f"{name} {', '.join(found) or 'nowhere'} (the testbed pushes {', '.join(tags)})")
    return wrong


def check_certified_tags(source: KubernetesSource) -> None:
    wrong = tag_mismatches(source.manifest_go(), expected_tags())
    if wrong:
        raise InstallError(f"kubernetes {KUBERNETES_VERSION}'s manifest.go tags " + "; ".join(wrong))


def copy_nautilus_files(progress: Progress) -> Path:
    """The release's nautilus.jpg and data.json (test/images/nautilus/html) into nautilus_dir(), so the image step
    needs no go command; a no-op when both are there."""
    target = nautilus_dir()
    if all((target / name).is_file() for name in NAUTILUS_FILES):
        progress.step(f"nautilus {NAUTILUS_TAG} files: cached")
        return target
    source = kubernetes_source()
    check_certified_tags(source)
    target.mkdir(parents=True, exist_ok=True)
    for name in NAUTILUS_FILES:
        partial = target / f".{name}.partial"
        shutil.copyfile(source.dir / "test/images/nautilus/html" / name, partial)
        partial.replace(target / name)
    progress.step(f"nautilus {NAUTILUS_TAG} files: copied from kubernetes {KUBERNETES_VERSION}")
    return target


def _go() -> str:
    return shutil.which("go") or "/usr/local/go/bin/go"


def build_sample_apiserver(progress: Progress) -> Path:
    """sample-apiserver of SAMPLE_APISERVER_VERSION, static, into the versioned cache; a no-op when it is there."""
    binary = sample_apiserver_path()
    if binary.exists():
        progress.step(f"sample-apiserver {SAMPLE_APISERVER_VERSION}: cached")
        return binary
    check_certified_tags(kubernetes_source())
    go = _go()
    env = {**_go_env(cache_root()), "GOFLAGS": "-mod=readonly -buildvcs=false"}
    module = f"{SAMPLE_APISERVER_MODULE}@{SAMPLE_APISERVER_VERSION}"
    progress.step(f"sample-apiserver {SAMPLE_APISERVER_VERSION}: go mod download, go build (minutes on a cold cache)")
    started = time.monotonic()
    info = json.loads(_run([go, "mod", "download", "-json", module], env=env, step="go mod download sample-apiserver"))
    work = binary.parent.with_name(binary.parent.name + ".build")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(info["Dir"], work)
    partial = work / "sample-apiserver.bin"
    argv = [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."]
    _run(argv, env=env, cwd=work, step="go build sample-apiserver")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial.replace(binary)  # whole or not at all: its presence is the cache check
    shutil.rmtree(work, ignore_errors=True)
    progress.step(f"sample-apiserver: built in {time.monotonic() - started:.0f}s")
    return binary


def etcd_go_mod(version: str = ETCD_E2E_VERSION) -> str:
    """The build module's go.mod before `go get` completes it."""
    return "module nodeagent.local/etcd-build\n\ngo 1.24.0\n\n" + "".join(
        f"require {package} {version}\n" for package in ETCD_PACKAGES.values()
    )


def etcd_ldflags(version: str = ETCD_E2E_VERSION) -> str:
    """Stripped, with the release's tag as GitSHA (what `etcd --version` prints as "Git SHA"; upstream's is the
    commit, which a module download does not carry)."""
    return f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA={version}"


def build_etcd(progress: Progress) -> Path:
    """etcd and etcdctl of ETCD_E2E_VERSION into etcd_e2e_dir(); a no-op when both are there."""
    target = etcd_e2e_dir()
    if all((target / name).exists() for name in ETCD_PACKAGES):
        progress.step(f"etcd {ETCD_E2E_VERSION}: cached")
        return target
    check_certified_tags(kubernetes_source())
    go = _go()
    env = _go_env(cache_root())  # -mod=mod: go get writes go.sum from the checksum database
    work = target.with_name(target.name + ".build")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "go.mod").write_text(etcd_go_mod())
    progress.step(f"etcd {ETCD_E2E_VERSION}: go get, go build etcd and etcdctl (minutes on a cold cache)")
    started = time.monotonic()
    gets = [f"{package}@{ETCD_E2E_VERSION}" for package in ETCD_PACKAGES.values()]
    _run([go, "get", *gets], env=env, cwd=work, step="go get etcd")
    for name, package in ETCD_PACKAGES.items():
        argv = [go, "build", "-trimpath", "-ldflags", etcd_ldflags(), "-o", str(work / name), package]
        _run(argv, env=env, cwd=work, step=f"go build {name}")
    target.mkdir(parents=True, exist_ok=True)
    # etcd last: its presence with etcdctl's is the cache check, and it appears whole or not at all.
    for name in sorted(ETCD_PACKAGES, key=lambda n: n == "etcd"):
        (work / name).replace(target / name)
    shutil.rmtree(work, ignore_errors=True)
    progress.step(f"etcd: built in {time.monotonic() - started:.0f}s")
    return target


def install_certified_packages(progress: Progress) -> None:
    """apache2-bin and bind9-dnsutils from bookworm (no daemon in either)."""
    install_debian_packages(progress, CERTIFIED_PACKAGES, {})


CERTIFIED_STEPS: Sequence[Callable[[Progress], object]] = (
    install_certified_packages,
    copy_nautilus_files,
    build_sample_apiserver,
    build_etcd,
)
