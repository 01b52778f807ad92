"""What a run came to, from its timeline (pure): each pod's outcome, the pressure intervals, the expectations met or
not, and the summary table printed at the end."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.experiment.scenario import Scenario
from nodeagent.experiment.timeline import Record


@dataclass(frozen=True)
class PodOutcome:
    name: str
    outcome: str  # evicted | refused | failed | running | pending | succeeded | never created
    t: float | None = None
    qos: str = ""
    priority: int | None = None
    rank: int | None = None
    message: str = ""


@dataclass(frozen=True)
class Interval:
    condition: str
    start: float
    end: float | None  # None: still True at the end


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str


def pod_outcomes(scenario: Scenario, records: Sequence[Record]) -> list[PodOutcome]:
    result = []
    for plan in scenario.pods:
        mine = [r for r in records if r.get("pod") == plan.name]
        phases = [r for r in mine if r["kind"] == "pod"]
        qos = next((str(r["qos"]) for r in phases if r.get("qos")), "")
        priority = next((r["priority"] for r in phases if r.get("priority") is not None), plan.priority)
        evicted = next((r for r in mine if r["kind"] == "eviction"), None)
        refused = next((r for r in mine if r["kind"] == "admission-refused"), None)
        if evicted is not None:
            outcome = PodOutcome(
                plan.name, "evicted", evicted["t"], qos, priority, evicted.get("rank"), evicted.get("message", "")
            )
        elif refused is not None:
            outcome = PodOutcome(plan.name, "refused", refused["t"], qos, priority, None, refused.get("message", ""))
        elif phases:
            last = phases[-1]
            phase = str(last.get("phase", "Pending")).lower()
            outcome = PodOutcome(plan.name, phase, last["t"], qos, priority, None, str(last.get("message", "")))
        else:
            outcome = PodOutcome(plan.name, "never created", None, qos, priority)
        result.append(outcome)
    return result


def pressure_intervals(records: Sequence[Record]) -> list[Interval]:
    result: list[Interval] = []
    open_since: dict[str, float] = {}
    for record in records:
        if record["kind"] != "condition":
            continue
        name, status = str(record["condition"]), record.get("status")
        if status == "True" and name not in open_since:
            open_since[name] = record["t"]
        elif status != "True" and name in open_since:
            result.append(Interval(name, open_since.pop(name), record["t"]))
    result.extend(Interval(name, start, None) for name, start in open_since.items())
    return sorted(result, key=lambda i: i.start)


def check_expectations(scenario: Scenario, outcomes: Sequence[PodOutcome]) -> list[Check]:
    by_name = {o.name: o for o in outcomes}
    checks = []
    expect = scenario.expect
    evicted_times = []
    for name in expect.evicted:
        outcome = by_name[name]
        ok = outcome.outcome == "evicted"
        checks.append(Check(ok, f"{name} evicted" if ok else f"{name} evicted (it was: {outcome.outcome})"))
        if ok and outcome.t is not None:
            evicted_times.append((outcome.t, name))
    if len(expect.evicted) > 1 and len(evicted_times) == len(expect.evicted):
        order = [name for _, name in sorted(evicted_times)]
        ok = order == list(expect.evicted)
        text = f"evicted in the order {', '.join(expect.evicted)}"
        checks.append(Check(ok, text if ok else f"{text} (it was: {', '.join(order)})"))
    for name in expect.not_evicted:
        outcome = by_name[name]
        ok = outcome.outcome not in ("evicted", "refused")
        checks.append(Check(ok, f"{name} not evicted" + ("" if ok else f" (it was {outcome.outcome})")))
    for name in expect.refused:
        outcome = by_name[name]
        ok = outcome.outcome == "refused"
        checks.append(Check(ok, f"{name} refused at admission" + ("" if ok else f" (it was {outcome.outcome})")))
    return checks


def _cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_table(scenario: Scenario, records: Sequence[Record], *, message_width: int = 90) -> str:
    outcomes = pod_outcomes(scenario, records)
    rows = [("pod", "qos", "priority", "outcome", "at (s)", "message")]
    for o in outcomes:
        outcome = o.outcome
        at = f"{o.t:.1f}" if o.t is not None and o.outcome in ("evicted", "refused") else ""
        priority = "" if o.priority is None else str(o.priority)
        rows.append((o.name, o.qos, priority, outcome, at, _cell(o.message, message_width)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"scenario {scenario.name}: {len(records)} timeline records"]
    if scenario.description.strip():
        lines.extend(textwrap.wrap(" ".join(scenario.description.split()), 110, initial_indent="  ",
                                   subsequent_indent="  "))  # fmt: skip
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) if i < 5 else cell for i, cell in enumerate(row)).rstrip())
    intervals = pressure_intervals(records)
    if intervals:
        spans = [f"{i.condition} {i.start:.1f} to {'end' if i.end is None else f'{i.end:.1f}'} s" for i in intervals]
        lines.append("pressure: " + ", ".join(spans))
    else:
        lines.append("pressure: none")
    refused = [r for r in records if r["kind"] == "admission-refused"]
    reclaims = [r for r in records if r["kind"] == "reclaim"]
    lines.append(f"evictions: {sum(o.outcome == 'evicted' for o in outcomes)}, admissions refused: {len(refused)}, "
                 f"reclaim attempts: {len(reclaims)}")  # fmt: skip
    checks = check_expectations(scenario, outcomes)
    if checks:
        passed = all(c.ok for c in checks)
        lines.append(f"expectations: {'PASS' if passed else 'FAIL'}")
        lines.extend(f"  {'ok ' if c.ok else 'NOT'} {c.text}" for c in checks)
    return "\n".join(lines)


__all__ = [
    "Check",
    "Interval",
    "PodOutcome",
    "check_expectations",
    "pod_outcomes",
    "pressure_intervals",
    "summary_table",
]
