"""Critical pods, as upstream's pkg/kubelet/types (IsCriticalPod, IsNodeCriticalPod, Preemptable).

A pod is critical when it is static or mirror, or when its priority is at least SystemCriticalPriority (2e9, what
the system-cluster-critical and system-node-critical PriorityClasses give). Node-critical is critical and of the
system-node-critical class by name. The OOM score (kuberuntime.container_config), critical-pod preemption at
admission (nodeagent.preemption) and eviction (eviction.pods, which has its own copy of the rule) read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.staticpods import is_mirror_pod, is_static_pod

# pkg/apis/scheduling: priorities at or above this are system-critical.
SYSTEM_CRITICAL_PRIORITY = 2 * 10**9
SYSTEM_NODE_CRITICAL = "system-node-critical"


def pod_priority(pod: Mapping[str, Any]) -> int | None:
    """spec.priority, None when unset (the apiserver sets it from the PriorityClass; a static pod may lack it)."""
    value = (pod.get("spec") or {}).get("priority")
    return int(value) if value is not None else None


def is_critical_pod(pod: Mapping[str, Any]) -> bool:
    """Upstream IsCriticalPod: static, mirror, or a priority at or above SystemCriticalPriority."""
    if is_static_pod(pod) or is_mirror_pod(pod):
        return True
    priority = pod_priority(pod)
    return priority is not None and priority >= SYSTEM_CRITICAL_PRIORITY


def is_node_critical_pod(pod: Mapping[str, Any]) -> bool:
    """Upstream IsNodeCriticalPod: critical, and of the system-node-critical PriorityClass."""
    return is_critical_pod(pod) and (pod.get("spec") or {}).get("priorityClassName") == SYSTEM_NODE_CRITICAL


def preemptable(preemptor: Mapping[str, Any], preemptee: Mapping[str, Any]) -> bool:
    """Upstream Preemptable: a critical pod may preempt a non-critical one; otherwise only a strictly higher
    priority preempts, and only when both pods have one."""
    if is_critical_pod(preemptor) and not is_critical_pod(preemptee):
        return True
    mine, theirs = pod_priority(preemptor), pod_priority(preemptee)
    return mine is not None and theirs is not None and mine > theirs
