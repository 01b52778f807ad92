"""Deciding whether a pod status is worth sending, and what to send.

`needs_update` ignores the times the kubelet stamps (as isPodStatusByKubeletEqual does), `status_patch` builds a
JSON merge patch (RFC 7386) carrying only what changed, and `is_stale` refuses a status that would move the pod
backwards: out of a terminal phase, or to a lower restart count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.status._common import JSON
from nodeagent.status.phase import TERMINAL_PHASES

_CONDITION_TIMES = ("lastProbeTime", "lastTransitionTime")


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


def _merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> JSON:
    patch: JSON = {}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            previous = old[key]
            if isinstance(previous, Mapping) and isinstance(value, Mapping) and value:
                patch[key] = _merge_diff(previous, value)
            else:
                patch[key] = value  # lists and scalars are replaced whole in a merge patch
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any], *, uid: str | None = None) -> JSON:
    """A merge patch for the pod's status subresource turning `old` into `new`; {} when nothing changed.

    With `uid`, the patch also carries metadata.uid, which the apiserver checks as a precondition so a status never
    lands on a new pod of the same name, as the status manager does.
    """
    diff = _merge_diff(old, new)
    if not diff:
        return {}
    patch: JSON = {"status": diff}
    if uid is not None:
        patch["metadata"] = {"uid": uid}
    return patch


def _restart_counts(status: Mapping[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(key) or ():
            counts[f"{key}/{container.get('name')}"] = int(container.get("restartCount", 0))
    return counts


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
    old: Mapping[str, Any] | None, new: Mapping[str, Any], *, pod_spec: Mapping[str, Any] | None = None
) -> bool:
    """True when `new` would move the pod backwards from `old`, and must not be sent.

    A terminal phase (Succeeded, Failed) never changes again and a container's restartCount never decreases. With
    `pod_spec`, a terminated container may not leave that state unless the restart policy lets it restart.
    """
    if old is None:
        return False
    old_phase = old.get("phase")
    if old_phase in TERMINAL_PHASES and new.get("phase") != old_phase:
        return True
    new_counts = _restart_counts(new)
    if any(name in new_counts and new_counts[name] < count for name, count in _restart_counts(old).items()):
        return True
    return pod_spec is not None and _illegal_restart(old, new, pod_spec)
