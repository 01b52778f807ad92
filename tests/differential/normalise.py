"""Pod status and events with what must differ between two runs taken out (pure functions).

A state is a flat mapping `path -> value`, e.g. `containerStatuses[main].state.waiting.reason -> "CrashLoopBackOff"`:
lists of named things are keyed by name (conditions by type), so that two states diff line by line. Times become
`<time>`, container IDs `<cid>`, addresses `<ip>`, and the run's own names (namespace, UIDs) placeholders.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
State = dict[str, str]

TIME_KEYS = {"startedAt", "finishedAt", "startTime", "lastTransitionTime", "lastProbeTime", "lastHeartbeatTime"}
IP_KEYS = {"podIP", "hostIP", "ip"}
_HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
# A measured duration ("in 1.203s", "525ms"); a whole number of seconds ("back-off 10s") is the kubelet's own
# constant and stays.
_DURATION = re.compile(r"\b\d+\.\d+(?:ns|µs|us|ms|s|m)\b|\b\d+(?:ns|µs|us|ms)\b")
_CONTAINER_ID = re.compile(r"\b[a-z]+://[0-9a-f]{64}\b")
# The ServiceAccount admission plugin names the projected token volume with a random suffix.
_TOKEN_VOLUME = re.compile(r"\bkube-api-access-[a-z0-9]{5}\b")


@dataclass(frozen=True)
class Context:
    """The names of one run, replaced by placeholders: the namespace, pod UIDs by pod name, and names generated for
    the run (a ResourceClaim made from a template: `<pod>-<claim>-<random>`) by what they stand for."""

    namespace: str
    uids: dict[str, str]
    node: str = ""
    names: dict[str, str] = field(default_factory=dict)


def scrub(text: str, ctx: Context) -> str:
    """A message with the run's names, IDs, addresses and measured durations replaced."""
    text = _CONTAINER_ID.sub("<cid>", text)
    text = _TOKEN_VOLUME.sub("kube-api-access-<rand>", text)
    for name, uid in ctx.uids.items():
        text = text.replace(uid, f"<uid:{name}>")
    for generated, placeholder in ctx.names.items():
        text = text.replace(generated, f"<{placeholder}>")
    text = _UUID.sub("<uid>", text)
    text = _HEX64.sub("<hex>", text)
    if ctx.namespace:
        text = text.replace(ctx.namespace, "<ns>")
    if ctx.node:
        text = text.replace(ctx.node, "<node>")
    text = _IPV4.sub("<ip>", text)
    return _DURATION.sub("<dur>", text)


def _key(item: Any, index: int) -> str:
    if isinstance(item, dict):
        for field in ("name", "type", "mountPath"):
            if isinstance(item.get(field), str):
                return _TOKEN_VOLUME.sub("kube-api-access-<rand>", str(item[field]))
    return str(index)


def _leaf(key: str, value: Any, ctx: Context) -> str:
    if value is None:
        return "null"
    if key in TIME_KEYS:
        return "<time>"
    if key == "containerID":
        return "<cid>"
    if key in IP_KEYS and isinstance(value, str):
        return "<ip>"
    if isinstance(value, str):
        return json.dumps(scrub(value, ctx), ensure_ascii=False)
    return json.dumps(value)


def flatten(value: Any, ctx: Context, prefix: str = "", key: str = "") -> State:
    out: State = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = "{}"
        for k, v in value.items():
            out.update(flatten(v, ctx, f"{prefix}.{k}" if prefix else k, k))
    elif isinstance(value, list):
        if not value:
            out[prefix] = "[]"
        for i, item in enumerate(value):
            out.update(flatten(item, ctx, f"{prefix}[{_key(item, i)}]", key))
    else:
        out[prefix] = _leaf(key, value, ctx)
    return out


def pod_state(pod: Obj, ctx: Context) -> State:
    """The normalised state of a pod as a watch delivered it: its status, and whether it is being deleted."""
    state = flatten(pod.get("status") or {}, ctx)
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        state["metadata.deletionTimestamp"] = "<time>"
    return state


def event_line(event: Obj, ctx: Context) -> str:
    """One event as `Type Reason fieldPath (component): message`, scrubbed."""
    involved = event.get("involvedObject") or {}
    component = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
    where = involved.get("fieldPath") or ""
    message = scrub(str(event.get("message") or event.get("note") or ""), ctx)
    return f"{event.get('type', '')} {event.get('reason', '')} {where} ({component}): {message}"
