"""CoreDNS for the testbed's cluster DNS (testbed/clusterdns.py) and kubeadm's `addon/coredns` phase: built from
the Go module proxy (by every `nodeagent testbed install`), and its image.

kubeadm v1.34.4 deploys CoreDNS v1.12.1 (constants.CoreDNSVersion). The module proxy here serves
`github.com/coredns/coredns` from v1.14.3 on only, so the nearest served version is built (`nearest_served`) and the
cluster's ClusterConfiguration names its tag (`dns.imageTag`); the Corefile kubeadm writes (errors, health, ready,
kubernetes, prometheus, forward, cache, loop, reload, loadbalance) is read the same by both.

Built as upstream's Makefile builds it (CGO off, static, `-s -w`, the version stamped into coremain.GitCommit) with
`go install pkg@version`, so the module's own go.mod and go.sum pick the dependencies, into the versioned cache; the
binary's presence there is the cache check. The image is upstream's shape: the static binary at /coredns as the
entrypoint. Upstream's runs as nonroot with a file capability (setcap cap_net_bind_service) to bind port 53; these
deterministic layers carry no xattrs, so the image names no user and the Deployment's securityContext (drop ALL,
add NET_BIND_SERVICE, read-only root) applies to root in the container.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from nodeagent.testbed import images
from nodeagent.testbed.images import ImageBuildError, OCIImage, TarEntry
from nodeagent.testbed.install import InstallError, Progress, _go_env, _run
from nodeagent.testbed.versions import cache_root

COREDNS_MODULE = "github.com/coredns/coredns"
# kubeadm v1.34.4's CoreDNSVersion (cmd/kubeadm/app/constants): what it would deploy.
KUBEADM_COREDNS_VERSION = "v1.12.1"
# The version built: KUBEADM_COREDNS_VERSION when the module proxy serves it, else the nearest served one
# (`go list -m -versions github.com/coredns/coredns` lists v1.14.3 ... here).
COREDNS_VERSION = "v1.14.3"
COREDNS_IMAGE = "coredns"
# As upstream's image: the binary at the root, run as the entrypoint.
COREDNS_IN_IMAGE = "/coredns"

_SEMVER = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


def _key(version: str) -> tuple[int, int, int]:
    match = _SEMVER.match(version)
    if match is None:
        raise ValueError(f"not a release version: {version!r}")
    return (int(match.group(1)), int(match.group(2)), int(match.group(3)))


def nearest_served(wanted: str, served: Iterable[str]) -> str:
    """`wanted` when served, else the oldest served release newer than it (closest to what kubeadm tests with),
    else the newest served release older than it. Pre-releases are ignored."""
    releases = sorted((v for v in served if _SEMVER.match(v)), key=_key)
    if not releases:
        raise ValueError(f"no release of {COREDNS_MODULE} is served")
    if wanted in releases:
        return wanted
    newer = [v for v in releases if _key(v) > _key(wanted)]
    return newer[0] if newer else releases[-1]


def coredns_path() -> Path:
    return cache_root() / f"coredns-{COREDNS_VERSION}" / "coredns"


def coredns_build_argv(go: str, version: str = COREDNS_VERSION) -> list[str]:
    """`go install` of the module at `version`, static and stamped as upstream's Makefile does."""
    return [
        go,
        "install",
        "-trimpath",
        "-ldflags",
        f"-s -w -X github.com/coredns/coredns/coremain.GitCommit={version}",
        f"{COREDNS_MODULE}@{version}",
    ]


def build_coredns(progress: Progress) -> Path:
    """CoreDNS into the versioned cache; a no-op when it is there."""
    binary = coredns_path()
    if binary.exists():
        progress.step(f"coredns {COREDNS_VERSION}: cached")
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    gobin = binary.parent.with_name(binary.parent.name + ".build")
    shutil.rmtree(gobin, ignore_errors=True)
    gobin.mkdir(parents=True)
    # `pkg@version` ignores any current module and refuses -mod=mod: GOFLAGS keeps only -buildvcs (as metrics-server).
    env = {**_go_env(cache_root()), "GOFLAGS": "-buildvcs=false", "GOBIN": str(gobin)}
    progress.step(f"coredns {COREDNS_VERSION} (kubeadm's is {KUBEADM_COREDNS_VERSION}, not served): go install")
    started = time.monotonic()
    _run(coredns_build_argv(go), env=env, cwd=gobin, step="go install coredns")
    built = gobin / "coredns"
    if not built.is_file():
        raise InstallError(f"go install coredns left no binary in {gobin}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    built.replace(binary)  # whole or not at all: its presence is the cache check
    shutil.rmtree(gobin, ignore_errors=True)
    progress.step(f"coredns: built in {time.monotonic() - started:.0f}s")
    return binary


def coredns_files(data: bytes) -> list[TarEntry]:
    """The image's files: the binary at /coredns and a writable-looking /tmp (the root is mounted read-only)."""
    return [TarEntry.file(COREDNS_IN_IMAGE.lstrip("/"), data, mode=0o755), TarEntry.directory("tmp", mode=0o1777)]


def coredns_image_config() -> dict[str, object]:
    return {
        "Entrypoint": [COREDNS_IN_IMAGE],
        "Env": [images.DEFAULT_PATH],
        "WorkingDir": "/",
        "ExposedPorts": {
            "53/tcp": {},
            "53/udp": {},
        },
    }


def build_coredns_image(dest: Path, binary: Path) -> OCIImage:
    if not binary.is_file():
        raise ImageBuildError(f"{binary} is missing: `nodeagent testbed install` builds CoreDNS")
    data = binary.read_bytes()
    inputs = {
        "image": "kubeadm-coredns",
        "version": COREDNS_VERSION,
        "binary": images.sha256_digest(data),
        "architecture": images.host_architecture(),
    }
    return images._build(dest, inputs, lambda: coredns_files(data), coredns_image_config())
