"""When to post the node status, and the node Lease that carries the heartbeat in between.

With leases, the status is posted when something in it changed (heartbeat times aside) or when the report
frequency (5 minutes by default) has passed since the last post; liveness is the Lease renewed every 10s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from nodeagent.nodestatus._quantity import format_micro_time

NODE_LEASE_NAMESPACE = "kube-node-lease"


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    conditions = out.get("conditions") or []
    out["conditions"] = sorted(
        ({k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in conditions),
        key=lambda c: str(c.get("type", "")),
    )
    return out


def node_status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Changed apart from the conditions' heartbeat times and order (nodeStatusHasChanged upstream)."""
    return _comparable(old) != _comparable(new)


def conditions_differ(current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Some condition in `new` is missing from `current` (the Node as the apiserver has it) or says something else
    there (status, reason or message): someone else wrote it, e.g. the node lifecycle controller's Unknown after
    missed heartbeats. Conditions `new` does not set are not compared."""
    have = {c.get("type"): c for c in current.get("conditions") or []}
    for cond in new.get("conditions") or []:
        old = have.get(cond.get("type"))
        if old is None or any(old.get(k) != cond.get(k) for k in ("status", "reason", "message")):
            return True
    return False


def should_report(
    last_reported: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    *,
    now: datetime,
    last_report_time: datetime | None,
    report_frequency: timedelta,
) -> bool:
    """Post `new` if it differs from what was last posted, or if `report_frequency` has elapsed since then."""
    if last_reported is None or last_report_time is None:
        return True
    if node_status_changed(last_reported, new):
        return True
    return now - last_report_time >= report_frequency


def lease_object(
    node_name: str,
    node_uid: str,
    *,
    duration_seconds: int,
    now: datetime,
    holder: str | None = None,
) -> dict[str, Any]:
    """The node's coordination.k8s.io/v1 Lease, owned by its Node so it goes when the Node goes."""
    holder_identity = holder if holder is not None else node_name
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node_name,
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}],
        },
        "spec": {
            "holderIdentity": holder_identity,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": format_micro_time(now),
        },
    }
