"""KubeletConfiguration: upstream defaults, every field round-trips, unknown fields warn, bad values fail clearly."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml

from nodeagent.config import (
    AuthorizationMode,
    CgroupDriver,
    ConfigError,
    HairpinMode,
    KubeletConfiguration,
    LoadedConfig,
    PLEGMode,
    ShutdownGracePeriodByPodPriority,
    Taint,
    TaintEffect,
    decode_document,
    defaults,
    encode_document,
    parse_config,
    schema,
)

HEADER = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}


def _load(fields: dict[str, Any]) -> LoadedConfig:
    return parse_config(yaml.safe_dump({**HEADER, **fields}), source="test")


def _get(config: object, attr_path: str) -> object:
    return functools.reduce(getattr, attr_path.split("."), config)


def _nest(json_path: str, value: object) -> dict[str, Any]:
    """`{"a.b.c": v}` as the document `{"a": {"b": {"c": v}}}`."""
    head, _, rest = json_path.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _leaf_attr_paths(instance: object, prefix: str = "") -> Iterator[str]:
    for f in dataclasses.fields(instance):  # type: ignore[arg-type]
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaf_attr_paths(value, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


# Upstream's defaults (pkg/kubelet/apis/config/v1beta1/defaults.go, defaults_unix.go), by field.
UPSTREAM_DEFAULTS: dict[str, object] = {
    "container_runtime_endpoint": "unix:///run/containerd/containerd.sock",
    "image_service_endpoint": "",
    "runtime_request_timeout": timedelta(minutes=2),
    "allowed_unsafe_sysctls": (),
    "static_pod_path": "",
    "static_pod_url": "",
    "static_pod_url_header": {},
    "file_check_frequency": timedelta(seconds=20),
    "http_check_frequency": timedelta(seconds=20),
    "sync_frequency": timedelta(minutes=1),
    "address": "0.0.0.0",
    "port": 10250,
    "read_only_port": 0,
    "healthz_port": 10248,
    "healthz_bind_address": "127.0.0.1",
    "authentication.x509.client_ca_file": "",
    "authentication.webhook.enabled": True,
    "authentication.webhook.cache_ttl": timedelta(minutes=2),
    "authentication.anonymous.enabled": False,
    "authorization.mode": "Webhook",
    "authorization.webhook.cache_authorized_ttl": timedelta(minutes=5),
    "authorization.webhook.cache_unauthorized_ttl": timedelta(seconds=30),
    "streaming_connection_idle_timeout": timedelta(hours=4),
    "cluster_domain": "",
    "cluster_dns": (),
    "resolv_conf": "/etc/resolv.conf",
    "hairpin_mode": "promiscuous-bridge",
    "pod_cidr": "",
    "cgroup_driver": "cgroupfs",
    "cgroup_root": "/",  # upstream: "" in the file, "/" in effect with cgroupsPerQOS
    "cgroups_per_qos": True,
    "max_pods": 110,
    "pod_pids_limit": -1,
    "system_reserved": {},
    "kube_reserved": {},
    "enforce_node_allocatable": ("pods",),
    "fail_swap_on": True,
    "node_status_update_frequency": timedelta(seconds=10),
    "node_status_report_frequency": timedelta(minutes=5),
    "node_lease_duration_seconds": 40,
    "register_node": True,
    "register_with_taints": (),
    "provider_id": "",
    "shutdown_grace_period": timedelta(0),
    "shutdown_grace_period_critical_pods": timedelta(0),
    "shutdown_grace_period_by_pod_priority": (),
    "serialize_image_pulls": True,
    "registry_pull_qps": 5,
    "registry_burst": 10,
    "image_gc_high_threshold_percent": 85,
    "image_gc_low_threshold_percent": 80,
    "image_minimum_gc_age": timedelta(minutes=2),
    "image_maximum_gc_age": timedelta(0),
    "eviction_hard": {
        "memory.available": "100Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
        "imagefs.inodesFree": "5%",
    },
    "eviction_soft": {},
    "eviction_soft_grace_period": {},
    "eviction_pressure_transition_period": timedelta(minutes=5),
    "eviction_max_pod_grace_period": 0,
    "eviction_minimum_reclaim": {},
    "merge_default_eviction_settings": False,
    "pod_logs_dir": "/var/log/pods",
    "fail_cgroup_v1": False,
    "max_open_files": 1_000_000,
    "oom_score_adj": -999,
    "pods_per_core": 0,
    "kernel_memcg_notification": False,
    "container_log_max_size": "10Mi",
    "container_log_max_files": 5,
    "container_log_max_workers": 1,
    "container_log_monitor_interval": timedelta(seconds=10),
    "tls_cert_file": "",
    "tls_private_key_file": "",
    "server_tls_bootstrap": False,
    "rotate_certificates": False,
    "enable_server": True,
    "enable_debugging_handlers": True,
    "enable_system_log_handler": True,
    "volume_plugin_dir": "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
    "feature_gates": {},
    "pleg": "auto",  # project extension
    "pleg_relist_threshold": timedelta(minutes=3),  # project extension
    "emulated_kubernetes_version": "v1.34.4",  # project extension: the testbed's release
}


def test_defaults_table_covers_every_field() -> None:
    assert set(UPSTREAM_DEFAULTS) == set(_leaf_attr_paths(defaults()))


@pytest.mark.parametrize(("attr_path", "expected"), UPSTREAM_DEFAULTS.items(), ids=list(UPSTREAM_DEFAULTS))
def test_defaults_match_upstream(attr_path: str, expected: object) -> None:
    assert _get(defaults(), attr_path) == expected
    assert _get(_load({}).config, attr_path) == expected


def test_an_empty_document_is_the_defaults_without_warnings() -> None:
    loaded = _load({})
    assert loaded.config == defaults()
    assert loaded.warnings == ()


# Every supported field, set to a value other than its default:
# (JSON path, attribute path, value in the file, value in the config).
_EVERY_HARD_SIGNAL = {
    "memory.available": "200Mi",
    "nodefs.available": "5%",
    "nodefs.inodesFree": "4%",
    "imagefs.available": "10%",
    "imagefs.inodesFree": "4%",
}

ROUND_TRIP: list[tuple[str, str, object, object]] = [
    (
        "containerRuntimeEndpoint",
        "container_runtime_endpoint",
        "unix:///run/crio/crio.sock",
        "unix:///run/crio/crio.sock",
    ),
    ("imageServiceEndpoint", "image_service_endpoint", "unix:///run/images.sock", "unix:///run/images.sock"),
    ("runtimeRequestTimeout", "runtime_request_timeout", "90s", timedelta(seconds=90)),
    ("staticPodPath", "static_pod_path", "/etc/kubernetes/manifests", "/etc/kubernetes/manifests"),
    ("staticPodURL", "static_pod_url", "http://example.com/pods", "http://example.com/pods"),
    (
        "staticPodURLHeader",
        "static_pod_url_header",
        {"Authorization": ["Bearer t"], "X-A": ["1", "2"]},
        {"Authorization": ("Bearer t",), "X-A": ("1", "2")},
    ),
    ("fileCheckFrequency", "file_check_frequency", "30s", timedelta(seconds=30)),
    ("httpCheckFrequency", "http_check_frequency", "1m", timedelta(minutes=1)),
    ("syncFrequency", "sync_frequency", "1m30s", timedelta(seconds=90)),
    ("address", "address", "::", "::"),
    ("port", "port", 10260, 10260),
    ("readOnlyPort", "read_only_port", 10255, 10255),
    ("healthzPort", "healthz_port", 0, 0),  # a pointer upstream: an explicit 0 stays (healthz off)
    ("healthzBindAddress", "healthz_bind_address", "0.0.0.0", "0.0.0.0"),
    (
        "authentication.x509.clientCAFile",
        "authentication.x509.client_ca_file",
        "/etc/kubernetes/ca.crt",
        "/etc/kubernetes/ca.crt",
    ),
    ("authentication.webhook.enabled", "authentication.webhook.enabled", False, False),
    ("authentication.webhook.cacheTTL", "authentication.webhook.cache_ttl", "10s", timedelta(seconds=10)),
    ("authentication.anonymous.enabled", "authentication.anonymous.enabled", True, True),
    ("authorization.mode", "authorization.mode", "AlwaysAllow", AuthorizationMode.ALWAYS_ALLOW),
    (
        "authorization.webhook.cacheAuthorizedTTL",
        "authorization.webhook.cache_authorized_ttl",
        "1m",
        timedelta(minutes=1),
    ),
    (
        "authorization.webhook.cacheUnauthorizedTTL",
        "authorization.webhook.cache_unauthorized_ttl",
        "5s",
        timedelta(seconds=5),
    ),
    ("streamingConnectionIdleTimeout", "streaming_connection_idle_timeout", "30m", timedelta(minutes=30)),
    ("clusterDomain", "cluster_domain", "cluster.local", "cluster.local"),
    ("clusterDNS", "cluster_dns", ["10.96.0.10", "fd00::a"], ("10.96.0.10", "fd00::a")),
    ("resolvConf", "resolv_conf", "", ""),  # a pointer upstream: "" stays and means no host resolv.conf
    ("hairpinMode", "hairpin_mode", "hairpin-veth", HairpinMode.HAIRPIN_VETH),
    ("podCIDR", "pod_cidr", "10.244.1.0/24", "10.244.1.0/24"),
    ("cgroupDriver", "cgroup_driver", "systemd", CgroupDriver.SYSTEMD),
    ("cgroupRoot", "cgroup_root", "/kubelet", "/kubelet"),
    ("cgroupsPerQOS", "cgroups_per_qos", False, False),
    ("maxPods", "max_pods", 250, 250),
    ("podPidsLimit", "pod_pids_limit", 4096, 4096),
    ("systemReserved", "system_reserved", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "500m", "memory": "1Gi"}),
    (
        "kubeReserved",
        "kube_reserved",
        {"ephemeral-storage": "1Gi", "pid": "1000"},
        {"ephemeral-storage": "1Gi", "pid": "1000"},
    ),
    ("enforceNodeAllocatable", "enforce_node_allocatable", ["none"], ("none",)),
    ("failSwapOn", "fail_swap_on", False, False),
    ("nodeStatusUpdateFrequency", "node_status_update_frequency", "20s", timedelta(seconds=20)),
    ("nodeStatusReportFrequency", "node_status_report_frequency", "1m", timedelta(minutes=1)),
    ("nodeLeaseDurationSeconds", "node_lease_duration_seconds", 60, 60),
    ("registerNode", "register_node", False, False),
    (
        "registerWithTaints",
        "register_with_taints",
        [{"key": "example.com/dedicated", "value": "infra", "effect": "NoSchedule"}],
        (Taint(key="example.com/dedicated", value="infra", effect=TaintEffect.NO_SCHEDULE),),
    ),
    ("providerID", "provider_id", "aws:///eu-west-1a/i-0123", "aws:///eu-west-1a/i-0123"),
    ("shutdownGracePeriod", "shutdown_grace_period", "30s", timedelta(seconds=30)),
    ("shutdownGracePeriodCriticalPods", "shutdown_grace_period_critical_pods", "10s", timedelta(seconds=10)),
    (
        "shutdownGracePeriodByPodPriority",
        "shutdown_grace_period_by_pod_priority",
        [{"priority": 2000000000, "shutdownGracePeriodSeconds": 10}, {"priority": 0}],
        (
            ShutdownGracePeriodByPodPriority(priority=2000000000, shutdown_grace_period_seconds=10),
            ShutdownGracePeriodByPodPriority(priority=0),
        ),
    ),
    ("serializeImagePulls", "serialize_image_pulls", False, False),
    ("registryPullQPS", "registry_pull_qps", 0, 0),  # a pointer upstream: 0 stays and means no limit
    ("registryBurst", "registry_burst", 20, 20),
    ("imageGCHighThresholdPercent", "image_gc_high_threshold_percent", 90, 90),
    ("imageGCLowThresholdPercent", "image_gc_low_threshold_percent", 70, 70),
    ("imageMinimumGCAge", "image_minimum_gc_age", "30s", timedelta(seconds=30)),
    ("imageMaximumGCAge", "image_maximum_gc_age", "1h", timedelta(hours=1)),
    # every signal set: with mergeDefaultEvictionSettings true (below) no default is merged in
    ("evictionHard", "eviction_hard", _EVERY_HARD_SIGNAL, _EVERY_HARD_SIGNAL),
    ("evictionSoft", "eviction_soft", {"memory.available": "500Mi"}, {"memory.available": "500Mi"}),
    (
        "evictionSoftGracePeriod",
        "eviction_soft_grace_period",
        {"memory.available": "1m30s"},
        {"memory.available": "1m30s"},
    ),
    ("evictionPressureTransitionPeriod", "eviction_pressure_transition_period", "30s", timedelta(seconds=30)),
    ("evictionMaxPodGracePeriod", "eviction_max_pod_grace_period", 60, 60),
    ("mergeDefaultEvictionSettings", "merge_default_eviction_settings", True, True),
    ("podLogsDir", "pod_logs_dir", "/srv/pod-logs", "/srv/pod-logs"),
    ("failCgroupV1", "fail_cgroup_v1", True, True),
    ("maxOpenFiles", "max_open_files", 4096, 4096),
    ("oomScoreAdj", "oom_score_adj", 0, 0),
    ("podsPerCore", "pods_per_core", 10, 10),
    ("kernelMemcgNotification", "kernel_memcg_notification", True, True),
    (
        "evictionMinimumReclaim",
        "eviction_minimum_reclaim",
        {"memory.available": "0Mi", "nodefs.available": "5%"},
        {"memory.available": "0Mi", "nodefs.available": "5%"},
    ),
    ("containerLogMaxSize", "container_log_max_size", "50Mi", "50Mi"),
    ("containerLogMaxFiles", "container_log_max_files", 3, 3),
    ("containerLogMaxWorkers", "container_log_max_workers", 2, 2),
    ("containerLogMonitorInterval", "container_log_monitor_interval", "30s", timedelta(seconds=30)),
    ("tlsCertFile", "tls_cert_file", "/etc/kubelet/serving.crt", "/etc/kubelet/serving.crt"),
    ("tlsPrivateKeyFile", "tls_private_key_file", "/etc/kubelet/serving.key", "/etc/kubelet/serving.key"),
    ("serverTLSBootstrap", "server_tls_bootstrap", True, True),
    ("rotateCertificates", "rotate_certificates", True, True),
    ("enableServer", "enable_server", False, False),
    ("enableDebuggingHandlers", "enable_debugging_handlers", False, False),
    ("enableSystemLogHandler", "enable_system_log_handler", False, False),
    ("volumePluginDir", "volume_plugin_dir", "/var/lib/kubelet/volumeplugins", "/var/lib/kubelet/volumeplugins"),
    (
        "featureGates",
        "feature_gates",
        {"EventedPLEG": True, "SomethingElse": False},
        {"EventedPLEG": True, "SomethingElse": False},
    ),
    ("pleg", "pleg", "evented", PLEGMode.EVENTED),
    ("plegRelistThreshold", "pleg_relist_threshold", "10s", timedelta(seconds=10)),
    (
        "allowedUnsafeSysctls",
        "allowed_unsafe_sysctls",
        ["kernel.msg*", "net.core.somaxconn"],
        ("kernel.msg*", "net.core.somaxconn"),
    ),
    ("emulatedKubernetesVersion", "emulated_kubernetes_version", "v1.33.2", "v1.33.2"),
]


def _everything_set() -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for json_path, _, raw, _ in ROUND_TRIP:
        head, _, rest = json_path.partition(".")
        nested = _nest(rest, raw) if rest else raw
        if isinstance(nested, dict) and isinstance(doc.get(head), dict) and rest:
            _merge(doc[head], nested)
        else:
            doc[head] = nested
    # Upstream's validation takes the by-priority list or the two periods, never both in one file.
    del doc["shutdownGracePeriodByPodPriority"]
    return doc


def _merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for k, v in other.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def test_round_trip_table_covers_every_field() -> None:
    assert {attr_path for _, attr_path, _, _ in ROUND_TRIP} == set(_leaf_attr_paths(defaults()))


def test_a_document_setting_every_field_loads_without_warnings() -> None:
    loaded = _load(_everything_set())
    assert loaded.warnings == ()
    for json_path, attr_path, _, expected in ROUND_TRIP:
        if json_path in _everything_set():
            assert _get(loaded.config, attr_path) == expected, json_path


@pytest.mark.parametrize(("json_path", "attr_path", "raw", "expected"), ROUND_TRIP, ids=[r[0] for r in ROUND_TRIP])
def test_each_field_round_trips(json_path: str, attr_path: str, raw: object, expected: object) -> None:
    config, warnings = decode_document({**HEADER, **_nest(json_path, raw)})
    assert warnings == []
    assert _get(config, attr_path) == expected
    assert _get(config, attr_path) != _get(defaults(), attr_path)
    encoded = encode_document(config)
    assert decode_document(encoded) == (config, [])


def test_encoding_spells_values_as_upstream_does() -> None:
    doc = encode_document(_load(_everything_set()).config)
    assert doc["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert doc["kind"] == "KubeletConfiguration"
    assert doc["syncFrequency"] == "1m30s"
    assert doc["httpCheckFrequency"] == "1m0s"
    assert doc["cgroupDriver"] == "systemd"
    assert doc["clusterDNS"] == ["10.96.0.10", "fd00::a"]
    assert doc["registerWithTaints"] == [{"key": "example.com/dedicated", "value": "infra", "effect": "NoSchedule"}]
    assert doc["authentication"] == {
        "x509": {"clientCAFile": "/etc/kubernetes/ca.crt"},
        "webhook": {"enabled": False, "cacheTTL": "10s"},
        "anonymous": {"enabled": True},
    }
    # What encoding writes is plain YAML/JSON data, and reads back as the same config.
    assert parse_config(yaml.safe_dump(doc)).config == _load(_everything_set()).config


def test_schema_tables_match_the_dataclasses() -> None:
    for struct in schema.STRUCTS:
        struct.check_covers_dataclass()


# Upstream defaulting cannot tell a non-pointer field's zero value from "unset": both take the default.
@pytest.mark.parametrize(
    ("json_path", "raw", "attr_path"),
    [
        ("containerRuntimeEndpoint", "", "container_runtime_endpoint"),
        ("runtimeRequestTimeout", "0s", "runtime_request_timeout"),
        ("syncFrequency", "0s", "sync_frequency"),
        ("syncFrequency", "0", "sync_frequency"),
        ("fileCheckFrequency", "0m", "file_check_frequency"),
        ("address", "", "address"),
        ("port", 0, "port"),
        ("healthzBindAddress", "", "healthz_bind_address"),
        ("authentication.webhook.cacheTTL", "0s", "authentication.webhook.cache_ttl"),
        ("authorization.mode", "", "authorization.mode"),
        ("authorization.webhook.cacheAuthorizedTTL", "0s", "authorization.webhook.cache_authorized_ttl"),
        ("hairpinMode", "", "hairpin_mode"),
        ("cgroupDriver", "", "cgroup_driver"),
        ("cgroupRoot", "", "cgroup_root"),
        ("maxPods", 0, "max_pods"),
        ("nodeLeaseDurationSeconds", 0, "node_lease_duration_seconds"),
        ("registryBurst", 0, "registry_burst"),
        ("evictionPressureTransitionPeriod", "0s", "eviction_pressure_transition_period"),
        ("containerLogMaxSize", "", "container_log_max_size"),
        ("volumePluginDir", "", "volume_plugin_dir"),
        ("pleg", "", "pleg"),
        ("plegRelistThreshold", "0s", "pleg_relist_threshold"),
        ("emulatedKubernetesVersion", "", "emulated_kubernetes_version"),
        # null is absent, whatever the field
        ("maxPods", None, "max_pods"),
        ("healthzPort", None, "healthz_port"),
        ("evictionHard", None, "eviction_hard"),
        ("authentication", None, "authentication"),
        ("authentication.webhook.enabled", None, "authentication.webhook.enabled"),
    ],
)
def test_zero_or_null_takes_the_default(json_path: str, raw: object, attr_path: str) -> None:
    config = _load(_nest(json_path, raw)).config
    assert _get(config, attr_path) == _get(defaults(), attr_path)


# Pointer fields upstream keep an explicit zero; explicitly empty lists and maps stay empty.
@pytest.mark.parametrize(
    ("json_path", "raw", "attr_path", "expected"),
    [
        ("healthzPort", 0, "healthz_port", 0),
        ("registryPullQPS", 0, "registry_pull_qps", 0),
        ("imageGCLowThresholdPercent", 0, "image_gc_low_threshold_percent", 0),
        ("resolvConf", "", "resolv_conf", ""),
        ("failSwapOn", False, "fail_swap_on", False),
        ("serializeImagePulls", False, "serialize_image_pulls", False),
        ("authentication.webhook.enabled", False, "authentication.webhook.enabled", False),
        ("evictionHard", {}, "eviction_hard", {}),
        ("enforceNodeAllocatable", [], "enforce_node_allocatable", ()),
    ],
)
def test_explicit_zero_stays(json_path: str, raw: object, attr_path: str, expected: object) -> None:
    assert _get(_load(_nest(json_path, raw)).config, attr_path) == expected


def test_setting_eviction_hard_replaces_the_defaults() -> None:
    assert _load({"evictionHard": {"memory.available": "1Gi"}}).config.eviction_hard == {"memory.available": "1Gi"}


@pytest.mark.parametrize(
    ("fields", "update", "report"),
    [
        ({}, timedelta(seconds=10), timedelta(minutes=5)),
        ({"nodeStatusUpdateFrequency": "20s"}, timedelta(seconds=20), timedelta(seconds=20)),
        ({"nodeStatusUpdateFrequency": "10s"}, timedelta(seconds=10), timedelta(seconds=10)),  # explicit, as upstream
        (
            {"nodeStatusUpdateFrequency": "20s", "nodeStatusReportFrequency": "1m"},
            timedelta(seconds=20),
            timedelta(minutes=1),
        ),
        (
            {"nodeStatusUpdateFrequency": "20s", "nodeStatusReportFrequency": "0s"},
            timedelta(seconds=20),
            timedelta(seconds=20),
        ),
        ({"nodeStatusReportFrequency": "1m"}, timedelta(seconds=10), timedelta(minutes=1)),
    ],
)
def test_report_frequency_follows_an_explicit_update_frequency(
    fields: dict[str, Any], update: timedelta, report: timedelta
) -> None:
    config = _load(fields).config
    assert (config.node_status_update_frequency, config.node_status_report_frequency) == (update, report)


@pytest.mark.parametrize(("raw", "expected"), [(-1, -1), (-5, -1), (0, 0), (100, 100)])
def test_negative_pod_pids_limit_means_no_limit(raw: int, expected: int) -> None:
    assert _load({"podPidsLimit": raw}).config.pod_pids_limit == expected


@pytest.mark.parametrize(
    ("fields", "warning"),
    [
        ({"fooBar": 1}, 'unknown field "fooBar"'),
        ({"maxpods": 10}, 'unknown field "maxpods"'),  # names are case-sensitive, as upstream's decoder
        ({"authentication": {"foo": True}}, 'unknown field "authentication.foo"'),
        ({"authentication": {"webhook": {"cacheTtl": "1s"}}}, 'unknown field "authentication.webhook.cacheTtl"'),
        ({"authorization": {"webhook": {"x": 1}}}, 'unknown field "authorization.webhook.x"'),
        (
            {"registerWithTaints": [{"key": "k", "effect": "NoSchedule", "extra": 1}]},
            'unknown field "registerWithTaints[0].extra"',
        ),
        ({"iptablesMasqueradeBit": 14}, 'field "iptablesMasqueradeBit" is ignored, as by the upstream kubelet'),
        ({"qosReserved": {"memory": "50%"}}, 'field "qosReserved" is ignored, as by the upstream kubelet'),
        ({"evictionHard": {"containerfs.available": "10%"}}, "evictionHard: containerfs.available: ignored"),
    ],
)
def test_unknown_and_ignored_fields_warn(fields: dict[str, Any], warning: str) -> None:
    loaded = _load(fields)
    assert any(warning in w for w in loaded.warnings), loaded.warnings
    assert len(loaded.warnings) == 1


def test_unknown_fields_do_not_change_the_config() -> None:
    assert _load({"fooBar": 1, "authentication": {"foo": 2}}).config == defaults()


def _problems(fields: dict[str, Any]) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        _load(fields)
    return caught.value.problems


# Wrong types and syntax, found while decoding.
@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"maxPods": "110"}, 'maxPods: must be an integer, got "110"'),
        ({"maxPods": 1.5}, "maxPods: must be an integer, got 1.5"),
        ({"maxPods": 110.0}, "maxPods: must be an integer, got 110.0"),
        ({"maxPods": True}, "maxPods: must be an integer, got true"),
        ({"port": 2**31}, "port: must fit in a 32-bit integer, got 2147483648"),
        ({"podPidsLimit": 2**63}, "podPidsLimit: must fit in a 64-bit integer"),
        ({"failSwapOn": "yes"}, 'failSwapOn: must be a boolean (true or false), got "yes"'),
        ({"failSwapOn": 1}, "failSwapOn: must be a boolean (true or false), got 1"),
        ({"syncFrequency": 10}, 'syncFrequency: must be a duration string such as "1m30s", got 10'),
        ({"syncFrequency": "abc"}, 'syncFrequency: invalid duration "abc"'),
        ({"syncFrequency": "10"}, 'syncFrequency: missing unit in duration "10"'),
        ({"shutdownGracePeriod": ""}, 'shutdownGracePeriod: invalid duration ""'),
        ({"authentication": {"webhook": {"cacheTTL": "2x"}}}, 'authentication.webhook.cacheTTL: unknown unit "x"'),
        ({"cgroupDriver": "bogus"}, 'cgroupDriver: must be one of cgroupfs, systemd, got "bogus"'),
        ({"cgroupDriver": "Systemd"}, 'cgroupDriver: must be one of cgroupfs, systemd, got "Systemd"'),
        ({"hairpinMode": "on"}, 'hairpinMode: must be one of promiscuous-bridge, hairpin-veth, none, got "on"'),
        ({"authorization": {"mode": "RBAC"}}, 'authorization.mode: must be one of AlwaysAllow, Webhook, got "RBAC"'),
        ({"pleg": "bogus"}, 'pleg: must be one of generic, evented, auto, got "bogus"'),
        ({"clusterDNS": "10.96.0.10"}, 'clusterDNS: must be a list, got "10.96.0.10"'),
        ({"clusterDNS": [10]}, "clusterDNS[0]: must be a string, got 10"),
        ({"evictionHard": ["memory.available<100Mi"]}, "evictionHard: must be a mapping, got a list"),
        ({"evictionHard": {"memory.available": 100}}, "evictionHard[memory.available]: must be a string, got 100"),
        ({"systemReserved": {"cpu": 1}}, "systemReserved[cpu]: must be a string, got 1"),
        ({"featureGates": {"X": "true"}}, 'featureGates[X]: must be a boolean (true or false), got "true"'),
        ({"featureGates": {1: True}}, "featureGates: keys must be strings, got 1"),
        ({"staticPodURLHeader": {"A": "b"}}, 'staticPodURLHeader[A]: must be a list, got "b"'),
        ({"authentication": "x"}, 'authentication: must be a mapping, got "x"'),
        ({"authentication": {"anonymous": {"enabled": "no"}}}, "authentication.anonymous.enabled: must be a boolean"),
        ({"registerWithTaints": [{"key": "k"}]}, "registerWithTaints[0].effect: required"),
        ({"registerWithTaints": [{"effect": "NoSchedule"}]}, "registerWithTaints[0].key: required"),
        (
            {"registerWithTaints": [{"key": "k", "effect": "Sometimes"}]},
            'registerWithTaints[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute, got "Sometimes"',
        ),
        (
            {"registerWithTaints": [{"key": "k", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}]},
            "registerWithTaints[0].timeAdded: must not be set",
        ),
    ],
)
def test_wrong_types_raise(fields: dict[str, Any], fragment: str) -> None:
    problems = _problems(fields)
    assert any(fragment in p for p in problems), problems


# Values of the right type that upstream (or the node at start-up) refuses.
@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"maxPods": -1}, "maxPods: must be greater than or equal to 0, got -1"),
        ({"nodeLeaseDurationSeconds": -5}, "nodeLeaseDurationSeconds: must be greater than 0, got -5"),
        ({"port": 70000}, "port: must be between 1 and 65535, inclusive, got 70000"),
        ({"port": -1}, "port: must be between 1 and 65535, inclusive, got -1"),
        ({"readOnlyPort": 65536}, "readOnlyPort: must be between 0 and 65535, inclusive, got 65536"),
        ({"healthzPort": -1}, "healthzPort: must be between 0 and 65535, inclusive, got -1"),
        ({"registryPullQPS": -1}, "registryPullQPS: must be greater than or equal to 0, got -1"),
        ({"registryBurst": -1}, "registryBurst: must be greater than or equal to 0, got -1"),
        (
            {"imageGCHighThresholdPercent": 101},
            "imageGCHighThresholdPercent: must be between 0 and 100, inclusive, got 101",
        ),
        (
            {"imageGCLowThresholdPercent": -1},
            "imageGCLowThresholdPercent: must be between 0 and 100, inclusive, got -1",
        ),
        (
            {"imageGCLowThresholdPercent": 90},
            "imageGCLowThresholdPercent: must be less than imageGCHighThresholdPercent (85), got 90",
        ),
        (
            {"imageGCLowThresholdPercent": 70, "imageGCHighThresholdPercent": 70},
            "imageGCLowThresholdPercent: must be less than imageGCHighThresholdPercent (70), got 70",
        ),
        ({"imageMinimumGCAge": "-1s"}, 'imageMinimumGCAge: must not be negative, got "-1s"'),
        ({"imageMaximumGCAge": "-5m"}, 'imageMaximumGCAge: must not be negative, got "-5m0s"'),
        (
            {"imageMaximumGCAge": "1m", "imageMinimumGCAge": "2m"},
            'imageMaximumGCAge: must be greater than imageMinimumGCAge (2m0s), got "1m0s"',
        ),
        ({"containerLogMaxFiles": 1}, "containerLogMaxFiles: must be greater than 1, got 1"),
        ({"containerLogMaxSize": "10MB"}, 'containerLogMaxSize: invalid quantity "10MB"'),
        ({"containerLogMaxSize": "-1Mi"}, 'containerLogMaxSize: must not be negative, got "-1Mi"'),
        ({"containerLogMaxWorkers": 0}, "containerLogMaxWorkers: must be greater than or equal to 1, got 0"),
        (
            {"containerLogMonitorInterval": "2s"},
            'containerLogMonitorInterval: must be a positive time duration greater than or equal to 3s, got "2s"',
        ),
        ({"syncFrequency": "-1s"}, 'syncFrequency: must not be negative, got "-1s"'),
        ({"plegRelistThreshold": "-1s"}, 'plegRelistThreshold: must not be negative, got "-1s"'),
        (
            {"emulatedKubernetesVersion": "1.34.4"},
            'emulatedKubernetesVersion: must be a Kubernetes release such as "v1.34.4", got "1.34.4"',
        ),
        ({"emulatedKubernetesVersion": "v1.34"}, "emulatedKubernetesVersion: must be a Kubernetes release"),
        (
            {"allowedUnsafeSysctls": ["kernel.msg*", "vm.swappiness"]},
            'allowedUnsafeSysctls[1]: the sysctls "vm.swappiness" are not known to be namespaced',
        ),
        (
            {"allowedUnsafeSysctls": ["Net.Core"]},
            'allowedUnsafeSysctls[0]: sysctl "Net.Core" must have at most 253 characters and match regex',
        ),
        ({"runtimeRequestTimeout": "-2m"}, 'runtimeRequestTimeout: must not be negative, got "-2m0s"'),
        ({"nodeStatusUpdateFrequency": "-10s"}, 'nodeStatusUpdateFrequency: must not be negative, got "-10s"'),
        ({"evictionPressureTransitionPeriod": "-1m"}, "evictionPressureTransitionPeriod: must not be negative"),
        ({"authentication": {"webhook": {"cacheTTL": "-1s"}}}, "authentication.webhook.cacheTTL: must not be negative"),
        ({"shutdownGracePeriod": "500ms"}, 'shutdownGracePeriod: must be either zero or otherwise >= 1s, got "500ms"'),
        ({"shutdownGracePeriod": "-1s"}, 'shutdownGracePeriod: must be either zero or otherwise >= 1s, got "-1s"'),
        (
            {"shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "500ms"},
            'shutdownGracePeriodCriticalPods: must be either zero or otherwise >= 1s, got "500ms"',
        ),
        (
            {"shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "31s"},
            'shutdownGracePeriodCriticalPods: must be <= shutdownGracePeriod (30s), got "31s"',
        ),
        (
            {"shutdownGracePeriod": "30s", "shutdownGracePeriodByPodPriority": [{"priority": 0}]},
            "shutdownGracePeriodByPodPriority: cannot be set together with shutdownGracePeriod",
        ),
        ({"address": "localhost"}, 'address: must be an IP address, got "localhost"'),
        ({"healthzBindAddress": "1.2.3"}, 'healthzBindAddress: must be an IP address, got "1.2.3"'),
        ({"clusterDNS": ["10.96.0.10", "dns"]}, 'clusterDNS[1]: must be an IP address, got "dns"'),
        ({"podCIDR": "10.0.0.0/33"}, 'podCIDR: must be a CIDR such as "10.244.0.0/24", got "10.0.0.0/33"'),
        (
            {"containerRuntimeEndpoint": "/run/containerd/containerd.sock"},
            "containerRuntimeEndpoint: must be a unix socket URL",
        ),
        ({"containerRuntimeEndpoint": "tcp://127.0.0.1:1234"}, "containerRuntimeEndpoint: must be a unix socket URL"),
        ({"imageServiceEndpoint": "unix://relative.sock"}, "imageServiceEndpoint: must be a unix socket URL"),
        (
            {"cgroupRoot": "kubepods"},
            'cgroupRoot: must be an absolute cgroup path such as "/" or "/kubepods", got "kubepods"',
        ),
        (
            {"systemReserved": {"gpu": "1"}},
            'systemReserved[gpu]: cannot reserve "gpu"; must be one of cpu, memory, ephemeral-storage, pid',
        ),
        ({"kubeReserved": {"memory": "1Xi"}}, 'kubeReserved[memory]: invalid quantity "1Xi"'),
        ({"kubeReserved": {"cpu": "-100m"}}, 'kubeReserved[cpu]: must not be negative, got "-100m"'),
        ({"enforceNodeAllocatable": ["pods", "pods"]}, 'enforceNodeAllocatable[1]: duplicated enforcement "pods"'),
        (
            {"enforceNodeAllocatable": ["none", "pods"]},
            "enforceNodeAllocatable[0]: may not be combined with other enforcements",
        ),
        (
            {"enforceNodeAllocatable": ["bogus"]},
            "enforceNodeAllocatable[0]: must be one of none, pods, system-reserved",
        ),
        (
            {"enforceNodeAllocatable": ["pods", "system-reserved"]},
            'enforceNodeAllocatable[1]: "system-reserved" needs systemReservedCgroup, which nodeagent does not support',
        ),
        ({"cgroupsPerQOS": False}, 'enforceNodeAllocatable[0]: "pods" needs cgroupsPerQOS to be true'),
        (
            {"evictionHard": {"memory.free": "1Gi"}},
            'evictionHard: memory.free: unsupported eviction signal "memory.free"; known signals: memory.available',
        ),
        ({"evictionSoft": {"disk.available": "1Gi"}}, "evictionSoft: disk.available: unsupported eviction signal"),
        ({"evictionSoftGracePeriod": {"x": "1m"}}, 'evictionSoftGracePeriod: x: unsupported eviction signal "x"'),
        ({"evictionMinimumReclaim": {"y": "1Gi"}}, 'evictionMinimumReclaim: y: unsupported eviction signal "y"'),
        (
            {"evictionHard": {"memory.available": "0"}},
            'evictionHard: memory.available: eviction threshold must be positive, got "0"',
        ),
        (
            {"evictionHard": {"memory.available": "-1Mi"}},
            "evictionHard: memory.available: eviction threshold must be positive",
        ),
        ({"evictionHard": {"memory.available": "100MB"}}, 'evictionHard: memory.available: invalid quantity "100MB"'),
        ({"evictionHard": {"nodefs.available": "101%"}}, 'eviction percentage threshold must be <= 100%, got "101%"'),
        ({"evictionHard": {"nodefs.available": "-1%"}}, 'eviction percentage threshold must be >= 0%, got "-1%"'),
        ({"evictionHard": {"nodefs.available": "x%"}}, 'evictionHard: nodefs.available: invalid percentage "x%"'),
        (
            {"evictionSoft": {"memory.available": "1Gi"}},
            "evictionSoftGracePeriod: memory.available: grace period must be specified for the soft eviction threshold",
        ),
        (
            {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1x"}},
            'evictionSoftGracePeriod: memory.available: unknown unit "x"',
        ),
        (
            {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "-1s"}},
            'evictionSoftGracePeriod: memory.available: must not be negative, got "-1s"',
        ),
        (
            {"evictionMinimumReclaim": {"memory.available": "0%"}},
            "eviction percentage minimum reclaim must be positive",
        ),
        ({"evictionMinimumReclaim": {"memory.available": "-1Mi"}}, "eviction minimum reclaim must not be negative"),
        (
            {"registerWithTaints": [{"key": "a/b/c", "effect": "NoSchedule"}]},
            'registerWithTaints[0].key: invalid taint key "a/b/c"',
        ),
        ({"registerWithTaints": [{"key": "", "effect": "NoSchedule"}]}, "registerWithTaints[0].key: invalid taint key"),
        (
            {"registerWithTaints": [{"key": "Example.com/x", "effect": "NoSchedule"}]},
            "prefix part must be a lowercase DNS subdomain",
        ),
        (
            {"registerWithTaints": [{"key": "k", "value": "-bad", "effect": "NoSchedule"}]},
            'registerWithTaints[0].value: invalid taint value "-bad"',
        ),
        (
            {
                "registerWithTaints": [
                    {"key": "k", "effect": "NoSchedule"},
                    {"key": "k", "value": "v", "effect": "NoSchedule"},
                ]
            },
            "registerWithTaints[1]: duplicate taint k:NoSchedule",
        ),
    ],
)
def test_invalid_values_raise(fields: dict[str, Any], fragment: str) -> None:
    problems = _problems(fields)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize(
    "fields",
    [
        {"healthzPort": 0, "readOnlyPort": 0},
        {"evictionHard": {"memory.available": "0%", "nodefs.available": "100%"}},  # 0% and 100% switch a signal off
        {"evictionSoft": {"memory.available": "0%"}},  # off, so no grace period is needed
        {"evictionHard": {"pid.available": "5%", "allocatableMemory.available": "1Gi", "imagefs.inodesFree": "1k"}},
        {"evictionMinimumReclaim": {"imagefs.available": "2Gi", "memory.available": "0"}},
        {"evictionSoftGracePeriod": {"nodefs.available": "0s"}},
        {"enforceNodeAllocatable": ["none"], "cgroupsPerQOS": False},
        {"enforceNodeAllocatable": [], "cgroupsPerQOS": False},
        {"shutdownGracePeriod": "0s"},
        {"shutdownGracePeriod": "1s"},
        {"shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "30s"},
        {"shutdownGracePeriodCriticalPods": "0s", "shutdownGracePeriodByPodPriority": [{"priority": 0}]},
        {"imageGCLowThresholdPercent": 0, "imageGCHighThresholdPercent": 100},
        {"registerWithTaints": [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}]},
        {"registerWithTaints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
        {"systemReserved": {"cpu": "0", "memory": "0.5Gi", "ephemeral-storage": "1e9", "pid": "100"}},
        {"podCIDR": "fd00:10:244::/64", "clusterDNS": ["fd00::10"], "address": "::1"},
        {"containerLogMaxSize": "0"},
    ],
)
def test_valid_edge_cases_load(fields: dict[str, Any]) -> None:
    assert _load(fields).warnings == ()


def test_every_problem_is_reported_at_once() -> None:
    problems = _problems({"maxPods": -1, "port": 0x10000, "cgroupRoot": "x", "containerLogMaxFiles": 0})
    assert [p.split(":")[0] for p in problems] == ["port", "cgroupRoot", "maxPods", "containerLogMaxFiles"]


def test_type_errors_are_all_reported_too() -> None:
    problems = _problems({"maxPods": "x", "failSwapOn": "y", "authentication": {"webhook": {"enabled": "z"}}})
    assert len(problems) == 3


def test_error_message_names_the_source_and_lists_the_problems() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml.safe_dump({**HEADER, "maxPods": -1}), source="/etc/nodeagent/config.yaml")
    assert str(caught.value).splitlines() == [
        "/etc/nodeagent/config.yaml: invalid KubeletConfiguration",
        "  - maxPods: must be greater than or equal to 0, got -1",
    ]


def test_the_config_is_frozen() -> None:
    config = defaults()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_pods = 1  # type: ignore[misc]
    assert isinstance(config, KubeletConfiguration)
