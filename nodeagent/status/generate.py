"""The whole pod status the kubelet reports, assembled as generateAPIPodStatus does (pkg/kubelet/kubelet_pods.go).

Conditions the kubelet does not own (readiness gate conditions, DisruptionTarget) are carried over from the old
status unchanged; the kubelet's own conditions follow in upstream's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nodeagent.kuberuntime.qos import compute_pod_qos
from nodeagent.status._common import JSON, format_time
from nodeagent.status.conditions import (
    KUBELET_CONDITIONS,
    containers_ready_condition,
    initialized_condition,
    pod_ready_to_start_containers_condition,
    pod_scheduled_condition,
    ready_condition,
    stamp_transition_times,
)
from nodeagent.status.container_status import POD_INITIALIZING, ContainerInput, container_status
from nodeagent.status.phase import get_phase


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
    sandbox_ready: bool,
    pod_ips: Sequence[str] = (),
    host_ips: Sequence[str] = (),
    pod_is_terminal: bool = False,
    qos: str | None = None,
    runtime_type: str = "containerd",
) -> JSON:
    """The pod's new status; `pod["status"]` is the old one, whose times are kept where nothing changed.

    `containers` / `init_containers` describe spec containers by name. A spec container without an entry (no
    runtime container, or one already garbage-collected) keeps its old status if that was terminated, as upstream
    does; otherwise it is waiting (ContainerCreating, or PodInitializing behind unfinished init containers) with
    the old restartCount and lastState.
    """
    spec: Mapping[str, Any] = pod.get("spec") or {}
    old: Mapping[str, Any] = pod.get("status") or {}

    old_init = {c.get("name"): c for c in old.get("initContainerStatuses") or ()}
    init_statuses = _statuses(
        spec.get("initContainers") or (), init_containers, old_init, runtime_type, "ContainerCreating"
    )
    old_app = {c.get("name"): c for c in old.get("containerStatuses") or ()}
    app_default = POD_INITIALIZING if spec.get("initContainers") else "ContainerCreating"
    app_statuses = _statuses(spec.get("containers") or (), containers, old_app, runtime_type, app_default)
    phase = get_phase(spec, app_statuses, init_statuses, pod_is_terminal=pod_is_terminal)

    all_statuses = [*init_statuses, *app_statuses]
    kept = [dict(c) for c in old.get("conditions") or () if c.get("type") not in KUBELET_CONDITIONS]
    owned = [
        pod_ready_to_start_containers_condition(sandbox_ready=sandbox_ready),
        initialized_condition(spec, all_statuses, phase),
        ready_condition(spec, kept, all_statuses, phase),
        containers_ready_condition(spec, all_statuses, phase),
        pod_scheduled_condition(),
    ]
    conditions = kept + stamp_transition_times(owned, old.get("conditions") or (), now=now)

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
    status["qosClass"] = qos or old.get("qosClass") or qos_class(spec)
    return status


def _statuses(
    spec_containers: Sequence[Mapping[str, Any]],
    inputs: Sequence[ContainerInput],
    old_by_name: Mapping[str, Mapping[str, Any]],
    runtime_type: str,
    default_waiting_reason: str,
) -> list[JSON]:
    by_name = {c.name: c for c in inputs}
    statuses: list[JSON] = []
    for container in spec_containers:
        name = container["name"]
        given = by_name.get(name)
        if given is not None:
            statuses.append(
                container_status(given, runtime_type=runtime_type, default_waiting_reason=default_waiting_reason)
            )
            continue
        previous = old_by_name.get(name)
        if previous is not None and (previous.get("state") or {}).get("terminated") is not None:
            statuses.append(dict(previous))
            continue
        status = container_status(
            ContainerInput(name=name, image=container.get("image", "")),
            runtime_type=runtime_type,
            default_waiting_reason=default_waiting_reason,
        )
        if previous is not None:
            status["restartCount"] = previous.get("restartCount", 0)
            status["lastState"] = previous.get("lastState") or {}
        statuses.append(status)
    return statuses
