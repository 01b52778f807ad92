"""Named selections of specs by group, for `nodeagent conformance --preset NAME`.

A subset (`subset.py`) is a fixed list of full spec texts. A preset is wider: groups of specs chosen by a pattern on
their text, narrowed by ginkgo v2's label filter, and reported group by group. `node-features` is the judge issue 29
asks for beyond `[NodeConformance]`: the node specs that the default skip drops (features such as sidecars and
in-place resize, [Serial] and [Slow] ones) or that are not tagged NodeConformance at all (security context,
runAsNonRoot, seccomp, probes, `sleep` hooks, Pods Extended, NodeLease).

The e2e framework turns a spec's bracketed tags into ginkgo labels (`[sig-node, NodeConformance, Conformance]`,
`[sig-node, Feature:SidecarContainers, FeatureGate:SidecarContainers]`), so the label filter can say what a regex on
the text cannot: "not already in the default run".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.conformance.junit import Outcome, SpecResult


@dataclass(frozen=True)
class Group:
    name: str
    pattern: str  # RE2 for ginkgo's focus; kept to the part of RE2 that Python's re reads the same way


@dataclass(frozen=True)
class Preset:
    name: str
    groups: tuple[Group, ...]
    skip: str
    label_filter: str
    # The testbed's apiserver --runtime-config for this selection (empty: the defaults).
    runtime_config: str = ""
    # The longest kubelet root dir whose sockets the selection's specs can create (unix socket paths are at most
    # 107 bytes); 0: no limit.
    max_kubelet_root: int = 0

    @property
    def focus(self) -> str:
        return "|".join(group.pattern for group in self.groups)

    def group_of(self, spec: str) -> str | None:
        """The first group whose pattern the spec's text matches (ginkgo's focus is a search, so is this)."""
        for group in self.groups:
            if re.search(group.pattern, spec):
                return group.name
        return None


@dataclass(frozen=True)
class GroupCount:
    group: str
    passed: int
    failed: int
    skipped: int  # skipped itself at run time (e2eskipper)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped


NODE_FEATURES = Preset(
    name="node-features",
    groups=(
        Group("sidecar containers", r"\[Feature:SidecarContainers\]"),
        Group("in-place pod resize", r"Pod InPlace Resize Container"),
        Group("security context", r"\[sig-node\] Security Context"),
        Group("lifecycle sleep hooks", r"\[sig-node\] Lifecycle Sleep Hook|\[sig-node\] Lifecycle sleep action"),
        Group("probes", r"\[sig-node\] Probing container"),
        Group("pods extended", r"\[sig-node\] Pods Extended"),
        Group("node lease", r"\[sig-node\] NodeLease"),
    ),
    # [Serial] specs run too (ginkgo runs them alone, after the parallel ones); what breaks the node or is known to
    # flake does not.
    skip=r"\[Disruptive\]|\[Flaky\]",
    # Only what the default run leaves out: not NodeConformance, or NodeConformance but skipped by default.
    label_filter="!NodeConformance || Serial || Slow || /^Feature:/",
)

# Issue 32's judge: upstream's DRA specs that need a kubelet and a driver (test/e2e/dra, "kubelet
# [Feature:DynamicResourceAllocation]": the test driver's kubelet plugin runs in e2e.test and registers through a
# proxy pod on the node; the "control plane" ones never reach a kubelet). The gates of 1.34 that are on by default
# (beta: DRAPrioritizedList, DRAAdminAccess) are in; alpha ones (off by default: DRADeviceTaints,
# DRAPartitionableDevices, DRAConsumableCapacity) need the control plane's gates and are out. e2e.test's only
# sample-device-plugin specs are DRAExtendedResource ones (alpha, off by default), so none of them is selected:
# the device-plugin specs upstream has are in test/e2e_node, not in e2e.test.
# The testbed serves what upstream's DRA cluster serves (test/e2e/dra/kind.yaml): resource.k8s.io v1beta1 and
# v1beta2 besides v1 (v1alpha3 too there; no selected spec uses it). The rolling-update specs' registration socket is
# <root>/plugins_registry/<driver>-<pod UID>-reg.sock: with the driver "dra-NNNN.k8s.io" (15), 18 + 15 + 46 = 79
# bytes besides the root, so the root can have 28.
DRA_RUNTIME_CONFIG = "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
DEVICES = Preset(
    name="devices",
    groups=(Group("DRA kubelet", r"\[DRA\] kubelet \[Feature:DynamicResourceAllocation\]"),),
    skip=r"\[Disruptive\]|\[Flaky\]",
    label_filter="Feature:DynamicResourceAllocation && !Alpha && !Feature:OffByDefault",
    runtime_config=DRA_RUNTIME_CONFIG,
    max_kubelet_root=28,
)

PRESETS: dict[str, Preset] = {NODE_FEATURES.name: NODE_FEATURES, DEVICES.name: DEVICES}


def missing_api_versions(runtime_config: str, served: Iterable[str]) -> list[str]:
    """The group/versions a --runtime-config turns on (`group/version=true`) that are not among `served` (`kubectl
    api-versions`' lines): what a cluster given by kubeconfig lacks for a preset."""
    wanted = []
    for entry in filter(None, (part.strip() for part in runtime_config.split(","))):
        version, _, value = entry.partition("=")
        if value.lower() in ("", "true"):
            wanted.append(version)
    have = {line.strip() for line in served}
    return [version for version in wanted if version not in have]


def group_counts(preset: Preset, results: Iterable[SpecResult]) -> list[GroupCount]:
    """Passed / failed / skipped per group of the preset, in the preset's order; specs in no group are left out."""
    tallies: dict[str, list[int]] = {group.name: [0, 0, 0] for group in preset.groups}
    for result in results:
        if not result.is_spec or result.outcome is Outcome.NOT_SELECTED:
            continue
        group = preset.group_of(result.name)
        if group is None:
            continue
        index = {Outcome.PASSED: 0, Outcome.FAILED: 1, Outcome.SKIPPED: 2}[result.outcome]
        tallies[group][index] += 1
    return [GroupCount(name, *tally) for name, tally in tallies.items()]


def format_group_counts(counts: Iterable[GroupCount]) -> str:
    lines = ["by group (passed / selected, failed, skipped):"]
    lines.extend(f"  {c.group}: {c.passed} / {c.total}, failed {c.failed}, skipped {c.skipped}" for c in counts)
    return "\n".join(lines)
