"""`nodeagent kind up|down --dir DIR`: the isolated Docker, the node image and a kind cluster left running, its state
in DIR (as the testbed keeps its own); `down` removes all of it.

DIR holds `kind-state.json` (the daemons' PIDs and command lines, written as soon as they run, so a failed `up` is
undone by `down`), `docker/` (the isolated Docker's base: kind/dockerd.py) and `work/` (kind's config, kubeconfig and
logs). `down`: the joined nodeagent node if any (kind/join.py), `kind delete cluster`, the network, then dockerd and
its containerd by PID, the mounts under `docker/`, the `/docker` cgroups and /run/docker it made. The testbed's
containerd is never touched: the isolated one has its own socket, root and state under `docker/`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.kind import cluster, nodeimage
from nodeagent.kind.dockerd import DockerPaths, IsolatedDocker
from nodeagent.kind.errors import KindError

log = logging.getLogger(__name__)

STATE_FILE = "kind-state.json"
# containerd refuses a longer unix socket path ("unix socket path too long (> 104)").
UNIX_PATH_MAX = 104


@dataclass(frozen=True)
class KindDir:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_FILE

    @property
    def docker_base(self) -> Path:
        return self.root / "docker"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def join(self) -> Path:
        return self.root / "join"


def _save(kdir: KindDir, data: dict[str, object]) -> None:
    partial = kdir.state.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=2) + "\n")
    partial.rename(kdir.state)


def load_state(kdir: KindDir) -> dict[str, object]:
    try:
        data = json.loads(kdir.state.read_text())
    except FileNotFoundError as exc:
        raise KindError(f"no kind cluster under {kdir.root} ({STATE_FILE} missing)") from exc
    if not isinstance(data, dict):
        raise KindError(f"{kdir.state}: not a JSON object")
    return data


def attached_docker(kdir: KindDir) -> IsolatedDocker:
    record = load_state(kdir).get("docker")
    if not isinstance(record, dict):
        raise KindError(f"{kdir.state}: no docker record")
    return IsolatedDocker.attach(record)


@dataclass
class UpResult:
    image: str
    create: cluster.CreateResult
    timings: dict[str, float] = field(default_factory=dict)


def up(root: Path, progress: Callable[[str], None], *, workers: int = 1) -> UpResult:
    """The isolated Docker, the node image (cached) and `kind create cluster`, left running; undone on failure."""
    kdir = KindDir(root)
    if kdir.state.exists():
        raise KindError(f"a kind cluster is already up under {root} (`nodeagent kind down --dir {root}` first)")
    longest = DockerPaths(kdir.docker_base.resolve()).containerd_socket.with_suffix(".sock.ttrpc")
    if len(str(longest)) > UNIX_PATH_MAX:
        raise KindError(f"--dir {root} is too long: containerd's socket {longest} exceeds {UNIX_PATH_MAX} bytes")
    for path in (kdir.docker_base, kdir.work):
        path.mkdir(parents=True, exist_ok=True)
    docker = IsolatedDocker(DockerPaths(kdir.docker_base))
    timings: dict[str, float] = {}
    t = time.monotonic()
    try:
        docker.start()
    finally:
        _save(kdir, {"docker": docker.record()})
        docker.detach()
    try:
        timings["docker"] = time.monotonic() - t
        progress(f"isolated docker up base={kdir.docker_base} seconds={timings['docker']:.1f}")
        t = time.monotonic()
        built = nodeimage.build_node_image(docker, progress)
        timings["image"] = time.monotonic() - t
        state = load_state(kdir)
        _save(kdir, {**state, "image": built.image, "workers": workers})
        result = cluster.create(docker, built.image, kdir.work, progress, workers=workers)
        timings["create"] = result.seconds
        if result.returncode != 0 or not result.ready:
            cluster.collect(docker, kdir.work, result)
            raise KindError("kind cluster not up:\n" + cluster.report(result)[-6000:])
    except BaseException:
        for problem in down(root, progress):
            log.warning("cleanup problem=%s", problem)
        raise
    progress(f"kind up: {cluster.CONTROL_PLANE} + {workers} worker(s) Ready; KUBECONFIG={kdir.work / 'kubeconfig'}")
    return UpResult(built.image, result, timings)


def down(root: Path, progress: Callable[[str], None]) -> list[str]:
    """Everything `up` (and `join`) made, removed; what could not be, as messages. No state: nothing to do."""
    kdir = KindDir(root)
    if not kdir.state.exists():
        return []
    problems: list[str] = []
    from nodeagent.kind import join  # noqa: PLC0415 (join imports this module)

    problems += join.leave(kdir, progress)
    docker = attached_docker(kdir)
    if docker.docker("version", check=False, timeout=30).returncode == 0:
        problems += cluster.delete(docker, kdir.work)
    problems += docker.stop()
    kdir.state.unlink()
    progress(f"kind down: {root} problems={len(problems)}")
    return problems
