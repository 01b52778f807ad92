"""The validation a static pod passes before the kubelet runs it: a subset of upstream's ValidatePodCreate, plus the
static-pod rule that it may not reference API objects.

An apiserver validates every pod it stores; a static pod comes from a file or a URL and was never validated, so the
kubelet does it (upstream: tryDecodeSinglePod calls validation.ValidatePodCreate, then HasAPIObjectReference).
The subset covers what would otherwise fail late or strangely in the runtime: names (DNS-1123), labels and
annotations, containers (unique names, image required, pull policy, ports, env names, volume mounts, probes,
lifecycle hooks, resources), volumes (one source each, unique names), restart and DNS policy, grace periods, no
ephemeral containers (only an API pod's subresource adds them), and values of the wrong JSON type. Messages keep
upstream's field-error form (`spec.containers[0].image: Required value`).

`api_object_reference` says which API object a pod references, in upstream's words ("secrets", "configmaps",
"serviceaccounts", "persistentvolumeclaims", ...): a static pod must run before (and without) the apiserver, and a
mirror pod that referenced such objects would be refused by NodeRestriction anyway.

Everything here is pure: a pod dict in, a list of messages out; nothing raises on malformed input.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.config.errors import QuantityError
from nodeagent.config.quantity import parse_quantity

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_IANA_SVC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_HAS_LETTER = re.compile(r"[a-z]")

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
IANA_SVC_NAME_MAX = 15
TOTAL_ANNOTATION_SIZE_MAX = 256 * 1024

RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
PROTOCOLS = ("TCP", "UDP", "SCTP")
PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
LIFECYCLE_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")

# Volume sources that need no API object (upstream's HasAPIObjectReference lets these pass).
_LOCAL_VOLUME_SOURCES = frozenset(
    {
        "awsElasticBlockStore", "azureDisk", "cephfs", "cinder", "downwardAPI", "emptyDir", "fc", "flexVolume",
        "flocker", "gcePersistentDisk", "gitRepo", "hostPath", "image", "iscsi", "nfs", "photonPersistentDisk",
        "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume",
    }
)  # fmt: skip
# Volume sources that reference an API object, and what upstream calls it.
_REFERENCING_VOLUME_SOURCES = {
    "configMap": "configmaps (via configmap volumes)",
    "secret": "secrets (via secret volumes)",
    "csi": "csidrivers (via CSI volumes)",
    "glusterfs": "endpoints (via glusterFS volumes)",
    "persistentVolumeClaim": "persistentvolumeclaims",
    "ephemeral": "persistentvolumeclaims (via ephemeral volumes)",
    "azureFile": "secrets (via azureFile volumes)",
}
_VOLUME_SOURCES = _LOCAL_VOLUME_SOURCES | set(_REFERENCING_VOLUME_SOURCES) | {"projected"}
_PROJECTED_SOURCES = {
    "configMap": "configmaps (via projected volumes)",
    "secret": "secrets (via projected volumes)",
    "serviceAccountToken": "serviceaccounts (via projected volumes)",
    "clusterTrustBundle": "clustertrustbundles",
    "podCertificate": "podcertificates",
}
# Volume sources whose secretRef (or the like) names a Secret (upstream: VisitPodSecretNames).
_SECRET_REF_VOLUMES = {
    "cephfs": "secretRef",
    "cinder": "secretRef",
    "flexVolume": "secretRef",
    "rbd": "secretRef",
    "scaleIO": "secretRef",
    "iscsi": "secretRef",
    "storageos": "secretRef",
    "csi": "nodePublishSecretRef",
}


def _q(value: Any) -> str:
    """A value as upstream's field errors print it: strings quoted, the rest as JSON."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def type_error(path: str, value: Any, expected: str) -> str:
    """A value of the wrong JSON type, as a field error (upstream's decoder would refuse it)."""
    return f"{path}: Invalid value: {_q(value)}: must be {expected}"


