"""Pod + container → `ContainerConfig` (upstream: kuberuntime_container.go generateContainerConfig,
kuberuntime_container_linux.go, kubelet_pods.go makeEnvironmentVariables, qos/policy.go).

Choices, each as upstream unless said:

- Environment: `envFrom` sources first, then `env` in order; a later definition of a name replaces the value but
  keeps the first position. Values expand `$(VAR)` against what is defined so far and the service variables.
  Service variables (already filtered by the caller for enableServiceLinks) follow, sorted, unless a container
  variable has the same name. Command and args expand against the final environment.
- ConfigMaps and Secrets come from injected lookups returning the data (decoded) or None when the object does not
  exist; a missing object or key raises `CreateContainerConfigError` unless the reference is optional.
- `resourceFieldRef` without a limit uses node allocatable (upstream MergeContainerResourceLimits), or the pod-level
  cpu / memory limit when the pod sets one (defaultPodLimitsForDownwardAPI); cpu rounds up to the divisor, memory
  and ephemeral-storage too. An unset or zero divisor means 1.
- Resources: cpu shares from the request (or the limit when there is no request; at least 2, at most 262144),
  period 100000 always and quota from the cpu limit (at least 1000 when set, 0 without), memory limit in bytes; a
  container without its own cpu / memory limit in a pod with pod-level resources takes the pod-level limit there
  (upstream getCPULimit / getMemoryLimit), its cpu shares too when it has no cpu request;
  oom_score_adj as upstream's GetContainerOOMScoreAdjust (`oom_score_adj`): node-critical pods and Guaranteed -997,
  BestEffort 1000, Burstable 1000 - 1000*request/capacity clamped to 3..999 (the request with the pod-level memory
  request's unclaimed share; a sidecar never above the regular containers). Hugepage limits: one per page size of
  the host, zero unless the container limits that size (hugepages.py). Swap: NoSwap, the swap limit equal to the
  memory limit on cgroup v1 where the swap controller is (swap.py). Both host facts are read once from the host
  unless passed in, as upstream reads them.
- Security (upstream determineEffectiveSecurityContext): the pod's runAsUser, runAsGroup, runAsNonRoot and
  seLinuxOptions overridden by the container's; capabilities, privileged, readOnlyRootFilesystem,
  allowPrivilegeEscalation and procMount are the container's own. Capability names go as the spec has them (the
  runtime adds `CAP_`); the Capability message goes only when the container's securityContext has `capabilities`
  (empty when that is `{}`), as upstream's convertToRuntimeCapabilities. no_new_privs is set when
  allowPrivilegeEscalation is false. Masked and read-only /proc paths are upstream's defaults, none for procMount
  Unmasked. Seccomp: the container's profile, else the pod's, else
  Unconfined; Localhost is a file under `<root-dir>/seccomp`. AppArmor: the profile nodeagent.apparmor finds (field,
  deprecated annotation, pod), also in the deprecated string form. supplementalGroupsPolicy as the CRI enum. The
  image's user (passed in, as the CRI image status reports it: `image_user_of`) fills run_as_user or run_as_username
  only when the spec sets no runAsUser, an image without a user filling run_as_user 0 (upstream getImageUser treats
  it as root and sends it); runAsNonRoot is verified against the spec's runAsUser, else the image's user (none at
  all is root).
- log_path is `<container>/<restartCount>.log`, relative to the sandbox's log directory (the CRI contract). Mounts,
  devices and the termination message file are not covered here.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from cri.v1 import api_pb2
from nodeagent import apparmor
from nodeagent.admission.resources import (
    is_pod_level_limits_set,
    is_pod_level_resources_set,
    pod_level_limits,
    pod_requests,
)
from nodeagent.config.errors import QuantityError
from nodeagent.config.quantity import INT64_MAX, INT64_MIN, ceil_int64, parse_quantity
from nodeagent.criticalpod import is_node_critical_pod
from nodeagent.kuberuntime import labels as kubelabels
from nodeagent.kuberuntime.errors import CreateContainerConfigError, CreatePodSandboxConfigError
from nodeagent.kuberuntime.expansion import expand
from nodeagent.kuberuntime.hashing import hash_container
from nodeagent.kuberuntime.hugepages import host_page_sizes, hugepage_limits
from nodeagent.kuberuntime.qos import QOSClass, effective_limits, effective_requests, pod_qos
from nodeagent.kuberuntime.sandbox_config import (
    DEFAULT_SECCOMP_PROFILE_ROOT,
    namespace_options,
    seccomp_profile,
    selinux_option,
    supplemental_groups,
    supplemental_groups_policy,
)
from nodeagent.kuberuntime.swap import SwapSupport, apply_no_swap, host_swap_support

#: (namespace, name) → the object's data, or None when it does not exist. Secret values are already decoded.
DataLookup = Callable[[str, str], Mapping[str, str] | None]

CPU_PERIOD = 100_000
MIN_CPU_SHARES = 2
MAX_CPU_SHARES = 262_144
MIN_QUOTA_PERIOD = 1000
GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000
MAX_USER_ID = 2**31 - 1  # upstream's validation.IsValidUserID bound (math.MaxInt32)


def _no_objects(namespace: str, name: str) -> Mapping[str, str] | None:
    return None


def _quantity(value: Any, what: str) -> Decimal:
    try:
        return parse_quantity(str(value))
    except QuantityError as exc:
        raise CreateContainerConfigError(f"invalid quantity for {what}: {exc}") from exc


# --- environment -----------------------------------------------------------------------------------------------


def _field_ref_value(pod: Mapping[str, Any], path: str, *, node_name: str, host_ip: str, pod_ips: Sequence[str]) -> str:
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    spec: Mapping[str, Any] = pod.get("spec") or {}
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            key = path[len(prefix) + 2 : -2]
            return str((meta.get(source) or {}).get(key, ""))
    simple: dict[str, str] = {
        "metadata.name": str(meta.get("name", "")),
        "metadata.namespace": str(meta.get("namespace", "")),
        "metadata.uid": str(meta.get("uid", "")),
        "spec.nodeName": str(spec.get("nodeName") or node_name),
        "spec.serviceAccountName": str(spec.get("serviceAccountName", "")),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ips[0] if pod_ips else "",
        "status.podIPs": ",".join(pod_ips),
    }
    if path not in simple:
        raise CreateContainerConfigError(f"unsupported fieldPath: {path}")
    return simple[path]


def downward_api_allocatable(pod: Mapping[str, Any], node_allocatable: Mapping[str, str]) -> Mapping[str, str]:
    """Upstream defaultPodLimitsForDownwardAPI: the defaults for a container's unset limits are node allocatable,
    except cpu and memory where the pod sets a non-zero pod-level limit (and allocatable has the resource)."""
    if not is_pod_level_limits_set(pod):
        return node_allocatable
    raw = ((pod.get("spec") or {}).get("resources") or {}).get("limits") or {}
    out = dict(node_allocatable)
    for name, value in pod_level_limits(pod).items():
        if name in ("cpu", "memory") and value and name in out:
            out[name] = str(raw[name])
    return out


def _resource_field_value(
    container: Mapping[str, Any], resource: str, divisor_text: str | None, node_allocatable: Mapping[str, str]
) -> str:
    kind, _, name = resource.partition(".")
    if kind not in {"limits", "requests"} or name not in {"cpu", "memory", "ephemeral-storage"}:
        raise CreateContainerConfigError(f"unsupported container resource: {resource}")
    if kind == "limits":
        values = effective_limits(container)
        if name not in values and name in node_allocatable:
            values[name] = _quantity(node_allocatable[name], f"node allocatable {name}")
    else:
        values = effective_requests(container)
    value = values.get(name, Decimal(0))
    # As upstream ExtractContainerResourceValue: an unset divisor reaches us as the zero quantity ("0"), meaning 1.
    divisor = _quantity(divisor_text or "1", f"divisor of {resource}")
    if divisor == 0:
        divisor = Decimal(1)
    elif divisor < 0:
        raise CreateContainerConfigError(f"invalid divisor {divisor_text} for {resource}")
    if name == "cpu":
        # As upstream: millicores first (rounded up), then divided by the divisor's millicores, rounded up.
        milli = ceil_int64(value, milli=True)  # MilliValue(): an int64
        divisor_milli = max(1, ceil_int64(divisor, milli=True))
        return str(math.ceil(Decimal(milli) / Decimal(divisor_milli)))
    return str(math.ceil(Decimal(ceil_int64(value)) / Decimal(max(1, ceil_int64(divisor)))))


def _lookup_data(
    lookup: DataLookup, kind: str, namespace: str, name: str, *, optional: bool
) -> Mapping[str, str] | None:
    data = lookup(namespace, name)
    if data is None and not optional:
        raise CreateContainerConfigError(f'{kind.lower()} "{name}" not found')
    return data


def make_environment(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    service_env: Mapping[str, str],
    node_name: str,
    host_ip: str,
    pod_ips: Sequence[str],
    node_allocatable: Mapping[str, str],
    get_config_map: DataLookup = _no_objects,
    get_secret: DataLookup = _no_objects,
) -> list[tuple[str, str]]:
    """The container's environment in order (upstream makeEnvironmentVariables)."""
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))
    env: dict[str, str] = {}

    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, ref_key, lookup in (
            ("ConfigMap", "configMapRef", get_config_map),
            ("Secret", "secretRef", get_secret),
        ):
            ref = source.get(ref_key)
            if ref is None:
                continue
            data = _lookup_data(lookup, kind, namespace, str(ref.get("name", "")), optional=bool(ref.get("optional")))
            for key, data_value in (data or {}).items():
                env[prefix + key] = data_value

    for var in container.get("env") or []:
        name = str(var["name"])
        value_from: Mapping[str, Any] | None = var.get("valueFrom")
        if value_from is None:
            env[name] = expand(str(var.get("value") or ""), {**service_env, **env})
            continue
        value: str | None
        if (field_ref := value_from.get("fieldRef")) is not None:
            value = _field_ref_value(
                pod, str(field_ref.get("fieldPath", "")), node_name=node_name, host_ip=host_ip, pod_ips=pod_ips
            )
        elif (resource_ref := value_from.get("resourceFieldRef")) is not None:
            target = container
            if resource_ref.get("containerName"):
                spec: Mapping[str, Any] = pod.get("spec") or {}
                candidates = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                found = [c for c in candidates if c.get("name") == resource_ref["containerName"]]
                if not found:
                    raise CreateContainerConfigError(f"container {resource_ref['containerName']} not found")
                target = found[0]
            value = _resource_field_value(
                target,
                str(resource_ref.get("resource", "")),
                resource_ref.get("divisor"),
                downward_api_allocatable(pod, node_allocatable),
            )
        else:
            value = None
            for kind, ref_key, lookup in (
                ("ConfigMap", "configMapKeyRef", get_config_map),
                ("Secret", "secretKeyRef", get_secret),
            ):
                ref = value_from.get(ref_key)
                if ref is None:
                    continue
                optional = bool(ref.get("optional"))
                obj_name, key = str(ref.get("name", "")), str(ref.get("key", ""))
                data = _lookup_data(lookup, kind, namespace, obj_name, optional=optional)
                if data is not None and key in data:
                    value = data[key]
                elif not optional:
                    raise CreateContainerConfigError(f"couldn't find key {key} in {kind} {namespace}/{obj_name}")
                break
            else:
                raise CreateContainerConfigError(f"env var {name} has an empty or unsupported valueFrom")
            if value is None:  # an optional reference that resolved to nothing leaves the variable out
                continue
        env[name] = value

    result = list(env.items())
    result.extend((k, service_env[k]) for k in sorted(service_env) if k not in env)
    return result


