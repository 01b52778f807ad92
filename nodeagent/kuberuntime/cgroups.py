"""Removing pod cgroups (cgroupfs driver). runc creates a container's parent cgroups but removes only its own, so
the pod-level cgroup (`.../kubepods/<qos>/pod<uid>`) is the kubelet's to delete once the pod's containers are gone,
as upstream's pod container manager does. Works for cgroup v1 (one tree per controller) and v2 (one tree)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _hierarchies(root: Path) -> list[Path]:
    if (root / "cgroup.controllers").exists():  # v2: a single unified tree
        return [root]
    return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()] if root.is_dir() else []


def remove_cgroup_tree(cgroup_path: str, *, root: Path = CGROUP_ROOT) -> int:
    """rmdir `cgroup_path` and everything below it in every hierarchy, deepest first; returns how many went.

    A cgroup that still holds a process refuses rmdir; it is left for the next attempt.
    """
    relative = cgroup_path.strip("/")
    if not relative:
        raise ValueError("refusing to remove the root cgroup")
    removed = 0
    for hierarchy in _hierarchies(root):
        top = hierarchy / relative
        if not top.is_dir():
            continue
        for dirpath, _, _ in sorted(os.walk(top), key=lambda entry: entry[0].count("/"), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
                removed += 1
    return removed


def kill_cgroup_processes(cgroup_path: str, *, root: Path = CGROUP_ROOT) -> int:
    """SIGKILL every process in `cgroup_path` and below, in every hierarchy; returns how many were signalled.

    As upstream's pod container manager does before it removes a pod cgroup (tryKillingCgroupProcesses): whatever
    still runs there belongs to nobody the runtime will stop.
    """
    relative = cgroup_path.strip("/")
    if not relative:
        raise ValueError("refusing to kill the root cgroup")
    pids: set[int] = set()
    for hierarchy in _hierarchies(root):
        top = hierarchy / relative
        if not top.is_dir():
            continue
        for dirpath, _, _ in os.walk(top):
            with contextlib.suppress(OSError):
                text = (Path(dirpath) / "cgroup.procs").read_text()
                pids.update(int(p) for p in text.split())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, 9)
    return len(pids)
