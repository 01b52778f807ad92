"""A container's swap limit for the CRI (upstream configureContainerSwapResources, kuberuntime_container_linux.go).

nodeagent runs every container as the kubelet's NoSwap behaviour (the default; `memorySwap` is not in nodeagent's
configuration subset, and upstream's LimitedSwap falls back to NoSwap on cgroup v1 anyway). As the kubelet v1.34:

- Nothing is set when the host has no swap controller: cgroup v1 without `memory.memsw.limit_in_bytes` at the memory
  hierarchy's root, cgroup v2 without `memory.swap.max` in the agent's own cgroup (its `0::` line of
  /proc/self/cgroup). Checked once.
- cgroup v1: the memory+swap limit equals the memory limit (no swap above it; no limit stays 0, which the runtime
  ignores).
- cgroup v2: `memory.swap.max` = "0" in the container's unified map.

Where nodeagent leaves the swap limit unset, containerd 1.7 sets the same memory.swap itself on v1; the value is sent
because the kubelet sends it (the CRI config is compared with the kubelet's, tests/differential).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from cri.v1 import api_pb2

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
V1_SWAP_FILE = "memory/memory.memsw.limit_in_bytes"
V2_SWAP_FILE = "memory.swap.max"


@dataclass(frozen=True)
class SwapSupport:
    """What the host offers: a unified (v2) hierarchy, and whether its swap controller is there."""

    cgroup_v2: bool
    controller: bool


def own_v2_cgroup(proc_self_cgroup: str) -> str | None:
    """The `0::<path>` cgroup of a /proc/self/cgroup text, None when it has none."""
    for line in proc_self_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if hierarchy == "0" and sep and not controllers:
            return path
    return None


def detect_swap_support(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> SwapSupport:
    """Upstream checkSwapControllerAvailability, with the cgroup version as cgroups.py tells it."""
    if not (root / "cgroup.controllers").exists():
        return SwapSupport(cgroup_v2=False, controller=(root / V1_SWAP_FILE).exists())
    try:
        own = own_v2_cgroup(proc_self_cgroup.read_text())
    except OSError:
        own = None
    if own is None:
        return SwapSupport(cgroup_v2=True, controller=False)
    return SwapSupport(cgroup_v2=True, controller=(root / own.lstrip("/") / V2_SWAP_FILE).exists())


@functools.cache
def host_swap_support() -> SwapSupport:
    """This host's, checked once (upstream's sync.OnceValue)."""
    return detect_swap_support()


def apply_no_swap(resources: api_pb2.LinuxContainerResources, support: SwapSupport) -> None:
    """Upstream ConfigureNoSwap, on `resources` whose memory limit is already set."""
    if not support.controller:
        return
    if support.cgroup_v2:
        resources.unified[V2_SWAP_FILE] = "0"
        return
    resources.memory_swap_limit_in_bytes = resources.memory_limit_in_bytes
