"""Labels and annotations the kubelet puts on sandboxes and containers, and their inverse (upstream: labels.go).

Labels identify (pod name, namespace, uid, container name) and are what the runtime filters on; annotations carry
what the kubelet needs back after a restart (spec hash, restart count, termination message settings, preStop handler,
ports). Both are plain strings, so crictl and a restarted agent read them without any state of ours.

Parsing is lenient where upstream is: a missing or malformed annotation leaves a default (restart count 0, no hash)
and never stops adoption; only the identifying labels are required.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.kuberuntime.errors import LabelsError

POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

CONTAINER_HASH_ANNOTATION = "io.kubernetes.container.hash"
CONTAINER_RESTART_COUNT_ANNOTATION = "io.kubernetes.container.restartCount"
TERMINATION_MESSAGE_PATH_ANNOTATION = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY_ANNOTATION = "io.kubernetes.container.terminationMessagePolicy"
POD_DELETION_GRACE_PERIOD_ANNOTATION = "io.kubernetes.pod.deletionGracePeriod"
POD_TERMINATION_GRACE_PERIOD_ANNOTATION = "io.kubernetes.pod.terminationGracePeriod"
PRE_STOP_HANDLER_ANNOTATION = "io.kubernetes.container.preStopHandler"
CONTAINER_PORTS_ANNOTATION = "io.kubernetes.container.ports"

# API defaults, used when the pod dict comes without them (static pods are not defaulted by an apiserver).
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
DEFAULT_TERMINATION_MESSAGE_POLICY = "File"


def _metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    return meta


# The field order of upstream's Go structs, which json.Marshal follows: the kubelet writes the ports and preStop
# annotations as json.Marshal(container.Ports) / json.Marshal(container.Lifecycle.PreStop), so `crictl inspect`
# shows them byte for byte as upstream's only in this order (k8s.io/api/core/v1 types.go).
_GO_FIELDS: dict[str, tuple[str, ...]] = {
    "port": ("name", "hostPort", "containerPort", "protocol", "hostIP"),
    "handler": ("exec", "httpGet", "tcpSocket", "sleep"),
    "exec": ("command",),
    "httpGet": ("path", "port", "host", "scheme", "httpHeaders"),
    "httpHeaders": ("name", "value"),
    "tcpSocket": ("port", "host"),
    "sleep": ("seconds",),
}


def _go_ordered(value: Any, kind: str) -> Any:
    """`value` with each object's keys in the order of its Go struct (unknown keys after, sorted)."""
    if isinstance(value, list):
        return [_go_ordered(item, kind) for item in value]
    if not isinstance(value, Mapping):
        return value
    fields = _GO_FIELDS.get(kind, ())
    keys = [k for k in fields if k in value] + sorted(k for k in value if k not in fields)
    return {k: _go_ordered(value[k], k) for k in keys}


def _go_json(value: Any, kind: str) -> str:
    return json.dumps(_go_ordered(value, kind), separators=(",", ":"))


def sandbox_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod labels plus the identifying ones; ours win over a pod label of the same name, as upstream."""
    meta = _metadata(pod)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels[POD_NAME_LABEL] = str(meta.get("name", ""))
    labels[POD_NAMESPACE_LABEL] = str(meta.get("namespace", ""))
    labels[POD_UID_LABEL] = str(meta.get("uid", ""))
    return labels


def sandbox_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's annotations, unchanged."""
    return {str(k): str(v) for k, v in (_metadata(pod).get("annotations") or {}).items()}


