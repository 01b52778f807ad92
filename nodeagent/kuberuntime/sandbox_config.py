"""Pod → `PodSandboxConfig` (upstream: kuberuntime_sandbox.go generatePodSandboxConfig, network/dns/dns.go).

Choices, each as upstream unless said:

- Hostname: `spec.hostname` or the pod name, cut to 63 characters (trailing '-' and '.' dropped); with `subdomain`
  the domain is `<subdomain>.<ns>.svc.<clusterDomain>`, and `setHostnameAsFQDN` joins both (at most 64 characters).
  A hostNetwork pod gets no hostname at all, as upstream: it shares the node's UTS namespace (so it reports the
  node's hostname), and a runtime asked to set one there fails ("unable to set hostname without a private UTS
  namespace").
- DNS: ClusterFirst (the default) uses the cluster DNS servers and the search list `<ns>.svc.<domain> svc.<domain>
  <domain>` followed by the host's, with `ndots:5`. A hostNetwork pod with ClusterFirst, or ClusterFirst without
  clusterDNS configured, falls back to Default (the host's resolv.conf, passed in parsed); that fallback (not the
  hostNetwork one) is upstream's MissingClusterDNS warning (`missing_cluster_dns`). None starts empty.
  `spec.dnsConfig` is then merged: servers and searches appended without duplicates, options overridden by name.
- Port mappings: every container port, with its hostPort (0 when unset) and hostIP, as upstream; the CNI portmap
  plugin only acts on non-zero host ports.
- Namespaces: hostNetwork → network NODE; hostPID → pid NODE, shareProcessNamespace → pid POD, else CONTAINER;
  hostIPC → ipc NODE, else POD; the user namespace is the node's (mode NODE, UserNamespacesSupport being on in
  v1.34). `hostUsers: false` is refused unless the pod's handler supports user namespaces
  (runtime_handlers.user_namespace_error), before anything is sent.
- Seccomp: the sandbox (pause) always gets RuntimeDefault, as upstream's generatePodSandboxLinuxConfig; the pod's
  seccompProfile is the containers' (container_config, `seccomp_profile`: a Localhost profile is a file under
  `<root-dir>/seccomp`; no profile is Unconfined, the kubelet's SeccompDefault being off by default).
- Supplemental groups: fsGroup first, then supplementalGroups; supplementalGroupsPolicy as its CRI enum value.
- seLinuxOptions are passed as they are: on a host without SELinux the runtime ignores them, as it does for upstream.
- Overhead (`spec.overhead`, set by the RuntimeClass admission plugin) as CRI resources, as upstream's
  convertOverheadToLinuxResources; `resources` the containers' requests and limits summed as the scheduler sums them
  (overhead excluded), pod-level `spec.resources` in their place where set, as upstream's calculateSandboxResources
  (containerd turns them into the pause container's io.kubernetes.cri.sandbox-* annotations).

`pod_cgroup_parent` spells the cgroupfs driver's pod cgroup; `systemd_cgroup_names.driver_cgroup` turns it into the
systemd driver's slices, which the runtime manager passes as cgroup_parent with cgroupDriver: systemd.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cri.v1 import api_pb2
from nodeagent.admission.resources import pod_limits, pod_requests
from nodeagent.config.quantity import INT64_MAX, ceil_int64, parse_quantity
from nodeagent.kuberuntime import labels as kubelabels
from nodeagent.kuberuntime.errors import CreatePodSandboxConfigError
from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.runtime_handlers import DEFAULT_HANDLER, RuntimeHandler, user_namespace_error

DEFAULT_POD_LOG_DIR_ROOT = "/var/log/pods"
DEFAULT_SECCOMP_PROFILE_ROOT = "/var/lib/kubelet/seccomp"
MAX_HOSTNAME_LENGTH = 63
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048
CLUSTER_FIRST_OPTIONS = ("ndots:5",)

_PROTOCOLS = {"TCP": api_pb2.TCP, "UDP": api_pb2.UDP, "SCTP": api_pb2.SCTP}


@dataclass(frozen=True)
class ResolvConf:
    """The host's resolv.conf, parsed by the caller (the file read is I/O, so it is not ours)."""

    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class DNSSettings:
    """The kubelet's DNS configuration (clusterDNS, clusterDomain, resolvConf) plus the node's resolv.conf."""

    cluster_dns: tuple[str, ...] = ()
    cluster_domain: str = "cluster.local"
    host: ResolvConf = field(default_factory=ResolvConf)


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    out: Mapping[str, Any] = pod.get("metadata") or {}
    return out


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    out: Mapping[str, Any] = pod.get("spec") or {}
    return out


