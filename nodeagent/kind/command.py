"""`nodeagent kind install|check|build-image|try-create`: Docker from Debian, the go/no-go check of a systemd node
container, the offline node image, and one `kind create cluster` with it (docs/kind.md)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from nodeagent.kind import cluster, join, lifecycle, nodeimage
from nodeagent.kind.dockerd import isolated_docker
from nodeagent.kind.hoststate import compare, snapshot
from nodeagent.kind.install import install_docker
from nodeagent.kind.nodecheck import report, run_check
from nodeagent.testbed.install import Progress


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kind = sub.add_parser("kind", help="kind support: Docker from Debian, isolated (docs/kind.md)")
    actions = kind.add_subparsers(dest="action", required=True)
    actions.add_parser("install", help="apt-get install docker.io, refused if it would touch containerd or runc")
    actions.add_parser(
        "check", help="go/no-go: boot a bookworm systemd container as kind runs its nodes, in an isolated Docker"
    )
    actions.add_parser(
        "build-image", help="build (or load from the cache) the offline kind node image in an isolated Docker"
    )
    create = actions.add_parser(
        "try-create",
        help="build the node image, run kind v0.33.0's `create cluster` with it, report, and delete everything",
    )
    create.add_argument("--logs", type=Path, default=None, help="where kind's exported logs go (default: a temp dir)")
    create.add_argument("--workers", type=int, default=1, help="kind worker nodes besides the control plane")
    for name, text in (
        ("up", "the isolated Docker, the node image and a kind cluster, left running (state in --dir)"),
        ("join", "nodeagent joins the kind cluster of --dir as one more node (its own containerd, our CNI)"),
        ("down", "remove what `kind up` and `kind join` made under --dir"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("--dir", type=Path, required=True, help="the cluster's state directory")
        if name == "up":
            action.add_argument("--workers", type=int, default=1, help="kind worker nodes besides the control plane")
    kind.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    progress = Progress(print)
    if args.action == "install":
        plan = install_docker(progress)
        if plan is not None:
            print("apt installed: " + ", ".join(f"{name} {version}" for name, version in plan.installs.items()))
        return 0
    install_docker(progress)
    if args.action in ("up", "down", "join"):
        return await _lifecycle(args, progress)
    if args.action == "check":
        result = run_check(progress.step)
        print(report(result))
        return 0 if result.go else 1
    return _with_docker(args, progress)


async def _lifecycle(args: argparse.Namespace, progress: Progress) -> int:
    root = args.dir.resolve()
    if args.action == "up":
        result = await asyncio.to_thread(lifecycle.up, root, progress.step, workers=args.workers)
        for name, seconds in result.timings.items():
            print(f"timing {name}: {seconds:.1f} s")
        print(f"KUBECONFIG={lifecycle.KindDir(root).work / 'kubeconfig'}")
        return 0
    if args.action == "join":
        joined = await join.join(root, progress.step)
        for name, seconds in joined.timings.items():
            print(f"timing {name}: {seconds:.1f} s")
        return 0
    problems = await asyncio.to_thread(lifecycle.down, root, progress.step)
    for problem in problems:
        print(f"down problem: {problem}")
    return 1 if problems else 0


def _with_docker(args: argparse.Namespace, progress: Progress) -> int:
    before = snapshot()
    base = Path(tempfile.mkdtemp(prefix="nodeagent-kind-"))
    code = 0
    try:
        t = time.monotonic()
        with isolated_docker(base) as docker:
            progress.step(f"isolated docker up base={base} seconds={time.monotonic() - t:.1f}")
            built = nodeimage.build_node_image(docker, progress.step)
            print(f"image: {built.image} (cached={built.cached}) archive={built.archive}")
            print("preloaded: " + ", ".join(built.preloaded))
            for name, seconds in built.timings.items():
                print(f"timing {name}: {seconds:.1f} s")
            if args.action == "try-create":
                work = args.logs or Path(tempfile.mkdtemp(prefix="nodeagent-kind-logs-"))
                work.mkdir(parents=True, exist_ok=True)
                result = cluster.try_create(docker, built.image, work, progress.step, workers=args.workers)
                print(cluster.report(result))
                code = 0 if result.returncode == 0 and result.ready else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    diff = compare(before, snapshot())
    for refused in diff.refused:
        print(f"host state REFUSED {refused}")
    return 1 if diff.refused else code
