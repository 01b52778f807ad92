"""`nodeagent conformance --preset` and `--label-filter`: what the preset selects, and its per-group counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.cli import build_parser
from nodeagent.conformance import presets
from nodeagent.conformance.harness import HarnessOptions
from nodeagent.conformance.junit import Outcome, SpecResult
from nodeagent.conformance.run import RunOptions, default_skip, ginkgo_argv
from tests.unit.conformance.test_run import SUITE

NODE = presets.NODE_FEATURES


@pytest.mark.parametrize(
    ("spec", "group"),
    [
        (
            "[sig-node] [Feature:SidecarContainers] [FeatureGate:SidecarContainers] Restartable Init Container "
            "Lifecycle Hook should call the container's preStop hook",
            "sidecar containers",
        ),
        (
            "[sig-node] Pod InPlace Resize Container [FeatureGate:InPlacePodVerticalScaling] [Beta] Guaranteed QoS "
            "pod, one container - decrease CPU only",
            "in-place pod resize",
        ),
        (
            "[sig-node] [Serial] Pod InPlace Resize Container (deferred-resizes) "
            "[FeatureGate:InPlacePodVerticalScaling] [Beta] pod-resize-retry-deferred-test-1",
            "in-place pod resize",
        ),
        ("[sig-node] Security Context should support seccomp runtime/default [LinuxOnly]", "security context"),
        (
            "[sig-node] Lifecycle sleep action zero value when create a pod with lifecycle hook using sleep action "
            "with a duration of zero seconds prestop hook using sleep action with zero duration",
            "lifecycle sleep hooks",
        ),
        ("[sig-node] Probing container should be restarted startup probe fails", "probes"),
        ("[sig-node] Pods Extended Delete Grace Period should be submitted and removed", "pods extended"),
        ("[sig-node] NodeLease NodeLease should have OwnerReferences set", "node lease"),
        ("[sig-node] Pods should get a host IP [NodeConformance] [Conformance]", None),
        ("[sig-storage] CSI Mock volume fsgroup policies should not update fsGroup", None),
    ],
)
def test_groups(spec: str, group: str | None) -> None:
    assert NODE.group_of(spec) == group
    assert bool(re.search(NODE.focus, spec)) is (group is not None)


@pytest.mark.parametrize(
    ("spec", "skipped"),
    [
        ("[sig-node] Pod InPlace Resize Container [Serial] x", False),  # [Serial] runs in this preset
        ("[sig-node] Probing container x [Disruptive]", True),
        ("[sig-node] Probing container x [Flaky]", True),
        ("[sig-node] [Feature:SidecarContainers] x", False),
    ],
)
def test_skip(spec: str, skipped: bool) -> None:
    assert bool(re.search(NODE.skip, spec)) is skipped


def test_label_filter_leaves_out_what_the_default_run_has() -> None:
    # The default run: NodeConformance and none of Serial, Slow, Feature:*; the preset asks for the rest.
    assert NODE.label_filter == "!NodeConformance || Serial || Slow || /^Feature:/"


DEVICES = presets.DEVICES


@pytest.mark.parametrize(
    ("spec", "selected"),
    [
        ("[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] registers plugin", True),
        (
            "[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] on single node supports init containers",
            True,
        ),
        ("[sig-node] [DRA] control plane [ConformanceCandidate] supports init containers", False),  # no kubelet
        (
            "[sig-node] [DRA] [FeatureGate:DRAExtendedResource] [Alpha] [Feature:OffByDefault] must run a pod with "
            "extended resource with one container one resource",
            False,
        ),
    ],
)
def test_devices_selects_the_dra_specs_that_need_a_kubelet(spec: str, selected: bool) -> None:
    assert bool(re.search(DEVICES.focus, spec)) is selected
    assert (DEVICES.group_of(spec) == "DRA kubelet") is selected


def test_devices_leaves_out_alpha_gates_and_flaky_specs() -> None:
    # Alpha gates are off by default in 1.34 (the control plane would need them); beta ones are on and stay in.
    assert DEVICES.label_filter == "Feature:DynamicResourceAllocation && !Alpha && !Feature:OffByDefault"
    flaky = "[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] on single node supports x [Serial] [Flaky]"
    assert re.search(DEVICES.skip, flaky)
    assert not re.search(DEVICES.skip, "[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] y [Slow]")
    assert build_parser().parse_args(["conformance", "--preset", "devices"]).preset == "devices"


def test_devices_brings_the_testbed_up_as_upstreams_dra_cluster() -> None:
    """test/e2e/dra/kind.yaml serves resource.k8s.io v1beta1 and v1beta2: the `with v1beta1 API` and `with v1beta2
    API` specs create claims through them ("the server could not find the requested resource" without)."""
    assert DEVICES.runtime_config == "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
    assert NODE.runtime_config == "" and NODE.max_kubelet_root == 0


def test_devices_kubelet_root_limit_fits_the_rolling_update_socket() -> None:
    """The registration socket of a rolling-update driver, under the longest root the preset allows, fits a unix
    socket path (107 bytes); one character more does not (the 2026-11-29 run's root had 30: 113 bytes)."""
    root = "/" + "r" * (DEVICES.max_kubelet_root - 1)
    socket = f"{root}/plugins_registry/dra-3576.k8s.io-1c262e32-97aa-4158-9050-9f68eb2b6f91-reg.sock"
    assert len(socket) == 107


def _result(name: str, outcome: Outcome, node_type: str = "It") -> SpecResult:
    return SpecResult(name=name, node_type=node_type, state=outcome.value, outcome=outcome, seconds=1.0, message="")


def test_group_counts() -> None:
    results = [
        _result("[sig-node] Probing container a", Outcome.PASSED),
        _result("[sig-node] Probing container b", Outcome.FAILED),
        _result("[sig-node] Probing container c", Outcome.NOT_SELECTED),
        _result("[sig-node] NodeLease NodeLease d", Outcome.SKIPPED),
        _result("[sig-node] Pods should e", Outcome.PASSED),  # in no group
        _result("[sig-node] Probing container", Outcome.FAILED, node_type="SynchronizedBeforeSuite"),
    ]
    counts = {c.group: c for c in presets.group_counts(NODE, results)}
    assert [c.group for c in presets.group_counts(NODE, results)] == [g.name for g in NODE.groups]
    assert (counts["probes"].passed, counts["probes"].failed, counts["probes"].total) == (1, 1, 2)
    assert (counts["node lease"].skipped, counts["node lease"].total) == (1, 1)
    assert counts["sidecar containers"].total == 0
    text = presets.format_group_counts(counts.values())
    assert "  probes: 1 / 2, failed 1, skipped 0" in text


def test_label_filter_reaches_ginkgo() -> None:
    argv = ginkgo_argv(SUITE, RunOptions(kubeconfig=Path("/k"), report_dir=Path("/r"), label_filter="A && !B"))
    assert "--label-filter=A && !B" in argv
    assert argv.index("--label-filter=A && !B") < argv.index(str(SUITE.e2e_test))  # a ginkgo flag, not the suite's
    assert not [a for a in ginkgo_argv(SUITE, RunOptions(kubeconfig=Path("/k"), report_dir=Path("/r"))) if "label" in a]


def test_cli_preset_and_label_filter() -> None:
    args = build_parser().parse_args(["conformance", "--preset", "node-features"])
    assert args.preset == "node-features" and args.label_filter is None
    args = build_parser().parse_args(["conformance", "--label-filter", "Feature:SidecarContainers"])
    assert args.label_filter == "Feature:SidecarContainers"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["conformance", "--preset", "node-features", "--subset", "ci"])