def pod_log_directory(namespace: str, name: str, uid: str, *, root: str = DEFAULT_POD_LOG_DIR_ROOT) -> str:
    """`<root>/<ns>_<name>_<uid>`, the directory kubectl logs and log collectors expect."""
    return posixpath.join(root, f"{namespace}_{name}_{uid}")


def pod_cgroup_parent(pod_uid: str, qos: QOSClass, cgroup_root: str = "/") -> str:
    """The cgroupfs driver's pod cgroup: Guaranteed pods sit directly under kubepods, the others in their QoS tier."""
    base = posixpath.join("/", cgroup_root.strip("/"), "kubepods")
    if qos is QOSClass.BURSTABLE:
        base = posixpath.join(base, "burstable")
    elif qos is QOSClass.BEST_EFFORT:
        base = posixpath.join(base, "besteffort")
    return posixpath.join(base, f"pod{pod_uid}")


def _truncate_hostname(hostname: str) -> str:
    if len(hostname) <= MAX_HOSTNAME_LENGTH:
        return hostname
    return hostname[:MAX_HOSTNAME_LENGTH].rstrip("-.")


def pod_hostname_and_domain(pod: Mapping[str, Any], cluster_domain: str) -> tuple[str, str]:
    """Upstream GeneratePodHostNameAndDomain."""
    meta, spec = _meta(pod), _spec(pod)
    hostname = _truncate_hostname(str(spec.get("hostname") or meta.get("name", "")))
    subdomain = spec.get("subdomain")
    domain = f"{subdomain}.{meta.get('namespace', '')}.svc.{cluster_domain}" if subdomain and cluster_domain else ""
    return hostname, domain


def sandbox_hostname(pod: Mapping[str, Any], *, cluster_domain: str) -> str:
    """The sandbox's hostname; "" for a hostNetwork pod, which keeps the node's (upstream generatePodSandboxConfig)."""
    spec = _spec(pod)
    if spec.get("hostNetwork"):
        return ""
    hostname, domain = pod_hostname_and_domain(pod, cluster_domain)
    if spec.get("setHostnameAsFQDN") and domain:
        fqdn = f"{hostname}.{domain}"
        if len(fqdn) > MAX_HOSTNAME_LENGTH + 1:
            raise CreatePodSandboxConfigError(
                f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long "
                f"({MAX_HOSTNAME_LENGTH + 1} characters is the max, {len(fqdn)} characters requested)"
            )
        return fqdn
    return hostname


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _fit_searches(searches: Sequence[str]) -> list[str]:
    # Upstream drops the tail beyond the resolver's limits (and reports an event, which is the caller's part).
    out: list[str] = []
    length = 0
    for search in searches[:MAX_DNS_SEARCH_PATHS]:
        length += len(search) + (1 if out else 0)
        if length > MAX_DNS_SEARCH_LIST_CHARS:
            break
        out.append(search)
    return out


def _merge_options(base: Sequence[str], extra: Sequence[Mapping[str, Any]]) -> list[str]:
    merged: dict[str, str | None] = {}
    for option in base:
        name, sep, value = option.partition(":")
        merged[name] = value if sep else None
    for extra_option in extra:
        merged[str(extra_option.get("name", ""))] = (
            None if extra_option.get("value") is None else str(extra_option["value"])
        )
    return [name if value is None else f"{name}:{value}" for name, value in merged.items() if name]


