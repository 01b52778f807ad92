"""Build the upstream e2e suites and the ginkgo CLI of the testbed's release, once, into the cache.

Two suites, built the same way (a `GoTestTarget` each):
- e2e.test, `go test -c k8s.io/kubernetes/test/e2e`, the cluster suite `nodeagent conformance` runs;
- e2e_node.test, `go test -c k8s.io/kubernetes/test/e2e_node`, the node suite (eviction, image GC, critical pods,
  local-storage isolation: docs/conformance.md, "node-eviction suite").

Each is built in a module of its own (`build-e2e`, `build-e2e-node`, next to the control plane's `build`), whose
go.mod takes the control plane module's `replace` lines (every k8s.io staging module mapped to its v0.x release),
so the suite is built from exactly the sources the testbed's apiserver comes from. A module of its own, not the
control plane's nor the other suite's: `go get` of a suite adds requirements to go.mod, and other builds (agnhost,
the control plane, the other suite) run in their modules and must not see them half-written. The Go build cache is
shared, so the second suite compiles only the packages the first did not.

The ginkgo CLI is `go install github.com/onsi/ginkgo/v2/ginkgo@<version>`, with the version k8s.io/kubernetes's own
go.mod requires: the CLI and the library inside e2e.test must match, or ginkgo warns and parallel runs may break.

Each binary appears whole or not at all (built aside, then renamed): its presence is the cache check.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeagent.conformance.errors import BuildError
from nodeagent.conformance.progress import Progress
from nodeagent.testbed.versions import (
    KUBERNETES_VERSION,
    e2e_node_test_path,
    e2e_test_path,
    ginkgo_path,
    kubernetes_bin_dir,
)

E2E_PACKAGE = "k8s.io/kubernetes/test/e2e"
E2E_NODE_PACKAGE = "k8s.io/kubernetes/test/e2e_node"
GINKGO_MODULE = "github.com/onsi/ginkgo/v2"
GINKGO_PACKAGE = f"{GINKGO_MODULE}/ginkgo"
HEARTBEAT_SECONDS = 60.0
NICENESS = 10


@dataclass(frozen=True)
class GoTestTarget:
    """One upstream test package compiled to a binary in the cache by `go test -c`."""

    package: str  # the Go package, e.g. k8s.io/kubernetes/test/e2e
    module: str  # the path of the build module's own go.mod
    build_dir: str  # the build module's directory, beside the control plane's `build`
    binary_path: Callable[[], Path]  # where the binary lives in the versioned cache

    @property
    def name(self) -> str:
        """The binary's file name, as upstream names it: the package's last element + `.test`."""
        return self.package.rsplit("/", 1)[-1] + ".test"

    def work_dir(self) -> Path:
        return kubernetes_bin_dir().parent / self.build_dir


E2E = GoTestTarget(E2E_PACKAGE, "nodeagent.local/kubernetes-e2e-build", "build-e2e", e2e_test_path)
E2E_NODE = GoTestTarget(
    E2E_NODE_PACKAGE, "nodeagent.local/kubernetes-e2e-node-build", "build-e2e-node", e2e_node_test_path
)


@dataclass(frozen=True)
class Suite:
    """The two binaries a run needs."""

    e2e_test: Path
    ginkgo: Path


def replace_lines(gomod: str) -> list[str]:
    """The `replace` directives of a go.mod, each as `old [version] => new [version]`, from blocks and single lines."""
    lines: list[str] = []
    in_block = False
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
            elif "=>" in line:
                lines.append(" ".join(line.split()))
        elif line in ("replace (", "replace("):
            in_block = True
        elif line.startswith("replace ") and "=>" in line:
            lines.append(" ".join(line.removeprefix("replace ").split()))
    return lines


def required_version(gomod: str, module: str) -> str | None:
    """The version a go.mod requires of `module` (in a require block or on a single require line), or None."""
    pattern = re.compile(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)")
    in_block = False
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].rstrip()
        stripped = line.strip()
        if stripped in ("require (", "require("):
            in_block = True
            continue
        if in_block and stripped == ")":
            in_block = False
            continue
        if not in_block and not stripped.startswith("require "):
            continue
        match = pattern.match(line)
        if match:
            return match.group(1)
    return None


def e2e_gomod(replaces: Sequence[str], module: str = E2E.module) -> str:
    """go.mod of a suite's build module: the pinned release and the control plane module's replace lines."""
    block = "\n".join(f"\t{r}" for r in replaces)
    return f"module {module}\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes {KUBERNETES_VERSION}\n\nreplace (\n{block}\n)\n"


def version_ldflags() -> str:
    """The release stamped into e2e.test as the control plane's binaries have it (it logs its version at start)."""
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


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if found is None:
        raise BuildError("go is not installed: e2e.test and ginkgo are built from Go modules")
    return found


def _go_env(**extra: str) -> dict[str, str]:
    # As the testbed's install builds: static, no VCS stamping, and the installed toolchain only (no download).
    env = dict(os.environ)
    env.update({"GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"})
    env.update(extra)
    return env