def container_labels(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """Identifying labels only: pod labels stay on the sandbox, as upstream."""
    meta = _metadata(pod)
    return {
        POD_NAME_LABEL: str(meta.get("name", "")),
        POD_NAMESPACE_LABEL: str(meta.get("namespace", "")),
        POD_UID_LABEL: str(meta.get("uid", "")),
        CONTAINER_NAME_LABEL: str(container.get("name", "")),
    }


def container_annotations(
    pod: Mapping[str, Any], container: Mapping[str, Any], *, container_hash: str, restart_count: int
) -> dict[str, str]:
    """What a restarted agent needs to judge a running container; JSON values are compact and key-sorted."""
    meta = _metadata(pod)
    spec: Mapping[str, Any] = pod.get("spec") or {}
    annotations = {
        CONTAINER_HASH_ANNOTATION: container_hash,
        CONTAINER_RESTART_COUNT_ANNOTATION: str(restart_count),
        TERMINATION_MESSAGE_PATH_ANNOTATION: str(
            container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
        ),
        TERMINATION_MESSAGE_POLICY_ANNOTATION: str(
            container.get("terminationMessagePolicy") or DEFAULT_TERMINATION_MESSAGE_POLICY
        ),
    }
    if meta.get("deletionGracePeriodSeconds") is not None:
        annotations[POD_DELETION_GRACE_PERIOD_ANNOTATION] = str(meta["deletionGracePeriodSeconds"])
    if spec.get("terminationGracePeriodSeconds") is not None:
        annotations[POD_TERMINATION_GRACE_PERIOD_ANNOTATION] = str(spec["terminationGracePeriodSeconds"])
    pre_stop = (container.get("lifecycle") or {}).get("preStop")
    if pre_stop:
        annotations[PRE_STOP_HANDLER_ANNOTATION] = _go_json(pre_stop, "handler")
    ports = container.get("ports")
    if ports:
        annotations[CONTAINER_PORTS_ANNOTATION] = _go_json(ports, "port")
    return annotations


@dataclass(frozen=True)
class SandboxInfo:
    """What the labels of a sandbox say about the pod it belongs to."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    pod_labels: Mapping[str, str]
    pod_annotations: Mapping[str, str]


@dataclass(frozen=True)
class ContainerInfo:
    """What the labels and annotations of a container say (upstream: labeledContainerInfo + annotatedContainerInfo)."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    container_name: str
    hash: str = ""
    restart_count: int = 0
    termination_message_path: str = ""
    termination_message_policy: str = ""
    pod_deletion_grace_period: int | None = None
    pod_termination_grace_period: int | None = None
    pre_stop_handler: Mapping[str, Any] | None = None
    ports: tuple[Mapping[str, Any], ...] = ()


def _required(labels: Mapping[str, str], key: str, what: str) -> str:
    value = labels.get(key)
    if not value:
        raise LabelsError(f"{what} has no {key} label; it was not created by a kubelet")
    return value


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _json_or_none(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_sandbox_labels(labels: Mapping[str, str], annotations: Mapping[str, str]) -> SandboxInfo:
    """Inverse of `sandbox_labels`/`sandbox_annotations`; raises `LabelsError` without the identifying labels."""
    ours = {POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL}
    return SandboxInfo(
        pod_name=_required(labels, POD_NAME_LABEL, "sandbox"),
        pod_namespace=_required(labels, POD_NAMESPACE_LABEL, "sandbox"),
        pod_uid=_required(labels, POD_UID_LABEL, "sandbox"),
        pod_labels={k: v for k, v in labels.items() if k not in ours},
        pod_annotations=dict(annotations),
    )


def parse_container_labels(labels: Mapping[str, str], annotations: Mapping[str, str]) -> ContainerInfo:
    """Inverse of `container_labels`/`container_annotations`; raises `LabelsError` without identifying labels."""
    pre_stop = _json_or_none(annotations.get(PRE_STOP_HANDLER_ANNOTATION))
    ports = _json_or_none(annotations.get(CONTAINER_PORTS_ANNOTATION))
    return ContainerInfo(
        pod_name=_required(labels, POD_NAME_LABEL, "container"),
        pod_namespace=_required(labels, POD_NAMESPACE_LABEL, "container"),
        pod_uid=_required(labels, POD_UID_LABEL, "container"),
        container_name=_required(labels, CONTAINER_NAME_LABEL, "container"),
        hash=annotations.get(CONTAINER_HASH_ANNOTATION, ""),
        restart_count=_int_or_none(annotations.get(CONTAINER_RESTART_COUNT_ANNOTATION)) or 0,
        termination_message_path=annotations.get(TERMINATION_MESSAGE_PATH_ANNOTATION, ""),
        termination_message_policy=annotations.get(TERMINATION_MESSAGE_POLICY_ANNOTATION, ""),
        pod_deletion_grace_period=_int_or_none(annotations.get(POD_DELETION_GRACE_PERIOD_ANNOTATION)),
        pod_termination_grace_period=_int_or_none(annotations.get(POD_TERMINATION_GRACE_PERIOD_ANNOTATION)),
        pre_stop_handler=pre_stop if isinstance(pre_stop, dict) else None,
        ports=tuple(p for p in ports if isinstance(p, dict)) if isinstance(ports, list) else (),
    )
