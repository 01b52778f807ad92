"""The go/no-go check of issue 36: does a systemd node container, as kind runs one, boot inside Docker on this host?

One Debian bookworm rootfs with systemd 252 (mmdebstrap, as the Vagrant box builds its own; cached), imported into
the isolated Docker of nodeagent/kind/dockerd.py and run with the arguments kind gives its node containers
(`--privileged --cgroupns=private`, tmpfs /run and /tmp, an anonymous /var, /lib/modules read-only, `--init=false`,
`container=docker`, SIGRTMIN+3 to stop), on `--network none`. The first attempt uses plain runc; the second, the
daemon's default runtime (runc behind nodeagent/kind/ocicaps.py). Each attempt records its error or what systemd
says: `systemctl is-system-running`, the failed units, `systemctl status`, a transient scope, the cgroup layout.
Everything is removed afterwards, and the host state (hoststate.py) compared with before.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.kind.dockerd import CAPS_RUNTIME, IsolatedDocker, isolated_docker
from nodeagent.kind.errors import KindError
from nodeagent.kind.hoststate import compare, snapshot
from nodeagent.testbed.versions import cache_root

log = logging.getLogger(__name__)

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
ROOTFS_PACKAGES = ("systemd", "systemd-sysv", "dbus", "iproute2", "procps")
IMAGE = "nodeagent-kind-check:bookworm"
CONTAINER = "nodeagent-kind-check"
BOOT_TIMEOUT = 90.0


def rootfs_recipe(packages: tuple[str, ...] = ROOTFS_PACKAGES) -> str:
    return f"mmdebstrap --variant=minbase --include={','.join(packages)} {SUITE} {MIRROR}"


def rootfs_path(
    cache: Path | None = None, packages: tuple[str, ...] = ROOTFS_PACKAGES, prefix: str = "check-rootfs"
) -> Path:
    digest = hashlib.sha256(rootfs_recipe(packages).encode()).hexdigest()[:12]
    return (cache or cache_root()) / "kind" / f"{prefix}-{digest}.tar"


def build_rootfs(
    cache: Path | None = None, packages: tuple[str, ...] = ROOTFS_PACKAGES, prefix: str = "check-rootfs"
) -> tuple[Path, float]:
    """The cached rootfs tar of a bookworm minbase plus `packages` (the check's by default; the node image passes
    its own list and prefix), built first when missing; its path and the seconds the build took (0 when cached)."""
    target = rootfs_path(cache, packages, prefix)
    if target.exists():
        return target, 0.0
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial.tar")
    started = time.monotonic()
    proc = subprocess.run(
        [
            "mmdebstrap",
            "--variant=minbase",
            "--include=" + ",".join(packages),
            SUITE,
            str(partial),
            f"deb {MIRROR} {SUITE} main",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise KindError(f"mmdebstrap failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    partial.rename(target)
    return target, time.monotonic() - started


def node_run_args(name: str, image: str, runtime: str | None) -> list[str]:
    """`docker run` arguments for a node container, as kind's docker provider gives them (no network, ports or
    labels here)."""
    args = [
        "run",
        "--detach",
        "--tty",
        "--name",
        name,
        "--hostname",
        name,
        "--network",
        "none",
        "--init=false",
        "--cgroupns=private",
        "--privileged",
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "apparmor=unconfined",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
        "--volume",
        "/var",
        "--volume",
        "/lib/modules:/lib/modules:ro",
        "--stop-signal",
        "SIGRTMIN+3",
        "--env",
        "container=docker",
    ]
    if runtime is not None:
        args += ["--runtime", runtime]
    return [*args, image, "/sbin/init"]


@dataclass
class Attempt:
    runtime: str
    started: bool = False
    error: str = ""
    state: str = ""
    boot_seconds: float = 0.0
    probes: dict[str, str] = field(default_factory=dict)

    @property
    def booted(self) -> bool:
        return self.state in ("running", "degraded") and all(
            not v.startswith("exit ") for k, v in self.probes.items() if k in REQUIRED_PROBES
        )


# name -> command run in the node container; the first three must succeed for a GO.
PROBES: dict[str, list[str]] = {
    "systemctl status": ["sh", "-c", "systemctl status --no-pager | head -n 8"],
    "systemd-run --scope": ["systemd-run", "--scope", "true"],
    "systemd-run --slice --scope": [
        "systemd-run",
        "--slice",
        "nodeagent-probe.slice",
        "--scope",
        "cat",
        "/proc/self/cgroup",
    ],
    "failed units": ["systemctl", "--failed", "--no-legend", "--plain"],
    "/proc/self/cgroup": ["cat", "/proc/self/cgroup"],
    "stat -fc %T /sys/fs/cgroup": ["stat", "-fc", "%T", "/sys/fs/cgroup"],
    "stat -fc %T /sys/fs/cgroup/unified": ["stat", "-fc", "%T", "/sys/fs/cgroup/unified"],
    "systemd --version": ["sh", "-c", "systemctl --version | head -n 1"],
    "systemd-analyze": ["systemd-analyze"],
}
REQUIRED_PROBES = ("systemctl status", "systemd-run --scope", "systemd-run --slice --scope")


def _exec(docker: IsolatedDocker, name: str, argv: list[str]) -> str:
    proc = docker.docker("exec", name, *argv, check=False, timeout=60)
    text = (proc.stdout + proc.stderr).strip()
    return text if proc.returncode == 0 else f"exit {proc.returncode}: {text}"


def run_attempt(docker: IsolatedDocker, runtime: str | None, label: str) -> Attempt:
    attempt = Attempt(runtime=label)
    started = time.monotonic()
    proc = docker.docker(*node_run_args(CONTAINER, IMAGE, runtime), check=False)
    try:
        if proc.returncode != 0:
            attempt.error = proc.stderr.strip()
            return attempt
        attempt.started = True
        deadline = started + BOOT_TIMEOUT
        while True:
            state = docker.docker("exec", CONTAINER, "systemctl", "is-system-running", check=False)
            attempt.state = state.stdout.strip() or state.stderr.strip()
            if attempt.state in ("running", "degraded") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        attempt.boot_seconds = time.monotonic() - started
        for probe, argv in PROBES.items():
            attempt.probes[probe] = _exec(docker, CONTAINER, argv)
        return attempt
    finally:
        docker.docker("rm", "--force", "--volumes", CONTAINER, check=False)


@dataclass
class CheckResult:
    attempts: list[Attempt]
    timings: dict[str, float]
    refused: list[str]
    noted: list[str]

    @property
    def go(self) -> bool:
        return any(a.booted for a in self.attempts) and not self.refused


def run_check(progress: Callable[[str], None], cache: Path | None = None) -> CheckResult:
    for tool in ("mmdebstrap", "/usr/sbin/dockerd", "/usr/bin/containerd"):
        if shutil.which(tool) is None:
            raise KindError(f"{tool} not found: run `nodeagent kind install` (and `nodeagent vm install`) first")
    timings: dict[str, float] = {}
    rootfs, seconds = build_rootfs(cache)
    timings["rootfs build (0 = cached)"] = seconds
    progress(f"rootfs {rootfs} ({rootfs.stat().st_size >> 20} MiB)")
    before = snapshot()
    attempts: list[Attempt] = []
    base = Path(tempfile.mkdtemp(prefix="nodeagent-kind-check-"))
    try:
        t = time.monotonic()
        with isolated_docker(base) as docker:
            timings["containerd + dockerd start"] = time.monotonic() - t
            progress(f"isolated docker up base={base}")
            t = time.monotonic()
            docker.docker("import", "--change", "ENV container=docker", str(rootfs), IMAGE, timeout=300)
            timings["docker import"] = time.monotonic() - t
            try:
                for runtime, label in ((("runc", "runc")), (None, f"{CAPS_RUNTIME} (runc via ocicaps.py)")):
                    attempt = run_attempt(docker, runtime, label)
                    progress(f"attempt runtime={label} started={attempt.started} state={attempt.state or '-'}")
                    attempts.append(attempt)
            finally:
                docker.docker("rmi", "--force", IMAGE, check=False)
            t = time.monotonic()
        timings["stop and clean"] = time.monotonic() - t
    finally:
        shutil.rmtree(base, ignore_errors=True)
    after = snapshot()
    diff = compare(before, after)
    return CheckResult(attempts=attempts, timings=timings, refused=diff.refused, noted=diff.noted)


def report(result: CheckResult) -> str:
    lines = []
    for attempt in result.attempts:
        lines.append(f"== attempt runtime={attempt.runtime}")
        if not attempt.started:
            lines.append(f"docker run failed: {attempt.error}")
            continue
        lines.append(f"systemctl is-system-running: {attempt.state} (after {attempt.boot_seconds:.1f} s)")
        for probe, out in attempt.probes.items():
            lines.append(f"-- {probe}:")
            lines.extend("   " + line for line in (out or "(empty)").splitlines())
    lines.append("== timings")
    lines.extend(f"{name}: {seconds:.2f} s" for name, seconds in result.timings.items())
    lines.append("== host state (iptables without KUBE-*, ip_forward, links, netns) before vs after")
    lines.extend(f"REFUSED {r}" for r in result.refused)
    lines.extend(f"noted (not Docker's) {n}" for n in result.noted)
    if not result.refused:
        lines.append("no Docker chain, rule, policy, forwarding or bridge change")
    lines.append(f"VERDICT: {'GO' if result.go else 'NO-GO'}")
    return "\n".join(lines)
