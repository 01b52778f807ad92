"""The whole pod status the kubelet reports, assembled as generateAPIPodStatus does (pkg/kubelet/kubelet_pods.go).

Conditions the kubelet does not own (readiness gate conditions, DisruptionTarget) are carried over from the pod's
status as the apiserver shows it, unchanged; the kubelet's own conditions follow in upstream's order.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeagent.kuberuntime.qos import compute_pod_qos
from nodeagent.status._common import JSON, format_time, is_restartable_init_container, pod_generation, state_of
from nodeagent.status.conditions import (
    KUBELET_CONDITIONS,
    containers_ready_condition,
    initialized_condition,
    pod_ready_to_start_containers_condition,
    pod_scheduled_condition,
    ready_condition,
    stamp_transition_times,
    with_observed_generation,
)
from nodeagent.status.container_status import (
    CONTAINER_CREATING,
    POD_INITIALIZING,
    ContainerInput,
    RuntimeState,
    container_status,
)
from nodeagent.status.phase import FAILED, SUCCEEDED, get_phase
from nodeagent.status.volume_mounts import volume_mount_statuses


def qos_class(pod_spec: Mapping[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort (upstream ComputePodQOS); one rule for the whole agent."""
    return str(compute_pod_qos({"spec": pod_spec}))


def _ip_list(ips: Sequence[str]) -> list[JSON]:
    return [{"ip": ip} for ip in ips]


def generate_pod_status(
    pod: Mapping[str, Any],
    *,
    now: datetime,
    containers: Sequence[ContainerInput],
    init_containers: Sequence[ContainerInput] = (),
    ephemeral_containers: Sequence[ContainerInput] = (),
    sandbox_ready: bool,
    pod_ips: Sequence[str] = (),
    host_ips: Sequence[str] = (),
    pod_is_terminal: bool = False,
    qos: str | None = None,
    runtime_type: str = "containerd",
    old_status: Mapping[str, Any] | None = None,
    supports_recursive_read_only: bool = False,
    resize_conditions: Sequence[Mapping[str, Any]] = (),
) -> JSON:
    """The pod's new status.

    `old_status` is the status the kubelet last set (the status manager's), whose container statuses and times are
    kept where nothing changed; `pod["status"]` is the status as the apiserver shows it, whose conditions that the
    kubelet does not own (readiness gates set by a controller or a user, DisruptionTarget) are carried over, as
    upstream reads them from the pod manager's pod. Without `old_status`, `pod["status"]` is both.

    `containers` / `init_containers` / `ephemeral_containers` describe spec containers by name. A spec container
    without an entry, or whose entry has no runtime container, is reported from its old status as upstream's
    convertToAPIContainerStatuses does (see `container_status`). Ephemeral containers are reported in
    ephemeralContainerStatuses and count for neither the phase nor the conditions.

    `supports_recursive_read_only` says whether the pod's runtime handler makes recursive read-only mounts: the
    containers' volumeMounts show the recursiveReadOnly mode it resolves to.

    `resize_conditions` are the pod's PodResizePending / PodResizeInProgress conditions as the allocation manager
    holds them (upstream's status manager): they follow the conditions others own and precede the kubelet's
    generated ones, as upstream's generateAPIPodStatus appends them; a terminal pod has none.
    """
    spec: Mapping[str, Any] = pod.get("spec") or {}
    api: Mapping[str, Any] = pod.get("status") or {}
    old: Mapping[str, Any] = old_status if old_status is not None else api
    # As upstream: with init containers, every container (init, app, ephemeral) waits as PodInitializing.
    default_reason = POD_INITIALIZING if spec.get("initContainers") else CONTAINER_CREATING
    context = _Context(
        runtime_type=runtime_type,
        default_reason=default_reason,
        pod_deleted=bool((pod.get("metadata") or {}).get("deletionTimestamp")),
        regular_created=any(c.state in _CREATED_STATES for c in containers),
        supports_rro=supports_recursive_read_only,
    )

    init_statuses = _statuses(
        spec.get("initContainers") or (), init_containers, old.get("initContainerStatuses"), context, kind=_Kind.INIT
    )
    app_statuses = _statuses(spec.get("containers") or (), containers, old.get("containerStatuses"), context)
    ephemeral_statuses = _statuses(
        spec.get("ephemeralContainers") or (),
        ephemeral_containers,
        old.get("ephemeralContainerStatuses"),
        context,
        kind=_Kind.EPHEMERAL,
    )
    phase = get_phase(spec, app_statuses, init_statuses, pod_is_terminal=pod_is_terminal)

    all_statuses = [*init_statuses, *app_statuses]
    kept = [dict(c) for c in api.get("conditions") or () if c.get("type") not in KUBELET_CONDITIONS]
    owned = [
        pod_ready_to_start_containers_condition(sandbox_ready=sandbox_ready),
        initialized_condition(spec, all_statuses, phase),
        ready_condition(spec, kept, all_statuses, phase),
        containers_ready_condition(spec, all_statuses, phase),
        pod_scheduled_condition(),
    ]
    # As upstream: every condition the kubelet generates (PodScheduled too) carries the generation it saw; the
    # status-wide observedGeneration is the status manager's (it sets it on every status it keeps).
    owned = with_observed_generation(owned, pod_generation(pod))
    resizing = [] if pod_is_terminal or phase in (FAILED, SUCCEEDED) else [dict(c) for c in resize_conditions]
    conditions = kept + resizing + stamp_transition_times(owned, old.get("conditions") or (), now=now)

    status: JSON = {"phase": phase, "conditions": conditions}
    if host_ips:
        status["hostIP"] = host_ips[0]
        status["hostIPs"] = _ip_list(host_ips)
    if pod_ips:
        status["podIP"] = pod_ips[0]
        status["podIPs"] = _ip_list(pod_ips)
    status["startTime"] = old.get("startTime") or format_time(now)
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    status["containerStatuses"] = app_statuses
    if ephemeral_statuses:
        status["ephemeralContainerStatuses"] = ephemeral_statuses
    status["qosClass"] = qos or old.get("qosClass") or qos_class(spec)
    return status