# --- resources -------------------------------------------------------------------------------------------------


def milli_cpu_to_shares(milli: int) -> int:
    if milli == 0:
        return MIN_CPU_SHARES
    return min(MAX_CPU_SHARES, max(MIN_CPU_SHARES, milli * 1024 // 1000))


def milli_cpu_to_quota(milli: int, period: int = CPU_PERIOD) -> int:
    if milli == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, milli * period // 1000)


def _memory_request(container: Mapping[str, Any]) -> int:
    return ceil_int64(effective_requests(container).get("memory", Decimal(0)))


def _remaining_pod_memory_per_container(pod: Mapping[str, Any]) -> int:
    """Upstream remainingPodMemReqPerContainer (PodLevelResources, beta and on in v1.34): the pod-level memory
    request the containers do not claim, shared equally by every regular and init container."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    pod_memory = ((spec.get("resources") or {}).get("requests") or {}).get("memory")
    if pod_memory is None or parse_quantity(str(pod_memory)) == 0:
        return 0
    count = len(spec.get("containers") or ()) + len(spec.get("initContainers") or ())
    # The containers' aggregate (sidecar-aware) request, without the overhead (upstream AggregateContainerRequests).
    aggregate = pod_requests(pod, pod_level=False, overhead=False).get("memory", Decimal(0))
    remaining = ceil_int64(parse_quantity(str(pod_memory))) - ceil_int64(aggregate)
    share = abs(remaining) // count if count else 0
    return share if remaining >= 0 else -share  # Go's integer division truncates toward zero


def _is_sidecar(pod: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
    if container.get("restartPolicy") != "Always":
        return False
    names = {c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or ()}
    return container.get("name") in names


def oom_score_adj(
    qos: QOSClass, container: Mapping[str, Any], memory_capacity: int, pod: Mapping[str, Any] | None = None
) -> int:
    """Upstream GetContainerOOMScoreAdjust (pkg/kubelet/qos/policy.go, v1.34). `pod` (as allocated) brings the
    node-critical rule, the pod-level memory request and the sidecar rule; without it only the QoS counts.

    The value goes to the runtime as is. On these machines containerd runs with restrict_oom_score_adj = true (the
    kernel refuses to lower it), so the -997 of Guaranteed and node-critical pods is clamped there to containerd's own.
    """
    if pod is not None and is_node_critical_pod(pod):
        # Only node-critical pods should be the last to be killed.
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QOSClass.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QOSClass.BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    if memory_capacity <= 0:
        return BEST_EFFORT_OOM_SCORE_ADJ - 1
    remaining = _remaining_pod_memory_per_container(pod) if pod is not None else 0
    score = 1000 - (1000 * (_memory_request(container) + remaining)) // memory_capacity
    if pod is not None and _is_sidecar(pod, container):
        # A sidecar matches or falls below the OOM score of the pod's regular container with the smallest request.
        regular = [_memory_request(c) for c in (pod.get("spec") or {}).get("containers") or ()]
        if regular:
            score = min(score, 1000 - (1000 * (min(regular) + remaining)) // memory_capacity)
    # Burstable stays strictly between Guaranteed (3 at full memory use) and BestEffort, as upstream.
    if score < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if score >= BEST_EFFORT_OOM_SCORE_ADJ:
        return BEST_EFFORT_OOM_SCORE_ADJ - 1
    return score


def make_linux_resources(
    container: Mapping[str, Any],
    *,
    qos: QOSClass,
    memory_capacity: int,
    pod: Mapping[str, Any] | None = None,
    hugepage_sizes: Sequence[str] | None = None,
    swap: SwapSupport | None = None,
) -> api_pb2.LinuxContainerResources:
    """Upstream generateLinuxContainerResources (without MemoryQoS, alpha and off), for CreateContainer and resize
    alike. `hugepage_sizes` (the host's page sizes) and `swap` (the host's swap controller) default to this host's."""
    requests, limits = effective_requests(container), effective_limits(container)
    if pod is not None and is_pod_level_resources_set(pod):
        # Upstream getCPULimit / getMemoryLimit: a container without its own limit takes the pod-level one.
        for name, value in pod_level_limits(pod).items():
            if name in ("cpu", "memory") and name not in limits and value:
                limits[name] = value
    # Saturated at int64 (the CRI's fields): the apiserver stores quantities as large as 1e999999.
    cpu_request_milli = ceil_int64(requests.get("cpu", Decimal(0)), milli=True)
    cpu_limit_milli = ceil_int64(limits.get("cpu", Decimal(0)), milli=True)
    shares_milli = cpu_request_milli or cpu_limit_milli
    out = api_pb2.LinuxContainerResources(
        cpu_period=CPU_PERIOD,
        cpu_quota=min(INT64_MAX, milli_cpu_to_quota(cpu_limit_milli)),
        cpu_shares=milli_cpu_to_shares(shares_milli),
        memory_limit_in_bytes=ceil_int64(limits.get("memory", Decimal(0))),
        oom_score_adj=oom_score_adj(qos, container, memory_capacity, pod),
        hugepage_limits=hugepage_limits(limits, host_page_sizes() if hugepage_sizes is None else hugepage_sizes),
    )
    apply_no_swap(out, host_swap_support() if swap is None else swap)
    return out


# --- security --------------------------------------------------------------------------------------------------


# Upstream's securitycontext defaults for a Default procMount (ConvertToRuntimeMaskedPaths/ReadonlyPaths).
DEFAULT_MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
DEFAULT_READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
_POSSIBLE_CPUS = "/sys/devices/system/cpu/possible"


def _cpu_list(text: str) -> list[int]:
    """A kernel CPU list ("0-3,6") as numbers; what does not parse is left out."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        first, sep, last = part.partition("-")
        try:
            cpus.extend(range(int(first), int(last) + 1) if sep else [int(first)])
        except ValueError:
            continue
    return cpus


@functools.cache
def default_masked_paths() -> tuple[str, ...]:
    """Upstream's defaultMaskedPaths: the list above plus each possible CPU's thermal_throttle directory that exists
    on this host. Read once, as upstream's sync.OnceValue."""
    try:
        with open(_POSSIBLE_CPUS, encoding="ascii") as f:
            cpus = _cpu_list(f.read())
    except OSError:
        cpus = []
    throttles = [f"/sys/devices/system/cpu/cpu{cpu}/thermal_throttle" for cpu in cpus]
    return DEFAULT_MASKED_PATHS + tuple(p for p in throttles if os.path.exists(p))


def apparmor_profile(
    pod: Mapping[str, Any], container: Mapping[str, Any]
) -> tuple[api_pb2.SecurityProfile | None, str]:
    """Upstream getAppArmorProfile: the CRI profile and its deprecated string form; (None, "") when none is asked
    for. Admission has already refused a pod asking for one on a host without AppArmor."""
    profile = apparmor.get_profile(pod, container)
    if profile is None:
        return None, ""
    if profile.type == apparmor.RUNTIME_DEFAULT:
        return (
            api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault),
            apparmor.DEPRECATED_RUNTIME_DEFAULT,
        )
    if profile.type == apparmor.UNCONFINED:
        return (
            api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Unconfined),
            apparmor.DEPRECATED_UNCONFINED,
        )
    if profile.type == apparmor.LOCALHOST:
        if profile.localhost_profile is None:
            raise CreateContainerConfigError("missing localhost apparmor profile name")
        return (
            api_pb2.SecurityProfile(
                profile_type=api_pb2.SecurityProfile.Localhost, localhost_ref=profile.localhost_profile
            ),
            apparmor.DEPRECATED_LOCALHOST_PREFIX + profile.localhost_profile,
        )
    raise CreateContainerConfigError(f'unknown apparmor profile type: "{profile.type}"')


