"""`nodeagent kind install|check`: Docker from Debian, and the go/no-go check of a systemd node container
(docs/kind.md)."""

from __future__ import annotations

import argparse

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
    kind.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    progress = Progress(print)
    if args.action == "install":
        plan = install_docker(progress)
        if plan is not None:
            print("apt installed: " + ", ".join(f"{name} {version}" for name, version in plan.installs.items()))
        return 0
    install_docker(progress)
    result = run_check(progress.step)
    print(report(result))
    return 0 if result.go else 1
