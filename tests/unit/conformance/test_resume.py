"""What a shard has done and what `--resume` runs again, from the attempts on disk.

The fixtures are real JUnit reports of the framework, cut down to a few testcases: shard 2 of a run that was
interrupted (SIGTERM to `nodeagent conformance`, one SIGINT to ginkgo) after 3 of its 10 specs, and the attempt that
`--resume` then ran for the 7 left.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeagent.conformance.junit import Outcome, SpecResult, parse_junit
from nodeagent.conformance.resume import (
    Attempt,
    AttemptRecord,
    attempt_dir,
    is_end,
    latest_ends,
    missing,
    next_attempt,
    read_attempts,
    running_ginkgo,
)
from nodeagent.conformance.shards import Shard

TESTDATA = Path(__file__).with_name("testdata") / "certified"
DAPI = "[sig-storage] Downward API volume should "
SHARD2 = Shard(
    2,
    False,
    2,
    tuple(
        DAPI + rest
        for rest in (
            "provide container's cpu request [NodeConformance] [Conformance]",
            "provide container's memory limit [NodeConformance] [Conformance]",
            "provide container's memory request [NodeConformance] [Conformance]",
            "provide node allocatable (cpu) as default cpu limit if the limit is not set [NodeConformance] "
            "[Conformance]",
            "provide node allocatable (memory) as default memory limit if the limit is not set [NodeConformance] "
            "[Conformance]",
            "provide podname only [NodeConformance] [Conformance]",
            "set DefaultMode on files [LinuxOnly] [NodeConformance] [Conformance]",
            "set mode on item file [LinuxOnly] [NodeConformance] [Conformance]",
            "update annotations on modification [NodeConformance] [Conformance]",
            "update labels on modification [NodeConformance] [Conformance]",
        )
    ),
    90,
)
DONE_BEFORE_THE_INTERRUPT = {
    DAPI + "provide podname only [NodeConformance] [Conformance]",
    DAPI + "set DefaultMode on files [LinuxOnly] [NodeConformance] [Conformance]",
    DAPI + "update annotations on modification [NodeConformance] [Conformance]",
}


def results(name: str) -> tuple[SpecResult, ...]:
    return tuple(parse_junit((TESTDATA / name).read_text()))


def result(state: str, outcome: Outcome, *, node_type: str = "It") -> SpecResult:
    return SpecResult(name="x", node_type=node_type, state=state, outcome=outcome, seconds=1.0, message="")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (result("passed", Outcome.PASSED), True),
        (result("failed", Outcome.FAILED), True),
        (result("timedout", Outcome.FAILED), True),
        (result("aborted", Outcome.FAILED), True),  # AbortSuite: running it again aborts again
        (result("skipped", Outcome.SKIPPED), True),  # the spec skipped itself, with a reason
        (result("interrupted", Outcome.FAILED), False),  # stopped by our SIGINT: run it again
        (result("skipped", Outcome.NOT_SELECTED), False),  # not started before the interrupt, or not focused
        (result("passed", Outcome.PASSED, node_type="SynchronizedBeforeSuite"), False),
    ],
)
def test_is_end(spec: SpecResult, expected: bool) -> None:
    assert is_end(spec) is expected


def attempt(number: int, fixture: str | None) -> Attempt:
    return Attempt(number, Path(f"/x/attempt-{number}"), None, results(fixture) if fixture else None)


def test_an_interrupted_attempt_leaves_what_did_not_end() -> None:
    interrupted = attempt(1, "shard2-attempt1-interrupted.xml")
    # The interrupted report lists the two running specs as `interrupted` and the five not started as bare
    # "skipped"; a spec of another shard that the report happens to hold (host IP, not selected) is not counted.
    assert set(latest_ends(SHARD2, [interrupted])) == DONE_BEFORE_THE_INTERRUPT
    left = missing(SHARD2, [interrupted])
    assert len(left) == 7 and set(left) == set(SHARD2.specs) - DONE_BEFORE_THE_INTERRUPT
    assert list(left) == [name for name in SHARD2.specs if name in left]  # in the plan's order


def test_the_resumed_attempt_completes_the_shard() -> None:
    attempts = [attempt(1, "shard2-attempt1-interrupted.xml"), attempt(2, "shard2-attempt2.xml")]
    assert missing(SHARD2, attempts) == ()
    ends = latest_ends(SHARD2, attempts)
    assert {r.outcome for r in ends.values()} == {Outcome.PASSED}


def test_an_attempt_killed_before_its_report_counts_for_nothing() -> None:
    assert missing(SHARD2, [attempt(1, None)]) == SHARD2.specs
    # ... and does not undo what an earlier attempt ended.
    attempts = [attempt(1, "shard2-attempt1-interrupted.xml"), attempt(2, None)]
    assert len(missing(SHARD2, attempts)) == 7


def test_the_latest_end_wins() -> None:
    name = SHARD2.specs[0]
    first = SpecResult(name, "It", "failed", Outcome.FAILED, 3.0, "[FAILED] boom")
    second = SpecResult(name, "It", "passed", Outcome.PASSED, 2.0, "")
    interrupted = SpecResult(name, "It", "interrupted", Outcome.FAILED, 1.0, "[INTERRUPTED] Interrupted by User")
    attempts = [
        Attempt(1, Path("a1"), None, (first,)),
        Attempt(2, Path("a2"), None, (second,)),
        Attempt(3, Path("a3"), None, (interrupted,)),
    ]
    assert latest_ends(SHARD2, attempts)[name] is second


def test_read_attempts_from_disk(tmp_path: Path) -> None:
    for number, fixture in ((1, "shard2-attempt1-interrupted.xml"), (2, None), (10, "shard2-attempt2.xml")):
        where = attempt_dir(tmp_path, 2, number)
        where.mkdir(parents=True)
        if fixture is not None:
            shutil.copy(TESTDATA / fixture, where / "junit_01.xml")
    record = AttemptRecord(asked=SHARD2.specs, procs=2, started="2026-11-28T22:45:30+00:00", version="v")
    (attempt_dir(tmp_path, 2, 1) / "attempt.json").write_text(record.to_json())
    (attempt_dir(tmp_path, 2, 10) / "attempt.json").write_text("not json")
    (tmp_path / "shards" / "02" / "attempt-x").mkdir()  # not an attempt

    attempts = read_attempts(tmp_path, 2)
    assert [a.number for a in attempts] == [1, 2, 10]  # by number, not by name (attempt-10 after attempt-2)
    assert attempts[0].record == record
    assert attempts[1].results is None and attempts[1].record is None
    assert attempts[2].record is None and attempts[2].results is not None
    assert next_attempt(attempts) == 11
    assert missing(SHARD2, attempts) == ()
    assert read_attempts(tmp_path, 3) == [] and next_attempt([]) == 1


def test_attempt_record_round_trip() -> None:
    record = AttemptRecord(("a", "b"), 1, "2026-11-28T22:45:30+00:00", "v", exit_code=1, seconds=21.3)
    assert AttemptRecord.from_json(record.to_json()) == record


def test_running_ginkgo(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "41").mkdir(parents=True)
    (proc / "41" / "cmdline").write_bytes(b"/cache/e2e/ginkgo\0--procs=2\0")
    (proc / "42").mkdir()
    (proc / "42" / "cmdline").write_bytes(b"/usr/bin/sleep\0100\0")  # the PID was reused by another program
    report_dir = tmp_path / "attempt-1"
    report_dir.mkdir()
    unended = Attempt(1, report_dir, AttemptRecord(("a",), 2, "t", "v"), None)
    ended = Attempt(1, report_dir, AttemptRecord(("a",), 2, "t", "v", exit_code=0, seconds=1.0), None)
    assert running_ginkgo(unended, proc) is None  # no ginkgo.pid
    (report_dir / "ginkgo.pid").write_text("41\n")
    assert running_ginkgo(unended, proc) == 41
    assert running_ginkgo(Attempt(1, report_dir, None, None), proc) == 41
    assert running_ginkgo(ended, proc) is None  # its driver saw it end
    (report_dir / "ginkgo.pid").write_text("42\n")
    assert running_ginkgo(unended, proc) is None
    (report_dir / "ginkgo.pid").write_text("43\n")  # gone
    assert running_ginkgo(unended, proc) is None
    (proc / "44").mkdir()
    (proc / "44" / "cmdline").write_bytes(b"/cache/e2e_node.test\0--ginkgo.focus=x\0")  # the node suite runs alone
    (report_dir / "ginkgo.pid").write_text("44\n")
    assert running_ginkgo(unended, proc) == 44
