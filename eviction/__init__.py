"""Eviction: the decisions of upstream's eviction manager (pkg/kubelet/eviction) as pure functions.

signals (names, observations) → thresholds (parsed config) → evaluate (met, grace, conditions) → rank → decide (one
cycle: conditions, node-level reclaim, one victim) with messages (upstream's words, admission under pressure),
localstorage (limit evictions) and cgroup (working sets from file content). Nothing here does I/O; nodeagent wires it.
"""
