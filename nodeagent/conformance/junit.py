"""Read the suite's JUnit report (`<report-dir>/junit_01.xml`) back into one record per spec.

The e2e framework writes it with ginkgo's JUnit reporter and its own settings (test/e2e/framework/internal/junit):
one <testcase> per node of the suite, named `[<node type>] <full text>` (`[It] [sig-node] Pods should ...`,
`[SynchronizedBeforeSuite]`, `[ReportAfterSuite] ...`), with `status` the ginkgo state (passed, skipped, failed,
timedout, panicked, interrupted, aborted, pending), the failure's `message` attribute left empty and the failure text
in the element's body (`[FAILED] <message>` and a line `In [It] at: <file:line> @ <time>`). A failed spec has its
timeline in <system-err>: steps, logs, and the events of its namespace that the framework dumps on failure. A spec
that focus/skip filtered out is a testcase too, skipped with the bare message "skipped"; a spec that skipped itself
at run time (e2eskipper) has "skipped - <reason>".
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from nodeagent.conformance.errors import ReportError

IT_PREFIX = "[It] "
FAILED_STATES = frozenset({"failed", "timedout", "panicked", "interrupted", "aborted"})


class Outcome(Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # skipped itself at run time, with a reason
    NOT_SELECTED = "not-selected"  # left out by focus/skip (or pending)


@dataclass(frozen=True)
class SpecResult:
    name: str  # the full text, without the `[It] ` prefix
    node_type: str  # "It", "SynchronizedBeforeSuite", "ReportAfterSuite", ...
    state: str  # ginkgo's state as written
    outcome: Outcome
    seconds: float
    message: str  # the failure text (body) or the skip message
    timeline: str = ""  # a failed spec's timeline (<system-err>): its steps, logs and the namespace's events

    @property
    def is_spec(self) -> bool:
        return self.node_type == "It"


def _node_type(name: str) -> tuple[str, str]:
    if name.startswith("[") and "]" in name:
        node, _, rest = name[1:].partition("]")
        return node, rest.strip()
    return "It", name


def outcome_of(state: str, skip_message: str) -> Outcome:
    if state == "passed":
        return Outcome.PASSED
    if state in FAILED_STATES:
        return Outcome.FAILED
    if state == "skipped" and skip_message.startswith("skipped - "):
        return Outcome.SKIPPED
    return Outcome.NOT_SELECTED


def parse_junit(text: str) -> list[SpecResult]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ReportError(f"the JUnit report is not XML: {exc}") from exc
    results = []
    for case in root.iter("testcase"):
        node_type, name = _node_type(case.get("name", ""))
        state = case.get("status", "")
        skipped = case.find("skipped")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skip_message = skipped.get("message", "") if skipped is not None else ""
        # The framework leaves the failure's message attribute empty: the text is the element's body.
        failure_text = "" if failure is None else (failure.text or "").strip() or failure.get("message", "")
        message = failure_text if failure is not None else skip_message
        if not state:  # reporters other than ginkgo's: derive the state from the children
            state = "failed" if failure is not None else "skipped" if skipped is not None else "passed"
        results.append(
            SpecResult(
                name=name,
                node_type=node_type,
                state=state,
                outcome=outcome_of(state, skip_message),
                seconds=float(case.get("time", "0") or 0),
                message=message,
                timeline=case.findtext("system-err") or "",
            )
        )
    return results


def read_junit(report_dir: Path) -> list[SpecResult]:
    """The results in the report directory's JUnit files (the suite writes one, `junit_01.xml`)."""
    files = sorted(report_dir.glob("junit_*.xml"))
    if not files:
        raise ReportError(f"no JUnit report (junit_*.xml) in {report_dir}: the suite did not get to write one")
    results: list[SpecResult] = []
    for path in files:
        results.extend(parse_junit(path.read_text(errors="replace")))
    return results
