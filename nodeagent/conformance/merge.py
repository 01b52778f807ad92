"""The certified run's report: the shards' JUnit merged into one result per planned spec.

Each spec's result is the latest end any attempt of its shard recorded (resume.py); a spec with none is "not run".
The report counts passed / failed / skipped / not run of the plan's total, groups the failures by cause as a single
run's summary does (summary.py: the message's first telling line, scrubbed), with where each failed (`In [It] at:
file:line`), and lists each shard's attempts with their measured minutes, so the next plan can use real times.
It goes to `report.txt` and, as one JUnit file of the merged results, `junit_certified.xml`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeagent.conformance import summary
from nodeagent.conformance.junit import Outcome, SpecResult
from nodeagent.conformance.resume import Attempt, latest_ends, missing, running_ginkgo
from nodeagent.conformance.shards import Plan, Shard

REPORT_FILE = "report.txt"
JUNIT_FILE = "junit_certified.xml"
# Specs not run yet listed per shard; a fresh plan has hundreds.
MAX_LISTED = 20
_LOCATION = re.compile(r"^\s*In \[[^\]]+\] at: (?P<where>\S+)", re.MULTILINE)


@dataclass(frozen=True)
class ShardState:
    shard: Shard
    attempts: tuple[Attempt, ...]
    ends: Mapping[str, SpecResult]
    missing: tuple[str, ...]


@dataclass(frozen=True)
class Merged:
    plan: Plan
    shards: tuple[ShardState, ...]

    @property
    def results(self) -> list[SpecResult]:
        """One result per planned spec that has an end, in the plan's order."""
        return [state.ends[name] for state in self.shards for name in state.shard.specs if name in state.ends]

    @property
    def not_run(self) -> list[str]:
        return [name for state in self.shards for name in state.missing]

    @property
    def suite_failures(self) -> list[tuple[int, int, SpecResult]]:
        """Suite nodes (BeforeSuite, AfterSuite, report nodes) that failed: (shard, attempt, result)."""
        return [
            (state.shard.index, attempt.number, result)
            for state in self.shards
            for attempt in state.attempts
            for result in attempt.results or ()
            if not result.is_spec and result.outcome is Outcome.FAILED
        ]

    @property
    def complete(self) -> bool:
        return not self.not_run


def merge(plan: Plan, attempts: Mapping[int, Sequence[Attempt]]) -> Merged:
    states = []
    for shard in plan.shards:
        tried = tuple(attempts.get(shard.index, ()))
        states.append(ShardState(shard, tried, latest_ends(shard, tried), missing(shard, tried)))
    return Merged(plan, tuple(states))


def failure_location(message: str) -> str | None:
    """`file:line` of `In [It] at: file:line @ time`, the line ginkgo's failure text ends with."""
    match = _LOCATION.search(message)
    return match.group("where") if match is not None else None


def _attempt_line(attempt: Attempt) -> str:
    record = attempt.record
    if record is None:
        return f"attempt {attempt.number}: no attempt.json"
    if record.seconds is not None:
        took = f"{record.seconds / 60:.1f} min"
    elif (pid := running_ginkgo(attempt)) is not None:
        # A report printed while the shard runs (--report DIR, or another shard's end): not killed, not ended yet.
        took = f"running (ginkgo PID {pid})"
    else:
        took = "did not end (killed)"
    code = f", exit {record.exit_code}" if record.exit_code is not None else ""
    report = "" if attempt.results is not None else ", no JUnit report"
    return f"attempt {attempt.number}: {len(record.asked)} specs, {record.procs} process(es), {took}{code}{report}"


