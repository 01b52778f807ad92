"""The libvirt host a Vagrant VM runs on: daemons, the qemu.conf setting that avoids slow defines, a storage pool,
and the check that nothing is left behind.

PID 1 is not systemd on these machines, so `LibvirtHost` starts `virtlogd -d` and `libvirtd -d` itself, only when
none runs, and ends only the PIDs it started. While QEMU runs as libvirt-qemu, libvirt re-probes /dev/kvm (root, 0600)
on every domain define and stalls about 45 s; `user = "root"` / `group = "root"` in qemu.conf makes a define take
0.03 s. That is set only for a libvirtd this code starts, and qemu.conf is restored byte for byte afterwards, even on
failure.

`Leftovers` snapshots domains, networks, storage pools, loop devices and libvirt's iptables rules; the difference
between two snapshots is what a run left behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.testbed.hostnet import choose_pod_cidr
from nodeagent.vm.errors import VMError

log = logging.getLogger(__name__)

QEMU_CONF = Path("/etc/libvirt/qemu.conf")
ROOT_QEMU_LINES = (
    "\n# nodeagent vm: QEMU as root, so libvirt does not re-probe /dev/kvm on each define\n"
    'user = "root"\ngroup = "root"\n'
)
DAEMONS = (("virtlogd", Path("/run/virtlogd.pid")), ("libvirtd", Path("/run/libvirtd.pid")))
LIBVIRT_CHAIN_PREFIX = "LIBVIRT_"


class HostError(VMError):
    """The libvirt host cannot be prepared (a daemon does not start, a virsh command fails)."""


def choose_network(vagrant_dir: Path) -> str:
    """A /24 of 198.18.0.0/16 that no route on this machine uses, stable per directory (the testbed's chooser)."""
    return choose_pod_cidr(vagrant_dir, taken=set())


def virsh(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["virsh", "--connect", "qemu:///system", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise HostError(f"virsh {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def running(comm: str) -> list[int]:
    """PIDs whose command name is `comm` (read from /proc, so no pattern matches another program)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == comm:
                    found.append(int(entry.name))
    return found


def with_root_qemu(conf: str) -> str:
    """qemu.conf with QEMU running as root; unchanged when it already says so."""
    lines = [line.split("#", 1)[0].replace(" ", "") for line in conf.splitlines()]
    if 'user="root"' in lines and 'group="root"' in lines:
        return conf
    return conf + ROOT_QEMU_LINES


@dataclass
class Leftovers:
    domains: set[str] = field(default_factory=set)
    networks: set[str] = field(default_factory=set)
    pools: set[str] = field(default_factory=set)
    loops: set[str] = field(default_factory=set)
    iptables: set[str] = field(default_factory=set)

    @classmethod
    def snapshot(cls, *, libvirt: bool = True) -> Leftovers:
        snap = cls()
        if libvirt:
            snap.domains = _names(virsh("list", "--all", "--name", check=False))
            snap.networks = _names(virsh("net-list", "--all", "--name", check=False))
            snap.pools = _names(virsh("pool-list", "--all", "--name", check=False))
        loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
        snap.loops = {line.split(":", 1)[0] for line in loops.splitlines() if line.strip()}
        rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
        snap.iptables = {line for line in rules.splitlines() if "libvirt" in line.lower()}
        return snap

    def new_since(self, before: Leftovers) -> dict[str, list[str]]:
        diff = {
            "domains": sorted(self.domains - before.domains),
            "networks": sorted(self.networks - before.networks),
            "pools": sorted(self.pools - before.pools),
            "loop devices": sorted(self.loops - before.loops),
            "iptables": sorted(self.iptables - before.iptables),
        }
        return {k: v for k, v in diff.items() if v}


def _names(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip()}


@dataclass
class LibvirtHost:
    """libvirtd (ours when none runs) with a storage pool of our own; everything undone on exit."""

    pool_name: str
    pool_dir: Path
    started: list[int] = field(default_factory=list)
    qemu_conf_before: str | None = None

    @contextlib.contextmanager
    def prepared(self) -> Iterator[LibvirtHost]:
        chains_before = _libvirt_chains()
        ours = False
        try:
            ours = not running("libvirtd")
            self._start_daemons()
            self._define_pool()
            yield self
        finally:
            self._remove_pool()
            self._stop_daemons()
            self._restore_qemu_conf()
            if ours:
                _remove_libvirt_chains(keep=chains_before)

    def _start_daemons(self) -> None:
        if not running("libvirtd") and QEMU_CONF.exists():
            original = QEMU_CONF.read_text()
            if with_root_qemu(original) != original:
                self.qemu_conf_before = original
                QEMU_CONF.write_text(with_root_qemu(original))
        for name, pidfile in DAEMONS:
            if running(name):
                log.info("vm host daemon already running name=%s (not ours, left alone)", name)
                continue
            proc = subprocess.run([name, "-d"], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise HostError(f"{name} -d failed: {proc.stderr.strip()}")
            pid = _wait_pid(pidfile, name)
            self.started.append(pid)
            log.info("vm host daemon started name=%s pid=%d", name, pid)
        deadline = time.monotonic() + 30
        while virsh("version", check=False) == "":
            if time.monotonic() > deadline:
                raise HostError("libvirtd does not answer virsh within 30 s")
            time.sleep(0.5)

    def _define_pool(self) -> None:
        self.pool_dir.mkdir(parents=True, exist_ok=True)
        if self.pool_name not in _names(virsh("pool-list", "--all", "--name")):
            virsh("pool-define-as", self.pool_name, "dir", "--target", str(self.pool_dir))
        virsh("pool-start", self.pool_name, check=False)

    def _remove_pool(self) -> None:
        if self.pool_name not in _names(virsh("pool-list", "--all", "--name", check=False)):
            return
        virsh("pool-refresh", self.pool_name, check=False)
        for line in virsh("vol-list", self.pool_name, check=False).splitlines()[2:]:
            if line.split():
                virsh("vol-delete", "--pool", self.pool_name, line.split()[0], check=False)
        virsh("pool-destroy", self.pool_name, check=False)
        virsh("pool-undefine", self.pool_name, check=False)

    def _stop_daemons(self) -> None:
        for pid in reversed(self.started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            if Path(f"/proc/{pid}").exists():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.started.clear()

    def _restore_qemu_conf(self) -> None:
        if self.qemu_conf_before is not None:
            QEMU_CONF.write_text(self.qemu_conf_before)
            self.qemu_conf_before = None


def _wait_pid(pidfile: Path, name: str) -> int:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().strip())
            if Path(f"/proc/{pid}").exists():
                return pid
        time.sleep(0.1)
    raise HostError(f"{name} -d started but wrote no live PID to {pidfile}")


def _libvirt_chains() -> set[tuple[str, str]]:
    found = set()
    for table in ("filter", "nat", "mangle"):
        rules = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, check=False).stdout
        found |= {
            (table, line[1:].split()[0]) for line in rules.splitlines() if line.startswith(":" + LIBVIRT_CHAIN_PREFIX)
        }
    return found


def _remove_libvirt_chains(keep: set[tuple[str, str]]) -> None:
    """Our libvirtd leaves its top-level LIBVIRT_* chains (empty) when its last network goes: remove the empty ones
    it made (never one that existed before it started)."""
    for table in ("filter", "nat", "mangle"):
        rules = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, check=False).stdout
        chains = [line[1:].split()[0] for line in rules.splitlines() if line.startswith(":" + LIBVIRT_CHAIN_PREFIX)]
        bodies = [line for line in rules.splitlines() if line.startswith("-A ")]
        for chain in chains:
            if (table, chain) in keep or any(line.startswith(f"-A {chain} ") for line in bodies):
                continue  # not empty: something still uses it
            for line in bodies:
                words = line.split()
                if words[-2:] == ["-j", chain]:
                    subprocess.run(["iptables", "-w", "-t", table, "-D", *words[1:]], capture_output=True, check=False)
            subprocess.run(["iptables", "-w", "-t", table, "-X", chain], capture_output=True, check=False)