# HasAnyRegularContainerCreated: a container in these states was created (unknown is not evidence).
_CREATED_STATES = frozenset({RuntimeState.CREATED, RuntimeState.RUNNING, RuntimeState.EXITED})


class _Kind(enum.Enum):
    APP = "app"
    INIT = "init"
    EPHEMERAL = "ephemeral"


@dataclass(frozen=True)
class _Context:
    runtime_type: str
    default_reason: str
    pod_deleted: bool
    regular_created: bool  # some regular container exists in the runtime: the pod initialized
    supports_rro: bool = False  # the pod's runtime handler makes recursive read-only mounts


def _statuses(
    spec_containers: Sequence[Mapping[str, Any]],
    inputs: Sequence[ContainerInput],
    old_statuses: Sequence[Mapping[str, Any]] | None,
    context: _Context,
    *,
    kind: _Kind = _Kind.APP,
) -> list[JSON]:
    """One kind's statuses: init containers in spec order, app and ephemeral containers sorted by name (upstream's
    SortedContainerStatuses)."""
    by_name = {c.name: c for c in inputs}
    old_by_name = {str(c.get("name")): c for c in old_statuses or ()}
    statuses: list[JSON] = []
    for container in spec_containers:
        name = str(container.get("name", ""))
        given = by_name.get(name) or ContainerInput(name=name, image=str(container.get("image", "")))
        regular_init = kind is _Kind.INIT and not is_restartable_init_container(container)
        status = container_status(
            given,
            runtime_type=context.runtime_type,
            default_waiting_reason=context.default_reason,
            previous=old_by_name.get(name),
            pod_deleted=context.pod_deleted,
            init_completed=regular_init and context.regular_created,
            volume_mounts=volume_mount_statuses(container, supports_rro=context.supports_rro),
            resources=container.get("resources") or {},
        )
        if regular_init:
            # As the prober manager's UpdatePodStatus: a regular init container is ready once it exited 0, and
            # never while it runs (it has no readiness probe; its being ready means "done").
            terminated = state_of(status).get("terminated")
            status["ready"] = terminated is not None and terminated.get("exitCode", 0) == 0
        elif kind is _Kind.EPHEMERAL:
            # Ephemeral containers have no probes: upstream leaves them unready and says nothing of started.
            status["ready"] = False
            status.pop("started", None)
        statuses.append(status)
    if kind is not _Kind.INIT:
        statuses.sort(key=lambda s: str(s.get("name", "")))
    return statuses


def failed_pod_status(
    pod: Mapping[str, Any], status: Mapping[str, Any], *, reason: str, message: str, now: datetime
) -> JSON:
    """`status` of a pod an internal module fails (upstream's PodSyncHandlers ShouldEvict: the active deadline):
    phase Failed with that reason and message, and the kubelet's conditions generated again for that phase, as
    generateAPIPodStatus decides the phase before it generates the conditions (Ready and ContainersReady False,
    PodFailed, while the containers still run)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    out: JSON = dict(status)
    out.update(phase=FAILED, reason=reason, message=message)
    statuses = [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    conditions = list(status.get("conditions") or ())
    others = [c for c in conditions if c.get("type") not in KUBELET_CONDITIONS]
    regenerated = stamp_transition_times(
        with_observed_generation(
            [
                initialized_condition(spec, statuses, FAILED),
                ready_condition(spec, others, statuses, FAILED),
                containers_ready_condition(spec, statuses, FAILED),
            ],
            pod_generation(pod),
        ),
        conditions,
        now=now,
    )
    by_type = {c["type"]: c for c in regenerated}
    out["conditions"] = [by_type.pop(str(c.get("type")), c) for c in conditions] + list(by_type.values())
    return out
