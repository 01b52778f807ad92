"""The last status of a terminated pod, as upstream's status manager TerminatePod settles it.

The kubelet reads the runtime to report how containers ended, but a container may be gone by then (removed behind
its back, garbage-collected, or lost over a restart). So that a pod is never described as successful by mistake,
any container without a terminated state is marked failed (ContainerStatusUnknown, exit 137, "could not be located
when the pod was terminated"): every app container once the pod has initialized, and the init containers that
tried to start. A pod that is not yet in a terminal phase becomes Failed (static pods excepted, as upstream).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.status._common import JSON, is_restartable_init_container, last_state_of, state_of
from nodeagent.status.container_status import UNKNOWN_WHEN_TERMINATED, unknown_state
from nodeagent.status.phase import FAILED, TERMINAL_PHASES


def has_pod_initialized(pod_spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the status shows the pod got past its init containers (upstream hasPodInitialized)."""
    init_containers = pod_spec.get("initContainers") or ()
    if not init_containers:
        return True
    for app in status.get("containerStatuses") or ():
        if last_state_of(app).get("terminated") is not None or state_of(app).get("waiting") is None:
            return True
    inits = status.get("initContainerStatuses") or ()
    if not inits or len(inits) > len(init_containers):
        return False
    last, container = inits[-1], init_containers[len(inits) - 1]
    if is_restartable_init_container(container):
        return state_of(last).get("running") is not None and bool(last.get("started"))
    for state in (last_state_of(last), state_of(last)):
        terminated = state.get("terminated")
        if terminated is not None and terminated.get("exitCode", 0) == 0:
            return True
    return False


def _tried_to_start(statuses: Sequence[Mapping[str, Any]]) -> int:
    """How many leading init statuses tried to start: all but the suffix still waiting with no earlier run, and
    at least one (upstream initializedContainers)."""
    for i in range(len(statuses) - 1, -1, -1):
        status = statuses[i]
        if state_of(status).get("waiting") is None or last_state_of(status).get("terminated") is not None:
            return i + 1
    return min(len(statuses), 1)


def terminated_pod_status(pod_spec: Mapping[str, Any], status: Mapping[str, Any], *, is_static: bool = False) -> JSON:
    """The status with every container that did not report an end marked ContainerStatusUnknown, and a terminal
    phase (upstream TerminatePod)."""
    out: JSON = copy.deepcopy(dict(status))
    if has_pod_initialized(pod_spec, status):
        for app in out.get("containerStatuses") or ():
            if state_of(app).get("terminated") is None:
                app["state"] = unknown_state(UNKNOWN_WHEN_TERMINATED)
    inits = out.get("initContainerStatuses") or []
    for init in inits[: _tried_to_start(inits)]:
        if state_of(init).get("terminated") is None:
            init["state"] = unknown_state(UNKNOWN_WHEN_TERMINATED)
    if not is_static and out.get("phase") not in TERMINAL_PHASES:
        out["phase"] = FAILED
    return out
