"""Semantic checks on a decoded, defaulted `KubeletConfiguration`, as upstream's config validation does.

Every problem is reported, each as `<field path>: <what is wrong>, got <value>`, with map keys and list indexes in
the field path the way Kubernetes spells them (`clusterDNS[0]`), except the eviction maps: their problems read
`evictionHard: <signal>: <problem>`, the wording the eviction issue asks for (and the eviction package's). The wording
follows upstream's (pkg/kubelet/apis/config/validation, the eviction manager's threshold parsing) where it reads well.

Beyond upstream's validation, values the upstream kubelet only rejects later, at start-up (an unparsable address,
a non-unix runtime endpoint, a reserved resource it cannot reserve), are rejected here, so a bad file fails at load.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from nodeagent.admission.sysctls import pattern_problem
from nodeagent.config.durations import format_go_duration, parse_go_duration
from nodeagent.config.errors import DurationError, QuantityError
from nodeagent.config.kubelet_config import KubeletConfiguration
from nodeagent.config.quantity import is_percentage, parse_percentage, parse_quantity
from nodeagent.config.schema import show
from nodeagent.version import parse_kubernetes_version

# The signals upstream's eviction manager knows (pkg/kubelet/eviction/api).
EVICTION_SIGNALS: tuple[str, ...] = (
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
)
# Upstream accepts these but replaces them with the nodefs or imagefs thresholds, depending on the disk layout.
_DERIVED_SIGNALS = frozenset({"containerfs.available", "containerfs.inodesFree"})

# What systemReserved and kubeReserved may reserve, as upstream's kubelet start-up accepts.
RESERVABLE_RESOURCES: tuple[str, ...] = ("cpu", "memory", "ephemeral-storage", "pid")

_ENFORCE_NONE = "none"
_ENFORCE_PODS = "pods"
# Upstream's other enforcements need systemReservedCgroup / kubeReservedCgroup, which nodeagent does not support.
_ENFORCE_NEEDS_CGROUP: dict[str, str] = {
    "system-reserved": "systemReservedCgroup",
    "system-reserved-compressible": "systemReservedCgroup",
    "kube-reserved": "kubeReservedCgroup",
    "kube-reserved-compressible": "kubeReservedCgroup",
}
ENFORCE_NODE_ALLOCATABLE_OPTIONS: tuple[str, ...] = (_ENFORCE_NONE, _ENFORCE_PODS, *_ENFORCE_NEEDS_CGROUP)

_MAX_PORT = 65535
# Label-style names and DNS subdomains, as apimachinery validates qualified names and label values.
_NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = "63 characters or less, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric"


@dataclass
class Findings:
    """What validation found: problems make the config unusable, warnings do not."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def warning(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}")


def validate(config: KubeletConfiguration) -> Findings:
    """Check a defaulted configuration. Pure: the same config always gives the same findings, in field order."""
    found = Findings()
    _check_runtime(config, found)
    _check_server(config, found)
    _check_network(config, found)
    _check_resources(config, found)
    _check_node(config, found)
    _check_images(config, found)
    _check_eviction(config, found)
    _check_logs(config, found)
    return found


# Small reusable checks.


def _at_least(found: Findings, path: str, value: int, low: int) -> None:
    if value < low:
        found.problem(path, f"must be greater than or equal to {low}, got {value}")


