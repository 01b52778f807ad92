"""Kubelet-side admission: the GeneralPredicates a pod must pass on this node before the kubelet runs it.

The checks, the order and the words are upstream's (pkg/kubelet/lifecycle/predicate.go and the scheduler plugins
it reuses): the pod's OS, then resources fit allocatable, node affinity/selector, node name, host ports, and
finally untolerated NoExecute taints (static pods exempt). Only the first failure is reported, as upstream does.
Before them, as upstream's admit handlers are ordered, the sysctl allowlist (`sysctls`, SysctlForbidden); after
them the AppArmor handler (reason `AppArmor`: a profile asked for on a host that cannot enforce it; see
nodeagent.apparmor). Among the predicates, right after the OS checks, supplementalGroupsPolicy Strict on a node
whose runtime does not report the feature (SupplementalGroupsPolicyNotSupported). Resources fit counts the pod's
requests as upstream's PodRequests: pod-level resources (`spec.resources`, PodLevelResources, beta and on in v1.34)
in place of the containers' sums where set (nodeagent.admission.resources); their pods are admitted like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from nodeagent import apparmor
from nodeagent.admission.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, pod_requests, scaled
from nodeagent.admission.sysctls import SYSCTL_FORBIDDEN, SysctlAllowlist
from nodeagent.config.quantity import parse_quantity

OUT_OF_CPU = "OutOfcpu"
OUT_OF_MEMORY = "OutOfmemory"
OUT_OF_EPHEMERAL_STORAGE = "OutOfephemeral-storage"
OUT_OF_PODS = "OutOfpods"
INSUFFICIENT_RESOURCE_PREFIX = "OutOf"
POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH = "PodOSSelectorNodeLabelDoesNotMatch"
POD_OS_NOT_SUPPORTED = "PodOSNotSupported"
SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED = "SupplementalGroupsPolicyNotSupported"
APPARMOR = apparmor.NOT_ADMITTED_REASON

NODE_AFFINITY = "NodeAffinity"
NODE_NAME = "NodeName"
NODE_PORTS = "NodePorts"
TAINT_TOLERATION = "TaintToleration"

_PREDICATE_DESCRIPTIONS = {
    NODE_AFFINITY: "node(s) didn't match Pod's node affinity/selector",
    NODE_NAME: "node(s) didn't match the requested node name",
    NODE_PORTS: "node(s) didn't have free ports for the requested pod ports",
    TAINT_TOLERATION: "node(s) had taints that the pod didn't tolerate",
}

LABEL_OS = "kubernetes.io/os"
_CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_ALL_ADDRESSES = "0.0.0.0"


@dataclass(frozen=True)
class AdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


ADMITTED = AdmitResult(admit=True)


@dataclass(frozen=True)
class InsufficientResource:
    """One resource the pod does not fit in (upstream lifecycle.InsufficientResourceError), in the scheduler's
    integers (millicores for cpu)."""

    name: str
    requested: int
    used: int
    capacity: int

    @property
    def insufficient_amount(self) -> int:
        """Upstream GetInsufficientAmount: how much more the node would need to free."""
        return self.requested - (self.capacity - self.used)

    def result(self) -> AdmitResult:
        return _insufficient(self.name, self.requested, self.used, self.capacity)


def _insufficient(name: str, requested: int, used: int, capacity: int) -> AdmitResult:
    reason = {CPU: OUT_OF_CPU, MEMORY: OUT_OF_MEMORY, EPHEMERAL_STORAGE: OUT_OF_EPHEMERAL_STORAGE, PODS: OUT_OF_PODS}
    return AdmitResult(
        admit=False,
        reason=reason.get(name, INSUFFICIENT_RESOURCE_PREFIX + name),
        message=(
            f"Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    )


def is_insufficient_resource(result: AdmitResult) -> bool:
    """A refusal for lack of a resource (reason OutOf<resource>), the only kind critical-pod preemption can cure."""
    return not result.admit and result.reason.startswith(INSUFFICIENT_RESOURCE_PREFIX)


def _predicate_failure(name: str) -> AdmitResult:
    return AdmitResult(admit=False, reason=name, message=f"Predicate {name} failed: {_PREDICATE_DESCRIPTIONS[name]}")


def _is_extended(name: str) -> bool:
    # Extended resources have a domain that is not kubernetes.io (nvidia.com/gpu); the kubelet ignores the ones the
    # node does not advertise (removeMissingExtendedResources) instead of rejecting the pod.
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def _insufficient_resources(
    pod: Mapping[str, Any], node: Mapping[str, Any], others: Sequence[Mapping[str, Any]]
) -> list[InsufficientResource]:
    """Every resource the pod does not fit in, in upstream's order (pods, cpu, memory, ephemeral-storage, then the
    scalar resources), as noderesources.Fits reports them all."""
    allocatable_raw: Mapping[str, Any] = (node.get("status") or {}).get("allocatable") or {}
    allocatable = {name: parse_quantity(str(value)) for name, value in allocatable_raw.items()}
    out: list[InsufficientResource] = []

    allowed_pods = int(allocatable.get(PODS, Decimal(0)))
    if len(others) + 1 > allowed_pods:
        out.append(InsufficientResource(PODS, 1, len(others), allowed_pods))

    requested = pod_requests(pod)
    used: dict[str, Decimal] = {}
    for other in others:
        for name, value in pod_requests(other).items():
            used[name] = used.get(name, Decimal(0)) + value

    scalar = sorted(n for n in requested if n not in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS))
    for name in (CPU, MEMORY, EPHEMERAL_STORAGE, *scalar):
        want = scaled(name, requested.get(name, Decimal(0)))
        if want <= 0 or (_is_extended(name) and name not in allocatable):
            continue
        have = scaled(name, allocatable.get(name, Decimal(0)))
        taken = scaled(name, used.get(name, Decimal(0)))
        if want > have - taken:
            out.append(InsufficientResource(name, want, taken, have))
    return out


def _requirement_matches(requirement: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator", "")
    wanted = list(requirement.get("values") or ())
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(wanted) != 1:
            return False
        try:
            actual, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False  # an unknown operator makes the term invalid, and an invalid term matches nothing


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches no node
    if not all(_requirement_matches(r, labels) for r in expressions):
        return False
    for requirement in fields:
        # metadata.name is the only field a node selector term may use, with In / NotIn.
        if requirement.get("key") != "metadata.name" or requirement.get("operator") not in ("In", "NotIn"):
            return False
        if not _requirement_matches(requirement, {"metadata.name": node_name}):
            return False
    return True


def matches_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """spec.nodeSelector and the required node affinity both match the node (GetRequiredNodeAffinity.Match)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    metadata: Mapping[str, Any] = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or ()
    return any(_term_matches(term, labels, metadata.get("name", "")) for term in terms)


