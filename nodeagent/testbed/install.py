"""`nodeagent testbed install`: put every real part of the testbed on a fresh Debian 12 machine.

Idempotent: each step checks what is already there and does nothing when it is. Everything comes from package
registries only (Debian, the Go module proxy), because these machines reach nothing else:

- containerd 1.7, etcd 3.5 and docker-registry from Debian trixie, with the trixie suite pinned low (priority 100)
  so that nothing else on the machine moves to trixie;
- runc, iproute2, busybox-static and the reference CNI plugins from bookworm, and curl and netcat-openbsd, which
  the agnhost image carries;
- kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and kubectl built from one pinned release of the
  `k8s.io/kubernetes` Go module, and crictl from `sigs.k8s.io/cri-tools`, into a versioned cache outside the repo;
- with `--with-kubelet` only, the upstream kubelet of the same release (the testbed's node instead of nodeagent,
  testbed/upstreamkubelet.py), built and stamped as the control plane is;
- the testbed's gRPC health server (`grpchealth/main.go`, on a pinned `google.golang.org/grpc`), built static, which
  the testbed packs into the image that grpc probes are tested against;
- metrics-server from `sigs.k8s.io/metrics-server`, with exactly the dependencies of its own go.mod (as its release
  is built), which the testbed registers through the aggregation layer for `kubectl top`;
- agnhost, the e2e suite's test image binary, from `k8s.io/kubernetes/test/images/agnhost` of the same release,
  static, which the testbed packs into an image under upstream's e2e name and tag;
- vanilla BusyBox from its release tarball (from the Debian pool, checked against a pinned digest), `make defconfig`
  and static, the base of the testbed's e2e busybox, agnhost and nonewprivs images as upstream's are busybox:1.37.0
  and alpine (whose busybox is close to the vanilla one, not to Debian's);
- nnp, the nonewprivs image's program, from `k8s.io/kubernetes/test/images/nonewprivs` of the release, static;
- Debian bookworm's nginx and nginx-common (`apt-get download`, `dpkg-deb -x` into the cache, never installed, which
  would start a daemon), the program of the testbed's e2e nginx images;
- with `--with-csi` only, the testbed's CSI stack (testbed/csistack.py): the e2e suite's CSI mock driver and our
  registration sidecar, built on packages of the release, and the external-attacher from its own module;
- with `--with-certified` only, the parts of the images only the certified `[Conformance]` suite pulls
  (testbed/certifiedbuild.py): sample-apiserver, etcd 3.6, and Debian's apache2-bin and bind9-dnsutils;
- with `--with-kwok` only, KWOK's controller from `sigs.k8s.io/kwok` (testbed/kwok.py), the peer that
  `benchmarks/fleet.py --peer kwok` measures `nodeagent fleet` beside.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from nodeagent.testbed.versions import (
    AGNHOST_VERSION,
    BUSYBOX_SOURCE_SHA256,
    BUSYBOX_SOURCE_URL,
    BUSYBOX_VERSION,
    CRI_TOOLS_VERSION,
    CSI_MOCK_SOURCE,
    CSI_REGISTRAR_SOURCE,
    E2E_BUSYBOX_TAG,
    EXTERNAL_ATTACHER_VERSION,
    GRPC_GO_VERSION,
    GRPC_HEALTH_SOURCE,
    KUBERNETES_VERSION,
    METRICS_SERVER_VERSION,
    NGINX_IMAGE_TAGS,
    NGINX_VERSION,
    NONEWPRIVS_VERSION,
    agnhost_path,
    busybox_path,
    cache_root,
    crictl_path,
    csi_attacher_path,
    csi_mock_path,
    csi_registrar_path,
    grpc_health_path,
    kubelet_path,
    kubernetes_bin_dir,
    metrics_server_path,
    nginx_root,
    nonewprivs_path,
)

log = logging.getLogger(__name__)

TRIXIE_SOURCES = Path("/etc/apt/sources.list.d/nodeagent-trixie.sources")
TRIXIE_PIN = Path("/etc/apt/preferences.d/nodeagent-trixie")
POLICY_RC = Path("/usr/sbin/policy-rc.d")

# package -> the version prefix we need (checked with dpkg-query).
BOOKWORM_PACKAGES: dict[str, str] = {
    "runc": "",
    "iproute2": "",
    "busybox-static": "",
    "containernetworking-plugins": "",
    "ca-certificates": "",
    # The pause image's binary is compiled from nodeagent/testbed/pause.c, statically.
    "gcc": "",
    "libc6-dev": "",
    # The agnhost image carries Debian's curl (with its libraries), as upstream's carries alpine's.
    "curl": "",
    # ... and OpenBSD's nc (108 kB with libbsd0), which the Services and HostPort specs run in agnhost.
    "netcat-openbsd": "",
    # Vanilla BusyBox is built from source (with gcc and libc6-dev above; Python unpacks the .tar.bz2).
    "make": "",
    # tests/unit/nodeshutdown/test_logind_dbus.py runs the agent's logind client against a private bus of its own.
    "dbus-daemon": "",
}
TRIXIE_PACKAGES: dict[str, str] = {
    "containerd": "1.7.",
    "etcd-server": "3.5.",
    "docker-registry": "2.8.",
}
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl")
# Built only when asked (`nodeagent testbed install --with-kubelet`): the upstream kubelet, which the testbed can run
# as its node instead of nodeagent (testbed/upstreamkubelet.py), for the differential corpus and benchmarks/versus.
OPTIONAL_KUBERNETES_COMMANDS = ("kubelet",)
KUBELET_PACKAGE = "k8s.io/kubernetes/cmd/kubelet"


class InstallError(RuntimeError):
    """A step of the install failed; the message names the step and carries the tail of its output."""


@dataclass(frozen=True)
class Progress:
    """Prints one line per step, so a user watching a cold install (tens of minutes) sees where it is."""

    write: Callable[[str], None]

    def step(self, message: str) -> None:
        self.write(f"[nodeagent install] {message}")


def _run(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, step: str) -> str:
    merged = dict(os.environ)
    if env:
        merged.update(env)
    proc = subprocess.run(
        list(cmd), env=merged, cwd=cwd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise InstallError(f"{step} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def installed_version(package: str) -> str | None:
    """The installed version of a Debian package, or None when it is not installed."""
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Status}\t${Version}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    status, _, version = proc.stdout.partition("\t")
    return version if status.endswith(" installed") else None


def missing_packages(wanted: dict[str, str]) -> list[str]:
    missing = []
    for package, prefix in wanted.items():
        version = installed_version(package)
        if version is None or not version.split(":")[-1].startswith(prefix):
            missing.append(package)
    return missing


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def configure_trixie() -> bool:
    """Add the trixie suite, pinned at 100: only packages asked for as `pkg/trixie` come from it."""
    sources = (
        "Types: deb\n"
        "URIs: http://deb.debian.org/debian\n"
        "Suites: trixie\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    pin = "Package: *\nPin: release n=trixie\nPin-Priority: 100\n"
    changed = _write_if_changed(TRIXIE_SOURCES, sources)
    return _write_if_changed(TRIXIE_PIN, pin) or changed


def install_debian_packages(
    progress: Progress,
    bookworm_packages: dict[str, str] = BOOKWORM_PACKAGES,
    trixie_packages: dict[str, str] = TRIXIE_PACKAGES,
) -> None:
    """Install what is missing of the two package sets (package -> version prefix); the testbed's by default, and
    the Vagrant VM's host packages from nodeagent/vm/packages.py."""
    bookworm = missing_packages(bookworm_packages)
    trixie = missing_packages(trixie_packages)
    sources_changed = configure_trixie()
    if not bookworm and not trixie:
        progress.step("debian packages: all present")
        return
    progress.step(f"apt-get update (trixie pinned at 100; missing: {', '.join(bookworm + trixie)})")
    _run(["apt-get", "update"], step="apt-get update")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    # Debian's packages start their daemons on install; the testbed runs its own, so forbid that for the install.
    own_policy = not POLICY_RC.exists()
    if own_policy:
        POLICY_RC.write_text("#!/bin/sh\nexit 101\n")
        POLICY_RC.chmod(0o755)
    try:
        args = ["apt-get", "install", "-y", "--no-install-recommends"]
        if bookworm:
            progress.step(f"apt-get install {' '.join(bookworm)}")
            _run([*args, *bookworm], env=env, step="apt-get install (bookworm)")
        if trixie:
            progress.step(f"apt-get install {' '.join(p + '/trixie' for p in trixie)}")
            _run([*args, *(p + "/trixie" for p in trixie)], env=env, step="apt-get install (trixie)")
    finally:
        if own_policy:
            POLICY_RC.unlink(missing_ok=True)
    del sources_changed
    still = missing_packages({**bookworm_packages, **trixie_packages})
    if still:
        raise InstallError(f"packages still missing after apt-get install: {still}")


