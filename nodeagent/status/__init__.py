"""Pod status as the kubelet computes it: phase, conditions, container statuses, and what to send.

Pure functions over the apiserver's JSON (plain dicts); the status manager that sends the patches lives elsewhere.
"""

from nodeagent.status.compare import (
    is_stale,
    merge_pod_status,
    needs_update,
    status_equal_ignoring_time,
    status_patch,
)
from nodeagent.status.conditions import (
    CONTAINERS_READY,
    INITIALIZED,
    KUBELET_CONDITIONS,
    POD_READY_TO_START_CONTAINERS,
    POD_SCHEDULED,
    READY,
    containers_ready_condition,
    initialized_condition,
    need_to_reconcile_pod_readiness,
    pod_ready_to_start_containers_condition,
    pod_scheduled_condition,
    ready_condition,
    stamp_transition_times,
)
from nodeagent.status.container_status import ContainerInput, RuntimeState, TerminatedRun, container_status
from nodeagent.status.generate import failed_pod_status, generate_pod_status, qos_class
from nodeagent.status.phase import FAILED, PENDING, RUNNING, SUCCEEDED, get_phase
from nodeagent.status.terminate import has_pod_initialized, terminated_pod_status

__all__ = [
    "CONTAINERS_READY",
    "FAILED",
    "INITIALIZED",
    "KUBELET_CONDITIONS",
    "PENDING",
    "POD_READY_TO_START_CONTAINERS",
    "POD_SCHEDULED",
    "READY",
    "RUNNING",
    "SUCCEEDED",
    "ContainerInput",
    "RuntimeState",
    "TerminatedRun",
    "container_status",
    "containers_ready_condition",
    "failed_pod_status",
    "generate_pod_status",
    "get_phase",
    "has_pod_initialized",
    "initialized_condition",
    "is_stale",
    "merge_pod_status",
    "need_to_reconcile_pod_readiness",
    "needs_update",
    "pod_ready_to_start_containers_condition",
    "pod_scheduled_condition",
    "qos_class",
    "ready_condition",
    "stamp_transition_times",
    "status_equal_ignoring_time",
    "status_patch",
    "terminated_pod_status",
]