def _host_ports(pod: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    spec: Mapping[str, Any] = pod.get("spec") or {}
    # Sidecars run alongside the app containers, so their host ports count; other init containers do not.
    containers = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    containers += list(spec.get("containers") or ())
    ports = []
    for container in containers:
        for port in container.get("ports") or ():
            host_port = int(port.get("hostPort") or 0)
            if host_port > 0:
                ports.append((port.get("hostIP") or _ALL_ADDRESSES, port.get("protocol") or "TCP", host_port))
    return ports


def _ports_conflict(wanted: Iterable[tuple[str, str, int]], used: set[tuple[str, str, int]]) -> bool:
    for ip, protocol, port in wanted:
        for used_ip, used_protocol, used_port in used:
            if (protocol, port) != (used_protocol, used_port):
                continue
            if _ALL_ADDRESSES in (ip, used_ip) or ip == used_ip:
                return True
    return False


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Toleration.ToleratesTaint: an empty effect or key matches any; Exists ignores the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key", ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def has_untolerated_no_execute_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A NoExecute taint on the node that no toleration of the pod tolerates (the only effect the kubelet checks)."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("effect") != "NoExecute":
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return True
    return False


def _is_static_pod(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    source = annotations.get(_CONFIG_SOURCE_ANNOTATION)
    return source is not None and source != "api"


def _supplemental_groups_policy_refused(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Upstream rejectPodAdmissionBasedOnSupplementalGroupsPolicy (the feature is beta in v1.34): Strict asked for,
    and the node's status.features does not say the runtime supports it."""
    policy = ((pod.get("spec") or {}).get("securityContext") or {}).get("supplementalGroupsPolicy")
    if policy is None:
        return False
    features = (node.get("status") or {}).get("features") or {}
    return policy == "Strict" and not features.get("supplementalGroupsPolicy")


def _apparmor(pod: Mapping[str, Any], host_apparmor: bool | None) -> AdmitResult:
    """Upstream's AppArmor admit handler: only a Pending pod is checked (one already running keeps running)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase not in (None, "", "Pending"):
        return ADMITTED
    enabled = apparmor.host_enabled() if host_apparmor is None else host_apparmor
    why = apparmor.validate(pod, host_apparmor=enabled)
    if why is None:
        return ADMITTED
    return AdmitResult(admit=False, reason=APPARMOR, message=f"Cannot enforce AppArmor: {why}")


def _after_predicates(pod: Mapping[str, Any], host_apparmor: bool | None) -> AdmitResult:
    return _apparmor(pod, host_apparmor)


def _active_others(pod: Mapping[str, Any], other_pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    uid = (pod.get("metadata") or {}).get("uid")
    return [
        p
        for p in other_pods
        if (p.get("status") or {}).get("phase") not in _TERMINAL_PHASES
        and (uid is None or (p.get("metadata") or {}).get("uid") != uid)
    ]


def _general_predicates(
    pod: Mapping[str, Any], node: Mapping[str, Any], others: Sequence[Mapping[str, Any]]
) -> list[AdmitResult]:
    """Upstream generalFilter: every failure, in its order (resources, node affinity, node name, host ports, then
    untolerated NoExecute taints, static pods exempt)."""
    failures = [r.result() for r in _insufficient_resources(pod, node, others)]
    if not matches_node_affinity(pod, node):
        failures.append(_predicate_failure(NODE_AFFINITY))
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name and node_name != (node.get("metadata") or {}).get("name"):
        failures.append(_predicate_failure(NODE_NAME))
    used_ports = {port for other in others for port in _host_ports(other)}
    if _ports_conflict(_host_ports(pod), used_ports):
        failures.append(_predicate_failure(NODE_PORTS))
    if not _is_static_pod(pod) and has_untolerated_no_execute_taint(pod, node):
        failures.append(_predicate_failure(TAINT_TOLERATION))
    return failures


def general_predicate_failures(
    pod: Mapping[str, Any], node: Mapping[str, Any], other_pods: Sequence[Mapping[str, Any]]
) -> tuple[list[InsufficientResource], list[AdmitResult]]:
    """The GeneralPredicates failures of `pod` among `other_pods` (terminal ones and the pod itself left out), split
    as upstream's critical-pod admission handler splits them: the insufficient resources, and every other failure."""
    others = _active_others(pod, other_pods)
    resources = _insufficient_resources(pod, node, others)
    rest = [f for f in _general_predicates(pod, node, others) if not is_insufficient_resource(f)]
    return resources, rest


def admit(
    pod: Mapping[str, Any],
    node: Mapping[str, Any] | None,
    other_pods: Sequence[Mapping[str, Any]],
    *,
    node_os: str = "linux",
    sysctls: SysctlAllowlist | None = None,
    host_apparmor: bool | None = None,
) -> AdmitResult:
    """Whether the kubelet may run `pod` on `node` next to `other_pods` (the pods it already admitted).

    Terminal pods and the pod itself are left out of `other_pods`, as the kubelet only counts active pods. Without
    a Node (standalone, or before registration) only the sysctls and AppArmor are checked. `host_apparmor` None
    reads this host (nodeagent.apparmor.host_enabled).
    """
    if sysctls is not None:
        forbidden = sysctls.forbidden(pod)
        if forbidden is not None:
            return AdmitResult(admit=False, reason=SYSCTL_FORBIDDEN, message=forbidden)
    if node is None:
        return _after_predicates(pod, host_apparmor)
    others = _active_others(pod, other_pods)

    # The pod's OS: upstream compares the pod's own kubernetes.io/os label, then spec.os.
    pod_os_label = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_OS)
    if pod_os_label is not None and pod_os_label != node_os:
        return AdmitResult(
            admit=False,
            reason=POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH,
            message="Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        )
    pod_os = ((pod.get("spec") or {}).get("os") or {}).get("name")
    if pod_os is not None and pod_os != node_os:
        return AdmitResult(
            admit=False,
            reason=POD_OS_NOT_SUPPORTED,
            message="Failed to admit pod as the OS field doesn't match node OS",
        )
    if _supplemental_groups_policy_refused(pod, node):
        return AdmitResult(
            admit=False,
            reason=SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED,
            message="SupplementalGroupsPolicy=Strict is not supported in this node",
        )

    # As upstream, only the first failure is reported.
    failures = _general_predicates(pod, node, others)
    if failures:
        return failures[0]
    return _after_predicates(pod, host_apparmor)
