"""The agent's configuration: the subset of KubeletConfiguration (kubelet.config.k8s.io/v1beta1) nodeagent supports.

Field names are the upstream JSON names in snake_case (`maxPods` is `max_pods`, `clusterDNS` is `cluster_dns`) and
every default is the upstream default after its defaulting (pkg/kubelet/apis/config/v1beta1), so a file written for
the kubelet means the same here. Values are already defaulted: a consumer never sees "unset".

Representation choices:

- durations (`metav1.Duration` upstream) are `datetime.timedelta`;
- resource quantities and eviction thresholds keep their string form ("100Mi", "10%"); `nodeagent.config.quantity`
  parses them exactly when a consumer needs the number;
- lists are tuples and maps are read-only `Mapping`s, so a frozen config stays effectively immutable.

Departures from upstream, all deliberate:

- `cgroup_root` defaults to "/" where v1beta1 leaves "" (the upstream kubelet then uses "/" itself when cgroupsPerQOS
  is on, so the effective value is the same).
- `register_with_taints` entries must carry an effect; upstream accepts an empty one here and the apiserver then
  refuses the Node.

Project extensions: fields that are not in upstream v1beta1. The upstream kubelet would report them as unknown.

- `pleg` (`PLEGMode`, default "auto"): which pod lifecycle event generator to run. "generic" relists the runtime,
  "evented" follows CRI GetContainerEvents, "auto" uses evented when the runtime supports it. Upstream chooses with
  the EventedPLEG feature gate instead.
- `plegRelistThreshold` (`pleg_relist_threshold`, default 3m0s): how old the generic relist's last success may be
  before the PLEG is unhealthy and the node NotReady ("PLEG is not healthy: ..."). Upstream hard-codes 3 minutes
  (10 for the evented PLEG's safety-net relist, which stays so); tests shorten it.
- `emulatedKubernetesVersion` (`emulated_kubernetes_version`, default the testbed's release, `v1.34.4`): the
  Kubernetes release the node reports as its kubeletVersion and probes name in their User-Agent
  (`kube-probe/1.34`); see `nodeagent.version`. Upstream reports the version it was built as.

Not in the subset: the rest of v1beta1 (CPU/memory/topology managers, event and API QPS, logging, tracing, TLS
cipher suites, graceful shutdown by pod priority, swap, ...). Each of those fields has a rule in
`nodeagent.config.upstreamonly`: a value nodeagent's behaviour matches is accepted, any other refused, and only
where the upstream kubelet ignores the field too is it a warning (docs/kubelet-config.md lists them).
`imagePullProgressDeadline` and `nodeLabels` are not v1beta1 fields at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from nodeagent.version import DEFAULT_KUBERNETES_VERSION

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"

DEFAULT_CONTAINER_RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
DEFAULT_VOLUME_PLUGIN_DIR = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
DEFAULT_RESOLV_CONF = "/etc/resolv.conf"
DEFAULT_POD_LOGS_DIR = "/var/log/pods"

# Upstream's hard eviction defaults on Linux (pkg/kubelet/eviction/defaults_linux.go). A config that sets
# evictionHard replaces the whole map, as upstream does while mergeDefaultEvictionSettings is false (its default).
DEFAULT_EVICTION_HARD: Mapping[str, str] = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "5%",
}
DEFAULT_ENFORCE_NODE_ALLOCATABLE: tuple[str, ...] = ("pods",)


class CgroupDriver(StrEnum):
    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


class HairpinMode(StrEnum):
    PROMISCUOUS_BRIDGE = "promiscuous-bridge"
    HAIRPIN_VETH = "hairpin-veth"
    NONE = "none"


class AuthorizationMode(StrEnum):
    ALWAYS_ALLOW = "AlwaysAllow"
    WEBHOOK = "Webhook"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class PLEGMode(StrEnum):
    """Project extension: which PLEG runs (see the module docstring)."""

    GENERIC = "generic"
    EVENTED = "evented"
    AUTO = "auto"


@dataclass(frozen=True, kw_only=True)
class X509Authentication:
    client_ca_file: str = ""


@dataclass(frozen=True, kw_only=True)
class WebhookAuthentication:
    enabled: bool = True
    cache_ttl: timedelta = timedelta(minutes=2)


@dataclass(frozen=True, kw_only=True)
class AnonymousAuthentication:
    enabled: bool = False


@dataclass(frozen=True, kw_only=True)
class KubeletAuthentication:
    x509: X509Authentication = field(default_factory=X509Authentication)
    webhook: WebhookAuthentication = field(default_factory=WebhookAuthentication)
    anonymous: AnonymousAuthentication = field(default_factory=AnonymousAuthentication)


@dataclass(frozen=True, kw_only=True)
class WebhookAuthorization:
    cache_authorized_ttl: timedelta = timedelta(minutes=5)
    cache_unauthorized_ttl: timedelta = timedelta(seconds=30)


@dataclass(frozen=True, kw_only=True)
class KubeletAuthorization:
    mode: AuthorizationMode = AuthorizationMode.WEBHOOK
    webhook: WebhookAuthorization = field(default_factory=WebhookAuthorization)


@dataclass(frozen=True, kw_only=True)
class Taint:
    """A taint put on the Node at registration (core/v1 Taint without timeAdded, which a kubelet may not set)."""

    key: str
    effect: TaintEffect
    value: str = ""


@dataclass(frozen=True, kw_only=True)
class ShutdownGracePeriodByPodPriority:
    """One priority class of graceful node shutdown: pods of this priority (up to the next entry's) get this many
    seconds."""

    priority: int
    shutdown_grace_period_seconds: int = 0


@dataclass(frozen=True, kw_only=True)
class KubeletConfiguration:
    # Container runtime (CRI).
    container_runtime_endpoint: str = DEFAULT_CONTAINER_RUNTIME_ENDPOINT
    image_service_endpoint: str = ""  # empty: the image service is at container_runtime_endpoint
    runtime_request_timeout: timedelta = timedelta(minutes=2)

    # Pod admission: unsafe sysctls (or patterns ending in *) pods may set beyond the safe ones.
    allowed_unsafe_sysctls: tuple[str, ...] = ()

    # Pod sources and the sync loop.
    static_pod_path: str = ""
    static_pod_url: str = ""
    static_pod_url_header: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    file_check_frequency: timedelta = timedelta(seconds=20)
    http_check_frequency: timedelta = timedelta(seconds=20)
    sync_frequency: timedelta = timedelta(minutes=1)

    # Kubelet server.
    address: str = "0.0.0.0"
    port: int = 10250
    read_only_port: int = 0  # 0 disables the read-only server
    healthz_port: int = 10248  # 0 disables healthz
    healthz_bind_address: str = "127.0.0.1"
    authentication: KubeletAuthentication = field(default_factory=KubeletAuthentication)
    authorization: KubeletAuthorization = field(default_factory=KubeletAuthorization)
    streaming_connection_idle_timeout: timedelta = timedelta(hours=4)
    tls_cert_file: str = ""  # "" (with tls_private_key_file ""): a self-signed pair under <rootDir>/pki
    tls_private_key_file: str = ""
    server_tls_bootstrap: bool = False  # the serving certificate from the kubernetes.io/kubelet-serving signer
    # The client certificate renewed through kubernetes.io/kube-apiserver-client-kubelet (certificate/rotation.py).
    rotate_certificates: bool = False
    enable_server: bool = True
    enable_debugging_handlers: bool = True  # logs, exec, attach, portForward, run, runningpods, /logs
    enable_system_log_handler: bool = True  # /logs/ (with enable_debugging_handlers)

    # Cluster networking and DNS.
    cluster_domain: str = ""
    cluster_dns: tuple[str, ...] = ()
    resolv_conf: str = DEFAULT_RESOLV_CONF  # "" disables DNS lookups from the host's resolv.conf
    hairpin_mode: HairpinMode = HairpinMode.PROMISCUOUS_BRIDGE
    pod_cidr: str = ""  # only used without an apiserver; otherwise the Node's spec.podCIDR

    # Cgroups and node resources.
    cgroup_driver: CgroupDriver = CgroupDriver.CGROUPFS
    cgroup_root: str = "/"
    cgroups_per_qos: bool = True
    max_pods: int = 110
    pod_pids_limit: int = -1  # -1: no per-pod limit beyond node allocatable
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    enforce_node_allocatable: tuple[str, ...] = DEFAULT_ENFORCE_NODE_ALLOCATABLE
    fail_swap_on: bool = True

    # Node status, lease and registration.
    node_status_update_frequency: timedelta = timedelta(seconds=10)
    node_status_report_frequency: timedelta = timedelta(minutes=5)
    node_lease_duration_seconds: int = 40
    register_node: bool = True
    register_with_taints: tuple[Taint, ...] = ()
    provider_id: str = ""
    # Graceful node shutdown (nodeagent/nodeshutdown): off when all three are zero/empty, the default.
    shutdown_grace_period: timedelta = timedelta(0)
    shutdown_grace_period_critical_pods: timedelta = timedelta(0)  # the part of shutdownGracePeriod kept for them
    shutdown_grace_period_by_pod_priority: tuple[ShutdownGracePeriodByPodPriority, ...] = ()

    # Images.
    serialize_image_pulls: bool = True
    registry_pull_qps: int = 5  # 0: no limit
    registry_burst: int = 10
    image_gc_high_threshold_percent: int = 85
    image_gc_low_threshold_percent: int = 80
    image_minimum_gc_age: timedelta = timedelta(minutes=2)
    image_maximum_gc_age: timedelta = timedelta(0)  # 0: images are not collected for their age

    # Eviction (maps of signal name to threshold, grace period or minimum reclaim, in upstream string form).
    eviction_hard: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_EVICTION_HARD))
    eviction_soft: Mapping[str, str] = field(default_factory=dict)
    eviction_soft_grace_period: Mapping[str, str] = field(default_factory=dict)
    eviction_pressure_transition_period: timedelta = timedelta(minutes=5)
    eviction_max_pod_grace_period: int = 0
    eviction_minimum_reclaim: Mapping[str, str] = field(default_factory=dict)
    # True: the signals evictionHard leaves out keep their defaults instead of being dropped.
    merge_default_eviction_settings: bool = False
    # Upstream's default (false): the eviction manager only polls every 10 s. True: a memory threshold notifier
    # (nodeagent.memorynotifier) wakes it as soon as a memory threshold is crossed.
    kernel_memcg_notification: bool = False

    # Container logs and volumes.
    container_log_max_size: str = "10Mi"
    container_log_max_files: int = 5
    container_log_max_workers: int = 1
    container_log_monitor_interval: timedelta = timedelta(seconds=10)
    pod_logs_dir: str = DEFAULT_POD_LOGS_DIR  # where each pod's log directory is made (upstream's podLogsDir)

    # The agent's own process and host (nodeagent.processsettings).
    fail_cgroup_v1: bool = False  # true: refuse to start on a cgroup v1 host
    max_open_files: int = 1_000_000  # the agent's RLIMIT_NOFILE
    oom_score_adj: int = -999  # the agent's own oom_score_adj (upstream's KubeletOOMScoreAdj)
    pods_per_core: int = 0  # >0: pod capacity is at most this times the CPUs
    volume_plugin_dir: str = DEFAULT_VOLUME_PLUGIN_DIR

    feature_gates: Mapping[str, bool] = field(default_factory=dict)

    # Project extensions (not upstream; see the module docstring).
    pleg: PLEGMode = PLEGMode.AUTO
    pleg_relist_threshold: timedelta = timedelta(minutes=3)
    emulated_kubernetes_version: str = DEFAULT_KUBERNETES_VERSION


def defaults() -> KubeletConfiguration:
    """The configuration an empty KubeletConfiguration document yields: every field at its upstream default."""
    return KubeletConfiguration()
