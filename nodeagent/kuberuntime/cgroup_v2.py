"""cgroup v2 (the unified hierarchy): telling it from v1, making a cgroup path whose controllers are on, cpu.weight.

Detection: a cgroup v2 mount has `cgroup.controllers` at its top; the v1 layouts (legacy, or hybrid with a
controller-less cgroup2 at `unified/`) have a tmpfs at /sys/fs/cgroup, which has none. On the real mount this is
the same answer as upstream's IsCgroup2UnifiedMode (statfs type CGROUP2_SUPER_MAGIC, `stat -f` "cgroup2fs"), and
it also works on a directory shaped like one, which is how the unit tests run it.

Creating: on v2 a child cgroup has only the controllers its parent lists in `cgroup.subtree_control`, so `mkdir -p`
alone yields a pod cgroup without cpu.weight, cpu.max, memory.max or pids.max. As libcontainer's fs2
CreateCgroupPath (which upstream's cgroup manager calls through Apply): every level from the mount down to the
parent of the new cgroup gets every controller the mount offers written to its subtree_control (all at once, then
one by one if the kernel refuses the batch; a controller left off shows up as the missing file when the value is
written), and a level whose cgroup.type is "domain invalid" stops it.

cpu.weight: upstream writes the pod and QoS cgroups' cpu shares as weight with its own conversion (cm's
getCPUWeight: [2, 262144] onto [1, 10000], linear, rounded down) and reads them back with the inverse
(cm/util CPUWeightToCPUShares); libcontainer's own conversion applies only to what the runtime writes for
containers.
"""

from __future__ import annotations

import os
from pathlib import Path

MIN_SHARES = 2
MAX_SHARES = 262144
MIN_WEIGHT = 1
MAX_WEIGHT = 10000
CONTROLLERS_FILE = "cgroup.controllers"
SUBTREE_CONTROL_FILE = "cgroup.subtree_control"
TYPE_FILE = "cgroup.type"


class CgroupV2Error(Exception):
    """A cgroup v2 path could not be made ready for its values."""


def is_unified(root: Path) -> bool:
    """Whether `root` (the cgroup mount) is the unified cgroup v2 hierarchy."""
    return (root / CONTROLLERS_FILE).is_file()


def controllers(directory: Path) -> list[str]:
    """The controllers available in the cgroup at `directory` (its cgroup.controllers), in the kernel's order."""
    return (directory / CONTROLLERS_FILE).read_text().split()


def shares_to_weight(shares: int) -> int:
    """cpu.shares (v1) to cpu.weight (v2) as upstream's cgroup manager converts them (getCPUWeight)."""
    if shares >= MAX_SHARES:
        return MAX_WEIGHT
    shares = max(shares, MIN_SHARES)
    return 1 + ((shares - MIN_SHARES) * (MAX_WEIGHT - 1)) // (MAX_SHARES - MIN_SHARES)


def weight_to_shares(weight: int) -> int:
    """cpu.weight back to cpu.shares as upstream reads a pod cgroup (cm/util CPUWeightToCPUShares)."""
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise ValueError(f"CPU weight must be between {MIN_WEIGHT} and {MAX_WEIGHT}, but equals to {weight}")
    return ((weight - 1) * (MAX_SHARES - MIN_SHARES)) // (MAX_WEIGHT - 1) + MIN_SHARES


def _enable(directory: Path, wanted: list[str]) -> None:
    if not wanted:
        return
    path = directory / SUBTREE_CONTROL_FILE
    try:
        path.write_text(" ".join(f"+{c}" for c in wanted))
    except OSError:
        # As libcontainer: one by one, and those the kernel refuses stay off (a write to their files fails later).
        for controller in wanted:
            try:
                path.write_text(f"+{controller}")
            except OSError:
                continue


def create_cgroup_path(root: Path, cgroup: str) -> Path:
    """Make `cgroup` (a path under the mount `root`) with the mount's controllers enabled down to it; return its
    directory. Idempotent: levels that exist are kept and their subtree_control written again."""
    parts = [p for p in cgroup.strip("/").split("/") if p]
    if not parts:
        raise CgroupV2Error("refusing to create the root cgroup")
    try:
        wanted = controllers(root)
    except OSError as exc:
        raise CgroupV2Error(f"cannot read the controllers of {root}: {exc.strerror or exc}") from exc
    current = root
    _enable(current, wanted)
    for depth, part in enumerate(parts, start=1):
        current = current / part
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise CgroupV2Error(f"failed to create cgroup {current}: {exc.strerror or exc}") from exc
        try:
            kind = (current / TYPE_FILE).read_text().strip()
        except OSError:
            kind = ""
        if kind == "domain invalid":
            raise CgroupV2Error(f"cannot enter cgroup v2 {current} with domain controllers: it is in an invalid state")
        if depth < len(parts):
            _enable(current, wanted)
    return current