def format_report(merged: Merged) -> str:
    plan = merged.plan
    results = merged.results
    counts = summary.count(results)
    not_run = merged.not_run
    heading = "certified conformance" if plan.suite == "certified" else f"{plan.suite} suite"
    lines = [
        f"{heading}: focus {plan.focus}"
        + (", no skip" if plan.suite == "certified" else "")
        + (f", narrowed by {plan.narrow}" if plan.narrow else "")
        + (f", label filter {plan.label_filter}" if plan.label_filter else ""),
        f"plan of {plan.created}; {plan.version}",
        f"passed {counts.passed}, failed {counts.failed}, skipped {counts.skipped}, not run {len(not_run)} "
        f"(of {plan.total} specs)",
        "",
        "shards (estimated minutes, then each attempt as measured):",
    ]
    for state in merged.shards:
        done = len(state.shard.specs) - len(state.missing)
        lines.append(f"  {state.shard.label}: {done} of {len(state.shard.specs)} done")
        lines.extend(f"      {_attempt_line(attempt)}" for attempt in state.attempts)
    for shard_index, attempt_number, result in merged.suite_failures:
        lines.append(f"  suite node failed in shard {shard_index}, attempt {attempt_number}: [{result.node_type}]")
        lines.append(f"      {summary.normalise_cause(result.message)}")
    groups = summary.group_failures(results)
    if groups:
        lines += ["", "failed, by cause:"]
        by_name = {result.name: result for result in results}
        for group in groups:
            lines.append(f"  {len(group.specs)} x {group.cause}")
            where = sorted({w for name in group.specs if (w := failure_location(by_name[name].message)) is not None})
            lines.extend(f"      at {location}" for location in where)
            lines.extend(f"      ({note})" for note in group.notes)
            lines.extend(f"      - {spec}" for spec in group.specs)
    reasons = summary.skip_reasons(results)
    if reasons:
        lines += ["", "skipped, by reason:"]
        lines.extend(f"  {n} x {reason}" for reason, n in reasons)
    if not_run:
        lines += ["", "not run yet (`--resume DIR` runs them):"]
        for state in merged.shards:
            lines.extend(f"  shard {state.shard.index}: {name}" for name in state.missing[:MAX_LISTED])
            if len(state.missing) > MAX_LISTED:
                more = len(state.missing) - MAX_LISTED
                lines.append(f"  shard {state.shard.index}: ... and {more} more (the shard's specs: plan.json)")
    return "\n".join(lines)


def junit_xml(results: Sequence[SpecResult], *, suite_name: str) -> str:
    """The merged results as one JUnit testsuite, in the shape the framework writes (junit.py reads it back)."""
    failed = sum(result.outcome is Outcome.FAILED for result in results)
    skipped = sum(result.outcome is Outcome.SKIPPED for result in results)
    total_time = sum(result.seconds for result in results)
    suites = ET.Element("testsuites", tests=str(len(results)), failures=str(failed), time=f"{total_time:.3f}")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=suite_name,
        tests=str(len(results)),
        failures=str(failed),
        skipped=str(skipped),
        errors="0",
        time=f"{total_time:.3f}",
    )
    for result in results:
        case = ET.SubElement(
            suite,
            "testcase",
            name=f"[{result.node_type}] {result.name}",
            classname=suite_name,
            status=result.state,
            time=f"{result.seconds:.3f}",
        )
        if result.outcome is Outcome.FAILED:
            failure = ET.SubElement(case, "failure", message="", type=result.state)
            failure.text = result.message
        elif result.outcome is Outcome.SKIPPED:
            ET.SubElement(case, "skipped", message=result.message)
        if result.timeline:
            ET.SubElement(case, "system-err").text = result.timeline
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def write_report(root: Path, merged: Merged) -> str:
    """report.txt and junit_certified.xml into the run's directory; the report's text."""
    text = format_report(merged)
    (root / REPORT_FILE).write_text(text + "\n")
    junit_file = JUNIT_FILE if merged.plan.suite == "certified" else f"junit_{merged.plan.suite}.xml"
    (root / junit_file).write_text(junit_xml(merged.results, suite_name=merged.plan.description))
    return text
