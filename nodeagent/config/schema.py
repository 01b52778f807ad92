"""Between the v1beta1 document (camelCase YAML/JSON) and the typed `KubeletConfiguration`: decode, default, encode.

Decoding follows what the upstream kubelet does with its config file:

- Types are strict, as Go's JSON decoding is: a string where an integer belongs, a float for an int32, a number where
  a duration string belongs are errors.
- Unknown fields are warnings, not errors. The kubelet decodes strictly first and, when that fails only on unknown
  or duplicate fields, logs the strict error and carries on leniently; the agent does the same.
- Defaulting follows v1beta1: a field that is absent or null takes its default. So does a non-pointer upstream field
  set to its zero value (`maxPods: 0`, `syncFrequency: 0s`, `cgroupDriver: ""`), because upstream cannot tell that
  from "unset". Fields that are pointers upstream (`healthzPort`, `registryPullQPS`, `imageGC*ThresholdPercent`,
  `resolvConf`, the booleans, ...) keep an explicit zero.
- Two upstream special cases: nodeStatusReportFrequency follows an explicitly set nodeStatusUpdateFrequency, and a
  negative podPidsLimit means -1.

Semantic checks (ranges, enumerations of signals, cross-field rules) live in `validation`, on the decoded value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from nodeagent.config.durations import format_go_duration, parse_go_duration
from nodeagent.config.errors import ConfigError, DurationError
from nodeagent.config.kubelet_config import (
    API_VERSION,
    DEFAULT_EVICTION_HARD,
    KIND,
    AnonymousAuthentication,
    AuthorizationMode,
    CgroupDriver,
    HairpinMode,
    KubeletAuthentication,
    KubeletAuthorization,
    KubeletConfiguration,
    PLEGMode,
    ShutdownGracePeriodByPodPriority,
    Taint,
    TaintEffect,
    WebhookAuthentication,
    WebhookAuthorization,
    X509Authentication,
)
from nodeagent.config.upstreamonly import UPSTREAM_ONLY_FIELDS, refusal, warning

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)

# Fields of this project that upstream does not have; documented in `kubelet_config`.
PROJECT_EXTENSION_FIELDS: frozenset[str] = frozenset({"pleg", "plegRelistThreshold", "emulatedKubernetesVersion"})


def show(raw: object) -> str:
    """A raw document value as a message quotes it: strings in double quotes, YAML spellings for the rest."""
    if isinstance(raw, str):
        return json.dumps(raw, ensure_ascii=False)
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw is None:
        return "null"
    if isinstance(raw, int | float):
        return repr(raw)
    if isinstance(raw, Mapping):
        return "a mapping"
    if isinstance(raw, list):
        return "a list"
    return f"a {type(raw).__name__}"


def join_path(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


class _Invalid(Exception):
    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


class _Codec(Generic[T]):
    """How one field's value is read from and written to the document."""

    def decode(self, raw: object, path: str, warnings: list[str]) -> T:
        raise NotImplementedError

    def encode(self, value: T) -> object:
        raise NotImplementedError

    def is_zero(self, raw: object) -> bool:
        """Whether a raw value is the Go zero value of the upstream field (which upstream cannot tell from unset)."""
        return False


class _Str(_Codec[str]):
    def decode(self, raw: object, path: str, warnings: list[str]) -> str:
        if not isinstance(raw, str):
            raise _Invalid([f"{path}: must be a string, got {show(raw)}"])
        return raw

    def encode(self, value: str) -> object:
        return value

    def is_zero(self, raw: object) -> bool:
        return raw == ""


class _Bool(_Codec[bool]):
    def decode(self, raw: object, path: str, warnings: list[str]) -> bool:
        if not isinstance(raw, bool):
            raise _Invalid([f"{path}: must be a boolean (true or false), got {show(raw)}"])
        return raw

    def encode(self, value: bool) -> object:
        return value


class _Int(_Codec[int]):
    def __init__(self, bits: int) -> None:
        self.bits = bits

    def decode(self, raw: object, path: str, warnings: list[str]) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise _Invalid([f"{path}: must be an integer, got {show(raw)}"])
        limit = 1 << (self.bits - 1)
        if not -limit <= raw < limit:
            raise _Invalid([f"{path}: must fit in a {self.bits}-bit integer, got {raw}"])
        return raw

    def encode(self, value: int) -> object:
        return value

    def is_zero(self, raw: object) -> bool:
        return isinstance(raw, int) and not isinstance(raw, bool) and raw == 0