def _between(found: Findings, path: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        found.problem(path, f"must be between {low} and {high}, inclusive, got {value}")


def _not_negative(found: Findings, path: str, value: timedelta) -> None:
    if value < timedelta(0):
        found.problem(path, f"must not be negative, got {show(format_go_duration(value))}")


def _ip_address(found: Findings, path: str, value: str) -> None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        found.problem(path, f"must be an IP address, got {show(value)}")


def _unix_endpoint(found: Findings, path: str, value: str) -> None:
    # On Linux upstream speaks CRI over unix sockets only (the scheme-less form is deprecated there).
    socket = value.removeprefix("unix://")
    if socket == value or not socket.startswith("/"):
        found.problem(
            path, f'must be a unix socket URL such as "unix:///run/containerd/containerd.sock", got {show(value)}'
        )


def _qualified_name_problem(name: str) -> str | None:
    """Why `name` is not a qualified name (`[prefix/]name`, as label and taint keys), or None when it is."""
    parts = name.split("/")
    if len(parts) > 2:
        return "must be a name with an optional DNS subdomain prefix and '/', e.g. example.com/my-name"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return "prefix part must be a lowercase DNS subdomain (RFC 1123)"
    last = parts[-1]
    if not last:
        return "name part must be non-empty"
    if len(last) > 63 or not _NAME_PART.fullmatch(last):
        return f"name part must be {_NAME_RULE}"
    return None


def _label_value_problem(value: str) -> str | None:
    if value == "" or (len(value) <= 63 and _NAME_PART.fullmatch(value)):
        return None
    return f"must be empty or {_NAME_RULE}"


# Checks by area, in the order the config lists its fields.


def _check_runtime(config: KubeletConfiguration, found: Findings) -> None:
    _unix_endpoint(found, "containerRuntimeEndpoint", config.container_runtime_endpoint)
    if config.image_service_endpoint:
        _unix_endpoint(found, "imageServiceEndpoint", config.image_service_endpoint)
    _not_negative(found, "runtimeRequestTimeout", config.runtime_request_timeout)
    _not_negative(found, "fileCheckFrequency", config.file_check_frequency)
    _not_negative(found, "httpCheckFrequency", config.http_check_frequency)
    _not_negative(found, "syncFrequency", config.sync_frequency)
    _not_negative(found, "plegRelistThreshold", config.pleg_relist_threshold)
    try:
        parse_kubernetes_version(config.emulated_kubernetes_version)
    except ValueError as e:
        found.problem("emulatedKubernetesVersion", str(e))
    # Upstream refuses these when it builds its allowlist at start-up, with the same words.
    for i, pattern in enumerate(config.allowed_unsafe_sysctls):
        problem = pattern_problem(pattern)
        if problem is not None:
            found.problem(f"allowedUnsafeSysctls[{i}]", problem)


def _check_server(config: KubeletConfiguration, found: Findings) -> None:
    _ip_address(found, "address", config.address)
    _between(found, "port", config.port, 1, _MAX_PORT)
    _between(found, "readOnlyPort", config.read_only_port, 0, _MAX_PORT)
    _between(found, "healthzPort", config.healthz_port, 0, _MAX_PORT)
    _ip_address(found, "healthzBindAddress", config.healthz_bind_address)
    _not_negative(found, "authentication.webhook.cacheTTL", config.authentication.webhook.cache_ttl)
    webhook = config.authorization.webhook
    _not_negative(found, "authorization.webhook.cacheAuthorizedTTL", webhook.cache_authorized_ttl)
    _not_negative(found, "authorization.webhook.cacheUnauthorizedTTL", webhook.cache_unauthorized_ttl)
    _not_negative(found, "streamingConnectionIdleTimeout", config.streaming_connection_idle_timeout)


def _check_network(config: KubeletConfiguration, found: Findings) -> None:
    for i, server in enumerate(config.cluster_dns):
        _ip_address(found, f"clusterDNS[{i}]", server)
    if config.pod_cidr:
        try:
            ipaddress.ip_network(config.pod_cidr, strict=False)
        except ValueError:
            found.problem("podCIDR", f'must be a CIDR such as "10.244.0.0/24", got {show(config.pod_cidr)}')


def _check_reserved(found: Findings, name: str, reserved: Mapping[str, str]) -> None:
    for resource, quantity in reserved.items():
        path = f"{name}[{resource}]"
        if resource not in RESERVABLE_RESOURCES:
            found.problem(path, f"cannot reserve {show(resource)}; must be one of {', '.join(RESERVABLE_RESOURCES)}")
            continue
        try:
            value = parse_quantity(quantity)
        except QuantityError as e:
            found.problem(path, str(e))
            continue
        if value < 0:
            found.problem(path, f"must not be negative, got {show(quantity)}")


def _check_enforce_node_allocatable(config: KubeletConfiguration, found: Findings) -> None:
    enforcements = config.enforce_node_allocatable
    seen: set[str] = set()
    for i, option in enumerate(enforcements):
        path = f"enforceNodeAllocatable[{i}]"
        if option in seen:
            found.problem(path, f"duplicated enforcement {show(option)}")
            continue
        seen.add(option)
        if option not in ENFORCE_NODE_ALLOCATABLE_OPTIONS:
            found.problem(path, f"must be one of {', '.join(ENFORCE_NODE_ALLOCATABLE_OPTIONS)}, got {show(option)}")
        elif option in _ENFORCE_NEEDS_CGROUP:
            needs = _ENFORCE_NEEDS_CGROUP[option]
            found.problem(path, f"{show(option)} needs {needs}, which nodeagent does not support")
        elif option == _ENFORCE_NONE:
            if len(enforcements) > 1:
                found.problem(path, f"may not be combined with other enforcements, got {', '.join(enforcements)}")
        elif not config.cgroups_per_qos:
            found.problem(path, f"{show(option)} needs cgroupsPerQOS to be true")


def _check_resources(config: KubeletConfiguration, found: Findings) -> None:
    if not config.cgroup_root.startswith("/"):
        found.problem(
            "cgroupRoot", f'must be an absolute cgroup path such as "/" or "/kubepods", got {show(config.cgroup_root)}'
        )
    _at_least(found, "maxPods", config.max_pods, 0)
    _check_reserved(found, "systemReserved", config.system_reserved)
    _check_reserved(found, "kubeReserved", config.kube_reserved)
    _check_enforce_node_allocatable(config, found)


def _check_node(config: KubeletConfiguration, found: Findings) -> None:
    if not -1000 <= config.oom_score_adj <= 1000:
        found.problem("oomScoreAdj", f"must be between -1000 and 1000, got {config.oom_score_adj}")
    _at_least(found, "podsPerCore", config.pods_per_core, 0)
    _not_negative(found, "nodeStatusUpdateFrequency", config.node_status_update_frequency)
    _not_negative(found, "nodeStatusReportFrequency", config.node_status_report_frequency)
    if config.node_lease_duration_seconds <= 0:
        found.problem("nodeLeaseDurationSeconds", f"must be greater than 0, got {config.node_lease_duration_seconds}")
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(config.register_with_taints):
        path = f"registerWithTaints[{i}]"
        key_problem = _qualified_name_problem(taint.key)
        if key_problem is not None:
            found.problem(f"{path}.key", f"invalid taint key {show(taint.key)}: {key_problem}")
        value_problem = _label_value_problem(taint.value)
        if value_problem is not None:
            found.problem(f"{path}.value", f"invalid taint value {show(taint.value)}: {value_problem}")
        if (taint.key, taint.effect) in seen:
            # The apiserver refuses a Node whose taints repeat a key and effect pair.
            found.problem(path, f"duplicate taint {taint.key}:{taint.effect}; taints must be unique by key and effect")
        seen.add((taint.key, taint.effect))
    _check_shutdown(config, found)


def _check_shutdown(config: KubeletConfiguration, found: Findings) -> None:
    """As upstream's validation of graceful node shutdown: each period zero or at least a second, the critical pods'
    part within the whole, and the by-priority list instead of the two periods, never beside them."""
    grace, critical = config.shutdown_grace_period, config.shutdown_grace_period_critical_pods
    for name, period in (("shutdownGracePeriod", grace), ("shutdownGracePeriodCriticalPods", critical)):
        if period < timedelta(0) or timedelta(0) < period < timedelta(seconds=1):
            found.problem(name, f"must be either zero or otherwise >= 1s, got {show(format_go_duration(period))}")
    if critical > grace:
        found.problem(
            "shutdownGracePeriodCriticalPods",
            f"must be <= shutdownGracePeriod ({format_go_duration(grace)}), got {show(format_go_duration(critical))}",
        )
    if config.shutdown_grace_period_by_pod_priority and (grace > timedelta(0) or critical > timedelta(0)):
        found.problem(
            "shutdownGracePeriodByPodPriority",
            "cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods",
        )


def _check_images(config: KubeletConfiguration, found: Findings) -> None:
    _at_least(found, "registryPullQPS", config.registry_pull_qps, 0)
    _at_least(found, "registryBurst", config.registry_burst, 0)
    high, low = config.image_gc_high_threshold_percent, config.image_gc_low_threshold_percent
    _between(found, "imageGCHighThresholdPercent", high, 0, 100)
    _between(found, "imageGCLowThresholdPercent", low, 0, 100)
    if low >= high:
        found.problem(
            "imageGCLowThresholdPercent", f"must be less than imageGCHighThresholdPercent ({high}), got {low}"
        )
    # As upstream's validation: both ages non-negative, and a maximum age (0 is off) above the minimum.
    minimum, maximum = config.image_minimum_gc_age, config.image_maximum_gc_age
    _not_negative(found, "imageMinimumGCAge", minimum)
    _not_negative(found, "imageMaximumGCAge", maximum)
    if maximum > timedelta(0) and maximum <= minimum:
        found.problem(
            "imageMaximumGCAge",
            f"must be greater than imageMinimumGCAge ({format_go_duration(minimum)}), "
            f"got {show(format_go_duration(maximum))}",
        )


def _known_signal(found: Findings, path: str, signal: str) -> bool:
    if signal in EVICTION_SIGNALS:
        return True
    found.problem(path, f"unsupported eviction signal {show(signal)}; known signals: {', '.join(EVICTION_SIGNALS)}")
    return False


def _threshold_enabled(found: Findings, path: str, value: str) -> bool:
    """Check one threshold; return whether it is in force ("0%" and "100%" switch a signal off, as upstream)."""
    if is_percentage(value):
        if value in ("0%", "100%"):
            return False
        try:
            fraction = parse_percentage(value)
        except QuantityError as e:
            found.problem(path, str(e))
            return False
        if fraction < 0:
            found.problem(path, f"eviction percentage threshold must be >= 0%, got {show(value)}")
        elif fraction > 1:
            found.problem(path, f"eviction percentage threshold must be <= 100%, got {show(value)}")
        return True
    try:
        quantity = parse_quantity(value)
    except QuantityError as e:
        found.problem(path, str(e))
        return False
    if quantity <= 0:
        found.problem(path, f"eviction threshold must be positive, got {show(value)}")
    return True


def _check_thresholds(found: Findings, name: str, thresholds: Mapping[str, str]) -> set[str]:
    enabled: set[str] = set()
    for signal, value in thresholds.items():
        path = f"{name}: {signal}"
        if not _known_signal(found, path, signal):
            continue
        if _threshold_enabled(found, path, value):
            enabled.add(signal)
            if signal in _DERIVED_SIGNALS:
                found.warning(path, "ignored; as upstream, containerfs thresholds follow the nodefs or imagefs ones")
    return enabled


def _check_eviction(config: KubeletConfiguration, found: Findings) -> None:
    _check_thresholds(found, "evictionHard", config.eviction_hard)
    soft = _check_thresholds(found, "evictionSoft", config.eviction_soft)
    for signal, period in config.eviction_soft_grace_period.items():
        path = f"evictionSoftGracePeriod: {signal}"
        if not _known_signal(found, path, signal):
            continue
        try:
            parsed = parse_go_duration(period)
        except DurationError as e:
            found.problem(path, str(e))
            continue
        _not_negative(found, path, parsed)
    for signal in EVICTION_SIGNALS:  # a stable order for the messages
        if signal in soft and signal not in config.eviction_soft_grace_period:
            found.problem(
                f"evictionSoftGracePeriod: {signal}",
                f"grace period must be specified for the soft eviction threshold {signal}",
            )
    _not_negative(found, "evictionPressureTransitionPeriod", config.eviction_pressure_transition_period)
    for signal, value in config.eviction_minimum_reclaim.items():
        path = f"evictionMinimumReclaim: {signal}"
        if not _known_signal(found, path, signal):
            continue
        try:
            if is_percentage(value):
                if parse_percentage(value) <= 0:
                    found.problem(path, f"eviction percentage minimum reclaim must be positive, got {show(value)}")
            elif parse_quantity(value) < 0:
                found.problem(path, f"eviction minimum reclaim must not be negative, got {show(value)}")
        except QuantityError as e:
            found.problem(path, str(e))


def _check_logs(config: KubeletConfiguration, found: Findings) -> None:
    try:
        if parse_quantity(config.container_log_max_size) < 0:
            found.problem("containerLogMaxSize", f"must not be negative, got {show(config.container_log_max_size)}")
    except QuantityError as e:
        found.problem("containerLogMaxSize", str(e))
    if config.container_log_max_files <= 1:
        found.problem("containerLogMaxFiles", f"must be greater than 1, got {config.container_log_max_files}")
    _at_least(found, "containerLogMaxWorkers", config.container_log_max_workers, 1)
    # As upstream: an absolute, normalised path.
    logs_dir = config.pod_logs_dir
    if not logs_dir.startswith("/"):
        found.problem("podLogsDir", f"must be an absolute path, got {show(logs_dir)}")
    elif os.path.normpath(logs_dir) != logs_dir:
        found.problem("podLogsDir", f"must be a normalised path ({os.path.normpath(logs_dir)}), got {show(logs_dir)}")
    # As upstream: the log manager checks sizes no more often than every 3 s.
    if config.container_log_monitor_interval < timedelta(seconds=3):
        found.problem(
            "containerLogMonitorInterval",
            "must be a positive time duration greater than or equal to 3s, "
            f"got {show(format_go_duration(config.container_log_monitor_interval))}",
        )