def dns_policy(pod: Mapping[str, Any], dns: DNSSettings) -> str:
    """The effective policy: Default replaces ClusterFirst on hostNetwork or when no cluster DNS is configured."""
    spec = _spec(pod)
    policy = str(spec.get("dnsPolicy") or "ClusterFirst")
    if policy == "ClusterFirst" and spec.get("hostNetwork"):
        return "Default"
    if policy == "ClusterFirstWithHostNet":
        policy = "ClusterFirst"
    if policy == "ClusterFirst" and not dns.cluster_dns:
        return "Default"
    return policy


def missing_cluster_dns(pod: Mapping[str, Any], dns: DNSSettings) -> bool:
    """Whether the pod asks for the cluster's DNS (ClusterFirst off the host network, or ClusterFirstWithHostNet)
    while none is configured: upstream's GetPodDNS then falls back to Default and records MissingClusterDNS."""
    spec = _spec(pod)
    policy = str(spec.get("dnsPolicy") or "ClusterFirst")
    wants_cluster = policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst" and not spec.get("hostNetwork"))
    return wants_cluster and not dns.cluster_dns


def missing_cluster_dns_messages(pod: Mapping[str, Any]) -> tuple[str, str]:
    """Upstream's MissingClusterDNS messages: (the node's event, the pod's event)."""
    meta = _meta(pod)
    node = (
        'kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. '
        'Falling back to "Default" policy.'
    )
    pod_ref = f"{meta.get('name', '')}_{meta.get('namespace', '')}({meta.get('uid', '')})"
    return node, f'pod: "{pod_ref}". {node}'


def make_dns_config(pod: Mapping[str, Any], dns: DNSSettings) -> api_pb2.DNSConfig:
    meta, spec = _meta(pod), _spec(pod)
    policy = dns_policy(pod, dns)
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    if policy == "ClusterFirst":
        servers = list(dns.cluster_dns)
        if dns.cluster_domain:
            ns_svc = f"{meta.get('namespace', '')}.svc.{dns.cluster_domain}"
            searches = [ns_svc, f"svc.{dns.cluster_domain}", dns.cluster_domain]
        searches = _unique([*searches, *dns.host.searches])
        options = list(CLUSTER_FIRST_OPTIONS)
    elif policy == "Default":
        servers = list(dns.host.nameservers)
        searches = list(dns.host.searches)
        options = list(dns.host.options)
    elif policy != "None":
        raise CreatePodSandboxConfigError(f"unsupported dnsPolicy {policy!r}")
    extra: Mapping[str, Any] = spec.get("dnsConfig") or {}
    servers = _unique([*servers, *(str(s) for s in extra.get("nameservers") or [])])
    searches = _unique([*searches, *(str(s) for s in extra.get("searches") or [])])
    options = _merge_options(options, extra.get("options") or [])
    return api_pb2.DNSConfig(servers=servers, searches=_fit_searches(searches), options=options)


def make_port_mappings(pod: Mapping[str, Any]) -> list[api_pb2.PortMapping]:
    mappings: list[api_pb2.PortMapping] = []
    seen: set[tuple[str, int, int, str]] = set()
    for container in _spec(pod).get("containers") or []:
        for port in container.get("ports") or []:
            protocol = str(port.get("protocol") or "TCP")
            if protocol not in _PROTOCOLS:
                raise CreatePodSandboxConfigError(f"unknown protocol {protocol!r} in container {container['name']}")
            key = (protocol, int(port["containerPort"]), int(port.get("hostPort") or 0), str(port.get("hostIP") or ""))
            if key in seen:  # upstream MakePortMappings drops exact duplicates
                continue
            seen.add(key)
            mappings.append(
                api_pb2.PortMapping(
                    protocol=_PROTOCOLS[protocol], container_port=key[1], host_port=key[2], host_ip=key[3]
                )
            )
    return mappings


def namespace_options(pod: Mapping[str, Any]) -> api_pb2.NamespaceOption:
    spec = _spec(pod)
    if spec.get("hostPID"):
        pid = api_pb2.NODE
    elif spec.get("shareProcessNamespace"):
        pid = api_pb2.POD
    else:
        pid = api_pb2.CONTAINER
    return api_pb2.NamespaceOption(
        network=api_pb2.NODE if spec.get("hostNetwork") else api_pb2.POD,
        pid=pid,
        ipc=api_pb2.NODE if spec.get("hostIPC") else api_pb2.POD,
        # As upstream with UserNamespacesSupport on: the node's user namespace, said explicitly. A pod with
        # hostUsers false never gets this far (user_namespace_error).
        userns_options=api_pb2.UserNamespace(mode=api_pb2.NODE),
    )