def _staging_modules(kubernetes_gomod: str) -> list[str]:
    """The k8s.io/* staging modules that k8s.io/kubernetes replaces with ./staging paths."""
    modules = []
    for line in kubernetes_gomod.splitlines():
        parts = line.split()
        if "=>" in parts and parts[0].startswith("k8s.io/") and parts[-1].startswith("./staging/"):
            modules.append(parts[0])
    return sorted(set(modules))


def _go_env(cache: Path) -> dict[str, str]:
    return {"GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "HOME": str(Path.home())}


@dataclass(frozen=True)
class KubernetesSource:
    """The `k8s.io/kubernetes` module of KUBERNETES_VERSION as the steps that build from it or check against it see
    it: the go command and environment they run with, and the module's files and go.mod in the module cache."""

    go: str
    env: dict[str, str]
    dir: Path
    gomod: Path

    def manifest_go(self) -> str:
        """test/utils/image/manifest.go: the e2e suite's image names and tags."""
        return (self.dir / "test/utils/image/manifest.go").read_text()


def kubernetes_source() -> KubernetesSource:
    """`go mod download` the release (a no-op once it is in the module cache) and say where it is."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = _go_env(cache_root())
    info = json.loads(
        _run(
            [go, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
            env=env,
            step="go mod download k8s.io/kubernetes",
        )
    )
    return KubernetesSource(go=go, env=env, dir=Path(info["Dir"]), gomod=Path(info["GoMod"]))


def control_plane_module(program: str) -> Path:
    """The control plane's build module (go.mod with the staging `replace` lines, go.sum), which the release's test
    programs are built in a copy of: they share its module and build caches but never write the same go.mod, even
    when both builds run at once. Checked before anything is downloaded for `program`."""
    module = kubernetes_bin_dir().parent / "build"
    if not (module / "go.mod").exists():
        raise InstallError(f"{program} is built in the control plane's build module, and {module}/go.mod is missing")
    return module


def fresh_module_copy(module: Path, work: Path) -> Path:
    """`work`, emptied of what a failed build left, holding a copy of `module`'s go.mod and go.sum."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name in ("go.mod", "go.sum"):
        if (module / name).exists():
            shutil.copyfile(module / name, work / name)
    return work


def kubernetes_version_ldflags() -> str:
    """The `-X` flags that stamp KUBERNETES_VERSION into a command of the release (what `--version` prints and what
    a node reports as kubeletVersion), as upstream's hack/lib/version.sh does."""
    major, minor = KUBERNETES_VERSION.removeprefix("v").split(".")[:2]
    return " ".join(
        f"-X {pkg}.{key}={value}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, value in (
            ("gitVersion", KUBERNETES_VERSION),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"),
        )
    )


