"""The ginkgo command line, and the progress lines read from ginkgo's output in both of its shapes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.conformance.build import Suite
from nodeagent.conformance.run import DEFAULT_FOCUS, ProgressParser, RunOptions, default_skip, ginkgo_argv, spec_text

TESTDATA = Path(__file__).with_name("testdata")
SUITE = Suite(e2e_test=Path("/cache/e2e/e2e.test"), ginkgo=Path("/cache/e2e/ginkgo"))

# ginkgo run in one process streams each spec: its text after the delimiter, its log, then the header (made-up
# content in ginkgo v2.21's verbose shape, as the e2e suite prints it).
SERIAL = (TESTDATA / "ginkgo-serial.log").read_text()

# Run in several processes, ginkgo reports each spec whole when it ends: the header first, then the text.
PARALLEL = (TESTDATA / "ginkgo-parallel.log").read_text()


def _shown(output: str) -> list[str]:
    parser = ProgressParser()
    return [line for raw in output.splitlines(keepends=True) if (line := parser.feed(raw)) is not None]


def test_progress_of_a_serial_run() -> None:
    assert _shown(SERIAL) == [
        "Will run 2 of 7144 specs",
        "[1/2, 0 failed] PASSED [sig-node] Pods should get a host IP [NodeConformance] [Conformance] (2.1s)",
        "[2/2, 1 failed] FAILED [sig-storage] Downward API volume should provide podname only [NodeConformance]"
        " [Conformance] (300.1s)",
        "Ran 2 of 7144 Specs in 302.474 seconds",
        "FAIL! -- 1 Passed | 1 Failed | 0 Pending | 7142 Skipped",
    ]


def test_progress_of_a_parallel_run() -> None:
    assert _shown(PARALLEL) == [
        "Will run 3 of 7144 specs",
        "[1/3, 0 failed] PASSED [sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance]"
        " [Conformance] (4.1s)",
        "[2/3, 1 failed] TIMEDOUT [sig-node] Container Runtime should not be able to pull image from invalid"
        " registry [NodeConformance] (600.0s)",
        "[SynchronizedAfterSuite] [FAILED] [1.000 seconds]",
        "[3/3, 1 failed] PASSED [sig-node] Pods should get a host IP [NodeConformance] [Conformance] (0.5s)",
        "Ran 3 of 7144 Specs in 605.1 seconds",
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[sig-node] Pods x [NodeConformance] [sig-node, NodeConformance]", "[sig-node] Pods x [NodeConformance]"),
        ("[sig-node] Pods x [NodeConformance]", "[sig-node] Pods x [NodeConformance]"),  # one label: kept
        ("  spaced text  ", "spaced text"),
        (
            "[sig-node] Pods [It] should be updated [NodeConformance]",
            "[sig-node] Pods should be updated [NodeConformance]",
        ),
        ("[sig-node] Probing [BeforeEach] should x [NodeConformance]", "[sig-node] Probing should x [NodeConformance]"),
    ],
)
def test_spec_text(line: str, expected: str) -> None:
    assert spec_text(line) == expected


@pytest.mark.parametrize(
    ("name", "slow", "skipped"),
    [
        ("[sig-node] Pods should get a host IP [NodeConformance] [Conformance]", False, False),
        ("[sig-node] Probing container should be restarted [NodeConformance] [Slow]", False, True),
        ("[sig-node] Probing container should be restarted [NodeConformance] [Slow]", True, False),
        ("[sig-node] x [Serial] [NodeConformance]", True, True),
        ("[sig-node] x [Disruptive] [NodeConformance]", True, True),
        ("[sig-node] x [Flaky] [NodeConformance]", True, True),
        ("[sig-node] x [Feature:SidecarContainers] [NodeConformance]", True, True),
        ("[sig-node] x [NodeFeature:RuntimeHandler] [NodeConformance]", False, False),  # not [Feature:...]
    ],
)
def test_default_skip(name: str, slow: bool, skipped: bool) -> None:
    assert bool(re.search(default_skip(slow=slow), name)) is skipped
    assert re.search(DEFAULT_FOCUS, name) is not None


def test_ginkgo_argv() -> None:
    options = RunOptions(
        kubeconfig=Path("/bed/admin.kubeconfig"),
        report_dir=Path("/run/report"),
        procs=2,
        repo_list=Path("/run/repo-list.yaml"),
        kubectl=Path("/cache/bin/kubectl"),
        kubelet_root_dir=Path("/bed/kubelet"),
    )
    argv = ginkgo_argv(SUITE, options)
    separator = argv.index("--")
    ginkgo, framework = argv[:separator], argv[separator + 1 :]
    assert ginkgo[0] == "/cache/e2e/ginkgo"
    assert ginkgo[-1] == "/cache/e2e/e2e.test"  # the suite binary comes last, before the framework's flags
    assert "--procs=2" in ginkgo
    assert f"--focus={DEFAULT_FOCUS}" in ginkgo
    assert f"--skip={default_skip(slow=False)}" in ginkgo
    assert "--timeout=3h" in ginkgo
    assert {"-v", "--no-color", "--silence-skips"} <= set(ginkgo)
    assert framework == [
        "--kubeconfig=/bed/admin.kubeconfig",
        "--provider=skeleton",
        "--report-dir=/run/report",
        "--e2e-output-dir=/run/report",
        "--disable-log-dump",
        "--kube-test-repo-list=/run/repo-list.yaml",
        "--kubectl-path=/cache/bin/kubectl",
        "--kubelet-root-dir=/bed/kubelet",
    ]


def test_ginkgo_argv_without_the_optional_paths() -> None:
    argv = ginkgo_argv(SUITE, RunOptions(kubeconfig=Path("/k"), report_dir=Path("/r"), focus="host IP"))
    assert "--focus=host IP" in argv
    assert not any(a.startswith(("--kube-test-repo-list", "--kubectl-path", "--kubelet-root-dir")) for a in argv)


def test_ginkgo_argv_without_a_skip() -> None:
    # The certified run skips nothing: `--skip=` would be a regex that matches, and so skips, every spec.
    argv = ginkgo_argv(SUITE, RunOptions(kubeconfig=Path("/k"), report_dir=Path("/r"), skip=""))
    assert not any(a.startswith("--skip") for a in argv)
