"""An OCI runtime in front of runc that keeps a container's capabilities within this host's bounding set.

This host's bounding set lacks CAP_SYS_RESOURCE (`grep CapBnd /proc/self/status` gives 000001fffeffffff: bit 24 is
clear), and Docker 20.10 gives a `--privileged` container every capability it knows, so runc fails with `unable to
apply caps: operation not permitted` and no kind node can start. dockerd runs this file as its default runtime
(nodeagent/kind/dockerd.py): on `create` and `run` it drops from the bundle's config.json, and on `exec` from the
`--process` file, the capabilities the bounding set does not hold, then execs runc with the same arguments.
Standalone (no nodeagent imports), since the shim runs it as a program.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

RUNC = "/usr/sbin/runc"
CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")
# Capability numbers, as in linux/capability.h, for the names an OCI config uses.
CAP_NUMBERS: dict[str, int] = {
    name: number
    for number, name in enumerate(
        [
            "CAP_CHOWN",
            "CAP_DAC_OVERRIDE",
            "CAP_DAC_READ_SEARCH",
            "CAP_FOWNER",
            "CAP_FSETID",
            "CAP_KILL",
            "CAP_SETGID",
            "CAP_SETUID",
            "CAP_SETPCAP",
            "CAP_LINUX_IMMUTABLE",
            "CAP_NET_BIND_SERVICE",
            "CAP_NET_BROADCAST",
            "CAP_NET_ADMIN",
            "CAP_NET_RAW",
            "CAP_IPC_LOCK",
            "CAP_IPC_OWNER",
            "CAP_SYS_MODULE",
            "CAP_SYS_RAWIO",
            "CAP_SYS_CHROOT",
            "CAP_SYS_PTRACE",
            "CAP_SYS_PACCT",
            "CAP_SYS_ADMIN",
            "CAP_SYS_BOOT",
            "CAP_SYS_NICE",
            "CAP_SYS_RESOURCE",
            "CAP_SYS_TIME",
            "CAP_SYS_TTY_CONFIG",
            "CAP_MKNOD",
            "CAP_LEASE",
            "CAP_AUDIT_WRITE",
            "CAP_AUDIT_CONTROL",
            "CAP_SETFCAP",
            "CAP_MAC_OVERRIDE",
            "CAP_MAC_ADMIN",
            "CAP_SYSLOG",
            "CAP_WAKE_ALARM",
            "CAP_BLOCK_SUSPEND",
            "CAP_AUDIT_READ",
            "CAP_PERFMON",
            "CAP_BPF",
            "CAP_CHECKPOINT_RESTORE",
        ]
    )
}


def bounding_set(status: str) -> int:
    """The CapBnd mask of a /proc/<pid>/status text."""
    for line in status.splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    raise ValueError("no CapBnd line")


def restrict_process(process: dict[str, object], mask: int) -> list[str]:
    """Drop from an OCI process's capabilities every one outside `mask`; the names dropped (sorted)."""
    caps = process.get("capabilities")
    if not isinstance(caps, dict):
        return []
    dropped: set[str] = set()
    for key in CAP_SETS:
        names = caps.get(key)
        if not isinstance(names, list):
            continue
        kept = [n for n in names if not (n in CAP_NUMBERS and not mask >> CAP_NUMBERS[n] & 1)]
        dropped.update(n for n in names if n not in kept)
        caps[key] = kept
    return sorted(dropped)


def restrict(config: dict[str, object], mask: int) -> list[str]:
    """restrict_process on a bundle config's `process`."""
    process = config.get("process")
    return restrict_process(process, mask) if isinstance(process, dict) else []


def _flag(argv: list[str], names: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg.partition("=")[2]
    return None


def command_of(argv: list[str]) -> str | None:
    """The runc command of a command line: the first word that is neither a global flag nor its value."""
    with_value = {"--root", "--log", "--log-format", "--criu", "--rootless"}
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in with_value:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def spec_to_restrict(argv: list[str]) -> tuple[Path, bool] | None:
    """The JSON file to restrict (and whether it is a whole bundle config rather than a process) for `create`,
    `run` and `exec`; None for every other command."""
    command = command_of(argv)
    if command in ("create", "run"):
        return Path(_flag(argv, ("--bundle", "-b")) or ".") / "config.json", True
    if command == "exec":
        process = _flag(argv, ("--process", "-p"))
        return (Path(process), False) if process else None
    return None


def main(argv: list[str]) -> None:
    target = spec_to_restrict(argv)
    if target is not None:
        path, is_bundle = target
        spec = json.loads(path.read_text())
        mask = bounding_set(Path("/proc/self/status").read_text())
        if restrict(spec, mask) if is_bundle else restrict_process(spec, mask):
            path.write_text(json.dumps(spec))
    os.execv(RUNC, [RUNC, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
