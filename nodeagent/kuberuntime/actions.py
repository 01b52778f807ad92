"""What to do to a pod, given what runs (upstream: kuberuntime_manager.go computePodActions, PodSandboxChanged,
ShouldContainerBeRestarted, and the sidecar-aware computeInitContainerActions).

The input is `RuntimePodStatus`, a frozen view of the runtime built from CRI ListPodSandbox / ListContainers /
PodSandboxStatus / ContainerStatus answers by the builders below (`from_pod_status` for a status the PLEG cached).
The output is `PodActions`: whether to kill the whole pod and create a new sandbox, which init container(s) to start
next, which containers to start and which to kill with a message and reason. The decision is pure; the caller
performs it.

As upstream:

- A new sandbox (and killing everything) when there is none, more than one is ready, the newest is not ready, its
  network namespace no longer matches hostNetwork, or a pod-network sandbox has no IP. A restartPolicy=Never pod whose
  sandbox dies after its containers ran gets no new sandbox.
- Init containers run in order, each to success; a failed one is restarted unless restartPolicy is Never, which kills
  the pod. Init containers with restartPolicy Always are sidecars: started in order, kept running, restarted when they
  exit, change spec or fail liveness.
- A regular container that is not running starts again per ShouldContainerBeRestarted (Always; OnFailure after a
  non-zero exit; never for Never); a container in unknown state is killed first. A running container is killed when
  its spec hash changed (and then always restarted), or its liveness or startup probe failed (restarted per policy,
  within the probe's own terminationGracePeriodSeconds when it sets one, as upstream's setTerminationGracePeriod).
- When nothing is left running and nothing is to start, the pod is killed (sidecars included).
- A Succeeded or Failed pod, or one being deleted, starts nothing; whatever still runs is killed.
- Ephemeral containers (spec.ephemeralContainers, added through the `ephemeralcontainers` subresource) start in the
  pod's current sandbox when they have no status at all, even before init completes, and are never restarted
  (EphemeralContainersToStart). A new sandbox starts none of them.

Leftovers (an agent killed between CreateContainer and StartContainer, or during RunPodSandbox) are cleared at sync
time, where upstream leaves them to its container GC:

- A container the runtime reports CREATED never ran (containerd marks one whose start failed EXITED, reason
  StartError). Neither did one whose StartContainer an earlier agent made and was killed during: containerd cancels
  the call and records StartError ("context canceled", or "signal: killed" for the shim it was starting).
  `interrupted_starts_as_created` turns such an instance (created before this agent started, never started, a
  cancelled start) back into CREATED before anything is decided. As upstream's
  ShouldContainerBeRestarted such a container is superseded by a new instance, but this instance is removed first
  (`containers_to_remove`; a CREATED one still being started cannot be, and its successor waits for the next sync),
  and so is any never-run instance that is not the newest of its name. The new instance takes the restart count the
  removed one carried, since that run never happened (`next_restart_count`); otherwise the count is the newest
  remaining instance's plus one, or comes from the log directory when none remains (upstream's
  calcRestartCountByLogDir; containerd opens `<n>.log` only at StartContainer, so a never-started run left none).
  A container that never ran thus reports 0 restarts, where upstream (keeping the CREATED instance beside the new
  one) would report 1 for a run that never happened.
- A sandbox that is not the newest and not ready is stopped (its network and netns go with StopPodSandbox, which is
  idempotent) and removed with its containers (`sandboxes_to_remove`), unless one of them is still what the pod's
  status reads (the newest instance of a container, or the last exited run before it, as upstream's GC keeps the
  newest dead instance per container). When a new sandbox is made, the pod's init containers are removed first, as
  upstream's purgeInitContainers, so they run again in the new sandbox.

Back-off (CrashLoopBackOff) is consulted for every container to start that exited before: one still waiting is
moved from the start lists to `backoff` with upstream's message. The back-off itself is only read here; the caller
records a restart with `Backoff.next` when it starts the container.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from cri.v1 import api_pb2
from nodeagent.config.quantity import parse_quantity
from nodeagent.kuberuntime import labels as kubelabels
from nodeagent.kuberuntime.backoff import BackoffView, container_backoff_key, crash_loop_message
from nodeagent.kuberuntime.errors import LabelsError
from nodeagent.kuberuntime.hashing import hash_container
from pleg.status import PodStatus

REASON_CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
REASON_LIVENESS_PROBE = "LivenessProbe"
REASON_STARTUP_PROBE = "StartupProbe"
REASON_SPEC_CHANGED = "SpecChanged"
REASON_UNKNOWN_STATE = "UnknownState"
# containerd's reason for a container whose StartContainer failed (errorStartReason).
REASON_START_ERROR = "StartError"

_NS_PER_SECOND = 1_000_000_000


class SandboxState(enum.StrEnum):
    READY = "SANDBOX_READY"
    NOT_READY = "SANDBOX_NOTREADY"


class ContainerState(enum.StrEnum):
    CREATED = "CONTAINER_CREATED"
    RUNNING = "CONTAINER_RUNNING"
    EXITED = "CONTAINER_EXITED"
    UNKNOWN = "CONTAINER_UNKNOWN"


@dataclass(frozen=True)
class SandboxStatus:
    id: str
    state: SandboxState
    attempt: int = 0
    created_at: int = 0  # nanoseconds since the epoch, as CRI reports
    ip: str = ""
    additional_ips: tuple[str, ...] = ()
    host_network: bool | None = None  # None: not known (ListPodSandbox does not say)


@dataclass(frozen=True)
class ContainerStatus:
    id: str
    name: str
    state: ContainerState
    exit_code: int = 0
    hash: str = ""
    restart_count: int = 0
    created_at: int = 0  # nanoseconds, as CRI
    started_at: int = 0
    finished_at: int = 0
    reason: str = ""
    message: str = ""
    image: str = ""
    image_ref: str = ""
    pod_sandbox_id: str = ""
    # What the runtime reports it applied (CRI ContainerStatus.resources.linux); None when it reports nothing.
    resources: RuntimeResources | None = None


@dataclass(frozen=True)
class RuntimeResources:
    """A container's cgroup values as the runtime reports them (CRI LinuxContainerResources)."""

    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit: int = 0

    @property
    def cpu_request_milli(self) -> int:
        """Upstream sharesToMilliCPU: 0 below the minimum shares."""
        return -(-self.cpu_shares * 1000 // 1024) if self.cpu_shares >= 2 else 0

    @property
    def cpu_limit_milli(self) -> int:
        """Upstream quotaToMilliCPU: 0 without a quota."""
        if self.cpu_quota <= 0 or self.cpu_period <= 0:
            return 0
        return self.cpu_quota * 1000 // self.cpu_period


@dataclass(frozen=True)
class ResourceValues:
    """cpu in millicores, memory in bytes; 0 for unset (upstream's containerResources)."""

    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0


@dataclass(frozen=True)
class ContainerToUpdate:
    """A running container whose resources change in place (upstream containerToUpdateInfo)."""

    name: str
    container_id: str
    desired: ResourceValues
    current: ResourceValues


@dataclass(frozen=True)
class RuntimePodStatus:
    """What runs for one pod; sandboxes and containers newest first (upstream kubecontainer.PodStatus)."""

    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: tuple[SandboxStatus, ...] = ()
    containers: tuple[ContainerStatus, ...] = ()
    # The pod's IPs as the PLEG keeps them: a finished pod keeps the IPs its sandbox had.
    ips: tuple[str, ...] = ()

    def find_container(self, name: str) -> ContainerStatus | None:
        """The newest status of the container called `name`."""
        return next((c for c in self.containers if c.name == name), None)


@dataclass(frozen=True)
class ContainerToKill:
    container_id: str
    name: str
    message: str
    reason: str = ""
    # A failed probe's own terminationGracePeriodSeconds, which overrides the pod's; None: the pod's.
    grace_period: int | None = None


@dataclass(frozen=True)
class BackoffWait:
    name: str
    message: str
    remaining: float
    reason: str = REASON_CRASH_LOOP_BACK_OFF


@dataclass(frozen=True)
class ContainerToRemove:
    container_id: str
    name: str
    why: str  # for the log: never started and superseded, an init container of an old sandbox, in an old sandbox


@dataclass(frozen=True)
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_id: str = ""
    attempt: int = 0
    init_containers_to_start: tuple[str, ...] = ()
    containers_to_start: tuple[str, ...] = ()
    containers_to_kill: tuple[ContainerToKill, ...] = ()
    backoff: tuple[BackoffWait, ...] = field(default=())
    ephemeral_containers_to_start: tuple[str, ...] = ()
    # Removed after the kills and before anything is created: containers first, then these sandboxes (stopped first).
    containers_to_remove: tuple[ContainerToRemove, ...] = ()
    sandboxes_to_remove: tuple[str, ...] = ()
    # In-place resize: per resource ("memory", "cpu"), the containers to update, decreases first (upstream
    # ContainersToUpdate); and whether a container is restarted for a resize (UpdatePodResources).
    containers_to_update: Mapping[str, tuple[ContainerToUpdate, ...]] = field(default_factory=dict)
    update_pod_resources: bool = False


# --- builders from CRI -------------------------------------------------------------------------------------------

_SANDBOX_STATES = {api_pb2.SANDBOX_READY: SandboxState.READY, api_pb2.SANDBOX_NOTREADY: SandboxState.NOT_READY}
_CONTAINER_STATES = {
    api_pb2.CONTAINER_CREATED: ContainerState.CREATED,
    api_pb2.CONTAINER_RUNNING: ContainerState.RUNNING,
    api_pb2.CONTAINER_EXITED: ContainerState.EXITED,
    api_pb2.CONTAINER_UNKNOWN: ContainerState.UNKNOWN,
}


def sandbox_from_cri(sandbox: api_pb2.PodSandbox | api_pb2.PodSandboxStatus) -> SandboxStatus:
    ip = ""
    additional: tuple[str, ...] = ()
    host_network: bool | None = None
    if isinstance(sandbox, api_pb2.PodSandboxStatus):
        ip = sandbox.network.ip
        additional = tuple(p.ip for p in sandbox.network.additional_ips)
        if sandbox.linux.HasField("namespaces"):
            host_network = sandbox.linux.namespaces.options.network == api_pb2.NODE
    return SandboxStatus(
        id=sandbox.id,
        state=_SANDBOX_STATES.get(sandbox.state, SandboxState.NOT_READY),
        attempt=sandbox.metadata.attempt,
        created_at=sandbox.created_at,
        ip=ip,
        additional_ips=additional,
        host_network=host_network,
    )


def container_from_cri(
    container: api_pb2.Container | api_pb2.ContainerStatus, *, pod_sandbox_id: str = ""
) -> ContainerStatus:
    """Name, hash and restart count come from our labels when present, else from the CRI metadata."""
    labels, annotations = dict(container.labels), dict(container.annotations)
    try:
        info = kubelabels.parse_container_labels(labels, annotations)
        name, container_hash, restart_count = info.container_name, info.hash, info.restart_count
    except LabelsError:
        name, container_hash, restart_count = container.metadata.name, "", container.metadata.attempt
    common: dict[str, Any] = {
        "id": container.id,
        "name": name,
        "state": _CONTAINER_STATES.get(container.state, ContainerState.UNKNOWN),
        "hash": container_hash,
        "restart_count": restart_count,
        "created_at": container.created_at,
        "image": container.image.image,
        "image_ref": container.image_ref,
    }
    if isinstance(container, api_pb2.ContainerStatus):
        resources = None
        if container.HasField("resources") and container.resources.HasField("linux"):
            linux = container.resources.linux
            resources = RuntimeResources(
                cpu_shares=linux.cpu_shares,
                cpu_quota=linux.cpu_quota,
                cpu_period=linux.cpu_period,
                memory_limit=linux.memory_limit_in_bytes,
            )
        return ContainerStatus(
            **common,
            resources=resources,
            exit_code=container.exit_code,
            started_at=container.started_at,
            finished_at=container.finished_at,
            reason=container.reason,
            message=container.message,
            pod_sandbox_id=pod_sandbox_id,
        )
    return ContainerStatus(**common, pod_sandbox_id=container.pod_sandbox_id or pod_sandbox_id)


def runtime_pod_status(
    uid: str,
    *,
    name: str = "",
    namespace: str = "",
    sandboxes: Iterable[SandboxStatus],
    containers: Iterable[ContainerStatus],
    ips: tuple[str, ...] = (),
) -> RuntimePodStatus:
    return RuntimePodStatus(
        uid=uid,
        name=name,
        namespace=namespace,
        sandboxes=tuple(sorted(sandboxes, key=lambda s: s.created_at, reverse=True)),
        containers=tuple(sorted(containers, key=lambda c: c.created_at, reverse=True)),
        ips=ips,
    )


def from_pod_status(status: PodStatus) -> RuntimePodStatus:
    """The agent's view of a status the PLEG cached (CRI messages as the runtime gave them)."""
    return runtime_pod_status(
        status.uid,
        name=status.name,
        namespace=status.namespace,
        sandboxes=[sandbox_from_cri(s) for s in status.sandboxes],
        containers=[container_from_cri(c.status, pod_sandbox_id=c.sandbox_id) for c in status.containers],
        ips=status.ips,
    )


def group_by_pod(
    sandboxes: Sequence[api_pb2.PodSandbox | api_pb2.PodSandboxStatus],
    containers: Sequence[api_pb2.Container | api_pb2.ContainerStatus],
) -> dict[str, RuntimePodStatus]:
    """Runtime pods by pod UID from list answers; objects without our labels are not ours and are left out."""
    pods: dict[str, tuple[str, str, list[SandboxStatus], list[ContainerStatus]]] = {}
    for sandbox in sandboxes:
        try:
            sinfo = kubelabels.parse_sandbox_labels(dict(sandbox.labels), dict(sandbox.annotations))
        except LabelsError:
            continue
        entry = pods.setdefault(sinfo.pod_uid, (sinfo.pod_name, sinfo.pod_namespace, [], []))
        entry[2].append(sandbox_from_cri(sandbox))
    for container in containers:
        try:
            cinfo = kubelabels.parse_container_labels(dict(container.labels), dict(container.annotations))
        except LabelsError:
            continue
        entry = pods.setdefault(cinfo.pod_uid, (cinfo.pod_name, cinfo.pod_namespace, [], []))
        entry[3].append(container_from_cri(container))
    return {
        uid: runtime_pod_status(uid, name=n, namespace=ns, sandboxes=s, containers=c)
        for uid, (n, ns, s, c) in pods.items()
    }


# --- decisions ---------------------------------------------------------------------------------------------------


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    out: Mapping[str, Any] = pod.get("spec") or {}
    return out


def _every_container(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = _spec(pod)
    return [c for kind in ("initContainers", "containers", "ephemeralContainers") for c in spec.get(kind) or ()]


def pod_sandbox_changed(pod: Mapping[str, Any], status: RuntimePodStatus) -> tuple[bool, int, str]:
    """(create a new sandbox?, its attempt, the current sandbox id) as upstream PodSandboxChanged."""
    if not status.sandboxes:
        return True, 0, ""
    newest = status.sandboxes[0]
    ready = sum(1 for s in status.sandboxes if s.state is SandboxState.READY)
    next_attempt = newest.attempt + 1
    if ready > 1 or newest.state is not SandboxState.READY:
        return True, next_attempt, newest.id
    host_network = bool(_spec(pod).get("hostNetwork"))
    if newest.host_network is not None and newest.host_network != host_network:
        return True, next_attempt, ""
    if not host_network and not newest.ip and newest.host_network is not None:
        # Only a PodSandboxStatus tells the IP; a bare ListPodSandbox entry (host_network None) is not judged on it.
        return True, next_attempt, newest.id
    return False, newest.attempt, newest.id


def should_container_be_restarted(
    container: Mapping[str, Any], pod: Mapping[str, Any], status: RuntimePodStatus
) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    st = status.find_container(str(container.get("name", "")))
    if st is None:
        return True
    if st.state is ContainerState.RUNNING:
        return False
    if st.state in (ContainerState.UNKNOWN, ContainerState.CREATED):
        return True
    policy = _spec(pod).get("restartPolicy") or "Always"
    if policy == "Never":
        return False
    return not (policy == "OnFailure" and st.exit_code == 0)


def _succeeded(name: str, status: RuntimePodStatus) -> bool:
    st = status.find_container(name)
    return st is not None and st.state is ContainerState.EXITED and st.exit_code == 0


def _changed(container: Mapping[str, Any], st: ContainerStatus) -> bool:
    # A container without our hash annotation was not made from this spec by us; judging it would restart it blindly.
    return bool(st.hash) and st.hash != hash_container(container)


@dataclass
class _Plan:
    kill_pod: bool = False
    ephemeral_to_start: list[str] = field(default_factory=list)
    init_to_start: list[str] = field(default_factory=list)
    to_start: list[str] = field(default_factory=list)
    to_kill: list[ContainerToKill] = field(default_factory=list)
    to_update: dict[str, list[ContainerToUpdate]] = field(default_factory=dict)
    update_pod_resources: bool = False


# (container name) -> the resources last actuated for it (the allocation manager's record), None when there is none.
ActuatedLookup = Callable[[str], Mapping[str, Any] | None]


def resource_values(resources: Mapping[str, Any] | None) -> ResourceValues:
    """Upstream containerResourcesFromRequirements (millicores rounded up, bytes)."""
    resources = resources or {}

    def get(part: str, name: str) -> Decimal:
        raw = (resources.get(part) or {}).get(name)
        return parse_quantity(str(raw)) if raw is not None else Decimal(0)

    return ResourceValues(
        cpu_request=math.ceil(get("requests", "cpu") * 1000),
        cpu_limit=math.ceil(get("limits", "cpu") * 1000),
        memory_request=math.ceil(get("requests", "memory")),
        memory_limit=math.ceil(get("limits", "memory")),
    )


def resize_restart_message(name: str) -> str:
    return f"Container {name} resize requires restart"


def compute_resize_action(
    container: Mapping[str, Any], st: ContainerStatus, actuated: Mapping[str, Any] | None, plan: _Plan
) -> bool:
    """Upstream computePodResizeAction for a running container: whether to keep it (True) or restart it. A change
    of a resource whose resizePolicy is RestartContainer kills and starts it; other changes go to `plan.to_update`,
    per resource, a decrease before the increases (limits decide where a limit changes, else requests)."""
    if st.state is not ContainerState.RUNNING:
        return True
    name = str(container.get("name", ""))
    desired = resource_values(container.get("resources"))
    current = resource_values(actuated)
    if desired == current:
        return True
    policies = {str(p.get("resourceName")): str(p.get("restartPolicy")) for p in container.get("resizePolicy") or ()}

    def change(resource: str, want: int, have: int) -> tuple[bool, bool]:
        if want == have:
            return False, False
        return True, policies.get(resource, "NotRequired") == "RestartContainer"

    memory_limit = change("memory", desired.memory_limit, current.memory_limit)
    memory_request = change("memory", desired.memory_request, current.memory_request)
    cpu_limit = change("cpu", desired.cpu_limit, current.cpu_limit)
    cpu_request = change("cpu", desired.cpu_request, current.cpu_request)
    if any(restart for _, restart in (memory_limit, memory_request, cpu_limit, cpu_request)):
        plan.to_kill.append(ContainerToKill(st.id, name, resize_restart_message(name)))
        plan.update_pod_resources = True
        return False
    update = ContainerToUpdate(name=name, container_id=st.id, desired=desired, current=current)

    def mark(resource: str, want: int, have: int) -> None:
        queue = plan.to_update.setdefault(resource, [])
        if want > have:
            queue.append(update)
        elif want < have:
            queue.insert(0, update)

    if memory_limit[0]:
        mark("memory", desired.memory_limit, current.memory_limit)
    elif memory_request[0]:
        mark("memory", desired.memory_request, current.memory_request)
    if cpu_limit[0]:
        mark("cpu", desired.cpu_limit, current.cpu_limit)
    elif cpu_request[0]:
        mark("cpu", desired.cpu_request, current.cpu_request)
    return True


def _init_actions(
    pod: Mapping[str, Any],
    status: RuntimePodStatus,
    plan: _Plan,
    *,
    liveness_failed: frozenset[str],
    startup_failed: frozenset[str],
    startup_passed: frozenset[str] | None = None,
    actuated: ActuatedLookup | None = None,
) -> bool:
    """Fill the plan's init part; True when every init container is done (sidecars started)."""
    spec = _spec(pod)
    policy = spec.get("restartPolicy") or "Always"
    # A regular container that ran means init completed before (its init containers may have been removed since),
    # but only in the current sandbox: a new sandbox runs init again. Upstream cannot tell sandboxes apart and so
    # counts only created or running ones (podHasInitialized); a container knows its sandbox here (unknown: current).
    current = status.sandboxes[0].id if status.sandboxes else ""
    initialized = any(
        st is not None
        and (st.state in (ContainerState.CREATED, ContainerState.RUNNING) or st.pod_sandbox_id in ("", current))
        for st in (status.find_container(str(c.get("name", ""))) for c in spec.get("containers") or [])
    )
    for container in spec.get("initContainers") or []:
        name = str(container.get("name", ""))
        st = status.find_container(name)
        if container.get("restartPolicy") == "Always":  # a sidecar
            if st is None or st.state is not ContainerState.RUNNING:
                if st is not None and st.state is ContainerState.UNKNOWN:
                    plan.to_kill.append(
                        ContainerToKill(st.id, name, _unknown_message("Init container"), REASON_UNKNOWN_STATE)
                    )
                plan.init_to_start.append(name)
                if not initialized:
                    return False
                continue
            kill = _running_container_kill(container, st, liveness_failed, startup_failed, restart=True)
            if kill is not None:
                plan.to_kill.append(kill)
                plan.init_to_start.append(name)
            elif actuated is not None and not compute_resize_action(container, st, actuated(name), plan):
                plan.init_to_start.append(name)  # restarted with its new resources
            elif not initialized and not _sidecar_started(container, st.id, startup_passed):
                # As upstream's computeInitContainerActions: a running sidecar with a startup probe holds the next
                # init container (and the regular ones) until that probe succeeds.
                return False
            continue
        if initialized:
            continue
        if st is None:
            plan.init_to_start.append(name)
            return False
        if st.state is ContainerState.RUNNING:
            return False
        if st.state is ContainerState.CREATED:
            # Never started (the runtime failed to, or the agent died first): start a new one, as upstream.
            plan.init_to_start.append(name)
            return False
        if st.state is ContainerState.EXITED:
            if st.exit_code == 0:
                continue
            if policy == "Never":
                plan.kill_pod = True
                return False
            plan.init_to_start.append(name)
            return False
        if policy == "Never":  # unknown state counts as failed, as upstream
            plan.kill_pod = True
            return False
        plan.to_kill.append(ContainerToKill(st.id, name, _unknown_message("Init container"), REASON_UNKNOWN_STATE))
        plan.init_to_start.append(name)
        return False
    return True


def _sidecar_started(container: Mapping[str, Any], container_id: str, startup_passed: frozenset[str] | None) -> bool:
    """A running sidecar counts as started without a startup probe, or once it succeeded (None: no prober, so
    every running container counts as started, as without probes)."""
    if startup_passed is None or container.get("startupProbe") is None:
        return True
    return container_id in startup_passed


def _unknown_message(what: str) -> str:
    # Upstream formats kubecontainer.ContainerStateUnknown ("unknown") with %q.
    return f'{what} is in "unknown" state, try killing it before restart'


def _running_container_kill(
    container: Mapping[str, Any],
    st: ContainerStatus,
    liveness_failed: frozenset[str],
    startup_failed: frozenset[str],
    *,
    restart: bool,
) -> ContainerToKill | None:
    name = str(container.get("name", ""))
    if _changed(container, st):
        return ContainerToKill(
            st.id, name, f"Container {name} definition changed, will be restarted", REASON_SPEC_CHANGED
        )
    if st.id in liveness_failed:
        message, reason, probe = f"Container {name} failed liveness probe", REASON_LIVENESS_PROBE, "livenessProbe"
    elif st.id in startup_failed:
        message, reason, probe = f"Container {name} failed startup probe", REASON_STARTUP_PROBE, "startupProbe"
    else:
        return None
    grace = (container.get(probe) or {}).get("terminationGracePeriodSeconds")
    return ContainerToKill(
        st.id,
        name,
        message + (", will be restarted" if restart else ""),
        reason,
        grace_period=None if grace is None else max(int(grace), 0),
    )


def _apply_backoff(
    names: Sequence[str], pod: Mapping[str, Any], status: RuntimePodStatus, backoff: BackoffView, now: float
) -> tuple[tuple[str, ...], list[BackoffWait]]:
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    start: list[str] = []
    waits: list[BackoffWait] = []
    for name in names:
        # As upstream's doBackOff: the newest instance that exited (a newer CREATED one never ran).
        st = next((c for c in status.containers if c.name == name and c.state is ContainerState.EXITED), None)
        if st is None or not st.finished_at:
            start.append(name)
            continue
        container = next((c for c in _every_container(pod) if c.get("name") == name), {"name": name})
        key = container_backoff_key(uid, container)
        waiting, remaining = backoff.in_backoff(key, now, since=st.finished_at / _NS_PER_SECOND)
        if not waiting:
            start.append(name)
            continue
        message = crash_loop_message(
            backoff.get(key),
            container_name=name,
            pod_name=str(meta.get("name", "")),
            pod_namespace=str(meta.get("namespace", "")),
            pod_uid=uid,
        )
        waits.append(BackoffWait(name=name, message=message, remaining=remaining))
    return tuple(start), waits


def _running_ids(status: RuntimePodStatus) -> bool:
    return any(c.state is ContainerState.RUNNING for c in status.containers) or any(
        s.state is SandboxState.READY for s in status.sandboxes
    )


def compute_pod_actions(
    pod: Mapping[str, Any],
    status: RuntimePodStatus,
    *,
    now: float,
    backoff: BackoffView,
    liveness_failed: frozenset[str] = frozenset(),
    startup_failed: frozenset[str] = frozenset(),
    startup_passed: frozenset[str] | None = None,
    actuated: ActuatedLookup | None = None,
) -> PodActions:
    """The actions that bring what runs to the pod's spec. `now` is in seconds on the clock of container finish
    times (wall clock); `liveness_failed`/`startup_failed` are ids of containers whose probe reported failure,
    `startup_passed` those whose startup probe succeeded (None: no prober). `actuated` gives each container's
    resources as last actuated: with it, a running container whose allocated resources (the pod's, which is the
    pod as allocated) differ is resized in place or restarted, as its resizePolicy says (None: no resize; a
    static pod is never resized, as upstream's IsInPlacePodVerticalScalingAllowed)."""
    if actuated is not None and _is_static(pod):
        actuated = None
    spec = _spec(pod)
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
        return PodActions(kill_pod=_running_ids(status))

    policy = spec.get("restartPolicy") or "Always"
    containers = [c for c in spec.get("containers") or []]
    create, attempt, sandbox_id = pod_sandbox_changed(pod, status)
    plan = _Plan(kill_pod=create)

    if create:
        if policy == "Never" and attempt != 0 and status.containers:
            return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
        to_start = [
            str(c.get("name", ""))
            for c in containers
            if not (policy == "OnFailure" and _succeeded(str(c.get("name", "")), status))
        ]
        inits = [str(c.get("name", "")) for c in spec.get("initContainers") or []]
        if not to_start and all(_succeeded(n, status) for n in inits):
            return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
        if inits:
            plan.init_to_start = [inits[0]]
        else:
            plan.to_start = to_start
    else:
        # Ephemeral containers may start before initialization completes (upstream starts them first).
        plan.ephemeral_to_start = _ephemeral_to_start(pod, status)
        initialized = _init_actions(
            pod,
            status,
            plan,
            liveness_failed=liveness_failed,
            startup_failed=startup_failed,
            startup_passed=startup_passed,
            actuated=actuated,
        )
        if initialized and not plan.kill_pod:
            keep = 0
            restart_on_failure = policy != "Never"
            for container in containers:
                name = str(container.get("name", ""))
                st = status.find_container(name)
                if st is None or st.state is not ContainerState.RUNNING:
                    if should_container_be_restarted(container, pod, status):
                        plan.to_start.append(name)
                        if st is not None and st.state is ContainerState.UNKNOWN:
                            message = _unknown_message("Container")
                            plan.to_kill.append(ContainerToKill(st.id, name, message, REASON_UNKNOWN_STATE))
                    continue
                changed = _changed(container, st)
                kill = _running_container_kill(
                    container, st, liveness_failed, startup_failed, restart=changed or restart_on_failure
                )
                if kill is None:
                    if actuated is not None and not compute_resize_action(container, st, actuated(name), plan):
                        plan.to_start.append(name)  # restarted with its new resources, whatever the restartPolicy
                        continue
                    keep += 1
                    continue
                plan.to_kill.append(kill)
                if changed or restart_on_failure:
                    plan.to_start.append(name)
            if keep == 0 and not plan.to_start:
                plan.kill_pod = True
                plan.init_to_start = []  # sidecars alone do not keep a pod alive

    init_start, init_waits = _apply_backoff(plan.init_to_start, pod, status, backoff, now)
    start, waits = _apply_backoff(plan.to_start, pod, status, backoff, now)
    starting = {*plan.ephemeral_to_start, *init_start, *start}
    init_names = {str(c.get("name", "")) for c in spec.get("initContainers") or []}
    remove, sandboxes = _leftovers(
        status, starting=starting, purge=init_names if create else set(), init_names=init_names, prune=not create
    )
    return PodActions(
        kill_pod=plan.kill_pod,
        create_sandbox=create,
        sandbox_id=sandbox_id,
        attempt=attempt,
        init_containers_to_start=init_start,
        containers_to_start=start,
        containers_to_kill=tuple(plan.to_kill),
        backoff=(*init_waits, *waits),
        ephemeral_containers_to_start=tuple(plan.ephemeral_to_start),
        containers_to_remove=remove,
        sandboxes_to_remove=sandboxes,
        containers_to_update={name: tuple(queue) for name, queue in plan.to_update.items() if queue},
        update_pod_resources=plan.update_pod_resources,
    )


def _is_static(pod: Mapping[str, Any]) -> bool:
    """Upstream IsStaticPod: a pod whose config source is not the apiserver."""
    source = ((pod.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/config.source")
    return source is not None and source != "api"


def _ephemeral_to_start(pod: Mapping[str, Any], status: RuntimePodStatus) -> list[str]:
    """Ephemeral containers with no status at all, as upstream; never restarted once they ran. One left CREATED
    (the agent died before starting it) never ran, so it is started anew: upstream would leave it CREATED for good."""
    out = []
    for container in _spec(pod).get("ephemeralContainers") or []:
        name = str(container.get("name", ""))
        st = status.find_container(name)
        if st is None or st.state is ContainerState.CREATED:
            out.append(name)
    return out


def _leftovers(
    status: RuntimePodStatus, *, starting: set[str], purge: set[str], init_names: set[str], prune: bool
) -> tuple[tuple[ContainerToRemove, ...], tuple[str, ...]]:
    """What to remove at this sync (see the module docstring): never-started instances that are superseded, the
    init containers of a pod that gets a new sandbox (`purge`), with `prune` every ended run of a container but its
    newest (upstream's podContainerDeletor on each ContainerDied, keeping one dead instance per container, and
    pruneInitContainersBeforeStart, which counts unknown init containers too: between a second exit and the
    CrashLoopBackOff status a container then shows no lastState, as upstream's), and old not-ready sandboxes nothing
    still needs."""
    remove: dict[str, ContainerToRemove] = {}
    seen: set[str] = set()
    ended: set[str] = set()
    for c in status.containers:  # newest first
        newest = c.name not in seen
        seen.add(c.name)
        if c.name in purge:
            remove[c.id] = ContainerToRemove(c.id, c.name, "init container of a replaced sandbox")
        elif c.state is ContainerState.CREATED and (not newest or c.name in starting):
            remove[c.id] = ContainerToRemove(c.id, c.name, "created, never started, superseded")
        elif prune and (
            c.state is ContainerState.EXITED or (c.state is ContainerState.UNKNOWN and c.name in init_names)
        ):
            if c.name in ended:
                remove[c.id] = ContainerToRemove(c.id, c.name, "older dead instance")
            ended.add(c.name)
    # What the pod's status reads: each container's newest instance and the last exited run before it.
    needed: set[str] = set()
    for name in seen:
        instances = [c for c in status.containers if c.name == name and c.id not in remove]
        if instances:
            needed.add(instances[0].id)
            previous = next((c for c in instances[1:] if c.state is ContainerState.EXITED), None)
            if previous is not None:
                needed.add(previous.id)
    sandboxes = []
    for sandbox in status.sandboxes[1:]:  # never the newest
        if sandbox.state is SandboxState.READY:
            continue
        members = [c for c in status.containers if c.pod_sandbox_id == sandbox.id]
        if any(c.id in needed or c.state in (ContainerState.RUNNING, ContainerState.UNKNOWN) for c in members):
            continue
        sandboxes.append(sandbox.id)
        for c in members:
            remove.setdefault(c.id, ContainerToRemove(c.id, c.name, "in an old sandbox"))
    return tuple(remove.values()), tuple(sandboxes)


# What containerd's StartContainer error says when its caller went away mid-call: the call's context was cancelled,
# or the shim process it was starting was killed with it.
_CANCELLED_START = ("context canceled", "signal: killed")


def start_interrupted(container: ContainerStatus, *, created_before: float) -> bool:
    """A start an earlier agent asked for and was killed during: created before `created_before` (this agent's start,
    wall seconds), failed to start (StartError, never started) because the call was cancelled. This agent's own
    failed starts are never taken for one, so a container that really fails to start is counted and backed off."""
    return (
        container.state is ContainerState.EXITED
        and container.reason == REASON_START_ERROR
        and not container.started_at
        and 0 < container.created_at < created_before * _NS_PER_SECOND
        and any(text in container.message for text in _CANCELLED_START)
    )


def interrupted_starts_as_created(status: RuntimePodStatus, *, created_before: float) -> RuntimePodStatus:
    """The status with each interrupted start (`start_interrupted`) shown as what it is: created, never run."""
    if not any(start_interrupted(c, created_before=created_before) for c in status.containers):
        return status
    containers = tuple(
        replace(c, state=ContainerState.CREATED) if start_interrupted(c, created_before=created_before) else c
        for c in status.containers
    )
    return replace(status, containers=containers)


def next_restart_count(status: RuntimePodStatus, name: str, *, removed: Iterable[str] = (), from_logs: int = 0) -> int:
    """The restart count of the container about to start, as upstream's startContainer: one more than its newest
    instance, else `from_logs` (`restart_count_from_log_files`). A `removed` newest instance that never ran gives
    its own count to its successor (that run never happened); other removed ones are left out."""
    gone = set(removed)
    instances = [c for c in status.containers if c.name == name]
    if instances and instances[0].id in gone and instances[0].state is ContainerState.CREATED:
        return instances[0].restart_count
    st = next((c for c in instances if c.id not in gone), None)
    return from_logs if st is None else st.restart_count + 1


_LOG_FILE = re.compile(r"(\d+)\.log(\..*)?")


def restart_count_from_log_files(names: Iterable[str]) -> int:
    """Upstream's calcRestartCountByLogDir over a container's log directory listing: one more than the highest
    `<n>.log` (rotated `<n>.log.<suffix>` too), 0 when there is none."""
    counts = [int(m.group(1)) + 1 for n in names if (m := _LOG_FILE.match(n))]
    return max(counts, default=0)


def ephemeral_target_id(pod: Mapping[str, Any], name: str, status: RuntimePodStatus) -> str | None:
    """The container whose PID namespace the ephemeral container `name` joins (its targetContainerName), as
    upstream's getTargetID: None when it names none; LookupError when that container has no instance yet."""
    for container in _spec(pod).get("ephemeralContainers") or []:
        if container.get("name") != name:
            continue
        target = str(container.get("targetContainerName") or "")
        if not target:
            return None
        st = status.find_container(target)
        if st is None:
            raise LookupError(f"unable to find target container {target}")
        return st.id
    return None
