"""Counting a run and grouping its failures by a cause stripped of what differs from spec to spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.conformance.junit import Outcome, SpecResult, parse_junit
from nodeagent.conformance.summary import (
    MAX_CAUSE,
    Counts,
    cause_of,
    count,
    format_summary,
    group_failures,
    kubelet_hint,
    normalise_cause,
    skip_reasons,
)

RESULTS = parse_junit((Path(__file__).with_name("testdata") / "junit_small.xml").read_text())


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # Gomega's timeout opening is generic: the next line tells; pod names with UIDs become <uid>.
        (
            '[FAILED] Timed out after 300.001s.\nexpected pod "downwardapi-volume-0d8ab1a8-5b5e-4e7a-9a39-1f5c7b6f7a10"'
            ' success: pod "x" failed\nIn [It] at: k8s.io/kubernetes/test/e2e/x.go:263 @ 11/25/26 12:05:00.123',
            'Timed out after N.Ns. expected pod "downwardapi-volume-<uid>" success: pod "x" failed',
        ),
        # A telling first line stands alone; the namespace's number and the generated suffix go.
        (
            '[FAILED] pod "pod-exec-wbz6k" in namespace "pods-8713" not running: container "c" waiting\nmore',
            'pod "pod-exec-<rand>" in namespace "pods-N" not running: container "c" waiting',
        ),
        # English words after a dash stay (they have vowels); only generated suffixes go.
        ("[FAILED] liveness-probe failed for readiness-check", "liveness-probe failed for readiness-check"),
        # gomega's object dump: the message after the type.
        (
            "[FAILED] Unexpected error:\n    <*errors.errorString | 0xc000a1b2c0>: dial tcp 198.18.0.7:8080: refused\n",
            "Unexpected error: dial tcp N.N.N.N:N: refused",
        ),
        ("[TIMEDOUT] A spec timeout occurred\nIn [It] at: x.go:1 @ t", "A spec timeout occurred"),
        ("[PANICKED] Test Panicked\nIn [It] at: runtime/panic.go:262 @ t", "Test Panicked"),
        ("failed with digest sha256:0123456789abcdef0123", "failed with digest sha256:<hex>"),
        ("", "(no failure message)"),
        ("[FAILED] \nIn [It] at: x.go:1 @ t", "(no failure message)"),
    ],
)
def test_normalise_cause(message: str, expected: str) -> None:
    assert normalise_cause(message) == expected


def test_normalise_cause_is_bounded() -> None:
    cause = normalise_cause("[FAILED] " + "x" * 1000)
    assert len(cause) == MAX_CAUSE and cause.endswith("...")


def test_count_the_recorded_report() -> None:
    assert count(RESULTS) == Counts(passed=1, failed=4, skipped=1, not_selected=2, setup_failed=1)
    assert count(RESULTS).ran == 5


def test_group_failures_largest_first_and_suite_nodes_named() -> None:
    groups = group_failures(RESULTS)
    assert [len(g.specs) for g in groups] == [2, 1, 1, 1]
    # One group although the pod names, ports and namespaces differ: both waited for a pod whose image the kubelet
    # could not pull, which is the cause; what the specs said is kept beside it.
    assert groups[0].cause == 'kubelet: Failed: Failed to pull image "N.N.N.N:N/e2e-test-images/made-up:N.N": not found'
    assert groups[0].notes == (
        'the spec: Timed out after N.Ns. expected pod "downwardapi-volume-<uid>" success: pod'
        ' "downwardapi-volume-<uid>" failed with reason: "", message: ""',
    )
    assert groups[0].specs == (
        "[sig-storage] Downward API volume should provide container's cpu limit [NodeConformance] [Conformance]",
        "[sig-storage] Downward API volume should provide podname only [NodeConformance] [Conformance]",
    )
    # Groups of one, by cause: the failed JUnit report node keeps its node type in front of its name.
    assert [g.cause for g in groups[1:]] == [
        "A spec timeout occurred",
        "Test Panicked",
        "Unexpected error: open /made/up/junit_N.xml: permission denied",
    ]
    assert groups[3].specs == ("[ReportAfterSuite] Kubernetes e2e JUnit report",)
    assert all(g.notes == () for g in groups[1:])


def _failed(message: str, timeline: str = "") -> SpecResult:
    return SpecResult("spec", "It", "failed", Outcome.FAILED, 1.0, message, timeline)


PULL = (
    "  I1125 12:36:40.727104 4788 dump.go:53] At 2026-11-25 12:31:40 +0000 UTC - event for p: {kubelet vm} Failed:"
    ' Failed to pull image "r:5000/x:1.3": not found'
)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        # No kubelet warning: the message is the cause.
        (_failed('[FAILED] wait for pod "p-1" to succeed'), ('wait for pod "p-N" to succeed', None)),
        # A wait in vain with a kubelet warning: the warning is the cause.
        (
            _failed('[FAILED] wait for pod "p-1" to succeed', PULL),
            ('kubelet: Failed: Failed to pull image "r:N/x:N.N": not found', 'the spec: wait for pod "p-N" to succeed'),
        ),
        (
            _failed("[TIMEDOUT] A spec timeout occurred", PULL),
            ('kubelet: Failed: Failed to pull image "r:N/x:N.N": not found', "the spec: A spec timeout occurred"),
        ),
        # A spec that saw something else go wrong keeps its message; the warning is only a note.
        (
            _failed('[FAILED] expected "data-1=value-1" in container output: Expected', PULL),
            (
                'expected "data-N=value-N" in container output: Expected',
                'kubelet: Failed: Failed to pull image "r:N/x:N.N": not found',
            ),
        ),
    ],
)
def test_cause_of(result: SpecResult, expected: tuple[str, str | None]) -> None:
    assert cause_of(result) == expected


def test_group_failures_of_a_clean_run_is_empty() -> None:
    passed = SpecResult("a", "It", "passed", Outcome.PASSED, 1.0, "")
    assert group_failures([passed]) == []


def test_skip_reasons() -> None:
    assert skip_reasons(RESULTS) == [("Only supported for providers [gce] (not skeleton)", 1)]


def test_format_summary() -> None:
    text = format_summary(RESULTS)
    lines = text.splitlines()
    assert lines[0] == "passed 1, failed 4, skipped 1 (of 6 selected specs; 2 not selected)"
    assert lines[1] == "suite nodes failed: 1"
    assert "failed, by cause:" in lines
    assert any(line.startswith("  2 x kubelet: Failed: Failed to pull image") for line in lines)
    assert any(line.startswith("      (the spec: Timed out after N.Ns.") for line in lines)
    assert "      - [ReportAfterSuite] Kubernetes e2e JUnit report" in lines
    assert lines[-2:] == ["skipped, by reason:", "  1 x Only supported for providers [gce] (not skeleton)"]


EVENT = (
    "  I1125 12:36:40.727104 4788 dump.go:53] At 2026-11-25 12:31:40 +0000 UTC - event for pod-{n}: {{{source}}} {rest}"
)


@pytest.mark.parametrize(
    ("timeline", "expected"),
    [
        ("", None),
        ("  STEP: creating pod @ 11/25/26 12:28:59.145\n", None),
        # Only the kubelet's warnings: not the scheduler's, not the kubelet's normal events.
        (EVENT.format(n=1, source=" ", rest="Scheduled: Successfully assigned ns-1/pod-1 to vm"), None),
        (EVENT.format(n=1, source="kubelet vm", rest="Pulling: Pulling image x"), None),
        (EVENT.format(n=1, source="default-scheduler ", rest="FailedScheduling: 0/1 nodes are available"), None),
        (
            EVENT.format(n=1, source="kubelet vm", rest='FailedMount: MountVolume.SetUp failed for volume "v-abc12"'),
            'FailedMount: MountVolume.SetUp failed for volume "v-abc12"',  # digits inside a word stay,
        ),
        # The first warning wins: the detailed pull error, not the ErrImagePull that follows it.
        (
            "\n".join(
                [
                    EVENT.format(
                        n=2, source="kubelet vm", rest='Failed: Failed to pull image "r:5000/x:1.3": not found'
                    ),
                    EVENT.format(n=2, source="kubelet vm", rest="Failed: Error: ErrImagePull"),
                ]
            ),
            'Failed: Failed to pull image "r:N/x:N.N": not found',
        ),
    ],
)
def test_kubelet_hint(timeline: str, expected: str | None) -> None:
    assert kubelet_hint(timeline) == expected