def build_in_release_module(
    source: KubernetesSource,
    module: Path,
    binary: Path,
    *,
    package: str,
    work: Path,
    ldflags: str = "",
    get: Sequence[str] | None = None,
    main_source: Path | None = None,
    beside: dict[str, Path] | None = None,
) -> float:
    """Build one program in `work`, a fresh copy of the control plane's build `module` (so the builds share its module
    and build caches but never write the same go.mod, even when two run at once), and put it at `binary`.

    `go get` each package of `get` (default: `package`) at KUBERNETES_VERSION first: a package path without @version
    would mean @upgrade, i.e. the newest Kubernetes, not the pinned one. With `main_source`, `package` is ignored and
    that one file is built as the main package (our own programs on the release's packages). Files of `beside` are
    copied next to the binary, which is put in place last, whole or not at all: its presence is the cache check.
    Returns the seconds the build took."""
    started = time.monotonic()
    work = fresh_module_copy(module, work)
    gets = [package] if get is None else list(get)
    if gets:
        argv = [source.go, "get", *(f"{p}@{KUBERNETES_VERSION}" for p in gets)]
        _run(argv, env=source.env, cwd=work, step=f"go get for {binary.name}")
    if main_source is not None:
        (work / "cmd").mkdir()
        shutil.copyfile(main_source, work / "cmd" / "main.go")
        package = "./cmd"
    partial = work / binary.name
    _run(
        [source.go, "build", "-trimpath", "-ldflags", f"-s -w {ldflags}".rstrip(), "-o", str(partial), package],
        env=source.env,
        cwd=work,
        step=f"go build {binary.name}",
    )
    binary.parent.mkdir(parents=True, exist_ok=True)
    for name, path in (beside or {}).items():
        shutil.copyfile(path, binary.parent / name)
    partial.replace(binary)
    shutil.rmtree(work, ignore_errors=True)
    return time.monotonic() - started


def build_kubernetes(progress: Progress) -> Path:
    """Build the control plane binaries and kubectl of KUBERNETES_VERSION into the versioned cache."""
    bin_dir = kubernetes_bin_dir()
    stamp = bin_dir / ".complete"
    if stamp.exists() and all((bin_dir / c).exists() for c in KUBERNETES_COMMANDS):
        progress.step(f"kubernetes {KUBERNETES_VERSION}: cached in {bin_dir}")
        return bin_dir
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        raise InstallError("go is not installed: the control plane is built from Go modules")
    work = bin_dir.parent / "build"
    work.mkdir(parents=True, exist_ok=True)
    progress.step(f"kubernetes {KUBERNETES_VERSION}: go mod download k8s.io/kubernetes")
    source = kubernetes_source()
    go, env = source.go, source.env
    gomod = source.gomod.read_text()
    staging_version = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
    replaces = "\n".join(f"\t{m} => {m} {staging_version}" for m in _staging_modules(gomod))
    (work / "go.mod").write_text(
        "module nodeagent.local/kubernetes-build\n\ngo 1.24.0\n\n"
        f"require k8s.io/kubernetes {KUBERNETES_VERSION}\n\nreplace (\n{replaces}\n)\n"
    )
    packages = [f"k8s.io/kubernetes/cmd/{c}" for c in KUBERNETES_COMMANDS]
    progress.step("kubernetes: resolving modules (go get)")
    # A package path without @version would mean @upgrade, i.e. the newest Kubernetes, not the pinned one.
    _run([go, "get", *(f"{p}@{KUBERNETES_VERSION}" for p in packages)], env=env, cwd=work, step="go get kubernetes")
    ldflags = kubernetes_version_ldflags()
    tmp_bin = bin_dir.with_name(bin_dir.name + ".tmp")
    tmp_bin.mkdir(parents=True, exist_ok=True)
    # A cache from before a command joined the list keeps what it has: only the new command is built. The optional
    # commands (the upstream kubelet) are kept too, or a rebuild of the control plane would drop them.
    for command in (*KUBERNETES_COMMANDS, *OPTIONAL_KUBERNETES_COMMANDS):
        if (bin_dir / command).exists() and not (tmp_bin / command).exists():
            shutil.copy2(bin_dir / command, tmp_bin / command)
    for command in KUBERNETES_COMMANDS:
        if (tmp_bin / command).exists():
            continue
        progress.step(f"kubernetes: go build {command} (several minutes on a cold cache)")
        started = time.monotonic()
        _run(
            [
                go,
                "build",
                "-trimpath",
                "-ldflags",
                f"-s -w {ldflags}",
                "-o",
                str(tmp_bin / command),
                f"k8s.io/kubernetes/cmd/{command}",
            ],
            env=env,
            cwd=work,
            step=f"go build {command}",
        )
        progress.step(f"kubernetes: built {command} in {time.monotonic() - started:.0f}s")
    if bin_dir.exists():
        shutil.rmtree(bin_dir)
    tmp_bin.rename(bin_dir)
    stamp.write_text(KUBERNETES_VERSION + "\n")
    return bin_dir


