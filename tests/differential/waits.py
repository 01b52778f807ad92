"""What a `wait` action waits for, as a predicate over the pod the watch showed last (pure)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def container_status(pod: Obj, name: str) -> Obj:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or ():
            if cs.get("name") == name:
                out: Obj = cs
                return out
    return {}


def _condition(pod: Obj, kind: str) -> Obj:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            out: Obj = cond
            return out
    return {}


def _container_matches(cs: Obj, args: Obj) -> bool:
    if not cs:
        return False
    state = cs.get("state") or {}
    if "state" in args and args["state"] not in state:
        return False
    if "reason" in args:
        reasons = {str(v.get("reason")) for v in state.values() if isinstance(v, dict)}
        if args["reason"] not in reasons:
            return False
    if "exitCode" in args and (state.get("terminated") or {}).get("exitCode") != args["exitCode"]:
        return False
    if "restartCount" in args and int(cs.get("restartCount", 0)) < int(args["restartCount"]):
        return False
    if "ready" in args and bool(cs.get("ready")) != bool(args["ready"]):
        return False
    return not ("started" in args and bool(cs.get("started")) != bool(args["started"]))


def satisfied(args: Obj, pod: Obj | None) -> bool:
    """Whether `pod` (None once deleted, or before the watch showed it) is what the wait's `args` ask for.

    Keys: `gone: true`; `deleting: true`; `phase`; `condition` (a type) with `status` (default "True");
    `container` (a name, init and ephemeral containers too) with `state`, `reason`, `exitCode`, `restartCount`
    (at least), `ready`, `started`. All given keys must hold.
    """
    if args.get("gone"):
        return pod is None
    if pod is None:
        return False
    if args.get("deleting") and not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if "phase" in args and (pod.get("status") or {}).get("phase") != args["phase"]:
        return False
    if "condition" in args and _condition(pod, args["condition"]).get("status") != str(args.get("status", "True")):
        return False
    return not ("container" in args and not _container_matches(container_status(pod, args["container"]), args))


def describe(args: Obj) -> str:
    return " ".join(f"{k}={v}" for k, v in args.items() if k not in ("timeout",))