def seccomp_profile(
    profile: Mapping[str, Any] | None, *, profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT
) -> api_pb2.SecurityProfile:
    kind = (profile or {}).get("type") or "Unconfined"
    if kind == "RuntimeDefault":
        return api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault)
    if kind == "Localhost":
        ref = (profile or {}).get("localhostProfile")
        if not ref:
            raise CreatePodSandboxConfigError("localhostProfile must be set if seccompProfile type is Localhost.")
        return api_pb2.SecurityProfile(
            profile_type=api_pb2.SecurityProfile.Localhost, localhost_ref=posixpath.join(profile_root, str(ref))
        )
    # Unconfined, and (as upstream's fieldSeccompProfile) any other type the apiserver would not have let through.
    return api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Unconfined)


def supplemental_groups(pod: Mapping[str, Any]) -> list[int]:
    sc: Mapping[str, Any] = _spec(pod).get("securityContext") or {}
    groups = [int(sc["fsGroup"])] if sc.get("fsGroup") is not None else []
    return groups + [int(g) for g in sc.get("supplementalGroups") or []]


_SUPPLEMENTAL_GROUPS_POLICIES = {"Merge": api_pb2.Merge, "Strict": api_pb2.Strict}


def supplemental_groups_policy(
    pod: Mapping[str, Any], error: type[Exception]
) -> api_pb2.SupplementalGroupsPolicy.ValueType:
    """The pod's supplementalGroupsPolicy as the CRI enum (unset is Merge, the enum's zero); an unknown value raises
    `error` in upstream's words. Strict on a node whose runtime cannot do it is refused at admission
    (SupplementalGroupsPolicyNotSupported), not here."""
    sc: Mapping[str, Any] = _spec(pod).get("securityContext") or {}
    policy = sc.get("supplementalGroupsPolicy")
    if policy is None:
        return api_pb2.Merge
    if policy not in _SUPPLEMENTAL_GROUPS_POLICIES:
        raise error(f"unsupported supplementalGroupsPolicy: {policy}")
    return _SUPPLEMENTAL_GROUPS_POLICIES[policy]


def selinux_option(options: Mapping[str, Any] | None) -> api_pb2.SELinuxOption | None:
    """seLinuxOptions as CRI has them (upstream convertToRuntimeSELinuxOption); None when unset."""
    if options is None:
        return None
    return api_pb2.SELinuxOption(
        user=str(options.get("user") or ""),
        role=str(options.get("role") or ""),
        type=str(options.get("type") or ""),
        level=str(options.get("level") or ""),
    )


def _has_privileged_container(pod: Mapping[str, Any]) -> bool:
    # Upstream HasPrivilegedContainer visits every container, ephemeral ones included.
    spec = _spec(pod)
    return any(
        (c.get("securityContext") or {}).get("privileged")
        for c in [
            *(spec.get("initContainers") or []),
            *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or []),
        ]
    )


