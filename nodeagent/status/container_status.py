"""API container statuses (v1.ContainerStatus as JSON) built from what the runtime and the pod worker know.

The input is `ContainerInput`: the newest runtime container of one spec container, the previous terminated run, and
the waiting reason the last sync left (ErrImagePull, ImagePullBackOff, CrashLoopBackOff, CreateContainerConfigError,
...). The shape follows convertToAPIContainerStatuses in kubelet_pods.go:

- without a runtime container the status waits with the default reason (ContainerCreating, or PodInitializing in a
  pod with init containers) and keeps the previous status's restartCount and lastState; a previous terminated
  status is kept whole. A container whose previous status was running but that the runtime no longer has (removed
  behind the kubelet's back, or garbage-collected) gets a terminated lastState with reason ContainerStatusUnknown,
  exit code 137 and upstream's "could not be located when the pod was deleted" message, and its restartCount goes
  up by one unless the pod is being deleted: the pod does not fall back to Pending, and the restart shows;
- a runtime container in the unknown state whose previous status was running is terminated with
  ContainerStatusUnknown and upstream's "could not be located when the pod was terminated" message;
- a container the last sync could not start waits with that reason, the run that ended (if any) in lastState;
- volumeMounts: a status without a runtime container lists the spec's (`status.volume_mounts`); one built from a
  runtime container keeps the previous status's list, which upstream treats as immutable;
- resources and allocatedResources (InPlacePodVerticalScaling, on by default): a status built from a runtime
  container reports allocatedResources as the allocated requests (the pod given is the pod as allocated; absent
  without requests) and resources as upstream's convertContainerStatusResources: a container that is not running
  shows its allocated resources; a running one shows, where the allocation sets limits or requests, the cpu limit,
  memory limit and cpu request the runtime reports it applied (CRI ContainerStatus.resources: quota/period, memory
  limit, shares; a cpu value at or below the minimum on both sides keeps the allocated text), the previous status's
  value when the runtime reports none for the same running instance, and the memory request last actuated. A status
  without a runtime container has neither;
- a runtime container that exited reports its startedAt/finishedAt as the runtime gave them, the Unix epoch when
  the runtime says 0 (a container that failed to start), as upstream's time.Unix(0, n); only a run nobody saw end
  (ContainerStatusUnknown) has null times.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from eviction.quantity import format_binary, format_decimal
from nodeagent.config.quantity import parse_quantity
from nodeagent.status._common import JSON, format_time, last_state_of, state_of

CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"

# Upstream's messages (convertToAPIContainerStatuses, and the status manager's TerminatePod) and exit code.
UNKNOWN_WHEN_TERMINATED = "The container could not be located when the pod was terminated"
UNKNOWN_WHEN_DELETED = "The container could not be located when the pod was deleted.  The container used to be Running"
INIT_ASSUMED_COMPLETED = (
    "Unable to get init container status from container runtime and pod has been initialized, "
    "treat it as exited normally"
)
UNKNOWN_EXIT_CODE = 137

# What Go's time.Unix(0, 0) marshals to: a runtime container that exited without ever starting has this startedAt.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
    # What the runtime reports it applied to this instance (CRI ContainerStatus.resources.linux, as upstream's
    # toKubeContainerResources reads it): None for a value it does not report.
    cpu_limit_milli: int | None = None
    cpu_request_milli: int | None = None
    memory_limit: int | None = None
    # The memory request last actuated for the container (the allocation manager's record), if any.
    actuated_memory_request: str | None = None


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


def unknown_state(message: str) -> JSON:
    """A run whose end nobody saw: upstream reports exit code 137 (killed), with no times and no container ID."""
    run = TerminatedRun(exit_code=UNKNOWN_EXIT_CODE, reason=CONTAINER_STATUS_UNKNOWN, message=message)
    return {"terminated": terminated_state(run)}


def _was_running(previous: Mapping[str, Any] | None) -> bool:
    return previous is not None and state_of(previous).get("running") is not None


def _without_runtime_container(
    container: ContainerInput,
    previous: Mapping[str, Any] | None,
    default_waiting_reason: str,
    *,
    pod_deleted: bool,
    volume_mounts: Sequence[Mapping[str, Any]],
) -> JSON:
    """No runtime container: the default waiting state over the previous status (upstream's first two passes)."""
    if previous is not None and state_of(previous).get("terminated") is not None:
        return copy.deepcopy(dict(previous))  # the last word on a finished container
    last = copy.deepcopy(dict(last_state_of(previous))) if previous is not None else {}
    status = _base(container, {"waiting": {"reason": default_waiting_reason}}, last, previous)
    if volume_mounts:
        status["volumeMounts"] = [dict(m) for m in volume_mounts]
    if _was_running(previous) and last.get("terminated") is None:
        # It ran and is gone: show it stopped (not pending), and count the restart unless the pod is going away.
        status["lastState"] = unknown_state(UNKNOWN_WHEN_DELETED)
        if not pod_deleted:
            status["restartCount"] += 1
    return status


def _base(container: ContainerInput, state: JSON, last_state: JSON, previous: Mapping[str, Any] | None) -> JSON:
    return {
        "name": container.name,
        "state": state,
        "lastState": last_state,
        "ready": False,
        "restartCount": int(previous.get("restartCount", 0)) if previous is not None else 0,
        "image": container.image,
        "imageID": "",
        "started": False,
    }


def _runtime_run(run: TerminatedRun) -> TerminatedRun:
    """A run the runtime reported: its times as upstream's time.Unix(0, n) makes them, the epoch for 0 (unset)."""
    return replace(run, started_at=run.started_at or EPOCH, finished_at=run.finished_at or EPOCH)


MIN_MILLI_CPU_LIMIT = 10  # upstream cm.MinMilliCPULimit
MIN_SHARES = 2  # upstream cm.MinShares, which it compares with millicores here


def _millicores(text: Any) -> int:
    return math.ceil(parse_quantity(str(text)) * 1000)


def _format_millicores(millis: int) -> str:
    return format_decimal(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def status_resources(
    resources: Mapping[str, Any],
    container: ContainerInput | None = None,
    previous: Mapping[str, Any] | None = None,
    *,
    runtime_type: str = "containerd",
) -> tuple[JSON, JSON | None]:
    """`resources` and `allocatedResources` of a status built from a runtime container (upstream
    convertContainerStatusResources and allocatedContainer.Resources.Requests). `resources` is the container's
    allocated resources; `container` the runtime's view of the instance (None: not running)."""
    copied: JSON = copy.deepcopy(dict(resources))
    requests = copied.get("requests")
    allocated = copy.deepcopy(dict(requests)) if isinstance(requests, Mapping) and requests else None
    if container is None or container.state is not RuntimeState.RUNNING:
        return copied, allocated
    old: Mapping[str, Any] = {}
    if (
        previous is not None
        and "running" in state_of(previous)
        and previous.get("containerID") == _full_id(runtime_type, container.container_id)
    ):
        old = previous.get("resources") or {}

    def keep_old(part: str, name: str, into: JSON) -> None:
        value = (old.get(part) or {}).get(name)
        if value is not None:
            into[name] = value

    limits = copied.get("limits")
    if isinstance(limits, dict):
        if container.cpu_limit_milli is not None:
            if (
                container.cpu_limit_milli > MIN_MILLI_CPU_LIMIT
                or _millicores(limits.get("cpu", 0)) > MIN_MILLI_CPU_LIMIT
            ):
                limits["cpu"] = _format_millicores(container.cpu_limit_milli)
        else:
            keep_old("limits", "cpu", limits)
        if container.memory_limit is not None:
            limits["memory"] = format_binary(container.memory_limit)
        else:
            keep_old("limits", "memory", limits)
    if isinstance(requests, dict):
        if container.cpu_request_milli is not None:
            if container.cpu_request_milli > MIN_SHARES or _millicores(requests.get("cpu", 0)) > MIN_SHARES:
                requests["cpu"] = _format_millicores(container.cpu_request_milli)
        else:
            keep_old("requests", "cpu", requests)
        if "memory" in requests and container.actuated_memory_request is not None:
            requests["memory"] = container.actuated_memory_request
    return copied, allocated


def _from_runtime_container(container: ContainerInput, previous: Mapping[str, Any] | None, runtime_type: str) -> JSON:
    """The newest runtime container's status, the run before it as lastState (upstream convertContainerStatus)."""
    last_state: JSON = {}
    if container.last_terminated is not None:
        last_run = _runtime_run(container.last_terminated)
        last_state = {"terminated": terminated_state(last_run, runtime_type=runtime_type)}
    restart_count = container.restart_count
    state: JSON
    if container.state is RuntimeState.RUNNING:
        state = {"running": {"startedAt": _time_or_none(container.started_at)}}
    elif container.state is RuntimeState.EXITED:
        this_run = _runtime_run(
            TerminatedRun(
                exit_code=container.exit_code,
                reason=container.reason,
                message=container.message,
                started_at=container.started_at,
                finished_at=container.finished_at,
                container_id=container.container_id,
            )
        )
        state = {"terminated": terminated_state(this_run, runtime_type=runtime_type)}
    elif container.state is RuntimeState.UNKNOWN and previous is not None and _was_running(previous):
        # It was running and the runtime cannot say what became of it: it stopped, and counts as a restart, so that
        # a run-once container does not look as if it never ran.
        state = unknown_state(UNKNOWN_WHEN_TERMINATED)
        restart_count = int(previous.get("restartCount", 0)) + 1
    else:
        state = {"waiting": {}}  # created but not started, or unknown: waiting, as upstream collapses them
    running = container.state is RuntimeState.RUNNING
    status: JSON = {
        "name": container.name,
        "state": state,
        "lastState": last_state,
        "ready": container.ready and running,
        "restartCount": restart_count,
        "image": container.image,
        "imageID": container.image_id,
    }
    if container.container_id:
        status["containerID"] = _full_id(runtime_type, container.container_id)
    # The prober's view (UpdatePodStatus): only a running container can have started, and one without a startup
    # probe has started as soon as it runs.
    status["started"] = running and (container.started if container.started is not None else True)
    if previous is not None and previous.get("volumeMounts"):
        # As upstream's convertContainerStatus: the list written while the container waited, unchanged.
        status["volumeMounts"] = copy.deepcopy(list(previous["volumeMounts"]))
    return status


def container_status(
    container: ContainerInput,
    *,
    runtime_type: str = "containerd",
    default_waiting_reason: str = CONTAINER_CREATING,
    previous: Mapping[str, Any] | None = None,
    pod_deleted: bool = False,
    init_completed: bool = False,
    volume_mounts: Sequence[Mapping[str, Any]] = (),
    resources: Mapping[str, Any] | None = None,
) -> JSON:
    """One v1.ContainerStatus as JSON.

    `default_waiting_reason` is the reason shown while no container exists and the last sync left no reason:
    ContainerCreating, or PodInitializing for every container of a pod with init containers. `previous` is the
    container's status in the last pod status (the status manager's); `pod_deleted` says the pod has a
    deletionTimestamp. `init_completed` says this is a regular init container of a pod whose regular containers
    exist in the runtime: without a runtime container of its own, it is reported as having exited 0.
    `volume_mounts` is the spec's volumeMounts as the status shows them (`status.volume_mounts`). `resources` is
    the spec container's resources: given (`{}` for none), a status built from a runtime container reports them
    (`status_resources`); None leaves both fields out.
    """
    if container.state is RuntimeState.NONE:
        status = _without_runtime_container(
            container, previous, default_waiting_reason, pod_deleted=pod_deleted, volume_mounts=volume_mounts
        )
        if init_completed and state_of(status).get("waiting") is not None:
            # As upstream: an init container the runtime lost, in a pod whose regular containers exist, succeeded;
            # it will not run again, so no reason to wait applies.
            run = TerminatedRun(exit_code=0, reason="Completed", message=INIT_ASSUMED_COMPLETED)
            status["state"] = {"terminated": terminated_state(run)}
            return status
    else:
        status = _from_runtime_container(container, previous, runtime_type)
        if resources is not None:
            status["resources"], allocated = status_resources(resources, container, previous, runtime_type=runtime_type)
            if allocated is not None:
                status["allocatedResources"] = allocated
    if container.waiting_reason:
        # The last sync could not start it (upstream's reason cache): it waits, the run that ended is the last state.
        if state_of(status).get("terminated") is not None:
            status["lastState"] = {"terminated": status["state"]["terminated"]}
        status["state"] = _waiting(container.waiting_reason, container.waiting_message)
    return status