def _run(argv: Sequence[str], *, cwd: Path, env: dict[str, str], step: str, progress: Progress) -> str:
    """Run one Go command; a line every HEARTBEAT_SECONDS while it runs, the tail of its output when it fails."""
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    while True:
        try:
            output, _ = proc.communicate(timeout=HEARTBEAT_SECONDS)
            break
        except subprocess.TimeoutExpired:
            progress.step(f"{step}: still running ({time.monotonic() - started:.0f}s)")
    if proc.returncode != 0:
        tail = "\n".join(output.splitlines()[-40:])
        raise BuildError(f"{step} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")
    return output


def control_plane_gomod() -> str:
    """The control plane build module's go.mod, which `nodeagent testbed install` writes."""
    path = kubernetes_bin_dir().parent / "build" / "go.mod"
    if not path.exists():
        raise BuildError(f"{path} is missing: run `nodeagent testbed install` first (it writes the replace lines)")
    return path.read_text()


def build_go_test(target: GoTestTarget, progress: Progress) -> Path:
    """`target`'s binary, built when missing (minutes on a cold Go cache); its presence is the cache check."""
    binary = target.binary_path()
    if binary.exists():
        progress.step(f"{target.name} {KUBERNETES_VERSION}: cached in {binary}")
        return binary
    go = _go()
    replaces = replace_lines(control_plane_gomod())
    if not replaces:
        raise BuildError("the control plane build module's go.mod has no replace lines")
    work = target.work_dir()
    work.mkdir(parents=True, exist_ok=True)
    gomod = work / "go.mod"
    if not gomod.exists():
        gomod.write_text(e2e_gomod(replaces, target.module))
        sums = kubernetes_bin_dir().parent / "build" / "go.sum"
        if sums.exists():  # a head start: the checksums of every module the control plane already resolved
            shutil.copyfile(sums, work / "go.sum")
    env = _go_env()
    started = time.monotonic()
    progress.step(f"{target.name} {KUBERNETES_VERSION}: resolving modules (go get {target.package})")
    # @version: a bare package path would mean @upgrade, i.e. the newest release, not the pinned one.
    _run(
        _niced([go, "get", f"{target.package}@{KUBERNETES_VERSION}"]),
        cwd=work,
        env=env,
        step=f"go get {target.name}",
        progress=progress,
    )
    progress.step(f"{target.name}: go test -c (several minutes on a cold cache)")
    partial = work / target.name
    ldflags = f"-s -w {version_ldflags()}"
    _run(
        _niced([go, "test", "-c", "-trimpath", "-ldflags", ldflags, "-o", str(partial), target.package]),
        cwd=work,
        env=env,
        step=f"go test -c {target.name}",
        progress=progress,
    )
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial.replace(binary)
    size = binary.stat().st_size >> 20
    progress.step(f"{target.name}: built in {time.monotonic() - started:.0f}s ({size} MiB)")
    return binary


def _niced(argv: list[str]) -> list[str]:
    """The build at a lower priority: it takes both cores for minutes, beside testbeds whose timing matters."""
    nice = shutil.which("nice")
    return [nice, "-n", str(NICENESS), *argv] if nice else argv


def build_e2e(progress: Progress) -> Path:
    return build_go_test(E2E, progress)


def build_e2e_node(progress: Progress) -> Path:
    return build_go_test(E2E_NODE, progress)


def build_ginkgo(progress: Progress) -> Path:
    binary = ginkgo_path()
    if binary.exists():
        progress.step(f"ginkgo: cached in {binary}")
        return binary
    go = _go()
    kubernetes_gomod = _kubernetes_gomod(go)
    version = required_version(kubernetes_gomod, GINKGO_MODULE)
    if version is None:
        raise BuildError(f"k8s.io/kubernetes {KUBERNETES_VERSION} go.mod does not require {GINKGO_MODULE}")
    gobin = binary.parent.with_name(binary.parent.name + ".ginkgo-build")
    if gobin.exists():
        shutil.rmtree(gobin)
    gobin.mkdir(parents=True)
    # `pkg@version` builds with ginkgo's own go.mod and refuses -mod=mod; the command lands in GOBIN.
    env = _go_env(GOFLAGS="-buildvcs=false", GOBIN=str(gobin))
    progress.step(f"ginkgo {version}: go install")
    started = time.monotonic()
    _run(
        [go, "install", "-trimpath", "-ldflags", "-s -w", f"{GINKGO_PACKAGE}@{version}"],
        cwd=gobin,
        env=env,
        step="go install ginkgo",
        progress=progress,
    )
    binary.parent.mkdir(parents=True, exist_ok=True)
    (gobin / "ginkgo").replace(binary)
    shutil.rmtree(gobin, ignore_errors=True)
    progress.step(f"ginkgo {version}: built in {time.monotonic() - started:.0f}s")
    return binary


def _kubernetes_gomod(go: str) -> str:
    """k8s.io/kubernetes's own go.mod at the pinned release (from the module cache, downloaded if need be)."""
    out = _run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
        cwd=kubernetes_bin_dir().parent,
        env=_go_env(GOFLAGS="-buildvcs=false"),
        step="go mod download k8s.io/kubernetes",
        progress=Progress(write=lambda _line: None),
    )
    info = json.loads(out)
    return Path(info["GoMod"]).read_text()


def ensure_suite(progress: Progress) -> Suite:
    """Both binaries, built when missing (e2e.test: minutes; ginkgo: tens of seconds)."""
    return Suite(e2e_test=build_e2e(progress), ginkgo=build_ginkgo(progress))