def make_security_context(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    image_user: str = "",
    seccomp_profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT,
) -> api_pb2.LinuxContainerSecurityContext:
    spec: Mapping[str, Any] = pod.get("spec") or {}
    pod_sc: Mapping[str, Any] = spec.get("securityContext") or {}
    sc: Mapping[str, Any] = container.get("securityContext") or {}

    def pick(key: str) -> Any:
        return sc[key] if sc.get(key) is not None else pod_sc.get(key)

    caps: Mapping[str, Any] | None = sc.get("capabilities")
    try:
        seccomp = seccomp_profile(pick("seccompProfile"), profile_root=seccomp_profile_root)
    except CreatePodSandboxConfigError as exc:
        raise CreateContainerConfigError(str(exc)) from exc
    armor, armor_deprecated = apparmor_profile(pod, container)
    unmasked = sc.get("procMount") == "Unmasked"
    out = api_pb2.LinuxContainerSecurityContext(
        privileged=bool(sc.get("privileged")),
        namespace_options=namespace_options(pod),
        readonly_rootfs=bool(sc.get("readOnlyRootFilesystem")),
        supplemental_groups=supplemental_groups(pod),
        supplemental_groups_policy=supplemental_groups_policy(pod, CreateContainerConfigError),
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        masked_paths=() if unmasked else default_masked_paths(),
        readonly_paths=() if unmasked else DEFAULT_READONLY_PATHS,
        seccomp=seccomp,
        apparmor_profile=armor_deprecated,
    )
    if caps is not None:
        # As upstream's convertToRuntimeCapabilities: a message only when the container names `capabilities`, with
        # the names as the pod spec has them ("NET_ADMIN"); the runtime adds the CAP_ prefix itself (containerd:
        # "CAP_" + upper(name)), so a prefix added here made "CAP_CAP_NET_ADMIN", which runc ignores: capabilities
        # were neither added nor dropped.
        out.capabilities.CopyFrom(
            api_pb2.Capability(
                add_capabilities=[str(c) for c in caps.get("add") or []],
                drop_capabilities=[str(c) for c in caps.get("drop") or []],
            )
        )
    if armor is not None:
        out.apparmor.CopyFrom(armor)
    selinux = selinux_option(pick("seLinuxOptions"))
    if selinux is not None:
        out.selinux_options.CopyFrom(selinux)
    run_as_user = pick("runAsUser")
    uid, username = parse_image_user(image_user)
    if run_as_user is not None:
        out.run_as_user.value = int(run_as_user)
    elif username:
        out.run_as_username = username
    else:
        # Upstream getImageUser: an image status with neither a uid nor a user name is root, sent as uid 0.
        out.run_as_user.value = 0 if uid is None else uid
    if pick("runAsGroup") is not None:
        out.run_as_group.value = int(pick("runAsGroup"))
    if pick("runAsNonRoot"):
        _verify_run_as_non_root(pod, container, run_as_user, uid, username)
    return out


