"""Kubelet-side pod admission (GeneralPredicates): pure decisions over the pod, the node and the pods already here."""

from nodeagent.admission.predicates import (
    NODE_AFFINITY,
    NODE_NAME,
    NODE_PORTS,
    OUT_OF_CPU,
    OUT_OF_EPHEMERAL_STORAGE,
    OUT_OF_MEMORY,
    OUT_OF_PODS,
    POD_OS_NOT_SUPPORTED,
    POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH,
    TAINT_TOLERATION,
    AdmitResult,
    admit,
    has_untolerated_no_execute_taint,
    matches_node_affinity,
)
from nodeagent.admission.resources import pod_requests

__all__ = [
    "NODE_AFFINITY",
    "NODE_NAME",
    "NODE_PORTS",
    "OUT_OF_CPU",
    "OUT_OF_EPHEMERAL_STORAGE",
    "OUT_OF_MEMORY",
    "OUT_OF_PODS",
    "POD_OS_NOT_SUPPORTED",
    "POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH",
    "TAINT_TOLERATION",
    "AdmitResult",
    "admit",
    "has_untolerated_no_execute_taint",
    "matches_node_affinity",
    "pod_requests",
]
