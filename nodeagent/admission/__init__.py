"""Kubelet-side pod admission (sysctls, GeneralPredicates, AppArmor): pure decisions over the pod, the node and the
pods here."""

from nodeagent.admission.predicates import (
    APPARMOR,
    NODE_AFFINITY,
    NODE_NAME,
    NODE_PORTS,
    OUT_OF_CPU,
    OUT_OF_EPHEMERAL_STORAGE,
    OUT_OF_MEMORY,
    OUT_OF_PODS,
    POD_OS_NOT_SUPPORTED,
    POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH,
    SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED,
    TAINT_TOLERATION,
    AdmitResult,
    InsufficientResource,
    admit,
    general_predicate_failures,
    has_untolerated_no_execute_taint,
    is_insufficient_resource,
    matches_node_affinity,
)
from nodeagent.admission.resources import pod_requests
from nodeagent.admission.sysctls import SYSCTL_FORBIDDEN, SysctlAllowlist, new_allowlist

__all__ = [
    "APPARMOR",
    "NODE_AFFINITY",
    "NODE_NAME",
    "NODE_PORTS",
    "OUT_OF_CPU",
    "OUT_OF_EPHEMERAL_STORAGE",
    "OUT_OF_MEMORY",
    "OUT_OF_PODS",
    "POD_OS_NOT_SUPPORTED",
    "POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH",
    "SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED",
    "SYSCTL_FORBIDDEN",
    "TAINT_TOLERATION",
    "AdmitResult",
    "InsufficientResource",
    "SysctlAllowlist",
    "admit",
    "general_predicate_failures",
    "has_untolerated_no_execute_taint",
    "is_insufficient_resource",
    "matches_node_affinity",
    "new_allowlist",
    "pod_requests",
]
