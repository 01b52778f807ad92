"""`nodeagent vm install|box|network|check`: the host's packages, the box for vagrant/, the VM's management network,
and what the host offers."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path

from nodeagent.vm import virt
from nodeagent.vm.box import BOX_NAME, VAGRANT_DIR, BoxError, build_box
from nodeagent.vm.host import choose_network
from nodeagent.vm.packages import install_vm_packages


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vm = sub.add_parser("vm", help="the Vagrant VM for static-pod testing (vagrant/, docs/vagrant.md)")
    actions = vm.add_subparsers(dest="action", required=True)
    actions.add_parser("install", help="install the host's Debian packages: QEMU, libvirt, Vagrant, mmdebstrap")
    box = actions.add_parser("box", help="build the local Debian box (cached) and add it to Vagrant")
    box.add_argument("--force", action="store_true", help="rebuild even when the cache has this recipe's box")
    box.add_argument("--no-add", action="store_true", help="only build; print the .box path")
    network = actions.add_parser("network", help="print a free /24 of 198.18.0.0/16 for the libvirt network")
    network.add_argument("--dir", type=Path, default=VAGRANT_DIR)
    actions.add_parser("check", help="say which hypervisor `vagrant up` will use, or what is missing")
    vm.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    if args.action == "install":
        install_vm_packages()
        return 0
    if args.action == "network":
        print(choose_network(args.dir))
        return 0
    if args.action == "check":
        choice = virt.choose(virt.probe())
        print(f"provider={choice.provider} driver={choice.driver or '-'} cpu={choice.cpu_model or 'default'}")
        return 0
    # The host's packages first (present ones are only checked), then: no hypervisor, no point in building a box.
    install_vm_packages()
    virt.choose(virt.probe())
    box = build_box(force=args.force)
    for step, seconds in box.timings.items():
        print(f"box {step}: {seconds:.0f} s")
    if args.no_add:
        print(box.archive)
        return 0
    add_box(box.archive)
    print(f"box {BOX_NAME} added from {box.archive}; now: cd {VAGRANT_DIR} && vagrant up")
    return 0


def add_box(archive: Path, name: str = BOX_NAME, env: dict[str, str] | None = None) -> None:
    vagrant = shutil.which("vagrant")
    if vagrant is None:
        raise BoxError("vagrant is not installed (apt-get install vagrant vagrant-libvirt)")
    proc = subprocess.run(
        [vagrant, "box", "add", "--force", "--name", name, str(archive)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise BoxError(f"vagrant box add {name}: {proc.stderr.strip() or proc.stdout.strip()}")
