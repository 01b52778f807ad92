"""Deciding whether a pod status is worth sending, and what to send.

`needs_update` ignores the times the kubelet stamps (as isPodStatusByKubeletEqual does), `merge_pod_status` puts
the conditions the kubelet does not own back as the apiserver has them (upstream mergePodStatus), `status_patch`
builds a strategic merge patch carrying only what changed, and `is_stale` refuses a status that would move the pod
backwards: out of a terminal phase, or a terminated container running again against its restart policy.

The patch is a strategic merge patch, as upstream's statusutil.PatchPodStatus sends: the lists v1.PodStatus merges
by key (conditions by type, podIPs and hostIPs by ip) carry only the elements that changed, `$patch: delete` for
those that went and `$setElementOrder` for the order. So a condition someone else owns (a readiness gate a user or
controller sets) is never written by the kubelet, even when it changed in the apiserver after the kubelet last
looked: a JSON merge patch would replace the whole list and put an old value back.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from nodeagent.status._common import JSON, format_time
from nodeagent.status.conditions import (
    CONTAINERS_READY,
    KUBELET_CONDITIONS,
    POD_COMPLETED,
    POD_FAILED,
    READY,
)
from nodeagent.status.phase import FAILED, TERMINAL_PHASES

# The kubelet sets this one though it does not own it, and only when the pod reaches a terminal phase (upstream
# PodConditionSharedByKubelet).
DISRUPTION_TARGET = "DisruptionTarget"

# The v1.PodStatus lists a strategic merge patch merges by a key (patchStrategy=merge, patchMergeKey).
_MERGE_KEYS = {"conditions": "type", "podIPs": "ip", "hostIPs": "ip", "resourceClaimStatuses": "name"}

_CONDITION_TIMES = ("lastProbeTime", "lastTransitionTime")
# Status fields others own, kept as the apiserver has them (upstream mergePodStatus).
_NOT_KUBELETS = ("resourceClaimStatuses", "extendedResourceClaimStatus")


def _without_condition_times(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    if "conditions" in out:
        out["conditions"] = sorted(
            ({k: v for k, v in c.items() if k not in _CONDITION_TIMES} for c in out["conditions"] or ()),
            key=lambda c: str(c.get("type", "")),
        )
    return out


def status_equal_ignoring_time(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Equal apart from the conditions' lastProbeTime/lastTransitionTime and the conditions' order."""
    return _without_condition_times(old) == _without_condition_times(new)


