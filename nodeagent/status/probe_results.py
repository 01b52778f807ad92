"""A probe verdict applied to a cached pod status at once (upstream status manager SetContainerReadiness and
SetContainerStartup).

A readiness change must reach the apiserver even while the pod's worker is busy (a pod terminating within its
grace period still leaves its Services as soon as its readiness probe fails), so it does not wait for the next
full status generation: the container's `ready` (or `started`) flag is flipped in the latest status and the
ContainersReady and Ready conditions are computed again, their lastTransitionTime moving only if their status did.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nodeagent.status._common import JSON, state_of
from nodeagent.status.conditions import (
    CONTAINERS_READY,
    READY,
    containers_ready_condition,
    ready_condition,
    stamp_transition_times,
    with_observed_generation,
)


def _find(status: JSON, container_id: str) -> JSON | None:
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in status.get(key) or ():
            if str(entry.get("containerID") or "").rpartition("://")[2] == container_id:
                found: JSON = entry
                return found
    return None


def with_probe_result(
    pod_spec: Mapping[str, Any],
    status: Mapping[str, Any],
    container_id: str,
    *,
    now: datetime,
    ready: bool | None = None,
    started: bool | None = None,
    generation: int = 0,
) -> JSON | None:
    """The status with the container's flag set, or None when the container is not in it or nothing changes.

    `generation` is the pod's metadata.generation, which the regenerated conditions carry as observedGeneration."""
    new: JSON = copy.deepcopy(dict(status))
    entry = _find(new, container_id)
    if entry is None:
        return None
    running = state_of(entry).get("running") is not None
    if started is not None:
        value = started and running
        if entry.get("started") == value:
            return None
        entry["started"] = value
        return new
    if ready is None:
        return None
    value = ready and running
    if bool(entry.get("ready")) == value:
        return None
    entry["ready"] = value
    all_statuses = [*(new.get("initContainerStatuses") or ()), *(new.get("containerStatuses") or ())]
    phase = str(new.get("phase", ""))
    old_conditions = list(new.get("conditions") or ())
    others = [c for c in old_conditions if c.get("type") not in (READY, CONTAINERS_READY)]
    regenerated = stamp_transition_times(
        with_observed_generation(
            [
                ready_condition(pod_spec, others, all_statuses, phase),
                containers_ready_condition(pod_spec, all_statuses, phase),
            ],
            generation,
        ),
        old_conditions,
        now=now,
    )
    by_type = {c["type"]: c for c in regenerated}
    conditions = [by_type.pop(c.get("type"), c) for c in old_conditions]
    conditions += by_type.values()  # a status without them gets them appended, as upstream
    new["conditions"] = conditions
    return new