@pytest.mark.parametrize(
    ("argv", "focus", "skip", "label_filter"),
    [
        (["--preset", "node-features"], NODE.focus, NODE.skip, NODE.label_filter),
        (["--preset", "node-features", "--label-filter", "Serial"], NODE.focus, NODE.skip, "Serial"),
        (["--preset", "node-features", "--skip", "x"], NODE.focus, "x", NODE.label_filter),
        (["--preset", "node-features", "--focus", "Probing"], "Probing", NODE.skip, NODE.label_filter),
        (["--label-filter", "Slow"], r"\[NodeConformance\]", None, "Slow"),
    ],
)
async def test_handler_builds_the_run(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], focus: str, skip: str | None, label_filter: str
) -> None:
    from nodeagent import cli  # noqa: PLC0415

    seen: list[HarnessOptions] = []

    async def fake_conformance(options: HarnessOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(cli, "conformance", fake_conformance)
    args = build_parser().parse_args(["conformance", *argv])
    assert await args.handler(args) == 0
    (options,) = seen
    assert (options.focus, options.label_filter) == (focus, label_filter)
    assert options.skip == (skip if skip is not None else default_skip(slow=False))
    assert options.preset is (NODE if "--preset" in argv else None)


@pytest.mark.parametrize(
    ("served", "missing"),
    [
        (["v1", "resource.k8s.io/v1"], ["resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"]),
        (["resource.k8s.io/v1", "resource.k8s.io/v1beta2"], ["resource.k8s.io/v1beta1"]),
        (["resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2\n"], []),
    ],
)
def test_a_given_cluster_must_serve_the_presets_api_versions(served: list[str], missing: list[str]) -> None:
    """`--preset devices --cluster DIR` / `--kubeconfig`: the cluster is not brought up here, so what the preset's
    testbed would serve is checked against `kubectl api-versions` before any spec runs."""
    assert presets.missing_api_versions(presets.DEVICES.runtime_config, served) == missing
    assert presets.missing_api_versions("a/v1=false,b/v2", []) == ["b/v2"]
    assert presets.missing_api_versions("", []) == []


async def test_preset_on_a_cluster_up_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`conformance --preset devices --cluster DIR` runs against that cluster (its admin kubeconfig and its
    registry, from its state) instead of a testbed; with --kubeconfig as well it is refused."""
    from nodeagent import cli  # noqa: PLC0415
    from nodeagent.conformance.errors import ConformanceError  # noqa: PLC0415
    from tests.unit.conformance.test_certified import _cluster  # noqa: PLC0415

    seen: list[HarnessOptions] = []

    async def fake_conformance(options: HarnessOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(cli, "conformance", fake_conformance)
    cluster = _cluster(tmp_path / "c", "198.18.5.1:5001")
    args = build_parser().parse_args(["conformance", "--preset", "devices", "--cluster", str(cluster)])
    assert await args.handler(args) == 0
    (options,) = seen
    assert options.kubeconfig == cluster / "node0" / "etc-kubernetes" / "admin.conf"
    assert options.registry == "198.18.5.1:5001"
    assert options.preset is presets.DEVICES and options.focus == presets.DEVICES.focus
    args = build_parser().parse_args(["conformance", "--cluster", str(cluster), "--kubeconfig", "/k"])
    with pytest.raises(ConformanceError, match="not both"):
        await args.handler(args)
    args = build_parser().parse_args(["conformance", "--preset", "devices", "--cluster", str(tmp_path / "none")])
    with pytest.raises(ConformanceError, match="no cluster in"):
        await args.handler(args)