def _linux_resources(
    cpu_request: Decimal | None, cpu_limit: Decimal, memory_limit: Decimal
) -> api_pb2.LinuxContainerResources:
    """Upstream calculateLinuxResources (cpuCFSQuota on, the default): shares from the cpu request, or from the limit
    when there is no request; quota from the limit (0 for none), period 100000; the memory limit when not zero.
    Saturated at int64, the CRI's fields."""
    limit_milli = ceil_int64(cpu_limit, milli=True)
    shares_milli = limit_milli if cpu_request is None else ceil_int64(cpu_request, milli=True)
    return api_pb2.LinuxContainerResources(
        cpu_shares=min(262144, max(2, shares_milli * 1024 // 1000)),
        cpu_period=100000,
        cpu_quota=min(INT64_MAX, max(1000, limit_milli * 100000 // 1000)) if limit_milli else 0,
        memory_limit_in_bytes=ceil_int64(memory_limit),
    )


def sandbox_resources(pod: Mapping[str, Any]) -> api_pb2.LinuxContainerResources:
    """Upstream calculateSandboxResources: the pod's requests and limits, overhead excluded, as CRI resources."""
    requests = pod_requests(pod, overhead=False)
    limits = pod_limits(pod, overhead=False)
    return _linux_resources(requests.get("cpu"), limits.get("cpu", Decimal(0)), limits.get("memory", Decimal(0)))


def resources_from_quantities(cpu: str | None, memory: str | None) -> api_pb2.LinuxContainerResources:
    """Overhead as CRI resources, as upstream's convertOverheadToLinuxResources (calculateLinuxResources with the
    overhead's cpu as request and limit): shares (at least 2) and quota (at least 1000, 0 for no cpu) from the cpu,
    period 100000, a memory limit when there is one. An unset cpu counts as zero, as Overhead.Cpu() reads it."""
    amount = parse_quantity(cpu) if cpu is not None else Decimal(0)
    return _linux_resources(amount, amount, parse_quantity(memory) if memory is not None else Decimal(0))


def make_sandbox_config(
    pod: Mapping[str, Any],
    *,
    attempt: int,
    cgroup_parent: str,
    dns: DNSSettings,
    pod_log_dir_root: str = DEFAULT_POD_LOG_DIR_ROOT,
    runtime_handler: str = DEFAULT_HANDLER,
    runtime_handlers: Sequence[RuntimeHandler] = (),
) -> api_pb2.PodSandboxConfig:
    """The sandbox's config; raises CreatePodSandboxConfigError as upstream's generatePodSandboxConfig fails.

    `runtime_handler` is the pod's (its RuntimeClass's), `runtime_handlers` what the runtime's Status lists: together
    they decide whether `hostUsers: false` can be honoured.
    """
    meta, spec = _meta(pod), _spec(pod)
    name, namespace, uid = str(meta.get("name", "")), str(meta.get("namespace", "")), str(meta.get("uid", ""))
    if not (name and namespace and uid):
        raise CreatePodSandboxConfigError("pod needs metadata.name, metadata.namespace and metadata.uid")
    refused = user_namespace_error(pod, runtime_handler, runtime_handlers)
    if refused is not None:
        raise CreatePodSandboxConfigError(refused)
    pod_sc: Mapping[str, Any] = spec.get("securityContext") or {}
    security = api_pb2.LinuxSandboxSecurityContext(
        namespace_options=namespace_options(pod),
        supplemental_groups=supplemental_groups(pod),
        supplemental_groups_policy=supplemental_groups_policy(pod, CreatePodSandboxConfigError),
        privileged=_has_privileged_container(pod),
        seccomp=api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault),
    )
    selinux = selinux_option(pod_sc.get("seLinuxOptions"))
    if selinux is not None:
        security.selinux_options.CopyFrom(selinux)
    if pod_sc.get("runAsUser") is not None:
        security.run_as_user.value = int(pod_sc["runAsUser"])
    if pod_sc.get("runAsGroup") is not None:
        security.run_as_group.value = int(pod_sc["runAsGroup"])
    linux = api_pb2.LinuxPodSandboxConfig(
        cgroup_parent=cgroup_parent,
        security_context=security,
        sysctls={str(s["name"]): str(s["value"]) for s in pod_sc.get("sysctls") or []},
    )
    overhead: Mapping[str, Any] | None = spec.get("overhead")
    linux.resources.CopyFrom(sandbox_resources(pod))
    # As upstream, the overhead is always sent: empty without one.
    linux.overhead.SetInParent()
    if overhead is not None:
        linux.overhead.CopyFrom(resources_from_quantities(overhead.get("cpu"), overhead.get("memory")))
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=attempt),
        hostname=sandbox_hostname(pod, cluster_domain=dns.cluster_domain),
        log_directory=pod_log_directory(namespace, name, uid, root=pod_log_dir_root),
        dns_config=make_dns_config(pod, dns),
        port_mappings=make_port_mappings(pod),
        labels=kubelabels.sandbox_labels(pod),
        annotations=kubelabels.sandbox_annotations(pod),
        linux=linux,
    )