class _Duration(_Codec[timedelta]):
    def decode(self, raw: object, path: str, warnings: list[str]) -> timedelta:
        if not isinstance(raw, str):
            raise _Invalid([f'{path}: must be a duration string such as "1m30s", got {show(raw)}'])
        try:
            return parse_go_duration(raw)
        except DurationError as e:
            raise _Invalid([f"{path}: {e}"]) from e

    def encode(self, value: timedelta) -> object:
        return format_go_duration(value)

    def is_zero(self, raw: object) -> bool:
        if not isinstance(raw, str):
            return False
        try:
            return parse_go_duration(raw) == timedelta(0)
        except DurationError:
            return False


class _Enum(_Codec[E]):
    def __init__(self, enum: type[E]) -> None:
        self.enum = enum

    def decode(self, raw: object, path: str, warnings: list[str]) -> E:
        allowed = [member.value for member in self.enum]
        if not isinstance(raw, str) or raw not in allowed:
            raise _Invalid([f"{path}: must be one of {', '.join(allowed)}, got {show(raw)}"])
        return self.enum(raw)

    def encode(self, value: E) -> object:
        return value.value

    def is_zero(self, raw: object) -> bool:
        return raw == ""


class _List(_Codec[tuple[T, ...]]):
    def __init__(self, item: _Codec[T]) -> None:
        self.item = item

    def decode(self, raw: object, path: str, warnings: list[str]) -> tuple[T, ...]:
        if not isinstance(raw, list):
            raise _Invalid([f"{path}: must be a list, got {show(raw)}"])
        items: list[T] = []
        problems: list[str] = []
        for i, element in enumerate(raw):
            try:
                items.append(self.item.decode(element, f"{path}[{i}]", warnings))
            except _Invalid as e:
                problems.extend(e.problems)
        if problems:
            raise _Invalid(problems)
        return tuple(items)

    def encode(self, value: tuple[T, ...]) -> object:
        return [self.item.encode(v) for v in value]


class _Map(_Codec[Mapping[str, T]]):
    def __init__(self, value: _Codec[T]) -> None:
        self.value = value

    def decode(self, raw: object, path: str, warnings: list[str]) -> Mapping[str, T]:
        if not isinstance(raw, Mapping):
            raise _Invalid([f"{path}: must be a mapping, got {show(raw)}"])
        result: dict[str, T] = {}
        problems: list[str] = []
        for key, element in raw.items():
            if not isinstance(key, str):
                problems.append(f"{path}: keys must be strings, got {show(key)}")
                continue
            try:
                result[key] = self.value.decode(element, f"{path}[{key}]", warnings)
            except _Invalid as e:
                problems.extend(e.problems)
        if problems:
            raise _Invalid(problems)
        return result

    def encode(self, value: Mapping[str, T]) -> object:
        return {k: self.value.encode(v) for k, v in value.items()}


@dataclass(frozen=True)
class _Field:
    json: str
    attr: str
    codec: _Codec[Any]
    zero_is_unset: bool = False  # a non-pointer field upstream: its zero value means "use the default"
    required: bool = False


class _Struct(_Codec[T]):
    def __init__(
        self,
        cls: type[T],
        members: Iterable[_Field],
        *,
        ignored: Iterable[str] = (),
        unsupported: frozenset[str] = frozenset(),
        forbidden: Mapping[str, str] | None = None,
    ) -> None:
        self.cls = cls
        self.members = tuple(members)
        self.ignored = frozenset(ignored)  # handled elsewhere (apiVersion, kind)
        self.unsupported = unsupported
        self.forbidden = dict(forbidden or {})

    def decode(self, raw: object, path: str, warnings: list[str]) -> T:
        if not isinstance(raw, Mapping):
            raise _Invalid([f"{path or 'document'}: must be a mapping, got {show(raw)}"])
        problems: list[str] = []
        known = {m.json for m in self.members} | self.ignored
        for key in raw:
            name = key if isinstance(key, str) else show(key)
            if name in known:
                continue
            if name in self.forbidden:
                if raw[key] is not None:
                    problems.append(f"{join_path(path, name)}: {self.forbidden[name]}")
            elif name in self.unsupported:
                # Each upstream-only field is honoured, refused or (where upstream ignores it too) warned about.
                if (refused := refusal(name, raw[key])) is not None:
                    problems.append(f"{join_path(path, name)}: {show(raw[key])}: {refused}")
                elif (ignored := warning(name)) is not None:
                    warnings.append(f'field "{join_path(path, name)}" is {ignored}')
            else:
                warnings.append(f'unknown field "{join_path(path, name)}"')
        values: dict[str, object] = {}
        for member in self.members:
            value = raw.get(member.json)
            member_path = join_path(path, member.json)
            if value is None:  # absent or null: Go leaves the zero value, defaulting fills it
                if member.required:
                    problems.append(f"{member_path}: required")
                continue
            if member.zero_is_unset and member.codec.is_zero(value):
                continue
            try:
                values[member.attr] = member.codec.decode(value, member_path, warnings)
            except _Invalid as e:
                problems.extend(e.problems)
        if problems:
            raise _Invalid(problems)
        return self.cls(**values)

    def encode(self, value: T) -> object:
        return {m.json: m.codec.encode(getattr(value, m.attr)) for m in self.members}

    def check_covers_dataclass(self) -> None:
        """Every dataclass field is in the table and vice versa (a test calls this for each struct)."""
        declared = {f.name for f in fields(self.cls)}  # type: ignore[arg-type]
        mapped = {m.attr for m in self.members}
        if declared != mapped:
            raise AssertionError(f"{self.cls.__name__}: unmapped {declared - mapped}, unknown {mapped - declared}")