class _Errors:
    def __init__(self) -> None:
        self.items: list[str] = []

    def required(self, path: str, detail: str = "") -> None:
        self.items.append(f"{path}: Required value" + (f": {detail}" if detail else ""))

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.items.append(f"{path}: Invalid value: {_q(value)}: {detail}")

    def duplicate(self, path: str, value: Any) -> None:
        self.items.append(f"{path}: Duplicate value: {_q(value)}")

    def unsupported(self, path: str, value: Any, supported: Iterable[str]) -> None:
        self.items.append(
            f"{path}: Unsupported value: {_q(value)}: supported values: " + ", ".join(_q(s) for s in supported)
        )

    def forbidden(self, path: str, detail: str) -> None:
        self.items.append(f"{path}: Forbidden: {detail}")

    def type_error(self, path: str, value: Any, expected: str) -> None:
        self.items.append(type_error(path, value, expected))


# --- small checks -------------------------------------------------------------------------------------------------


def dns1123_label_error(value: str) -> str | None:
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    if not _DNS1123_LABEL.fullmatch(value):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
            "end with an alphanumeric character (e.g. 'my-name',  or '123-abc')"
        )
    return None


def dns1123_subdomain_error(value: str) -> str | None:
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'example.com')"
        )
    return None


def qualified_name_error(value: str) -> str | None:
    """A label or annotation key: an optional DNS subdomain prefix and '/', then a name of up to 63 characters."""
    prefix, _, name = value.rpartition("/")
    if "/" in value and (not prefix or dns1123_subdomain_error(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > QUALIFIED_NAME_MAX:
        return f"name part must be no more than {QUALIFIED_NAME_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )
    return None


def iana_svc_name_error(value: str) -> str | None:
    if len(value) > IANA_SVC_NAME_MAX:
        return f"must be no more than {IANA_SVC_NAME_MAX} characters"
    if not _IANA_SVC_NAME.fullmatch(value):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if "--" in value:
        return "must not contain consecutive hyphens"
    if not _HAS_LETTER.search(value):
        return "must contain at least one letter (a-z)"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _map(errs: _Errors, value: Any, path: str) -> Mapping[str, Any]:
    """`value` as a map (None is an empty one); a wrong type is an error and yields an empty map."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    errs.type_error(path, value, "an object")
    return {}


def _list(errs: _Errors, value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    errs.type_error(path, value, "a list")
    return []


def _str(errs: _Errors, value: Any, path: str) -> str | None:
    """`value` if it is a string (None when absent); a wrong type is an error."""
    if value is None or isinstance(value, str):
        return value
    errs.type_error(path, value, "a string")
    return None


def _int_between(errs: _Errors, value: Any, path: str, low: int, high: int | None = None) -> None:
    if value is None:
        return
    if not _is_int(value):
        errs.type_error(path, value, "an integer")
    elif value < low or (high is not None and value > high):
        bound = f"between {low} and {high}, inclusive" if high is not None else f"greater than or equal to {low}"
        errs.invalid(path, value, f"must be {bound}")


def _string_map(errs: _Errors, value: Any, path: str, *, labels: bool) -> Mapping[str, Any]:
    out = _map(errs, value, path)
    for key, val in out.items():
        problem = qualified_name_error(key)
        if problem:
            errs.invalid(path, key, problem)
        if not isinstance(val, str):
            errs.type_error(f"{path}[{key}]", val, "a string")
        elif labels and (len(val) > LABEL_VALUE_MAX or not _LABEL_VALUE.fullmatch(val)):
            errs.invalid(
                f"{path}[{key}]",
                val,
                f"a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                f"must start and end with an alphanumeric character, at most {LABEL_VALUE_MAX} characters",
            )
    return out


# --- metadata -----------------------------------------------------------------------------------------------------


def _validate_metadata(errs: _Errors, meta: Mapping[str, Any]) -> None:
    name = _str(errs, meta.get("name"), "metadata.name")
    if not name:
        errs.required("metadata.name", "name or generateName is required")
    elif problem := dns1123_subdomain_error(name):
        errs.invalid("metadata.name", name, problem)
    namespace = _str(errs, meta.get("namespace"), "metadata.namespace")
    if not namespace:
        errs.required("metadata.namespace")
    elif problem := dns1123_label_error(namespace):
        errs.invalid("metadata.namespace", namespace, problem)
    _str(errs, meta.get("uid"), "metadata.uid")
    _string_map(errs, meta.get("labels"), "metadata.labels", labels=True)
    annotations = _string_map(errs, meta.get("annotations"), "metadata.annotations", labels=False)
    size = sum(len(k) + len(v) for k, v in annotations.items() if isinstance(v, str))
    if size > TOTAL_ANNOTATION_SIZE_MAX:
        errs.items.append(f"metadata.annotations: Too long: must have at most {TOTAL_ANNOTATION_SIZE_MAX} bytes")


# --- containers ---------------------------------------------------------------------------------------------------


def _validate_port_ref(errs: _Errors, value: Any, path: str) -> None:
    """An httpGet/tcpSocket port: a number 1-65535 or an IANA service name."""
    if value is None:
        errs.required(path)
    elif isinstance(value, str):
        if value.isdigit():
            _int_between(errs, int(value), path, 1, 65535)
        elif problem := iana_svc_name_error(value):
            errs.invalid(path, value, problem)
    else:
        _int_between(errs, value, path, 1, 65535)


def _validate_handler(errs: _Errors, handler: Mapping[str, Any], path: str, kinds: tuple[str, ...]) -> None:
    present = [k for k in kinds if handler.get(k) is not None]
    if not present:
        errs.required(path, "must specify a handler type")
        return
    if len(present) > 1:
        errs.forbidden(f"{path}.{present[1]}", "may not specify more than 1 handler type")
        return
    kind = present[0]
    body = _map(errs, handler[kind], f"{path}.{kind}")
    if kind == "exec":
        command = _list(errs, body.get("command"), f"{path}.exec.command")
        if not command:
            errs.required(f"{path}.exec.command")
        for i, arg in enumerate(command):
            _str(errs, arg, f"{path}.exec.command[{i}]")
    elif kind in ("httpGet", "tcpSocket"):
        _validate_port_ref(errs, body.get("port"), f"{path}.{kind}.port")
        if kind == "httpGet":
            scheme = body.get("scheme")
            if scheme is not None and scheme not in ("HTTP", "HTTPS"):
                errs.unsupported(f"{path}.httpGet.scheme", scheme, ("HTTP", "HTTPS"))
            _str(errs, body.get("path"), f"{path}.httpGet.path")
    elif kind == "grpc":
        _int_between(errs, body.get("port"), f"{path}.grpc.port", 1, 65535)
        if body.get("port") is None:
            errs.required(f"{path}.grpc.port")
    elif kind == "sleep":
        _int_between(errs, body.get("seconds"), f"{path}.sleep.seconds", 0)


def _validate_probe(errs: _Errors, value: Any, path: str, *, success_must_be_one: bool) -> None:
    probe = _map(errs, value, path)
    if not probe:
        return
    _validate_handler(errs, probe, path, PROBE_HANDLERS)
    for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        _int_between(errs, probe.get(key), f"{path}.{key}", 0)
    if success_must_be_one and probe.get("successThreshold") not in (None, 1):
        errs.invalid(f"{path}.successThreshold", probe.get("successThreshold"), "must be 1")
    _int_between(errs, probe.get("terminationGracePeriodSeconds"), f"{path}.terminationGracePeriodSeconds", 1)


def _validate_resources(errs: _Errors, value: Any, path: str) -> None:
    resources = _map(errs, value, path)
    parsed: dict[str, dict[str, Any]] = {}
    for part in ("limits", "requests"):
        parsed[part] = {}
        for name, quantity in _map(errs, resources.get(part), f"{path}.{part}").items():
            text = str(quantity) if _is_int(quantity) or isinstance(quantity, float) else quantity
            try:
                parsed[part][name] = parse_quantity(text)
            except QuantityError as exc:
                errs.invalid(f"{path}.{part}[{name}]", quantity, str(exc))
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is not None and request > limit:
            errs.invalid(f"{path}.requests[{name}]", str(request), f"must be less than or equal to {name} limit")


def _validate_env(errs: _Errors, container: Mapping[str, Any], path: str) -> None:
    for i, item in enumerate(_list(errs, container.get("env"), f"{path}.env")):
        env = _map(errs, item, f"{path}.env[{i}]")
        name = _str(errs, env.get("name"), f"{path}.env[{i}].name")
        if not name:
            errs.required(f"{path}.env[{i}].name")
        elif not _ENV_VAR_NAME.fullmatch(name):
            errs.invalid(f"{path}.env[{i}].name", name, "a valid environment variable name must consist of alphabetic "
                         "characters, digits, '_', '-', or '.', and must not start with a digit")  # fmt: skip
        _str(errs, env.get("value"), f"{path}.env[{i}].value")
        source = _map(errs, env.get("valueFrom"), f"{path}.env[{i}].valueFrom")
        kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if source.get(k)]
        if env.get("valueFrom") is not None and len(kinds) != 1:
            errs.invalid(f"{path}.env[{i}].valueFrom", "", "must specify exactly one of: `fieldRef`, "
                         "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`")  # fmt: skip
        if kinds and env.get("value"):
            errs.invalid(f"{path}.env[{i}].valueFrom", "", "may not be specified when `value` is not empty")


def _validate_ports(errs: _Errors, container: Mapping[str, Any], path: str, *, host_network: bool) -> None:
    names: set[str] = set()
    for i, item in enumerate(_list(errs, container.get("ports"), f"{path}.ports")):
        port_path = f"{path}.ports[{i}]"
        port = _map(errs, item, port_path)
        name = _str(errs, port.get("name"), f"{port_path}.name")
        if name:
            if problem := iana_svc_name_error(name):
                errs.invalid(f"{port_path}.name", name, problem)
            elif name in names:
                errs.duplicate(f"{port_path}.name", name)
            names.add(name)
        if port.get("containerPort") is None:
            errs.required(f"{port_path}.containerPort")
        _int_between(errs, port.get("containerPort"), f"{port_path}.containerPort", 1, 65535)
        _int_between(errs, port.get("hostPort"), f"{port_path}.hostPort", 0, 65535)
        protocol = port.get("protocol")
        if protocol is not None and protocol not in PROTOCOLS:
            errs.unsupported(f"{port_path}.protocol", protocol, PROTOCOLS)
        host_ip = _str(errs, port.get("hostIP"), f"{port_path}.hostIP")
        if host_ip:
            try:
                ipaddress.ip_address(host_ip)
            except ValueError:
                errs.invalid(f"{port_path}.hostIP", host_ip, "must be a valid IP address")
        host_port = port.get("hostPort")
        if host_network and _is_int(host_port) and host_port and host_port != port.get("containerPort"):
            errs.invalid(f"{port_path}.hostPort", host_port, "must match `containerPort` when `hostNetwork` is true")


def _validate_container(
    errs: _Errors,
    container: Mapping[str, Any],
    path: str,
    *,
    volumes: set[str],
    init: bool,
    host_network: bool,
) -> None:
    image = _str(errs, container.get("image"), f"{path}.image")
    if not image:
        errs.required(f"{path}.image")
    elif image != image.strip():
        errs.invalid(f"{path}.image", image, "must not have leading or trailing whitespace")
    policy = container.get("imagePullPolicy")
    if policy is not None and policy not in PULL_POLICIES:
        errs.unsupported(f"{path}.imagePullPolicy", policy, PULL_POLICIES)
    for key in ("command", "args"):
        for i, arg in enumerate(_list(errs, container.get(key), f"{path}.{key}")):
            _str(errs, arg, f"{path}.{key}[{i}]")
    _str(errs, container.get("workingDir"), f"{path}.workingDir")
    _validate_ports(errs, container, path, host_network=host_network)
    _validate_env(errs, container, path)
    for i, item in enumerate(_list(errs, container.get("envFrom"), f"{path}.envFrom")):
        _map(errs, item, f"{path}.envFrom[{i}]")
    mount_paths: set[str] = set()
    for i, item in enumerate(_list(errs, container.get("volumeMounts"), f"{path}.volumeMounts")):
        mount = _map(errs, item, f"{path}.volumeMounts[{i}]")
        name = _str(errs, mount.get("name"), f"{path}.volumeMounts[{i}].name")
        if not name:
            errs.required(f"{path}.volumeMounts[{i}].name")
        elif name not in volumes:
            errs.items.append(f"{path}.volumeMounts[{i}].name: Not found: {_q(name)}")
        mount_path = _str(errs, mount.get("mountPath"), f"{path}.volumeMounts[{i}].mountPath")
        if not mount_path:
            errs.required(f"{path}.volumeMounts[{i}].mountPath")
        elif mount_path in mount_paths:
            errs.invalid(f"{path}.volumeMounts[{i}].mountPath", mount_path, "must be unique")
        else:
            mount_paths.add(mount_path)
    _validate_resources(errs, container.get("resources"), f"{path}.resources")

    restart_policy = container.get("restartPolicy")
    sidecar = init and restart_policy == "Always"
    if restart_policy is not None:
        if not init:
            errs.forbidden(f"{path}.restartPolicy", "may not be set for non-init containers")
        elif restart_policy != "Always":
            errs.unsupported(f"{path}.restartPolicy", restart_policy, ("Always",))
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        if container.get(kind) is None:
            continue
        if init and not sidecar:
            errs.forbidden(f"{path}.{kind}", "may not be set for init containers")
            continue
        _validate_probe(
            errs, container.get(kind), f"{path}.{kind}", success_must_be_one=kind in ("livenessProbe", "startupProbe")
        )
    lifecycle = _map(errs, container.get("lifecycle"), f"{path}.lifecycle")
    if lifecycle and init and not sidecar:
        errs.forbidden(f"{path}.lifecycle", "may not be set for init containers")
    for hook in ("postStart", "preStop"):
        if lifecycle.get(hook) is not None:
            handler = _map(errs, lifecycle[hook], f"{path}.lifecycle.{hook}")
            _validate_handler(errs, handler, f"{path}.lifecycle.{hook}", LIFECYCLE_HANDLERS)
    _map(errs, container.get("securityContext"), f"{path}.securityContext")


# --- volumes ------------------------------------------------------------------------------------------------------


def _validate_volumes(errs: _Errors, spec: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for i, item in enumerate(_list(errs, spec.get("volumes"), "spec.volumes")):
        path = f"spec.volumes[{i}]"
        volume = _map(errs, item, path)
        name = _str(errs, volume.get("name"), f"{path}.name")
        if not name:
            errs.required(f"{path}.name")
        elif problem := dns1123_label_error(name):
            errs.invalid(f"{path}.name", name, problem)
        elif name in names:
            errs.duplicate(f"{path}.name", name)
        if name:
            names.add(name)
        sources = [k for k in volume if k != "name" and volume[k] is not None]
        if not sources:
            errs.required(path, "must specify a volume type")
        elif len(sources) > 1:
            errs.forbidden(f"{path}.{sources[1]}", "may not specify more than 1 volume type")
        elif sources[0] not in _VOLUME_SOURCES:
            errs.forbidden(f"{path}.{sources[0]}", "unknown volume type")
        elif sources[0] == "hostPath":
            host_path = _map(errs, volume["hostPath"], f"{path}.hostPath")
            if not _str(errs, host_path.get("path"), f"{path}.hostPath.path"):
                errs.required(f"{path}.hostPath.path")
        else:
            _map(errs, volume[sources[0]], f"{path}.{sources[0]}")
    return names


# --- the pod ------------------------------------------------------------------------------------------------------


def validate_pod(pod: Mapping[str, Any]) -> list[str]:
    """Upstream-style field errors for `pod` (empty when it is valid). Never raises."""
    errs = _Errors()
    _validate_metadata(errs, _map(errs, pod.get("metadata"), "metadata"))
    spec = _map(errs, pod.get("spec"), "spec")
    if not spec:
        errs.required("spec")
        return errs.items
    volumes = _validate_volumes(errs, spec)
    host_network = spec.get("hostNetwork") is True
    for key in ("hostNetwork", "hostPID", "hostIPC", "enableServiceLinks", "automountServiceAccountToken"):
        if spec.get(key) is not None and not isinstance(spec.get(key), bool):
            errs.type_error(f"spec.{key}", spec.get(key), "a boolean")
    containers = _list(errs, spec.get("containers"), "spec.containers")
    if not containers:
        errs.required("spec.containers")
    if spec.get("ephemeralContainers"):
        # Only the ephemeralcontainers subresource of an API pod adds them (upstream's ValidatePodCreate).
        errs.forbidden("spec.ephemeralContainers", "cannot be set on create")
    names: set[str] = set()
    for key, init in (("initContainers", True), ("containers", False)):
        for i, item in enumerate(_list(errs, spec.get(key), f"spec.{key}")):
            path = f"spec.{key}[{i}]"
            container = _map(errs, item, path)
            name = _str(errs, container.get("name"), f"{path}.name")
            if not name:
                errs.required(f"{path}.name")
            elif problem := dns1123_label_error(name):
                errs.invalid(f"{path}.name", name, problem)
            elif name in names:
                errs.duplicate(f"{path}.name", name)
            if name:
                names.add(name)
            _validate_container(errs, container, path, volumes=volumes, init=init, host_network=host_network)
    restart = spec.get("restartPolicy")
    if restart is not None and restart not in RESTART_POLICIES:
        errs.unsupported("spec.restartPolicy", restart, RESTART_POLICIES)
    dns = spec.get("dnsPolicy")
    if dns is not None and dns not in DNS_POLICIES:
        errs.unsupported("spec.dnsPolicy", dns, DNS_POLICIES)
    if dns == "None" and not _map(errs, spec.get("dnsConfig"), "spec.dnsConfig").get("nameservers"):
        errs.required("spec.dnsConfig", "must provide `dnsConfig` when `dnsPolicy` is None")
    _int_between(errs, spec.get("terminationGracePeriodSeconds"), "spec.terminationGracePeriodSeconds", 0)
    _int_between(errs, spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds", 1)
    _string_map(errs, spec.get("nodeSelector"), "spec.nodeSelector", labels=True)
    for i, item in enumerate(_list(errs, spec.get("tolerations"), "spec.tolerations")):
        _map(errs, item, f"spec.tolerations[{i}]")
    for i, item in enumerate(_list(errs, spec.get("imagePullSecrets"), "spec.imagePullSecrets")):
        _map(errs, item, f"spec.imagePullSecrets[{i}]")
    _map(errs, spec.get("securityContext"), "spec.securityContext")
    _str(errs, spec.get("serviceAccountName"), "spec.serviceAccountName")
    _str(errs, spec.get("hostname"), "spec.hostname")
    return errs.items


# --- references to API objects ------------------------------------------------------------------------------------


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            out.extend(c for c in items if isinstance(c, Mapping))
    return out


def _sub(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _references_secrets(spec: Mapping[str, Any]) -> bool:
    if spec.get("imagePullSecrets"):
        return True
    for container in _containers(spec):
        if any(_sub(item, "secretRef") for item in _items(container.get("envFrom"))):
            return True
        if any(_sub(_sub(item, "valueFrom"), "secretKeyRef") for item in _items(container.get("env"))):
            return True
    for volume in _items(spec.get("volumes")):
        if not isinstance(volume, Mapping):
            continue
        if volume.get("secret") is not None or _sub(volume.get("azureFile"), "secretName"):
            return True
        if any(_sub(volume.get(kind), ref) for kind, ref in _SECRET_REF_VOLUMES.items()):
            return True
        for source in _items(_sub(volume.get("projected"), "sources")):
            if _sub(source, "secret") is not None:
                return True
    return False


def _references_configmaps(spec: Mapping[str, Any]) -> bool:
    for container in _containers(spec):
        if any(_sub(item, "configMapRef") for item in _items(container.get("envFrom"))):
            return True
        if any(_sub(_sub(item, "valueFrom"), "configMapKeyRef") for item in _items(container.get("env"))):
            return True
    for volume in _items(spec.get("volumes")):
        if not isinstance(volume, Mapping):
            continue
        if volume.get("configMap") is not None:
            return True
        for source in _items(_sub(volume.get("projected"), "sources")):
            if _sub(source, "configMap") is not None:
                return True
    return False


def api_object_reference(pod: Mapping[str, Any]) -> str | None:
    """The kind of API object the pod references, in upstream's words, or None (upstream: HasAPIObjectReference)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    if spec.get("serviceAccountName") or spec.get("serviceAccount"):
        return "serviceaccounts"
    if _references_secrets(spec):
        return "secrets"
    if _references_configmaps(spec):
        return "configmaps"
    if spec.get("resourceClaims"):
        return "resourceclaims"
    for volume in _items(spec.get("volumes")):
        if not isinstance(volume, Mapping):
            continue
        for kind, what in _REFERENCING_VOLUME_SOURCES.items():
            if volume.get(kind) is not None:
                return what
        for source in _items(_sub(volume.get("projected"), "sources")):
            for kind, what in _PROJECTED_SOURCES.items():
                if _sub(source, kind) is not None:
                    return what
    return None
