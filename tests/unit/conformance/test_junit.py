"""Reading the framework's JUnit report back: node types, outcomes, failure text from the body."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.conformance.errors import ReportError
from nodeagent.conformance.junit import Outcome, outcome_of, parse_junit, read_junit

TESTDATA = Path(__file__).with_name("testdata")


@pytest.mark.parametrize(
    ("state", "skip_message", "expected"),
    [
        ("passed", "", Outcome.PASSED),
        ("failed", "", Outcome.FAILED),
        ("timedout", "", Outcome.FAILED),
        ("panicked", "", Outcome.FAILED),
        ("interrupted", "", Outcome.FAILED),
        ("aborted", "", Outcome.FAILED),
        ("skipped", "skipped - Only supported for providers [gce]", Outcome.SKIPPED),
        ("skipped", "skipped", Outcome.NOT_SELECTED),  # left out by focus/skip
        ("pending", "pending", Outcome.NOT_SELECTED),
    ],
)
def test_outcome_of(state: str, skip_message: str, expected: Outcome) -> None:
    assert outcome_of(state, skip_message) is expected


def test_parse_the_recorded_report() -> None:
    results = parse_junit((TESTDATA / "junit_small.xml").read_text())
    by_name = {r.name: r for r in results}
    assert len(results) == 10
    host_ip = by_name["[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"]
    assert (host_ip.node_type, host_ip.outcome, host_ip.seconds) == ("It", Outcome.PASSED, 2.05)
    before = by_name[""]
    assert (before.node_type, before.is_spec, before.outcome) == ("SynchronizedBeforeSuite", False, Outcome.PASSED)
    podname = by_name["[sig-storage] Downward API volume should provide podname only [NodeConformance] [Conformance]"]
    assert podname.outcome is Outcome.FAILED
    assert podname.message.startswith("[FAILED] Timed out after 300.001s.\nexpected pod")
    panicked = by_name["[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]"]
    assert (panicked.state, panicked.outcome) == ("panicked", Outcome.FAILED)  # an <error>, not a <failure>
    assert "nil pointer dereference" in panicked.message
    report = by_name["Kubernetes e2e JUnit report"]
    assert (report.node_type, report.is_spec, report.outcome) == ("ReportAfterSuite", False, Outcome.FAILED)


def test_read_junit_needs_a_report(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no JUnit report"):
        read_junit(tmp_path)
    (tmp_path / "junit_01.xml").write_text("<testsuites")
    with pytest.raises(ReportError, match="not XML"):
        read_junit(tmp_path)
    (tmp_path / "junit_01.xml").write_text((TESTDATA / "junit_small.xml").read_text())
    assert len(read_junit(tmp_path)) == 10