_STR = _Str()
_BOOL = _Bool()
_INT32 = _Int(32)
_INT64 = _Int(64)
_DURATION = _Duration()
_STR_LIST = _List(_STR)
_STR_MAP = _Map(_STR)

_X509_AUTHENTICATION = _Struct(X509Authentication, [_Field("clientCAFile", "client_ca_file", _STR)])
_WEBHOOK_AUTHENTICATION = _Struct(
    WebhookAuthentication,
    [
        _Field("enabled", "enabled", _BOOL),
        _Field("cacheTTL", "cache_ttl", _DURATION, zero_is_unset=True),
    ],
)
_ANONYMOUS_AUTHENTICATION = _Struct(AnonymousAuthentication, [_Field("enabled", "enabled", _BOOL)])
_AUTHENTICATION = _Struct(
    KubeletAuthentication,
    [
        _Field("x509", "x509", _X509_AUTHENTICATION),
        _Field("webhook", "webhook", _WEBHOOK_AUTHENTICATION),
        _Field("anonymous", "anonymous", _ANONYMOUS_AUTHENTICATION),
    ],
)
_WEBHOOK_AUTHORIZATION = _Struct(
    WebhookAuthorization,
    [
        _Field("cacheAuthorizedTTL", "cache_authorized_ttl", _DURATION, zero_is_unset=True),
        _Field("cacheUnauthorizedTTL", "cache_unauthorized_ttl", _DURATION, zero_is_unset=True),
    ],
)
_AUTHORIZATION = _Struct(
    KubeletAuthorization,
    [
        _Field("mode", "mode", _Enum(AuthorizationMode), zero_is_unset=True),
        _Field("webhook", "webhook", _WEBHOOK_AUTHORIZATION),
    ],
)
_TAINT = _Struct(
    Taint,
    [
        _Field("key", "key", _STR, required=True),
        _Field("value", "value", _STR),
        _Field("effect", "effect", _Enum(TaintEffect), required=True),
    ],
    forbidden={"timeAdded": "must not be set; the apiserver sets it on NoExecute taints"},
)
_SHUTDOWN_PRIORITY = _Struct(
    ShutdownGracePeriodByPodPriority,
    [
        _Field("priority", "priority", _INT32),
        _Field("shutdownGracePeriodSeconds", "shutdown_grace_period_seconds", _INT64),
    ],
)