def parse_image_user(user: str) -> tuple[int | None, str]:
    """The image's configured user ("uid", "uid:gid", "name", "name:group") as (uid, user name), as containerd's
    getUserFromImage reports it in the image status: the group is dropped, a numeric user is a uid."""
    name = user.split(":", 1)[0]
    if not name:
        return None, ""
    try:
        uid = int(name)
    except ValueError:
        return None, name
    # containerd parses the uid as an int64; a longer number stays a user name (and would overflow the CRI field).
    return (uid, "") if INT64_MIN <= uid <= INT64_MAX else (None, name)


def image_user_of(image: api_pb2.Image | None) -> str:
    """The user the CRI image status reports (its uid, else its user name), as upstream's getImageUser reads it;
    "" when it reports neither (the image runs as root)."""
    if image is None:
        return ""
    if image.HasField("uid"):
        return str(image.uid.value)
    return str(image.username)


def _verify_run_as_non_root(
    pod: Mapping[str, Any], container: Mapping[str, Any], run_as_user: Any, uid: int | None, username: str
) -> None:
    """Upstream's verifyRunAsNonRoot: the spec's runAsUser decides when set; else the image's user, where no user at
    all means root and a user name cannot be verified."""
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    pod_ref = f"{meta.get('name', '')}_{meta.get('namespace', '')}({meta.get('uid', '')})"
    where = f'(pod: "{pod_ref}", container: {container.get("name", "")})'
    if run_as_user is not None:
        if int(run_as_user) == 0:
            raise CreateContainerConfigError(f"container's runAsUser breaks non-root policy {where}")
        return
    if uid is None and username:
        raise CreateContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user ({username}), cannot verify user is non-root "
            f"{where}"
        )
    if uid is None or uid == 0:
        raise CreateContainerConfigError(f"container has runAsNonRoot and image will run as root {where}")
    if not 0 <= uid <= MAX_USER_ID:
        raise CreateContainerConfigError(
            f"container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({MAX_USER_ID})): "
            f"must be between 0 and {MAX_USER_ID}, inclusive {where}"
        )