def build_kubelet(progress: Progress) -> Path:
    """The upstream kubelet of KUBERNETES_VERSION, stamped as the control plane is, into the versioned cache.

    Built in a copy of the control plane's build module (as agnhost is): the two share the module and build caches
    (under a minute with them warm) but never write the same go.mod.
    """
    return build_release_command(progress, "kubelet", KUBELET_PACKAGE, kubelet_path())


def build_release_command(progress: Progress, name: str, package: str, binary: Path) -> Path:
    """A command of the k8s.io/kubernetes release (kubelet, kubeadm) into `binary`, stamped as the control plane is;
    a no-op when it is there. Built in a copy of the control plane's build module named after it."""
    if binary.exists():
        progress.step(f"{name} {KUBERNETES_VERSION}: cached")
        return binary
    module = control_plane_module(name)
    source = kubernetes_source()
    progress.step(f"{name} {KUBERNETES_VERSION}: go build (several minutes on a cold cache)")
    took = build_in_release_module(
        source,
        module,
        binary,
        package=package,
        work=binary.parent.parent / f"build-{name}",
        ldflags=kubernetes_version_ldflags(),
    )
    progress.step(f"{name}: built in {took:.0f}s")
    return binary


def build_crictl(progress: Progress) -> Path:
    bin_dir = kubernetes_bin_dir()
    crictl = crictl_path()
    if crictl.exists():
        progress.step(f"crictl {CRI_TOOLS_VERSION}: cached")
        return crictl
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if crictl.parent.is_file():  # the layout before crictl got a directory of its own (to go on PATH)
        crictl.parent.unlink()
    crictl.parent.mkdir(parents=True, exist_ok=True)
    work = bin_dir.parent / "build-crictl"
    work.mkdir(parents=True, exist_ok=True)
    # The checksum database answers 404 for sigs.k8s.io/cri-tools and for the pre-release k8s.io/cri-client it
    # pins, although the module proxy serves both; so this one build (a test tool) runs without the sumdb.
    env = {**_go_env(cache_root()), "GOSUMDB": "off"}
    (work / "go.mod").write_text(
        f"module nodeagent.local/crictl-build\n\ngo 1.24.0\n\nrequire sigs.k8s.io/cri-tools {CRI_TOOLS_VERSION}\n"
    )
    progress.step(f"crictl {CRI_TOOLS_VERSION}: go build")
    _run([go, "get", f"sigs.k8s.io/cri-tools/cmd/crictl@{CRI_TOOLS_VERSION}"], env=env, cwd=work, step="go get crictl")
    _run(
        [
            go,
            "build",
            "-trimpath",
            "-ldflags",
            f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={CRI_TOOLS_VERSION}",
            "-o",
            str(crictl),
            "sigs.k8s.io/cri-tools/cmd/crictl",
        ],
        env=env,
        cwd=work,
        step="go build crictl",
    )
    return crictl


def build_grpc_health(progress: Progress) -> Path:
    """The gRPC health server, static (CGO_ENABLED=0, so it runs in an image holding nothing else)."""
    binary = grpc_health_path()
    if binary.exists():
        progress.step(f"grpc-health (grpc {GRPC_GO_VERSION}): cached")
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    work = binary.parent.with_name(binary.parent.name + ".build")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "main.go").write_bytes(GRPC_HEALTH_SOURCE.read_bytes())
    (work / "go.mod").write_text(
        f"module nodeagent.local/grpc-health\n\ngo 1.24.0\n\nrequire google.golang.org/grpc {GRPC_GO_VERSION}\n"
    )
    progress.step(f"grpc-health (grpc {GRPC_GO_VERSION}): go build")
    partial = work / "grpc-health"
    _run(
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
        env=_go_env(cache_root()),
        cwd=work,
        step="go build grpc-health",
    )
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial.replace(binary)  # the binary appears whole or not at all: its presence is the cache check
    shutil.rmtree(work, ignore_errors=True)
    return binary


