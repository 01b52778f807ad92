"""spec.activeDeadlineSeconds: how long a pod may be active on the node (upstream pkg/kubelet/active_deadline.go).

The deadline counts from the pod's status.startTime (the status the kubelet last generated, else the API's): a pod
without a start time has not started on this node and has no deadline yet. Once `now - startTime` reaches the
deadline the pod fails, as upstream's handler decides it: phase Failed, reason DeadlineExceeded, upstream's message,
a Normal event with the same words, and its containers are killed by termination. The kubelet also syncs such a pod
at once (upstream's ShouldSync in getPodsToSync) and, before that, wakes it exactly when the deadline falls, so the
pod is acted on at the deadline rather than at the next periodic resync.

Pure: the status and `now` are given, so tests use a fake clock.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Final

REASON: Final = "DeadlineExceeded"
MESSAGE: Final = "Pod was active on the node longer than the specified deadline"


def _start_time(status: Mapping[str, Any] | None) -> datetime.datetime | None:
    raw = (status or {}).get("startTime")
    if not raw:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(str(raw))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def time_left(pod: Mapping[str, Any], status: Mapping[str, Any] | None, now: datetime.datetime) -> float | None:
    """Seconds until the pod's active deadline (0 or less: reached); None without a deadline or a start time.

    `status` is the kubelet's latest status of the pod, or None to use the pod's own (upstream: the status
    manager's, else pod.Status).
    """
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    if deadline is None or isinstance(deadline, bool):
        return None
    started = _start_time(status if status is not None else pod.get("status"))
    if started is None:
        return None
    return float(deadline) - (now - started).total_seconds()


def past_active_deadline(pod: Mapping[str, Any], status: Mapping[str, Any] | None, now: datetime.datetime) -> bool:
    """Upstream's pastActiveDeadline: the pod has been active for at least activeDeadlineSeconds."""
    left = time_left(pod, status, now)
    return left is not None and left <= 0