# --- the config ------------------------------------------------------------------------------------------------


def container_log_path(container_name: str, restart_count: int) -> str:
    return f"{container_name}/{restart_count}.log"


def make_container_config(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    restart_count: int,
    pod_ips: Sequence[str],
    node_name: str,
    host_ip: str,
    service_env: Mapping[str, str],
    image_ref: str,
    memory_capacity: int,
    node_allocatable: Mapping[str, str],
    get_config_map: DataLookup = _no_objects,
    get_secret: DataLookup = _no_objects,
    image_user: str = "",
    volume_mounts: Sequence[api_pb2.Mount] = (),
    seccomp_profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT,
) -> api_pb2.ContainerConfig:
    """The config of one container of the pod; raises `CreateContainerConfigError` as upstream would report it.

    `pod_ips` is the sandbox's IPs, primary first (status.podIP is the first); `memory_capacity` is the node's memory
    capacity in bytes (for the Burstable OOM score); `node_allocatable` fills resourceFieldRef limits that are unset;
    `volume_mounts` are the container's volume mounts, already made by the volume manager (nodeagent.volume);
    `seccomp_profile_root` is `<root-dir>/seccomp`, where Localhost seccomp profiles are.
    """
    name = str(container.get("name", ""))
    env = make_environment(
        pod,
        container,
        service_env=service_env,
        node_name=node_name,
        host_ip=host_ip,
        pod_ips=pod_ips,
        node_allocatable=node_allocatable,
        get_config_map=get_config_map,
        get_secret=get_secret,
    )
    env_map = dict(env)
    try:
        qos = pod_qos(pod)
        resources = make_linux_resources(container, qos=qos, memory_capacity=memory_capacity, pod=pod)
    except QuantityError as exc:
        raise CreateContainerConfigError(f"invalid resources of container {name}: {exc}") from exc
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=name, attempt=restart_count),
        image=api_pb2.ImageSpec(image=image_ref, user_specified_image=str(container.get("image", ""))),
        command=[expand(str(c), env_map) for c in container.get("command") or []],
        args=[expand(str(a), env_map) for a in container.get("args") or []],
        working_dir=str(container.get("workingDir") or ""),
        envs=[api_pb2.KeyValue(key=k, value=v) for k, v in env],
        labels=kubelabels.container_labels(pod, container),
        annotations=kubelabels.container_annotations(
            pod, container, container_hash=hash_container(container), restart_count=restart_count
        ),
        log_path=container_log_path(name, restart_count),
        stdin=bool(container.get("stdin")),
        stdin_once=bool(container.get("stdinOnce")),
        tty=bool(container.get("tty")),
        mounts=list(volume_mounts),
        linux=api_pb2.LinuxContainerConfig(
            resources=resources,
            security_context=make_security_context(
                pod, container, image_user=image_user, seccomp_profile_root=seccomp_profile_root
            ),
        ),
    )
