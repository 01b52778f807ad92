"""The certified report: the shards' JUnit merged, counted, failures grouped by cause with their location."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeagent.conformance import merge as merge_module
from nodeagent.conformance.junit import Outcome, parse_junit
from nodeagent.conformance.merge import (
    JUNIT_FILE,
    MAX_LISTED,
    REPORT_FILE,
    failure_location,
    format_report,
    junit_xml,
    merge,
    write_report,
)
from nodeagent.conformance.resume import Attempt, AttemptRecord, attempt_dir, read_attempts
from nodeagent.conformance.shards import Plan, Shard

TESTDATA = Path(__file__).with_name("testdata")
SMALL = TESTDATA / "junit_small.xml"  # passed, failed x2 (one cause), timedout, panicked, skipped, suite node failed
INTERRUPTED = TESTDATA / "certified" / "shard2-attempt1-interrupted.xml"
SHARD1 = (
    "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
    "[sig-storage] Downward API volume should provide podname only [NodeConformance] [Conformance]",
    "[sig-storage] Downward API volume should provide container's cpu limit [NodeConformance] [Conformance]",
    "[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]",
    "[sig-node] Sysctls [LinuxOnly] should support sysctls [MinimumKubeletVersion:1.21] [Environment:NotInUbuntu] "
    "[NodeConformance]",
    "[sig-node] Container Runtime blackbox test when running a container with a new image should not be able to pull "
    "image from invalid registry [NodeConformance]",
)
SHARD2 = (
    "[sig-storage] Downward API volume should update annotations on modification [NodeConformance] [Conformance]",
    "[sig-storage] Downward API volume should provide container's memory limit [NodeConformance] [Conformance]",
)
PLAN = Plan(
    description="Kubernetes e2e suite",
    focus=r"\[Conformance\]",
    label_filter="",
    narrow="",
    budget_seconds=2700,
    shards=(Shard(1, False, 2, SHARD1, 2400), Shard(2, True, 1, SHARD2, 180)),
    created="2026-11-28T22:00:00+00:00",
    version="nodeagent 0.1.0 (commit abc), e2e.test v1.34.4",
)


def _attempt(number: int, path: Path, asked: tuple[str, ...], seconds: float | None) -> Attempt:
    record = AttemptRecord(asked, 2, "2026-11-28T22:00:00+00:00", "v", 1 if seconds else None, seconds)
    return Attempt(number, path.parent, record, tuple(parse_junit(path.read_text())))


def _merged() -> tuple[str, list[str]]:
    attempts = {1: [_attempt(1, SMALL, SHARD1, 2712.0)], 2: [_attempt(1, INTERRUPTED, SHARD2, None)]}
    merged = merge(PLAN, attempts)
    return format_report(merged), merged.not_run


def test_counts_and_what_is_not_run() -> None:
    text, not_run = _merged()
    # Shard 1: host IP passed, two Downward API failed, submitted-and-removed panicked, the invalid registry one
    # timed out; Sysctls skipped itself (with a reason). Shard 2: annotations passed before the interrupt; memory
    # limit never started.
    assert "passed 2, failed 4, skipped 1, not run 1 (of 8 specs)" in text
    assert not_run == [SHARD2[1]]
    assert f"  shard 2: {SHARD2[1]}" in text


def test_failures_grouped_by_cause_with_their_location() -> None:
    text, _ = _merged()
    lines = text.splitlines()
    first = lines.index("failed, by cause:") + 1
    # The two Downward API specs timed out on one missing image: one group, the kubelet's warning as its cause.
    assert lines[first].startswith("  2 x kubelet: Failed: Failed to pull image")
    assert "      at k8s.io/kubernetes@v1.34.4/test/e2e/framework/pod/output/output.go:263" in lines[first : first + 4]
    assert "  1 x Test Panicked" in lines
    assert "      at runtime/panic.go:262" in lines


def test_shards_with_their_measured_attempts_and_failed_suite_nodes() -> None:
    text, _ = _merged()
    assert "  shard 1 (2 processes, 6 specs, ~40 min): 6 of 6 done" in text
    assert "      attempt 1: 6 specs, 2 process(es), 45.2 min, exit 1" in text
    assert "  shard 2 (serial, 1 process, 2 specs, ~3 min): 1 of 2 done" in text
    assert "      attempt 1: 2 specs, 2 process(es), did not end (killed)" in text
    assert "  suite node failed in shard 1, attempt 1: [ReportAfterSuite]" in text


def test_an_attempt_whose_ginkgo_still_runs_is_running_not_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--report DIR` during a shard (seen in the first certified run) called the running attempt killed."""
    monkeypatch.setattr(merge_module, "running_ginkgo", lambda attempt: 4242)
    text, _ = _merged()
    assert "      attempt 1: 2 specs, 2 process(es), running (ginkgo PID 4242)" in text
    assert "did not end (killed)" not in text


def test_failure_location() -> None:
    message = "[FAILED] boom\nIn [It] at: k8s.io/kubernetes@v1.34.4/test/e2e/x.go:12 @ 11/28/26 22:45:52.647\n"
    assert failure_location(message) == "k8s.io/kubernetes@v1.34.4/test/e2e/x.go:12"
    assert failure_location("[FAILED] boom") is None


def test_merged_junit_reads_back_as_the_results() -> None:
    merged = merge(PLAN, {1: [_attempt(1, SMALL, SHARD1, 1.0)], 2: [_attempt(1, INTERRUPTED, SHARD2, None)]})
    again = parse_junit(junit_xml(merged.results, suite_name=PLAN.description))
    assert [(r.name, r.state, r.outcome, r.message, r.timeline) for r in again] == [
        (r.name, r.state, r.outcome, r.message, r.timeline) for r in merged.results
    ]
    assert {r.outcome for r in again} == {Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED}


def test_write_report_from_disk(tmp_path: Path) -> None:
    PLAN.save(tmp_path)
    first = attempt_dir(tmp_path, 1, 1)
    first.mkdir(parents=True)
    shutil.copy(SMALL, first / "junit_01.xml")
    (first / "attempt.json").write_text(AttemptRecord(SHARD1, 2, "t", "v", 1, 60.0).to_json())
    merged = merge(PLAN, {shard.index: read_attempts(tmp_path, shard.index) for shard in PLAN.shards})
    text = write_report(tmp_path, merged)
    assert (tmp_path / REPORT_FILE).read_text() == text + "\n"
    assert "not run 2 (of 8 specs)" in text and "shard 2 (serial, 1 process, 2 specs, ~3 min): 0 of 2 done" in text
    assert len(parse_junit((tmp_path / JUNIT_FILE).read_text())) == 6
    assert not merged.complete


def test_a_long_list_of_specs_not_run_is_cut() -> None:
    names = tuple(f"[sig-a] spec {i:03d} [Conformance]" for i in range(MAX_LISTED + 5))
    plan = Plan("Kubernetes e2e suite", r"\[Conformance\]", "", "", 2700, (Shard(1, False, 2, names, 900),), "t", "v")
    text = format_report(merge(plan, {}))
    assert "not run 25 (of 25 specs)" in text
    assert f"  shard 1: {names[MAX_LISTED - 1]}" in text and names[MAX_LISTED] not in text
    assert "  shard 1: ... and 5 more (the shard's specs: plan.json)" in text