def metrics_server_build_argv(go: str) -> list[str]:
    """`go install pkg@version` builds with the module's own go.mod and go.sum, so the binary has the dependency
    versions upstream's release has (k8s.io/* v0.33), not the control plane's; the version is stamped as its
    Makefile does (into k8s.io/client-go/pkg/version, which `metrics-server --version` prints)."""
    stamp = " ".join(
        f"-X k8s.io/client-go/pkg/version.{key}={value}"
        for key, value in (
            ("gitVersion", METRICS_SERVER_VERSION),
            ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"),
        )
    )
    return [
        go,
        "install",
        "-trimpath",
        "-ldflags",
        f"-s -w {stamp}",
        f"sigs.k8s.io/metrics-server/cmd/metrics-server@{METRICS_SERVER_VERSION}",
    ]


def go_install_into_cache(progress: Progress, *, label: str, argv: Sequence[str], binary: Path) -> Path:
    """`go install pkg@version` (`argv`, the module's own go.mod and go.sum pick the dependencies) into a GOBIN beside
    the cache, then the command moved to `binary`, whole or not at all: its presence is the cache check, so this is a
    no-op when it is there. `label` names the part and its version in the progress lines."""
    if binary.exists():
        progress.step(f"{label}: cached")
        return binary
    gobin = binary.parent.with_name(binary.parent.name + ".build")
    shutil.rmtree(gobin, ignore_errors=True)
    gobin.mkdir(parents=True)
    # `pkg@version` ignores any current module and refuses -mod=mod, so GOFLAGS keeps only -buildvcs.
    env = {**_go_env(cache_root()), "GOFLAGS": "-buildvcs=false", "GOBIN": str(gobin)}
    progress.step(f"{label}: go install (a few minutes on a cold cache)")
    started = time.monotonic()
    _run(argv, env=env, cwd=gobin, step=f"go install {label}")
    built = gobin / binary.name
    if not built.is_file():
        raise InstallError(f"go install {label} left no {binary.name} in {gobin}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    built.replace(binary)
    shutil.rmtree(gobin, ignore_errors=True)
    progress.step(f"{label}: built in {time.monotonic() - started:.0f}s")
    return binary


def build_metrics_server(progress: Progress) -> Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    return go_install_into_cache(
        progress,
        label=f"metrics-server {METRICS_SERVER_VERSION}",
        argv=metrics_server_build_argv(go),
        binary=metrics_server_path(),
    )


AGNHOST_PACKAGE = "k8s.io/kubernetes/test/images/agnhost"
# Upstream's agnhost image holds these at / (its Dockerfile: `ADD porter/localhost.crt localhost.crt`): `porter`
# serves TLS with them when a test points CERT_FILE/KEY_FILE there.
AGNHOST_PORTER_FILES = ("localhost.crt", "localhost.key")


def manifest_image_tag(manifest_go: str, name: str) -> str | None:
    """The tag test/utils/image/manifest.go gives the e2e image `name`, as in
    `configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.56"}`; None when it names no such image."""
    pattern = r'configs\[\w+\]\s*=\s*Config\{\s*list\.PromoterE2eRegistry\s*,\s*"' + re.escape(name)
    pattern += r'"\s*,\s*"([^"]+)"'
    match = re.search(pattern, manifest_go)
    return match.group(1) if match else None


def manifest_image_tags(manifest_go: str, name: str) -> list[str]:
    """Every tag manifest.go gives e2e images named `name`, in its order: nginx has two (Nginx and NginxNew)."""
    pattern = r'configs\[\w+\]\s*=\s*Config\{\s*list\.PromoterE2eRegistry\s*,\s*"' + re.escape(name)
    return re.findall(pattern + r'"\s*,\s*"([^"]+)"', manifest_go)


def build_agnhost(progress: Progress) -> Path:
    """agnhost of KUBERNETES_VERSION, static, with upstream's version stamp, next to porter's TLS files.

    It is built from a copy of the control plane's build module (go.mod with the staging `replace` lines, go.sum),
    so the two share the module and build caches but never write the same go.mod, even when both run at once.
    """
    binary = agnhost_path()
    if binary.exists() and all((binary.parent / name).exists() for name in AGNHOST_PORTER_FILES):
        progress.step(f"agnhost {AGNHOST_VERSION} (kubernetes {KUBERNETES_VERSION}): cached")
        return binary
    module = control_plane_module("agnhost")
    source = kubernetes_source()
    version = (source.dir / "test/images/agnhost/VERSION").read_text().strip()
    tag = manifest_image_tag(source.manifest_go(), "agnhost")
    if version != AGNHOST_VERSION or tag != AGNHOST_VERSION:
        # The image is pushed under AGNHOST_VERSION: a release whose e2e suite expects another tag needs it bumped.
        raise InstallError(
            f"kubernetes {KUBERNETES_VERSION} has agnhost {version} (manifest.go tag {tag}), "
            f"the testbed expects {AGNHOST_VERSION}: update AGNHOST_VERSION"
        )
    progress.step(f"agnhost {AGNHOST_VERSION}: go build (a few minutes on a cold cache)")
    took = build_in_release_module(
        source,
        module,
        binary,
        package=AGNHOST_PACKAGE,
        work=binary.parent.with_name(binary.parent.name + ".build"),
        # As upstream's image-util.sh builds it (CGO off, the VERSION file stamped into main.Version), trimmed.
        ldflags=f"-X main.Version={AGNHOST_VERSION}",
        beside={name: source.dir / "test/images/agnhost/porter" / name for name in AGNHOST_PORTER_FILES},
    )
    progress.step(f"agnhost: built in {took:.0f}s")
    return binary


NONEWPRIVS_PACKAGE = "k8s.io/kubernetes/test/images/nonewprivs"
# Upstream's busybox build as docker-library's non-glibc variants make it: `make defconfig`, then these.
BUSYBOX_CONFIG = {"CONFIG_STATIC": "y"}


def set_kconfig(config: str, values: dict[str, str]) -> str:
    """`.config` text with each symbol set to its value, as docker-library's sed does: a `CONFIG_X=...` line or a
    `# CONFIG_X is not set` line is replaced, a symbol on neither is appended. Other lines are kept as they are."""
    lines = config.splitlines()
    for symbol, value in values.items():
        setting = f"{symbol}={value}"
        found = False
        for i, line in enumerate(lines):
            if line.startswith(f"{symbol}=") or line == f"# {symbol} is not set":
                lines[i] = setting
                found = True
        if not found:
            lines.append(setting)
    return "\n".join(lines) + "\n"


def kconfig_has(config: str, values: dict[str, str]) -> list[str]:
    """The settings of `values` that `config` does not have (after `make oldconfig` had its say)."""
    present = set(config.splitlines())
    return [f"{symbol}={value}" for symbol, value in values.items() if f"{symbol}={value}" not in present]


def fetch_verified(url: str, dest: Path, sha256: str) -> Path:
    """Download `url` to `dest` unless a file with that digest is there; the digest is checked before the file is
    put in place, so a partial or altered download never is."""
    if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    try:
        with httpx.stream("GET", url, timeout=60.0, follow_redirects=True) as response, partial.open("wb") as out:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                digest.update(chunk)
                out.write(chunk)
    except (httpx.HTTPError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise InstallError(f"download of {url} failed: {exc}") from exc
    if digest.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise InstallError(f"{url}: sha256 {digest.hexdigest()}, expected {sha256}")
    partial.replace(dest)
    return dest


def build_busybox(progress: Progress) -> Path:
    """Vanilla BusyBox BUSYBOX_VERSION: the release tarball, `make defconfig`, CONFIG_STATIC=y, `make busybox`.

    As docker-library builds busybox:1.37.0 (its static variants), SOURCE_DATE_EPOCH is the tarball's own time, so
    the build date the binary prints is the release's and the same source gives the same binary.
    """
    binary = busybox_path()
    if binary.exists():
        progress.step(f"busybox {BUSYBOX_VERSION}: cached")
        return binary
    for tool in ("gcc", "make"):
        if shutil.which(tool) is None:
            raise InstallError(f"{tool} is not installed: busybox {BUSYBOX_VERSION} is built from source")
    work = binary.parent.with_name(binary.parent.name + ".build")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    tarball = cache_root() / "downloads" / BUSYBOX_SOURCE_URL.rpartition("/")[2]
    progress.step(f"busybox {BUSYBOX_VERSION}: fetching {BUSYBOX_SOURCE_URL}")
    fetch_verified(BUSYBOX_SOURCE_URL, tarball, BUSYBOX_SOURCE_SHA256)
    top = f"busybox-{BUSYBOX_VERSION}"
    with tarfile.open(tarball, "r:bz2") as archive:
        epoch = archive.getmember(top).mtime
        archive.extractall(work, filter="data")
    source = work / top
    env = {"SOURCE_DATE_EPOCH": str(epoch)}
    progress.step(f"busybox {BUSYBOX_VERSION}: make defconfig, static, make (about 30 s on 2 cores)")
    started = time.monotonic()
    _run(["make", "defconfig"], env=env, cwd=source, step="busybox make defconfig")
    config = source / ".config"
    config.write_text(set_kconfig(config.read_text(), BUSYBOX_CONFIG))
    # stdin is /dev/null: a symbol the change brings in takes its default, as in docker-library's build.
    _run(["make", "oldconfig"], env=env, cwd=source, step="busybox make oldconfig")
    missing = kconfig_has(config.read_text(), BUSYBOX_CONFIG)
    if missing:
        raise InstallError(f"busybox .config lacks {', '.join(missing)} after make oldconfig")
    _run(["make", f"-j{os.cpu_count() or 1}", "busybox"], env=env, cwd=source, step="busybox make")
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, binary.parent / ".config")
    (source / "busybox").replace(binary)  # last, whole or not at all: its presence is the cache check
    shutil.rmtree(work, ignore_errors=True)
    progress.step(f"busybox {BUSYBOX_VERSION}: built in {time.monotonic() - started:.0f}s")
    return binary


def check_manifest_tags(manifest_go: str, expected: dict[str, str]) -> None:
    """Each e2e image the testbed builds has the tag test/utils/image/manifest.go gives it: the images are pushed
    under the testbed's tags, and a release whose suite expects others needs them bumped."""
    wrong = {name: manifest_image_tag(manifest_go, name) for name in expected}
    wrong = {name: tag for name, tag in wrong.items() if tag != expected[name]}
    if wrong:
        raise InstallError(
            f"kubernetes {KUBERNETES_VERSION}'s manifest.go tags "
            + ", ".join(f"{name} {tag} (the testbed pushes {expected[name]})" for name, tag in sorted(wrong.items()))
            + ": update versions.py"
        )


def build_nonewprivs(progress: Progress) -> Path:
    """nnp of KUBERNETES_VERSION (prints its effective uid), static, in a copy of the control plane's build module
    as agnhost is; after checking that manifest.go tags nonewprivs and busybox as the testbed does."""
    binary = nonewprivs_path()
    if binary.exists():
        progress.step(f"nonewprivs {NONEWPRIVS_VERSION} (kubernetes {KUBERNETES_VERSION}): cached")
        return binary
    module = control_plane_module("nnp")
    source = kubernetes_source()
    check_manifest_tags(source.manifest_go(), {"nonewprivs": NONEWPRIVS_VERSION, "busybox": E2E_BUSYBOX_TAG})
    progress.step(f"nonewprivs {NONEWPRIVS_VERSION}: go build")
    work = binary.parent.with_name(binary.parent.name + ".build")
    build_in_release_module(source, module, binary, package=NONEWPRIVS_PACKAGE, work=work)
    return binary


NGINX_PACKAGES = ("nginx", "nginx-common")


def fetch_nginx(progress: Progress) -> Path:
    """Debian's nginx (/usr/sbin/nginx) and nginx-common (mime.types, the welcome page) of NGINX_VERSION, unpacked
    into the cache for the e2e nginx images; after checking that manifest.go tags those images NGINX_IMAGE_TAGS."""
    root = nginx_root()
    if (root / "usr/sbin/nginx").is_file():
        progress.step(f"nginx {NGINX_VERSION} (Debian): cached")
        return root
    tags = manifest_image_tags(kubernetes_source().manifest_go(), "nginx")
    if sorted(tags) != sorted(NGINX_IMAGE_TAGS):
        raise InstallError(
            f"kubernetes {KUBERNETES_VERSION}'s manifest.go tags nginx {', '.join(tags) or 'nowhere'} "
            f"(the testbed pushes {', '.join(NGINX_IMAGE_TAGS)}): update versions.py"
        )
    work = root.with_name("download")
    staging = root.with_name("root.partial")
    for path in (work, staging, root):  # root: what a run that failed half-way left
        if path.exists():
            shutil.rmtree(path)
    work.mkdir(parents=True)
    progress.step(f"nginx {NGINX_VERSION}: apt-get download {' '.join(NGINX_PACKAGES)}")
    _run(["apt-get", "download", *NGINX_PACKAGES], cwd=work, step="apt-get download nginx")
    debs = sorted(work.glob("*.deb"))
    for deb in debs:
        version = _run(["dpkg-deb", "-f", str(deb), "Version"], step=f"dpkg-deb -f {deb.name}").strip()
        if not version.startswith(f"{NGINX_VERSION}-"):
            raise InstallError(f"{deb.name} is nginx {version}, not {NGINX_VERSION}: update versions.py")
        _run(["dpkg-deb", "-x", str(deb), str(staging)], step=f"dpkg-deb -x {deb.name}")
    if len(debs) != len(NGINX_PACKAGES):
        raise InstallError(f"apt-get download {' '.join(NGINX_PACKAGES)} gave {[d.name for d in debs]}")
    staging.replace(root)  # whole or not at all: its nginx is the cache check
    shutil.rmtree(work, ignore_errors=True)
    return root


# The packages of KUBERNETES_VERSION that csimock/main.go serves: the e2e suite's CSI mock driver.
CSI_MOCK_PACKAGES = (
    "k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/driver",
    "k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service",
)
EXTERNAL_ATTACHER_MODULE = "github.com/kubernetes-csi/external-attacher/v4"


def build_csi_mock(progress: Progress) -> Path:
    """The testbed's CSI mock driver: csimock/main.go on the e2e suite's mock driver packages of the release."""
    binary = csi_mock_path()
    if binary.exists():
        progress.step(f"csi-mock (kubernetes {KUBERNETES_VERSION}): cached")
        return binary
    module = control_plane_module("csi-mock")
    progress.step("csi-mock: go build")
    took = build_in_release_module(
        kubernetes_source(),
        module,
        binary,
        package="",
        get=CSI_MOCK_PACKAGES,
        main_source=CSI_MOCK_SOURCE,
        work=binary.parent.with_name(binary.parent.name + ".build"),
    )
    progress.step(f"csi-mock: built in {took:.0f}s")
    return binary


def build_csi_registrar(progress: Progress) -> Path:
    """The testbed's plugin-registration sidecar (csiregistrar/main.go), on the release's k8s.io/kubelet staging
    module (pluginregistration/v1) and its CSI spec and grpc, all already in the control plane's module graph."""
    binary = csi_registrar_path()
    if binary.exists():
        progress.step(f"csi-registrar (kubernetes {KUBERNETES_VERSION}): cached")
        return binary
    module = control_plane_module("csi-registrar")
    progress.step("csi-registrar: go build")
    took = build_in_release_module(
        kubernetes_source(),
        module,
        binary,
        package="",
        get=(),
        main_source=CSI_REGISTRAR_SOURCE,
        work=binary.parent.with_name(binary.parent.name + ".build"),
    )
    progress.step(f"csi-registrar: built in {took:.0f}s")
    return binary


def build_csi_attacher(progress: Progress) -> Path:
    """csi-attacher of EXTERNAL_ATTACHER_VERSION, built in a copy of its own module with its own go.mod and go.sum
    (-mod=readonly: exactly the dependencies of its release), stamped as its Makefile does (main.version). Not
    `go install pkg@version`, which refuses a module whose go.mod has `replace` lines, as this one's has."""
    binary = csi_attacher_path()
    if binary.exists():
        progress.step(f"external-attacher {EXTERNAL_ATTACHER_VERSION}: cached")
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = {**_go_env(cache_root()), "GOFLAGS": "-mod=readonly -buildvcs=false"}
    module = f"{EXTERNAL_ATTACHER_MODULE}@{EXTERNAL_ATTACHER_VERSION}"
    progress.step(f"external-attacher {EXTERNAL_ATTACHER_VERSION}: go mod download, go build (minutes on a cold cache)")
    started = time.monotonic()
    info = json.loads(_run([go, "mod", "download", "-json", module], env=env, step="go mod download external-attacher"))
    work = binary.parent.with_name(binary.parent.name + ".build")
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(info["Dir"], work)
    partial = work / "csi-attacher.bin"
    ldflags = f"-s -w -X main.version={EXTERNAL_ATTACHER_VERSION}"
    argv = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "./cmd/csi-attacher"]
    _run(argv, env=env, cwd=work, step="go build csi-attacher")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial.replace(binary)  # whole or not at all: its presence is the cache check
    shutil.rmtree(work, ignore_errors=True)
    progress.step(f"external-attacher: built in {time.monotonic() - started:.0f}s")
    return binary


