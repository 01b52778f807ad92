"""Static pods: a decoded manifest becomes a pod the kubelet can run, as upstream's config/common.go does.

`decode_pod` turns the JSON data of one manifest into a defaulted, validated pod, or raises `InvalidManifest` with
upstream's wording ("couldn't parse as pod(...)", "invalid pod: [...]", "static pods may not reference ..."); data
that is no v1 Pod at all raises its subclass `NotAPod`, whose reason each source words as its upstream does (the file
source adds ", please check config file", as file.go).
The defaults are upstream's applyDefaults:

- the UID, unless the manifest sets one, is a hash of the manifest's content, the node name and the source (the
  file path or the URL). Restarting the agent therefore finds the same UID for the same file, and the pods it left
  running are adopted instead of restarted; an edited manifest is a new pod;
- the name gets `-<node name>` appended (lowercase), the namespace defaults to `default`, `spec.nodeName` is the
  node, the annotation kubernetes.io/config.hash carries the UID (the mirror pod repeats it to say which static pod
  it mirrors), and the status starts Pending;
- pods from files tolerate every NoExecute taint, so node problems never evict them;
- the API defaults an apiserver would have applied (restart and DNS policy, grace period, scheduler, pull policy,
  termination message, port protocol, probe timings), so a static pod looks like an API pod to the rest of the
  kubelet and its container hashes never change for lack of a default.

Fields only an apiserver sets (resourceVersion, creationTimestamp, deletionTimestamp, ...) are dropped from the
manifest: a static pod is deleted by removing its manifest, never by a timestamp in it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from nodeagent.sources.validation import api_object_reference, type_error, validate_pod

Pod = dict[str, Any]

FILE_SOURCE = "file"  # upstream: kubetypes.FileSource
HTTP_SOURCE = "http"  # upstream: kubetypes.HTTPSource
CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash"
DEFAULT_NAMESPACE = "default"

_SERVER_SET_METADATA = (
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
)
_NO_EXECUTE_TOLERATION = {"operator": "Exists", "effect": "NoExecute"}


class InvalidManifest(ValueError):
    """A manifest that is not a usable pod; the message says why, in upstream's words."""


