"""Small helpers shared by the pod status modules: JSON aliases, timestamps, container lookup, sidecar detection."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]


def format_time(moment: datetime) -> str:
    """RFC 3339 with whole seconds, as metav1.Time marshals ("2006-01-02T15:04:05Z")."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_generation(pod: Mapping[str, Any]) -> int:
    """The pod's metadata.generation (0 when unset), which the kubelet reports back as observedGeneration."""
    meta = pod.get("metadata")
    value = meta.get("generation") if isinstance(meta, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def find_status(statuses: Iterable[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    """The status named `name`, as podutil.GetContainerStatus finds it."""
    for status in statuses:
        if status.get("name") == name:
            return status
    return None


def is_restartable_init_container(container: Mapping[str, Any]) -> bool:
    """A sidecar: an init container whose restartPolicy is Always (KEP-753)."""
    return container.get("restartPolicy") == "Always"


def state_of(status: Mapping[str, Any]) -> Mapping[str, Any]:
    state = status.get("state")
    return state if isinstance(state, Mapping) else {}


def last_state_of(status: Mapping[str, Any]) -> Mapping[str, Any]:
    state = status.get("lastState")
    return state if isinstance(state, Mapping) else {}


def go_list(names: Iterable[str]) -> str:
    """A string slice as Go's %s prints it: "[a b]"."""
    return "[" + " ".join(names) + "]"


def has_any_regular_container_started(spec: Mapping[str, Any], statuses: Iterable[Mapping[str, Any]]) -> bool:
    """True once any app container ran or is running: the pod was initialized at some point (upstream helper)."""
    names = {c.get("name") for c in spec.get("containers") or ()}
    for status in statuses:
        if status.get("name") not in names:
            continue
        state = state_of(status)
        if state.get("running") is not None or state.get("terminated") is not None:
            return True
    return False
