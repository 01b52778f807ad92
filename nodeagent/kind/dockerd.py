"""Docker for kind, isolated from the testbed: a containerd instance and a dockerd of its own, all under one directory.

dockerd adopts the containerd it finds at /run/containerd/containerd.sock (the testbed's, when one runs), so it gets
its own: socket, root, state and `opt` directory under `<base>/containerd`, the CRI plugin off. dockerd's data-root,
exec-root, pidfile, API socket, trust key and daemon.json are under `<base>` too; nothing goes to /var/lib/docker or
/etc/docker, and the one directory dockerd makes outside (/run/docker/plugins) is removed on stop. No networking on
the host: `iptables`, `ip-masq` and `ip-forward` off and no default bridge, so no Docker chain, no NAT and no sysctl
change; user networks (kind's) come from 198.19.252.0/22, inside the
project's 198.18.0.0/15.

Its default runtime is nodeagent/kind/ocicaps.py in front of runc (this host's capability bounding set lacks
CAP_SYS_RESOURCE, which `--privileged` asks for); `runc` stays registered under its own name.

Containers go to the cgroup `/docker/<id>` of every hierarchy (the cgroupfs driver); `stop` removes what is left of
`/docker` when the directory was not there before `start`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.kind.errors import KindError
from nodeagent.testbed import processes

log = logging.getLogger(__name__)

CONTAINERD = "/usr/bin/containerd"
DOCKERD = "/usr/sbin/dockerd"
# Debian's client, the daemon's version; /usr/local/bin/docker (a newer client) may come first on PATH.
DOCKER = "/usr/bin/docker"
ADDRESS_POOL = "198.19.252.0/22"
ADDRESS_POOL_SIZE = 24
EMBEDDED_DNS_UPSTREAM = "198.19.252.1"
CAPS_RUNTIME = "nodeagent-runc"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "docker"
OCICAPS = Path(__file__).with_name("ocicaps.py")
# dockerd 20.10 makes its plugin discovery directory here whatever its exec-root; removed if it was not there before.
PLUGINS_DIR = Path("/run/docker/plugins")


@dataclass(frozen=True)
class DockerPaths:
    base: Path

    @property
    def containerd_dir(self) -> Path:
        return self.base / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.containerd_dir / "config.toml"

    @property
    def daemon_json(self) -> Path:
        return self.base / "daemon.json"

    @property
    def docker_socket(self) -> Path:
        return self.base / "docker.sock"

    @property
    def runtime(self) -> Path:
        return self.base / "nodeagent-runc"

    @property
    def key(self) -> Path:
        return self.base / "key.json"


def containerd_config(paths: DockerPaths) -> str:
    d = paths.containerd_dir
    return (
        "version = 2\n"
        f'root = "{d / "root"}"\n'
        f'state = "{d / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        "[grpc]\n"
        f'  address = "{paths.containerd_socket}"\n'
        "[ttrpc]\n"
        f'  address = "{paths.containerd_socket}.ttrpc"\n'
        "[debug]\n"
        '  address = ""\n'
        "[metrics]\n"
        '  address = ""\n'
        '[plugins."io.containerd.internal.v1.opt"]\n'
        f'  path = "{d / "opt"}"\n'
    )


def daemon_config(paths: DockerPaths) -> dict[str, object]:
    return {
        "data-root": str(paths.base / "data"),
        "exec-root": str(paths.base / "exec"),
        "pidfile": str(paths.base / "docker.pid"),
        "hosts": [f"unix://{paths.docker_socket}"],
        "containerd": str(paths.containerd_socket),
        "iptables": False,
        "ip6tables": False,
        "ip-masq": False,
        "ip-forward": False,
        "bridge": "none",
        "default-address-pools": [{"base": ADDRESS_POOL, "size": ADDRESS_POOL_SIZE}],
        # The upstream of the embedded resolver (127.0.0.11) on user networks: the host's resolvers otherwise. The
        # pool's first address, the gateway of kind's network (198.19.252.1, the host's end of its bridge), where
        # nothing listens on port 53: container names resolve, nothing else does, and no query leaves the host.
        "dns": [EMBEDDED_DNS_UPSTREAM],
        "exec-opts": ["native.cgroupdriver=cgroupfs"],
        "runtimes": {CAPS_RUNTIME: {"path": str(paths.runtime)}},
        "default-runtime": CAPS_RUNTIME,
        # dockerd 20.10 writes its trust key to /etc/docker/key.json unless told otherwise (no command-line flag).
        "deprecated-key-path": str(paths.key),
    }


def runtime_script(python: str = sys.executable, ocicaps: Path = OCICAPS) -> str:
    return f'#!/bin/sh\nexec {python} -I {ocicaps} "$@"\n'


def dockerd_argv(paths: DockerPaths) -> list[str]:
    return [DOCKERD, "--config-file", str(paths.daemon_json)]


def containerd_argv(paths: DockerPaths) -> list[str]:
    return [CONTAINERD, "--config", str(paths.containerd_config)]


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _stop_recorded(pid: int, argv: tuple[str, ...], name: str, timeout: float = 30.0) -> None:
    """A daemon another process started: SIGTERM, then SIGKILL, only while PID still runs `argv`."""
    proc = processes.Process(name=name, pid=pid, argv=argv, log_path=Path("/dev/null"))
    if not proc.alive():
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.alive():
        log.warning("kill after timeout name=%s pid=%d", name, pid)
        os.kill(pid, signal.SIGKILL)
        while proc.alive() and time.monotonic() < deadline + 10:
            time.sleep(0.1)
    log.info("stopped name=%s pid=%d", name, pid)


def mounts_under(base: Path, mountinfo: str) -> list[Path]:
    """The mount points at or below `base` in a /proc/self/mountinfo text, deepest first (the order to unmount)."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = Path(fields[4].replace("\\040", " "))
            if point == base or base in point.parents:
                found.append(point)
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _stop_pid(proc: subprocess.Popen[bytes], name: str, timeout: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("kill after timeout name=%s pid=%d", name, proc.pid)
        proc.kill()
        proc.wait(10)
    log.info("stopped name=%s pid=%d code=%s", name, proc.pid, proc.returncode)


@dataclass
class IsolatedDocker:
    paths: DockerPaths
    containerd: subprocess.Popen[bytes] | None = None
    dockerd: subprocess.Popen[bytes] | None = None
    cgroups_before: frozenset[Path] = field(default_factory=frozenset)
    plugins_dir_before: bool = True
    recorded: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)

    def base_argv(self) -> list[str]:
        """The docker client's argv prefix for this daemon."""
        return [DOCKER, "-H", f"unix://{self.paths.docker_socket}"]

    def docker(self, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [*self.base_argv(), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KindError(f"docker {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def _spawn(self, argv: Sequence[str], logfile: Path) -> subprocess.Popen[bytes]:
        with logfile.open("ab") as out:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                cwd=self.paths.base,
                start_new_session=True,
            )

    def _wait_for(self, what: str, proc: subprocess.Popen[bytes], ready: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = (self.paths.base / f"{what}.log").read_text(errors="replace").splitlines()[-5:]
                raise KindError(f"{what} exited with {proc.returncode}: " + " | ".join(tail))
            if ready.exists():
                return
            time.sleep(0.2)
        raise KindError(f"{what} not ready after {timeout:.0f} s ({ready} missing)")

    def start(self) -> None:
        paths = self.paths
        paths.containerd_dir.mkdir(parents=True, exist_ok=True)
        paths.containerd_config.write_text(containerd_config(paths))
        paths.daemon_json.write_text(json.dumps(daemon_config(paths), indent=2) + "\n")
        paths.runtime.write_text(runtime_script())
        paths.runtime.chmod(0o755)
        self.cgroups_before = frozenset(p for p in CGROUP_ROOT.glob(f"*/{CGROUP_PARENT}"))
        self.plugins_dir_before = PLUGINS_DIR.parent.exists()
        self.containerd = self._spawn(containerd_argv(paths), paths.base / "containerd.log")
        log.info("started name=containerd pid=%d socket=%s", self.containerd.pid, paths.containerd_socket)
        self._wait_for("containerd", self.containerd, paths.containerd_socket, 30)
        self.dockerd = self._spawn(dockerd_argv(paths), paths.base / "dockerd.log")
        log.info("started name=dockerd pid=%d socket=%s", self.dockerd.pid, paths.docker_socket)
        self._wait_for("dockerd", self.dockerd, paths.docker_socket, 60)
        deadline = time.monotonic() + 30
        while self.docker("version", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise KindError(f"dockerd not answering on {paths.docker_socket}")
            time.sleep(0.5)

    def record(self) -> dict[str, object]:
        """What `attach` needs in another process (`nodeagent kind down`): the daemons' PIDs and command lines and
        what was on the host before `start`."""
        return {
            "base": str(self.paths.base),
            "containerd": [self.containerd.pid, containerd_argv(self.paths)] if self.containerd else None,
            "dockerd": [self.dockerd.pid, dockerd_argv(self.paths)] if self.dockerd else None,
            "cgroups_before": sorted(str(p) for p in self.cgroups_before),
            "plugins_dir_before": self.plugins_dir_before,
        }

    def detach(self) -> None:
        """Leave the daemons running beyond this process (`kind up`): from now on they are stopped by PID and
        command line, as `attach` does."""
        for name in ("containerd", "dockerd"):
            popen = getattr(self, name)
            if popen is not None and popen.poll() is None:
                argv = containerd_argv(self.paths) if name == "containerd" else dockerd_argv(self.paths)
                self.recorded[name] = (popen.pid, tuple(argv))
                popen.returncode = 0  # not ours to wait for any more (as testbed/processes.py does)
            setattr(self, name, None)

    @classmethod
    def attach(cls, record: dict[str, object]) -> IsolatedDocker:
        """The daemon `record` describes, started by another process: `stop` ends it by PID and command line."""
        daemon = cls(
            DockerPaths(Path(str(record["base"]))),
            cgroups_before=frozenset(Path(str(p)) for p in _as_list(record["cgroups_before"])),
            plugins_dir_before=bool(record["plugins_dir_before"]),
        )
        for name in ("containerd", "dockerd"):
            entry = record.get(name)
            if isinstance(entry, list):
                daemon.recorded[name] = (int(entry[0]), tuple(str(a) for a in entry[1]))
        return daemon

    def stop(self) -> list[str]:
        """Stop dockerd then containerd (by PID), unmount what is left under the base and remove the /docker
        cgroups and /run/docker this run created; what could not be cleaned, as messages."""
        problems: list[str] = []
        if self.dockerd is not None:
            _stop_pid(self.dockerd, "dockerd")
        if self.containerd is not None:
            _stop_pid(self.containerd, "containerd")
        for name in ("dockerd", "containerd"):
            if name in self.recorded:
                pid, argv = self.recorded.pop(name)
                _stop_recorded(pid, argv, name)
        for point in mounts_under(self.paths.base, Path("/proc/self/mountinfo").read_text()):
            proc = subprocess.run(["umount", str(point)], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                problems.append(f"umount {point}: {proc.stderr.strip()}")
        for top in sorted(CGROUP_ROOT.glob(f"*/{CGROUP_PARENT}")):
            if top in self.cgroups_before:
                continue
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            try:
                top.rmdir()
            except OSError as exc:
                problems.append(f"rmdir {top}: {exc}")
        if not self.plugins_dir_before:
            for directory in (PLUGINS_DIR, PLUGINS_DIR.parent):
                try:
                    directory.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    problems.append(f"rmdir {directory}: {exc}")
        return problems


@contextlib.contextmanager
def isolated_docker(base: Path) -> Iterator[IsolatedDocker]:
    daemon = IsolatedDocker(DockerPaths(base))
    try:
        daemon.start()
        yield daemon
    finally:
        for problem in daemon.stop():
            log.warning("cleanup problem=%s", problem)