def needs_update(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether `new` says something the apiserver does not know yet."""
    return old is None or not status_equal_ignoring_time(old, new)


def merge_pod_status(
    api: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    could_have_running_containers: bool = False,
    now: datetime | None = None,
) -> JSON:
    """What the status manager sends: `new` merged over `api` (the apiserver's status) as upstream mergePodStatus.

    - the conditions the kubelet does not own stay as `api` has them, the kubelet's own come from `new`;
    - a pod turning terminal (Succeeded/Failed) while it `could_have_running_containers` (its worker has not
      finished terminating it) keeps the phase, reason and message `api` shows: the apiserver hears of the end
      only once nothing runs, as upstream, so nothing above the node releases what the pod still holds;
    - DisruptionTarget from `new` goes only with the terminal phase itself;
    - resourceClaimStatuses and extendedResourceClaimStatus are `api`'s (the resourceclaim controller's);
    - a terminal phase never goes out with Ready or ContainersReady True.
    `now` stamps the transition times this changes (default: the current time).
    """
    moment = now if now is not None else datetime.now(UTC)
    turning_terminal = api.get("phase") not in TERMINAL_PHASES and new.get("phase") in TERMINAL_PHASES
    conditions = [dict(c) for c in api.get("conditions") or () if c.get("type") not in KUBELET_CONDITIONS]
    conditions += [dict(c) for c in new.get("conditions") or () if c.get("type") in KUBELET_CONDITIONS]
    for shared in (c for c in new.get("conditions") or () if c.get("type") == DISRUPTION_TARGET):
        if turning_terminal and not could_have_running_containers:
            # Sent late: its transition time is the time it goes out, unless the apiserver has it already.
            stamped = dict(shared)
            before = next((c for c in api.get("conditions") or () if c.get("type") == DISRUPTION_TARGET), None)
            same = before is not None and before.get("status") == shared.get("status")
            stamped["lastTransitionTime"] = before.get("lastTransitionTime") if same and before else format_time(moment)
            conditions = [c for c in conditions if c.get("type") != DISRUPTION_TARGET] + [stamped]
    out = dict(new)
    if conditions or "conditions" in new:
        out["conditions"] = conditions
    # As upstream: the claim statuses belong to the resourceclaim controller and are never the kubelet's to change
    # (NodeRestriction refuses a node's status update that changes them): they go out as the apiserver has them.
    for key in _NOT_KUBELETS:
        if key in api:
            out[key] = api[key]
        else:
            out.pop(key, None)
    if turning_terminal and could_have_running_containers:
        for key in ("phase", "reason", "message"):
            if key in api:
                out[key] = api[key]
            else:
                out.pop(key, None)
    phase = out.get("phase")
    if phase in TERMINAL_PHASES and any(
        c.get("type") in (READY, CONTAINERS_READY) and c.get("status") == "True" for c in out.get("conditions") or ()
    ):
        # As upstream (issues.k8s.io/108594): readiness may lag the phase; a terminal pod is never ready.
        reason = POD_FAILED if phase == FAILED else POD_COMPLETED
        out["conditions"] = [
            _unready(c, reason, moment) if c.get("type") in (READY, CONTAINERS_READY) else c for c in out["conditions"]
        ]
    return out


def _unready(condition: Mapping[str, Any], reason: str, now: datetime) -> JSON:
    """The condition False with a terminal phase's reason, its transition time moved if its status changed."""
    out = {k: v for k, v in condition.items() if k != "message"}
    if out.get("status") != "False":
        out["lastTransitionTime"] = format_time(now)
    out.update(status="False", reason=reason)
    return out


def _merge_diff(old: Mapping[str, Any], new: Mapping[str, Any], *, top: bool = False) -> JSON:
    patch: JSON = {}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            previous = old[key]
            merge_key = _MERGE_KEYS.get(key) if top else None
            if merge_key is not None and isinstance(previous, list) and isinstance(value, list):
                patch.update(_keyed_list_diff(key, merge_key, previous, value))
            elif isinstance(previous, Mapping) and isinstance(value, Mapping) and value:
                patch[key] = _merge_diff(previous, value)
            else:
                patch[key] = value  # other lists (containerStatuses) and scalars are replaced whole
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def _keyed_list_diff(field: str, key: str, old: list[Any], new: list[Any]) -> JSON:
    """A merge-by-key list's part of a strategic merge patch: changed or new elements (a changed one as the
    element's own diff, with its key), deletions, and the new order."""
    old_by_key = {item.get(key): item for item in old if isinstance(item, Mapping)}
    new_keys = [item.get(key) for item in new if isinstance(item, Mapping)]
    elements: list[Any] = []
    for item in new:
        previous = old_by_key.get(item.get(key))
        if previous is None:
            elements.append(item)
        elif previous != item:
            elements.append({key: item.get(key), **_merge_diff(previous, item)})
    elements += [{key: k, "$patch": "delete"} for k in old_by_key if k not in new_keys]
    out: JSON = {f"$setElementOrder/{field}": [{key: k} for k in new_keys]}
    if elements:
        out[field] = elements
    return out


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any], *, uid: str | None = None) -> JSON:
    """A strategic merge patch for the pod's status subresource turning `old` into `new`; {} when nothing changed.

    With `uid`, the patch also carries metadata.uid, which the apiserver checks as a precondition so a status never
    lands on a new pod of the same name, as the status manager does.
    """
    diff = _merge_diff(old, new, top=True)
    if not diff:
        return {}
    patch: JSON = {"status": diff}
    if uid is not None:
        patch["metadata"] = {"uid": uid}
    return patch


def _illegal_restart(old: Mapping[str, Any], new: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool:
    """A terminated container coming back though the restart policy forbids it (checkContainerStateTransition)."""
    policy = pod_spec.get("restartPolicy") or "Always"
    if policy == "Always":
        return False
    sidecars = {c.get("name") for c in pod_spec.get("initContainers") or () if c.get("restartPolicy") == "Always"}
    for key in ("initContainerStatuses", "containerStatuses"):
        new_by_name = {c.get("name"): c for c in new.get(key) or ()}
        for previous in old.get(key) or ():
            terminated = (previous.get("state") or {}).get("terminated")
            if terminated is None or (key == "initContainerStatuses" and previous.get("name") in sidecars):
                continue
            if terminated.get("exitCode", 0) != 0 and policy == "OnFailure":
                continue  # a failed container may restart under OnFailure
            current = new_by_name.get(previous.get("name"))
            if current is not None and (current.get("state") or {}).get("terminated") is None:
                return True
    return False


def is_stale(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    *,
    pod_spec: Mapping[str, Any] | None = None,
    old_sent: bool = True,
) -> bool:
    """True when `new` would move the pod backwards from `old`, and must not be sent.

    A terminal phase (Succeeded, Failed) is never left for a running one. A container's restartCount may decrease,
    as upstream lets it (its status manager checks phases and terminated containers only): after the runtime lost
    its containers (a node's reboot, an emulated node's restart) the count comes from the container's log directory
    (calcRestartCountByLogDir), which may be below the count shown meanwhile; refusing it would strand the pod in
    its interim status (waiting) for good. A terminal phase the apiserver does not show yet (`old_sent` False: a
    kill's Failed held back while containers ran) may still become the other terminal phase, as upstream's status
    after the kill is computed from how the containers ended (all exited 0: Succeeded); once sent it never changes
    (upstream refuses a transition out of the API's terminal phase). With `pod_spec`, a terminated container may
    not leave that state unless the restart policy lets it restart.
    """
    if old is None:
        return False
    old_phase, new_phase = old.get("phase"), new.get("phase")
    if old_phase in TERMINAL_PHASES and new_phase != old_phase and (old_sent or new_phase not in TERMINAL_PHASES):
        return True
    return pod_spec is not None and _illegal_restart(old, new, pod_spec)