class NotAPod(InvalidManifest):
    """The data is no v1 Pod at all (upstream's tryDecodeSinglePod: not parsed); `reason` says what it is instead."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"couldn't parse as pod({reason})")
        self.reason = reason


def generate_pod_name(name: str, node_name: str) -> str:
    """A name unique among nodes (upstream: generatePodName)."""
    return f"{name}-{node_name.lower()}"


def static_pod_uid(manifest: Mapping[str, Any], *, node_name: str, source: str) -> str:
    """A stable hash of the manifest's content, the node name and the source (file path or URL): 32 hex digits."""
    hasher = hashlib.sha256()
    hasher.update(json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    hasher.update(f"host:{node_name}".encode())
    hasher.update(f"source:{source}".encode())
    return hasher.hexdigest()[:32]


def default_pull_policy(image: str) -> str:
    """Upstream's defaulting: Always for `:latest` or no tag, else IfNotPresent."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        probe.setdefault(key, value)
    http = probe.get("httpGet")
    if isinstance(http, dict):
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")


def _default_container(container: Any, *, host_network: bool) -> None:
    if not isinstance(container, dict):
        return
    image = container.get("image")
    if isinstance(image, str) and image and "imagePullPolicy" not in container:
        container["imagePullPolicy"] = default_pull_policy(image)
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    ports = container.get("ports")
    for port in ports if isinstance(ports, list) else []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if host_network and "hostPort" not in port and "containerPort" in port:
                port["hostPort"] = port["containerPort"]
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(container.get(kind))


def apply_api_defaults(pod: Pod) -> None:
    """The subset of the apiserver's pod defaulting the kubelet relies on (SetObjectDefaults_Pod)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    host_network = spec.get("hostNetwork") is True
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            for container in containers:
                _default_container(container, host_network=host_network)


def apply_static_defaults(pod: Pod, *, node_name: str, source: str, is_file: bool) -> None:
    """Upstream's applyDefaults, on a pod whose metadata and spec are maps (see `decode_pod`)."""
    meta: dict[str, Any] = pod["metadata"]
    if not meta.get("uid"):
        meta["uid"] = static_pod_uid(pod, node_name=node_name, source=source)
    meta["name"] = generate_pod_name(str(meta.get("name", "")), node_name)
    if not meta.get("namespace"):
        meta["namespace"] = DEFAULT_NAMESPACE
    for key in _SERVER_SET_METADATA:
        meta.pop(key, None)
    spec: dict[str, Any] = pod["spec"]
    spec["nodeName"] = node_name
    annotations = meta.get("annotations")
    meta["annotations"] = annotations = dict(annotations) if isinstance(annotations, dict) else {}
    annotations[CONFIG_HASH_ANNOTATION] = meta["uid"]
    if is_file:
        tolerations = spec.get("tolerations")
        tolerations = list(tolerations) if isinstance(tolerations, list) else []
        if _NO_EXECUTE_TOLERATION not in tolerations:
            tolerations.append(dict(_NO_EXECUTE_TOLERATION))
        spec["tolerations"] = tolerations
    pod["status"] = {"phase": "Pending"}
    apply_api_defaults(pod)


def _is_kind(obj: Any, kind: str) -> bool:
    return isinstance(obj, Mapping) and obj.get("kind") == kind and obj.get("apiVersion") == "v1"


def describe_kind(obj: Any, expected: str = "a v1 Pod") -> str:
    """Why `obj` is not the `expected` kind of object, in the words of upstream's decoder where it has some."""
    if not isinstance(obj, Mapping):
        return f"a {type(obj).__name__}, not an object"
    if not obj.get("kind"):
        return "Object 'Kind' is missing"
    if not obj.get("apiVersion"):
        return "Object 'apiVersion' is missing"
    return f"kind {obj.get('kind')!r} of apiVersion {obj.get('apiVersion')!r} is not {expected}"


def _decode(obj: Mapping[str, Any], *, node_name: str, source: str, is_file: bool) -> Pod:
    pod: Pod = copy.deepcopy(dict(obj))
    meta, spec = pod.get("metadata"), pod.get("spec")
    # A name of another type would become a string when the node name is appended: checked before the defaults.
    if isinstance(meta, dict) and meta.get("name") is not None and not isinstance(meta["name"], str):
        raise InvalidManifest(f"invalid pod: [{type_error('metadata.name', meta['name'], 'a string')}]")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise InvalidManifest("invalid pod: name is needed for the pod")
    if not isinstance(spec, dict):
        raise InvalidManifest("invalid pod: [spec: Required value]")
    # The two fields the defaults extend must have their type already (the validator checks all the others).
    if not isinstance(meta.get("annotations") or {}, dict):
        raise InvalidManifest(f"invalid pod: [{type_error('metadata.annotations', meta['annotations'], 'an object')}]")
    if not isinstance(spec.get("tolerations") or [], list):
        raise InvalidManifest(f"invalid pod: [{type_error('spec.tolerations', spec['tolerations'], 'a list')}]")
    apply_static_defaults(pod, node_name=node_name, source=source, is_file=is_file)
    errors = validate_pod(pod)
    if errors:
        raise InvalidManifest(f"invalid pod: [{', '.join(errors)}]")
    resource = api_object_reference(pod)
    if resource is not None:
        raise InvalidManifest(f"static pods may not reference {resource}")
    return pod


def decode_pod(obj: Any, *, node_name: str, source: str, is_file: bool) -> Pod:
    """One manifest's data as a defaulted, validated static pod. Raises InvalidManifest (NotAPod: not a v1 Pod)."""
    if not _is_kind(obj, "Pod"):
        raise NotAPod(describe_kind(obj))
    return _decode(obj, node_name=node_name, source=source, is_file=is_file)


def is_pod(obj: Any) -> bool:
    return _is_kind(obj, "Pod")


def is_pod_list(obj: Any) -> bool:
    return _is_kind(obj, "PodList")


def decode_pod_list(obj: Any, *, node_name: str, source: str) -> list[Pod | InvalidManifest]:
    """Each item of a v1 PodList (from a URL) as a pod, or the reason it is not one; the list itself must be valid."""
    if not _is_kind(obj, "PodList"):
        raise InvalidManifest(f"couldn't parse as a pod list({describe_kind(obj, 'a v1 PodList')})")
    items = obj.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise InvalidManifest("invalid pod list: items must be a list")
    out: list[Pod | InvalidManifest] = []
    for item in items:
        # Items of a PodList carry no kind of their own; each is decoded as the Pod it is.
        if not isinstance(item, Mapping):
            out.append(NotAPod(describe_kind(item)))
            continue
        try:
            out.append(
                _decode({"apiVersion": "v1", "kind": "Pod", **item}, node_name=node_name, source=source, is_file=False)
            )
        except InvalidManifest as exc:
            out.append(exc)
    return out
