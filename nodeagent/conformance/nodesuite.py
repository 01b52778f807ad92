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
