"""The pod phase, computed from the spec and the container statuses as the kubelet's getPhase does.

Init containers are counted first: a regular init container that has not exited 0 keeps the pod Pending, and one
that failed fails the pod when restartPolicy is Never. Sidecars (init containers with restartPolicy Always) count
like app containers for Running, and a stopped sidecar is ignored, so a Job with a sidecar can still succeed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.status._common import (
    find_status,
    has_any_regular_container_started,
    is_restartable_init_container,
    last_state_of,
    state_of,
)

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})


def get_phase(
    pod_spec: Mapping[str, Any],
    container_statuses: Sequence[Mapping[str, Any]],
    init_statuses: Sequence[Mapping[str, Any]],
    *,
    pod_is_terminal: bool = False,
    pod_has_initialized: bool | None = None,
    is_static_pod: bool = False,
) -> str:
    """Pending, Running, Succeeded or Failed, as upstream getPhase (pkg/kubelet/kubelet_pods.go).

    `pod_is_terminal` says the pod worker finished the pod, so its containers will not restart whatever the
    restartPolicy. `pod_has_initialized` defaults to "an app container has run".
    """
    restart_policy = pod_spec.get("restartPolicy") or "Always"
    init_containers = pod_spec.get("initContainers") or ()
    if pod_has_initialized is None:
        pod_has_initialized = has_any_regular_container_started(pod_spec, container_statuses)

    pending_regular_init = 0
    pending_restartable_init = 0
    failed_initialization = 0
    for container in init_containers:
        if is_restartable_init_container(container):
            continue
        status = find_status(init_statuses, container.get("name", ""))
        if status is None:
            pending_regular_init += 1
            continue
        state = state_of(status)
        if state.get("running") is not None:
            pending_regular_init += 1
        elif state.get("terminated") is not None:
            if state["terminated"].get("exitCode", 0) != 0:
                failed_initialization += 1
        elif state.get("waiting") is not None:
            last_terminated = last_state_of(status).get("terminated")
            if last_terminated is not None:
                if last_terminated.get("exitCode", 0) != 0:
                    failed_initialization += 1
            else:
                pending_regular_init += 1
        else:
            pending_regular_init += 1

    unknown = running = waiting = stopped = succeeded = 0
    for container in init_containers:
        if not is_restartable_init_container(container):
            continue
        status = find_status(init_statuses, container.get("name", ""))
        if status is None:
            unknown += 1
            continue
        state = state_of(status)
        if state.get("running") is not None:
            if not status.get("started"):
                pending_restartable_init += 1
            running += 1
        elif state.get("terminated") is not None:
            pass  # a stopped sidecar does not decide the phase
        elif state.get("waiting") is not None:
            if last_state_of(status).get("terminated") is None:
                pending_restartable_init += 1
                waiting += 1
        else:
            pending_restartable_init += 1
            unknown += 1

    for container in pod_spec.get("containers") or ():
        status = find_status(container_statuses, container.get("name", ""))
        if status is None:
            unknown += 1
            continue
        state = state_of(status)
        if state.get("running") is not None:
            running += 1
        elif state.get("terminated") is not None:
            stopped += 1
            if state["terminated"].get("exitCode", 0) == 0:
                succeeded += 1
        elif state.get("waiting") is not None:
            if last_state_of(status).get("terminated") is not None:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1

    if failed_initialization > 0 and restart_policy == "Never":
        return FAILED

    if pending_regular_init > 0 or (pending_restartable_init > 0 and not pod_has_initialized) or waiting > 0:
        return PENDING
    if running > 0 and unknown == 0:
        return RUNNING
    if running == 0 and stopped > 0 and unknown == 0:
        # A terminal pod's containers will not be restarted, whatever the restart policy says.
        if pod_is_terminal and not is_static_pod:
            return SUCCEEDED if stopped == succeeded else FAILED
        if restart_policy == "Always":
            return RUNNING  # all containers are being restarted
        if stopped == succeeded:
            return SUCCEEDED
        if restart_policy == "Never":
            return FAILED
        return RUNNING  # OnFailure, at least one failed and is being restarted
    return PENDING
