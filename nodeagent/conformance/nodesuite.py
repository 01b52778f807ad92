"""The node e2e suite (`e2e_node.test`, k8s.io/kubernetes/test/e2e_node) and its node-eviction selection.

Issue 33's `--suite node-eviction`: the binary (build.E2E_NODE) and which of its specs judge eviction, grouped as
the issue names them. noderun.py runs them, through the adapter of nodeadapter.py and systemctl_shim.py
(docs/conformance.md, "node-eviction suite").

The groups, in order (a spec counts in the first group whose pattern it matches):
- eviction: every spec of eviction_test.go (memory, disk, inodes, PIDs, priority ordering, soft thresholds, local
  storage limits), including ImageGCNoEviction and LocalStorageCapacityIsolationEviction, which live there;
- image GC: image_gc_test.go (ImageMaximumGCAge);
- critical pods: critical_pod_test.go and system_node_critical_test.go;
- local-storage isolation: quota_lsci_test.go (LSCI with and without filesystem quotas).
Container GC (garbage_collector_test.go, `[sig-node] GarbageCollect`) is not in the selection.
"""

from __future__ import annotations

from nodeagent.conformance.presets import Group, Preset

# The dry run's suite description: ginkgo's focus sees it before each spec's text.
SUITE_DESCRIPTION = "E2eNode Suite"
# e2e_node.test takes no --provider (e2e.test's flag); a dry run passes it nothing after `--`.
DRY_RUN_SUITE_ARGS: tuple[str, ...] = ()

_EVICTION_TESTS = (
    "InodeEviction",
    "ImageGCNoEviction",
    r"MemoryAllocatableEviction(?:PodLevelResources)?",
    r"LocalStorage(?:Soft)?Eviction",
    "LocalStorageSoftEvictionNotOverwriteTerminationGracePeriodSeconds",
    "LocalStorageCapacityIsolationEviction",
    r"Priority(?:Memory|LocalStorage|Pid)EvictionOrdering(?:PodLevelResources)?",
)

NODE_EVICTION = Preset(
    name="node-eviction",
    groups=(
        Group("eviction", rf"\[sig-node\] (?:{'|'.join(_EVICTION_TESTS)}) \["),
        Group("image GC", r"\[sig-node\] ImageGarbageCollect \["),
        Group(
            "critical pods", r"\[sig-node\] (?:CriticalPod|CriticalPodWithPodLevelResources|SystemNodeCriticalPod) \["
        ),
        Group("local-storage isolation", r"\[sig-node\] LocalStorageCapacityIsolationFSQuotaMonitoring \["),
    ),
    skip="",
    label_filter="",
)

# What the v1.34.4 dry run lists per group (docs/conformance.md, "node-eviction suite").
EXPECTED_COUNTS = {"eviction": 14, "image GC": 2, "critical pods": 4, "local-storage isolation": 2}

# --- Shards of the selection (noderun's `--resume`, `--shard`, `--time-budget`) ---------------------------------
# The 22 specs take hours one after the other, so a run is planned in shards (shards.Plan, as `--certified` is) and
# resumed. The order puts first what the machine's other tenants disturb least, and the memory specs last: their
# pressure is sized from the node's free memory when they begin, so memory that other processes take during the
# spec counts as the pods' (PriorityMemoryEvictionOrdering failed so on 2026-11-29).
RUN_ORDER = (
    "CriticalPod",  # seconds each
    "ImageGarbageCollect",
    "PriorityPidEvictionOrdering",
    "LocalStorageCapacityIsolationFSQuotaMonitoring",
    "SystemNodeCriticalPod",
    "InodeEviction",
    "ImageGCNoEviction",
    "LocalStorage",  # every LocalStorage*Eviction, and LocalStorageCapacityIsolationEviction
    "PriorityLocalStorageEvictionOrdering",
    "MemoryAllocatableEviction",
    "PriorityMemoryEvictionOrdering",
)
# Seconds of one spec, measured here (docs/conformance.md, "node-eviction suite"), else by its tags below.
MEASURED_SECONDS = {
    "CriticalPod": 10.0,
    "CriticalPodWithPodLevelResources": 10.0,
    "ImageGarbageCollect": 345.0,  # the image GC period is 5 min, hardcoded
    "PriorityPidEvictionOrdering": 490.0,
    "MemoryAllocatableEviction": 680.0,
    "SystemNodeCriticalPod": 860.0,  # 8 min of Consistently under DiskPressure, then the 5 min transition period
    "PriorityMemoryEvictionOrdering": 600.0,
}
SLOW_SECONDS = 720.0  # an eviction spec: a config change, pressure, the 5 min transition period, 1 min stable
OTHER_SECONDS = 120.0


def spec_test(name: str) -> str:
    """The spec's top container: `[sig-node] InodeEviction [Slow] ...` → `InodeEviction`."""
    words = name.split()
    return words[1] if len(words) > 1 and words[0] == "[sig-node]" else name


def run_rank(name: str) -> int:
    test = spec_test(name)
    for rank, prefix in enumerate(RUN_ORDER):
        if test.startswith(prefix):
            return rank
    return len(RUN_ORDER)


def ordered(names: list[str]) -> list[str]:
    """The specs in RUN_ORDER (stable: by text within one rank)."""
    return sorted(names, key=lambda name: (run_rank(name), name))


def estimated_seconds(name: str) -> float:
    test = spec_test(name)
    if test in MEASURED_SECONDS:
        return MEASURED_SECONDS[test]
    return SLOW_SECONDS if "[Slow]" in name else OTHER_SECONDS


def within_budget(names: tuple[str, ...], seconds: dict[str, float], left: float | None) -> tuple[str, ...]:
    """The longest prefix of `names` whose estimated seconds fit in `left` seconds (None: no budget)."""
    if left is None:
        return names
    taken: list[str] = []
    used = 0.0
    for name in names:
        used += seconds.get(name, SLOW_SECONDS)
        if used > left:
            break
        taken.append(name)
    return tuple(taken)
