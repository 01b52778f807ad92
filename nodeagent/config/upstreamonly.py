"""The v1beta1 fields nodeagent has no field of its own for, and what it does with each.

A KubeletConfiguration may be shared with real kubelets (kubeadm writes one for every node), so such a field is not
"unknown". But ignoring it would let a node run with a setting it silently does not have. So every one of them has
a rule here:

- `Honoured`: nodeagent behaves as this field with the values `accepts` lets through (mostly the upstream default,
  or the value that turns the feature off); any other value is refused at load with what nodeagent does instead.
  Absent or null is always fine, and so is the Go zero value of a non-pointer field where that zero means "the
  default" and the default is what nodeagent does (kubeadm writes `cpuManagerReconcilePeriod: 0s`, `memorySwap: {}`).
- `IgnoredUpstream`: the upstream kubelet itself ignores the field here (deprecated with no effect, or read only
  behind an alpha feature gate that is off); it stays a warning, as the file is valid for upstream too.

The fields nodeagent does implement are in `schema` with their own codecs; `kernelMemcgNotification`,
`mergeDefaultEvictionSettings`, `podLogsDir`, `failCgroupV1`, `maxOpenFiles`, `oomScoreAdj`, `podsPerCore`,
`shutdownGracePeriodCriticalPods` and `shutdownGracePeriodByPodPriority` moved there from this table.
docs/kubelet-config.md shows this table to users; a unit test checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.config.durations import parse_go_duration
from nodeagent.config.errors import DurationError

Accepts = Callable[[object], bool]


@dataclass(frozen=True)
class Honoured:
    accepts: Accepts
    behaviour: str  # what nodeagent does (after "nodeagent"); the refusal message and the docs table say it
    # What /configz shows for the field (a value `accepts` takes), or None to leave it out: a config written back
    # from /configz (the node e2e suite does so, through Go structs that spell false and 0 out) must load again.
    reported: object = None


@dataclass(frozen=True)
class IgnoredUpstream:
    reason: str  # why the upstream kubelet ignores it too


Rule = Honoured | IgnoredUpstream


def _is(*values: object) -> Accepts:
    def accepts(raw: object) -> bool:
        # bool is an int in Python: `0` must not accept `false`, nor `1` accept `true`
        return any(type(raw) is type(v) and raw == v for v in values)

    return accepts


def _durations(*values: str) -> Accepts:
    wanted = {parse_go_duration(v) for v in values}

    def accepts(raw: object) -> bool:
        if not isinstance(raw, str):
            return False
        try:
            return parse_go_duration(raw) in wanted
        except DurationError:
            return False

    return accepts


def _parses(raw: object) -> bool:
    if not isinstance(raw, str):
        return False
    try:
        parse_go_duration(raw)
    except DurationError:
        return False
    return True


def _empty(raw: object) -> bool:
    return raw in ({}, [], "")


def _struct(**members: Accepts) -> Accepts:
    """A mapping whose every key is listed and whose value that key accepts (absent or null is always fine)."""

    def accepts(raw: object) -> bool:
        if not isinstance(raw, Mapping):
            return False
        return all(k in members and (v is None or members[k](v)) for k, v in raw.items())

    return accepts


def _int_at_most(limit: int) -> Accepts:
    return lambda raw: type(raw) is int and raw <= limit


def _negative_int(raw: object) -> bool:
    return type(raw) is int and raw < 0


def _logging(raw: object) -> bool:
    # kubeadm writes {flushFrequency: 0, options: {json: {infoBufferSize: "0"}, text: ...}, verbosity: 0}.
    # flushFrequency and the buffer options only tune klog's buffering, which nodeagent (Python logging, unbuffered)
    # does not have: any value gives the same log lines.
    return _struct(
        format=_is("text"),
        verbosity=_is(0),
        flushFrequency=lambda v: type(v) is int or _parses(v),
        options=lambda v: isinstance(v, Mapping),
        vmodule=_empty,
    )(raw)


UPSTREAM_ONLY_RULES: Mapping[str, Rule] = {
    "configMapAndSecretChangeDetectionStrategy": Honoured(
        _is("Watch", "Cache"),
        "a short-TTL cache of single GETs (5 s): an update reaches running pods within the sync period plus 5 s, "
        "as Watch and Cache promise; Get (a request on every pod sync) is not done",
        reported="Cache",
    ),
    "contentType": Honoured(
        _is("", "application/json"), "talks JSON to the apiserver, never protobuf", reported="application/json"
    ),
    "cpuCFSQuota": Honoured(_is(True), "always enforces CPU limits with a CFS quota", reported=True),
    "cpuCFSQuotaPeriod": Honoured(_durations("100ms"), "the CFS period is always 100ms", reported="100ms"),
    "cpuManagerPolicy": Honoured(_is("", "none"), "only the none CPU manager policy", reported="none"),
    "cpuManagerPolicyOptions": Honoured(_empty, "no CPU manager policy options (the none policy takes none)"),
    "cpuManagerReconcilePeriod": Honoured(
        _parses, "any value: with the none policy, the only one, there is nothing to reconcile", reported="10s"
    ),
    "crashLoopBackOff": Honoured(
        _struct(maxContainerRestartPeriod=_durations("300s")), "the container restart back-off is capped at 300s"
    ),
    "draManagerReconcilePeriod": Honoured(_durations("0s", "60s"), "the DRA manager's default period"),
    "enableContentionProfiling": Honoured(_is(False), "serves no profiling handlers", reported=False),
    "enableControllerAttachDetach": Honoured(
        _is(True),
        "leaves attach and detach to the attach/detach controller (it annotates the Node for that)",
        reported=True,
    ),
    "enableDebugFlagsHandler": Honoured(_is(False), "serves no /debug/flags/v handler", reported=False),
    "enableProfilingHandler": Honoured(_is(False), "serves no /debug/pprof handlers", reported=False),
    "enableSystemLogQuery": Honoured(_is(False), "serves no node log query", reported=False),
    "eventBurst": Honoured(_is(0), "does not rate-limit events (upstream's eventRecordQPS: 0)", reported=0),
    "eventRecordQPS": Honoured(_is(0), "does not rate-limit events (upstream's eventRecordQPS: 0)", reported=0),
    "imagePullCredentialsVerificationPolicy": Honoured(
        _is("", "NeverVerify"),
        "never re-verifies the credentials of an image already on the node",
        reported="NeverVerify",
    ),
    "iptablesDropBit": IgnoredUpstream("deprecated upstream: no longer has any effect"),
    "iptablesMasqueradeBit": IgnoredUpstream("deprecated upstream: no longer has any effect"),
    "kubeAPIBurst": Honoured(
        _is(0), "does not rate-limit its apiserver requests (upstream's kubeAPIQPS: -1)", reported=0
    ),
    "kubeAPIQPS": Honoured(
        _negative_int, "does not rate-limit its apiserver requests (upstream's kubeAPIQPS: -1)", reported=-1
    ),
    "kubeReservedCgroup": Honoured(_is(""), "enforces no kube-reserved cgroup"),
    "kubeletCgroups": Honoured(_is(""), "does not move itself into a cgroup"),
    "localStorageCapacityIsolation": Honoured(
        _is(True),
        "always isolates local storage (ephemeral-storage capacity, limits and their evictions)",
        reported=True,
    ),
    "logging": Honoured(
        _logging,
        "logs text at its own level (--v / -v); format text and verbosity 0 only, the buffering any",
        reported={"format": "text", "verbosity": 0},
    ),
    "makeIPTablesUtilChains": Honoured(
        _is(False), "creates no iptables chains (no KUBE-IPTABLES-HINT)", reported=False
    ),
    "maxParallelImagePulls": Honoured(
        _int_at_most(1), "pulls one image at a time with serializeImagePulls, else without a cap"
    ),
    "memoryManagerPolicy": Honoured(_is("", "None"), "only the None memory manager policy", reported="None"),
    "memoryReservationPolicy": Honoured(_is("", "None"), "reserves no memory for pods (no MemoryQoS)", reported="None"),
    "memorySwap": Honoured(_struct(swapBehavior=_is("", "NoSwap")), "runs every container without swap (NoSwap)"),
    "memoryThrottlingFactor": IgnoredUpstream("read only with the MemoryQoS feature gate, alpha and off"),
    "nodeStatusMaxImages": Honoured(_is(0), "reports no images in the node status", reported=0),
    "podHousekeepingPeriod": Honoured(_durations("2s"), "housekeeping runs every 2s", reported="2s"),
    "preloadedImagesVerificationAllowlist": Honoured(
        _empty, "never re-verifies credentials, so there is nothing to allow"
    ),
    "protectKernelDefaults": Honoured(_is(False), "does not check the kernel's tunables", reported=False),
    "qosReserved": IgnoredUpstream("read only with the QOSReserved feature gate, alpha and off"),
    "reservedMemory": Honoured(_empty, "reserves no NUMA memory (it needs the Static memory manager policy)"),
    "reservedSystemCPUs": Honoured(_is(""), "reserves no CPUs (it needs a CPU manager policy other than none)"),
    "runOnce": Honoured(_is(False), "runs as a service, never once", reported=False),
    "seccompDefault": Honoured(_is(False), "leaves a container without a seccomp profile Unconfined", reported=False),
    "showHiddenMetricsForVersion": Honoured(_is(""), "shows no hidden metrics"),
    "singleProcessOOMKill": Honoured(
        _is(True), "does not set memory.oom.group: the kernel kills a single process, as on cgroup v1", reported=True
    ),
    "systemCgroups": Honoured(_is(""), "moves no system processes into a cgroup"),
    "systemReservedCgroup": Honoured(_is(""), "enforces no system-reserved cgroup"),
    "tlsCipherSuites": Honoured(_empty, "serves TLS with Python's default cipher suites"),
    "tlsCurvePreferences": Honoured(_empty, "serves TLS with Python's default curves"),
    "tlsMinVersion": Honoured(_is(""), "serves TLS with Python's default minimum version"),
    "topologyManagerPolicy": Honoured(_is("", "none"), "only the none topology manager policy", reported="none"),
    "topologyManagerPolicyOptions": Honoured(_empty, "no topology manager policy options"),
    "topologyManagerScope": Honoured(
        _is("", "container", "pod"),
        "any scope: with the none policy, the only one, both mean the same",
        reported="container",
    ),
    "tracing": Honoured(_empty, "exports no traces"),
    "userNamespaces": Honoured(
        _struct(idsPerPod=lambda v: type(v) is int),
        "runs no pod in a user namespace (hostUsers: false is refused at admission), so any idsPerPod means the same",
    ),
    "volumeStatsAggPeriod": Honoured(
        _durations("0s", "1m"), "refreshes each pod's volume stats every minute", reported="1m0s"
    ),
}

UPSTREAM_ONLY_FIELDS: frozenset[str] = frozenset(UPSTREAM_ONLY_RULES)


def reported_fields() -> dict[str, object]:
    """The upstream-only fields /configz shows, with the value nodeagent's behaviour matches."""
    return {
        name: rule.reported
        for name, rule in UPSTREAM_ONLY_RULES.items()
        if isinstance(rule, Honoured) and rule.reported is not None
    }


def refusal(name: str, raw: object) -> str | None:
    """Why a set value of an upstream-only field cannot be honoured, or None when it can (or is ignored upstream)."""
    rule = UPSTREAM_ONLY_RULES[name]
    if raw is None or isinstance(rule, IgnoredUpstream) or rule.accepts(raw):
        return None
    return f"nodeagent cannot honour this value ({rule.behaviour})"


def warning(name: str) -> str | None:
    rule = UPSTREAM_ONLY_RULES[name]
    if isinstance(rule, IgnoredUpstream):
        return f"ignored, as by the upstream kubelet: {rule.reason}"
    return None


__all__ = [
    "UPSTREAM_ONLY_FIELDS",
    "UPSTREAM_ONLY_RULES",
    "Honoured",
    "IgnoredUpstream",
    "refusal",
    "reported_fields",
    "warning",
]