_KUBELET_CONFIGURATION = _Struct(
    KubeletConfiguration,
    [
        _Field("containerRuntimeEndpoint", "container_runtime_endpoint", _STR, zero_is_unset=True),
        _Field("imageServiceEndpoint", "image_service_endpoint", _STR),
        _Field("runtimeRequestTimeout", "runtime_request_timeout", _DURATION, zero_is_unset=True),
        _Field("allowedUnsafeSysctls", "allowed_unsafe_sysctls", _STR_LIST),
        _Field("staticPodPath", "static_pod_path", _STR),
        _Field("staticPodURL", "static_pod_url", _STR),
        _Field("staticPodURLHeader", "static_pod_url_header", _Map(_STR_LIST)),
        _Field("fileCheckFrequency", "file_check_frequency", _DURATION, zero_is_unset=True),
        _Field("httpCheckFrequency", "http_check_frequency", _DURATION, zero_is_unset=True),
        _Field("syncFrequency", "sync_frequency", _DURATION, zero_is_unset=True),
        _Field("address", "address", _STR, zero_is_unset=True),
        _Field("port", "port", _INT32, zero_is_unset=True),
        _Field("readOnlyPort", "read_only_port", _INT32),
        _Field("healthzPort", "healthz_port", _INT32),
        _Field("healthzBindAddress", "healthz_bind_address", _STR, zero_is_unset=True),
        _Field("authentication", "authentication", _AUTHENTICATION),
        _Field("authorization", "authorization", _AUTHORIZATION),
        _Field("streamingConnectionIdleTimeout", "streaming_connection_idle_timeout", _DURATION, zero_is_unset=True),
        _Field("tlsCertFile", "tls_cert_file", _STR),
        _Field("tlsPrivateKeyFile", "tls_private_key_file", _STR),
        _Field("serverTLSBootstrap", "server_tls_bootstrap", _BOOL),
        _Field("rotateCertificates", "rotate_certificates", _BOOL),
        _Field("enableServer", "enable_server", _BOOL),
        _Field("enableDebuggingHandlers", "enable_debugging_handlers", _BOOL),
        _Field("enableSystemLogHandler", "enable_system_log_handler", _BOOL),
        _Field("clusterDomain", "cluster_domain", _STR),
        _Field("clusterDNS", "cluster_dns", _STR_LIST),
        _Field("resolvConf", "resolv_conf", _STR),
        _Field("hairpinMode", "hairpin_mode", _Enum(HairpinMode), zero_is_unset=True),
        _Field("podCIDR", "pod_cidr", _STR),
        _Field("cgroupDriver", "cgroup_driver", _Enum(CgroupDriver), zero_is_unset=True),
        _Field("cgroupRoot", "cgroup_root", _STR, zero_is_unset=True),
        _Field("cgroupsPerQOS", "cgroups_per_qos", _BOOL),
        _Field("maxPods", "max_pods", _INT32, zero_is_unset=True),
        _Field("podPidsLimit", "pod_pids_limit", _INT64),
        _Field("systemReserved", "system_reserved", _STR_MAP),
        _Field("kubeReserved", "kube_reserved", _STR_MAP),
        _Field("enforceNodeAllocatable", "enforce_node_allocatable", _STR_LIST),
        _Field("failSwapOn", "fail_swap_on", _BOOL),
        _Field("nodeStatusUpdateFrequency", "node_status_update_frequency", _DURATION, zero_is_unset=True),
        _Field("nodeStatusReportFrequency", "node_status_report_frequency", _DURATION, zero_is_unset=True),
        _Field("nodeLeaseDurationSeconds", "node_lease_duration_seconds", _INT32, zero_is_unset=True),
        _Field("registerNode", "register_node", _BOOL),
        _Field("registerWithTaints", "register_with_taints", _List(_TAINT)),
        _Field("providerID", "provider_id", _STR),
        _Field("shutdownGracePeriod", "shutdown_grace_period", _DURATION),
        _Field("shutdownGracePeriodCriticalPods", "shutdown_grace_period_critical_pods", _DURATION),
        _Field("shutdownGracePeriodByPodPriority", "shutdown_grace_period_by_pod_priority", _List(_SHUTDOWN_PRIORITY)),
        _Field("serializeImagePulls", "serialize_image_pulls", _BOOL),
        _Field("registryPullQPS", "registry_pull_qps", _INT32),
        _Field("registryBurst", "registry_burst", _INT32, zero_is_unset=True),
        _Field("imageGCHighThresholdPercent", "image_gc_high_threshold_percent", _INT32),
        _Field("imageGCLowThresholdPercent", "image_gc_low_threshold_percent", _INT32),
        _Field("imageMinimumGCAge", "image_minimum_gc_age", _DURATION, zero_is_unset=True),
        _Field("imageMaximumGCAge", "image_maximum_gc_age", _DURATION),
        _Field("evictionHard", "eviction_hard", _STR_MAP),
        _Field("evictionSoft", "eviction_soft", _STR_MAP),
        _Field("evictionSoftGracePeriod", "eviction_soft_grace_period", _STR_MAP),
        _Field(
            "evictionPressureTransitionPeriod", "eviction_pressure_transition_period", _DURATION, zero_is_unset=True
        ),
        _Field("evictionMaxPodGracePeriod", "eviction_max_pod_grace_period", _INT32),
        _Field("evictionMinimumReclaim", "eviction_minimum_reclaim", _STR_MAP),
        _Field("mergeDefaultEvictionSettings", "merge_default_eviction_settings", _BOOL),
        _Field("kernelMemcgNotification", "kernel_memcg_notification", _BOOL),
        _Field("containerLogMaxSize", "container_log_max_size", _STR, zero_is_unset=True),
        _Field("containerLogMaxFiles", "container_log_max_files", _INT32),
        _Field("containerLogMaxWorkers", "container_log_max_workers", _INT32),
        _Field("containerLogMonitorInterval", "container_log_monitor_interval", _DURATION),
        _Field("podLogsDir", "pod_logs_dir", _STR, zero_is_unset=True),
        _Field("failCgroupV1", "fail_cgroup_v1", _BOOL),
        _Field("maxOpenFiles", "max_open_files", _INT64, zero_is_unset=True),
        _Field("oomScoreAdj", "oom_score_adj", _INT32),
        _Field("podsPerCore", "pods_per_core", _INT32),
        _Field("volumePluginDir", "volume_plugin_dir", _STR, zero_is_unset=True),
        _Field("featureGates", "feature_gates", _Map(_BOOL)),
        _Field("pleg", "pleg", _Enum(PLEGMode), zero_is_unset=True),
        _Field("plegRelistThreshold", "pleg_relist_threshold", _DURATION, zero_is_unset=True),
        _Field("emulatedKubernetesVersion", "emulated_kubernetes_version", _STR, zero_is_unset=True),
    ],
    ignored=("apiVersion", "kind"),
    unsupported=UPSTREAM_ONLY_FIELDS,
)