CSI_STEPS = (build_csi_mock, build_csi_registrar, build_csi_attacher)


def install_steps(
    *,
    with_kubelet: bool = False,
    with_csi: bool = False,
    with_kubeadm: bool = False,
    with_certified: bool = False,
    with_kwok: bool = False,
) -> list[Callable[[Progress], object]]:
    """The steps of an install, in order; the upstream kubelet only when asked for (`--with-kubelet`), after the
    control plane, whose build module it is built in; the CSI stack (`--with-csi`) last, as it needs that module
    too; the certified suite's image parts (`--with-certified`, testbed/certifiedbuild.py) at the very end, KWOK
    (`--with-kwok`, testbed/kwok.py, a module of its own) after them."""
    steps: list[Callable[[Progress], object]] = [
        install_debian_packages,
        build_kubernetes,
        build_crictl,
        build_grpc_health,
        build_metrics_server,
        build_agnhost,
        build_busybox,
        build_nonewprivs,
        fetch_nginx,
    ]
    # CoreDNS (testbed/coredns.py, from the Go module proxy): the testbed's cluster DNS and kubeadm's addon.
    from nodeagent.testbed.coredns import build_coredns  # noqa: PLC0415 - coredns.py builds on this module

    steps.insert(steps.index(build_metrics_server) + 1, build_coredns)
    if with_kubelet:
        steps.insert(steps.index(build_kubernetes) + 1, build_kubelet)
    if with_kubeadm:
        # kubeadm (`nodeagent cluster up`, testbed/kubeadm.py), in the control plane's build module like the kubelet.
        from nodeagent.testbed.kubeadm import build_kubeadm  # noqa: PLC0415 - kubeadm.py builds on this module

        steps.insert(steps.index(build_kubernetes) + 1, build_kubeadm)
    if with_csi:
        steps.extend(CSI_STEPS)
    if with_certified:
        from nodeagent.testbed.certifiedbuild import CERTIFIED_STEPS  # noqa: PLC0415 - it builds on this module

        steps.extend(CERTIFIED_STEPS)
    if with_kwok:
        from nodeagent.testbed.kwok import build_kwok  # noqa: PLC0415 - kwok.py builds on this module

        steps.append(build_kwok)
    return steps


def install(
    progress: Progress | None = None,
    *,
    with_kubelet: bool = False,
    with_csi: bool = False,
    with_kubeadm: bool = False,
    with_certified: bool = False,
    with_kwok: bool = False,
) -> None:
    progress = progress or Progress(write=lambda line: print(line, file=sys.stderr, flush=True))
    if os.geteuid() != 0:
        raise InstallError("nodeagent testbed install must run as root (it installs Debian packages)")
    started = time.monotonic()
    chosen = install_steps(
        with_kubelet=with_kubelet,
        with_csi=with_csi,
        with_kubeadm=with_kubeadm,
        with_certified=with_certified,
        with_kwok=with_kwok,
    )
    for step in chosen:
        step(progress)
    progress.step(f"done in {time.monotonic() - started:.0f}s")
