"""API container statuses (v1.ContainerStatus as JSON) built from what the runtime and the pod worker know.

The input is `ContainerInput`: the newest runtime container of one spec container, the previous terminated run, and
the waiting reason the last sync left (ContainerCreating, ErrImagePull, ImagePullBackOff, CrashLoopBackOff,
CreateContainerConfigError, ...). The shape follows convertToAPIContainerStatuses in kubelet_pods.go: a runtime
container that exited while the last sync recorded a reason to wait (a back-off) is reported as waiting with that
reason and the exited run moves to lastState.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from nodeagent.status._common import JSON, format_time

CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"


class RuntimeState(StrEnum):
    """The CRI container state, plus NONE for "no runtime container yet"."""

    NONE = "none"
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class TerminatedRun:
    """One finished run of a container."""

    exit_code: int
    reason: str = ""
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    container_id: str = ""  # the runtime's bare ID; the runtime type prefix is added on output


@dataclass(frozen=True, kw_only=True)
class ContainerInput:
    """What the kubelet knows about one spec container when it writes the pod status."""

    name: str
    image: str  # the image as the spec names it
    state: RuntimeState = RuntimeState.NONE
    container_id: str = ""
    image_id: str = ""  # the image reference the runtime resolved (digest)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int = 0
    reason: str = ""  # the runtime's reason for an exited container: Completed, Error, OOMKilled
    message: str = ""
    restart_count: int = 0
    last_terminated: TerminatedRun | None = None
    waiting_reason: str = ""  # the last sync's reason to wait, e.g. ImagePullBackOff; "" for the default
    waiting_message: str = ""
    ready: bool = False
    started: bool | None = None  # the startup probe result; None: no startup probe


def _full_id(runtime_type: str, container_id: str) -> str:
    return f"{runtime_type}://{container_id}" if container_id else ""


def _time_or_none(moment: datetime | None) -> str | None:
    return format_time(moment) if moment is not None else None


def terminated_state(run: TerminatedRun, *, runtime_type: str = "containerd") -> JSON:
    """v1.ContainerStateTerminated as JSON."""
    state: JSON = {"exitCode": run.exit_code}
    if run.reason:
        state["reason"] = run.reason
    if run.message:
        state["message"] = run.message
    state["startedAt"] = _time_or_none(run.started_at)
    state["finishedAt"] = _time_or_none(run.finished_at)
    if run.container_id:
        state["containerID"] = _full_id(runtime_type, run.container_id)
    return state


def _waiting(reason: str, message: str) -> JSON:
    waiting: JSON = {}
    if reason:
        waiting["reason"] = reason
    if message:
        waiting["message"] = message
    return {"waiting": waiting}


def container_status(
    container: ContainerInput, *, runtime_type: str = "containerd", default_waiting_reason: str = CONTAINER_CREATING
) -> JSON:
    """One v1.ContainerStatus as JSON.

    `default_waiting_reason` is the reason shown while no container exists and the last sync left no reason:
    ContainerCreating, or PodInitializing for app containers of a pod whose init containers have not finished.
    """
    last_state: JSON = {}
    if container.last_terminated is not None:
        last_state = {"terminated": terminated_state(container.last_terminated, runtime_type=runtime_type)}

    state: JSON
    if container.state is RuntimeState.RUNNING:
        state = {"running": {"startedAt": _time_or_none(container.started_at)}}
    elif container.state is RuntimeState.EXITED:
        this_run = TerminatedRun(
            exit_code=container.exit_code,
            reason=container.reason,
            message=container.message,
            started_at=container.started_at,
            finished_at=container.finished_at,
            container_id=container.container_id,
        )
        if container.waiting_reason:
            # Waiting to restart (a back-off): the run that just ended is the last state.
            state = _waiting(container.waiting_reason, container.waiting_message)
            last_state = {"terminated": terminated_state(this_run, runtime_type=runtime_type)}
        else:
            state = {"terminated": terminated_state(this_run, runtime_type=runtime_type)}
    elif container.state is RuntimeState.NONE:
        state = _waiting(container.waiting_reason or default_waiting_reason, container.waiting_message)
    else:
        # Created-but-not-started and unknown collapse to waiting, as upstream does.
        state = _waiting(container.waiting_reason, container.waiting_message)

    status: JSON = {
        "name": container.name,
        "state": state,
        "lastState": last_state,
        "ready": container.ready and container.state is RuntimeState.RUNNING,
        "restartCount": container.restart_count,
        "image": container.image,
        "imageID": container.image_id,
    }
    if container.container_id:
        status["containerID"] = _full_id(runtime_type, container.container_id)
    # The prober's view (UpdatePodStatus): only a running container can have started, and one without a startup
    # probe has started as soon as it runs.
    running = container.state is RuntimeState.RUNNING
    status["started"] = running and (container.started if container.started is not None else True)
    return status