# For tests: every table next to the dataclass it maps.
STRUCTS: tuple[_Struct[Any], ...] = (
    _X509_AUTHENTICATION,
    _WEBHOOK_AUTHENTICATION,
    _ANONYMOUS_AUTHENTICATION,
    _AUTHENTICATION,
    _WEBHOOK_AUTHORIZATION,
    _AUTHORIZATION,
    _TAINT,
    _KUBELET_CONFIGURATION,
)


def _check_type_meta(doc: Mapping[str, object], source: str) -> None:
    expected = f'apiVersion "{API_VERSION}" and kind "{KIND}"'
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version is None or kind is None:
        missing = " and ".join(name for name, v in (("apiVersion", api_version), ("kind", kind)) if v is None)
        raise ConfigError(f"{source}: {missing} missing; a kubelet config file needs {expected}")
    if api_version != API_VERSION:
        raise ConfigError(f'{source}: apiVersion: must be "{API_VERSION}", got {show(api_version)}')
    if kind != KIND:
        raise ConfigError(f'{source}: kind: must be "{KIND}", got {show(kind)}')


def _duration_unset(raw: object) -> bool:
    return raw is None or _DURATION.is_zero(raw)


def decode_document(doc: Mapping[str, object], *, source: str = "config") -> tuple[KubeletConfiguration, list[str]]:
    """Decode and default a KubeletConfiguration document. Returns the config and the warnings (unknown fields).

    Raises `ConfigError` listing every field whose type or syntax is wrong. Semantic validation is separate
    (`validation.validate`).
    """
    _check_type_meta(doc, source)
    warnings: list[str] = []
    try:
        config = _KUBELET_CONFIGURATION.decode(doc, "", warnings)
    except _Invalid as e:
        raise ConfigError(f"{source}: invalid KubeletConfiguration", e.problems) from None
    # As upstream: an explicitly set update frequency is also the report frequency unless that is set too.
    if _duration_unset(doc.get("nodeStatusReportFrequency")) and not _duration_unset(
        doc.get("nodeStatusUpdateFrequency")
    ):
        config = replace(config, node_status_report_frequency=config.node_status_update_frequency)
    # As upstream's mergeDefaultEvictionSettings: the hard thresholds the document leaves out keep their defaults
    # (only evictionHard has defaults; without it a set evictionHard replaces them all).
    if config.merge_default_eviction_settings:
        config = replace(config, eviction_hard={**DEFAULT_EVICTION_HARD, **config.eviction_hard})
    # As upstream: any negative pod PID limit means "no limit", spelled -1.
    if config.pod_pids_limit < 0:
        config = replace(config, pod_pids_limit=-1)
    return config, warnings


def encode_document(config: KubeletConfiguration) -> dict[str, object]:
    """The v1beta1 document for a config, every field spelled out (defaults included), durations in Go syntax.

    Decoding the result gives back an equal config.
    """
    doc: dict[str, object] = {"apiVersion": API_VERSION, "kind": KIND}
    body = _KUBELET_CONFIGURATION.encode(config)
    assert isinstance(body, dict)
    doc.update(body)
    return doc
