"""In-place pod resize's allocation state (upstream pkg/kubelet/allocation): what each container was allocated and
what the runtime was told, checkpointed; the pure resize decisions; the manager that holds the resize conditions."""

from nodeagent.allocation.manager import AllocationManager
from nodeagent.allocation.resize import (
    DEFERRED,
    ERROR,
    INFEASIBLE,
    POD_RESIZE_IN_PROGRESS,
    POD_RESIZE_PENDING,
    RESIZE_COMPLETED,
    ResizeDecision,
    decide_resize,
)
from nodeagent.allocation.state import AllocationStateError, ResourceState

__all__ = [
    "DEFERRED",
    "ERROR",
    "INFEASIBLE",
    "POD_RESIZE_IN_PROGRESS",
    "POD_RESIZE_PENDING",
    "RESIZE_COMPLETED",
    "AllocationManager",
    "AllocationStateError",
    "ResizeDecision",
    "ResourceState",
    "decide_resize",
]
