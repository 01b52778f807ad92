"""`nodeagent experiment eviction S.yaml --sweep SETTING=V1,V2,...`: one scenario run at several values of one eviction
setting, and what each run came to (pure: the parsing, the scenario documents, the summary's numbers and table).

The sweep is given on the command line, not in the scenario file: a scenario describes one run (its `expect` is
about one set of thresholds), and a flag sweeps any scenario already written, the shipped ones included. SETTING is
a field of the scenario's `eviction` map, a per-signal one as `FIELD.SIGNAL` (`evictionHard.memory.available`,
`evictionSoftGracePeriod.memory.available`) or a plain one (`evictionPressureTransitionPeriod`); a value is
anything that field takes in a scenario, relative thresholds (`current-200Mi`) included. Each run's scenario is the
file's with that one value set, checked as any scenario is (a bad value is named before a testbed comes up).

The summary, per value: the threshold the agent had (for a threshold setting, as the run recorded it beside the
signal, so a relative one shows what it resolved to), the first eviction at or after second 0, and the victims in
the order they were evicted.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eviction.signals import BYTE_SIGNALS, parse_signal
from nodeagent.experiment.errors import ScenarioError
from nodeagent.experiment.scenario import EVICTION_FIELDS, Scenario, parse_scenario
from nodeagent.experiment.timeline import Record

MI = 1 << 20
PER_SIGNAL = ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim")
# The record field that carries each threshold setting's value, as the run saw it.
THRESHOLD_KEY = {"evictionHard": "threshold", "evictionSoft": "soft_threshold"}
# The summary's columns after the swept value's.
COLUMNS = ("threshold", "crossed (s)", "first eviction (s)", "victims, in order", "refused at admission")
_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")


@dataclass(frozen=True)
class SweepSpec:
    field: str  # an eviction field, e.g. evictionHard
    signal: str | None  # its signal for a per-signal field, e.g. memory.available
    values: tuple[str, ...]

    @property
    def setting(self) -> str:
        return f"{self.field}.{self.signal}" if self.signal else self.field


@dataclass(frozen=True)
class SweepRow:
    value: str
    threshold: int | None  # what the run's agent had (bytes, or a count), for a threshold setting
    first_eviction: float | None  # seconds since second 0; None: nothing was evicted
    victims: tuple[str, ...]  # in the order they were evicted
    refused: tuple[str, ...] = ()  # refused at admission
    # When the recorder (every 2 s) first read the signal below the threshold at or after second 0: the agent acts at
    # its own next reading, so the gap to the first eviction is its monitoring period at work.
    crossing: float | None = None


def parse_sweep(text: str) -> SweepSpec:
    """`FIELD[.SIGNAL]=V1,V2,...` as the sweep. Raises ScenarioError naming the problem."""
    setting, sep, listed = text.partition("=")
    setting = setting.strip()
    if not sep:
        raise ScenarioError("--sweep", [f"expected SETTING=V1,V2,... (e.g. evictionHard.memory.available=100Mi,"
                                        f"200Mi), got {text!r}"])  # fmt: skip
    field, _, signal = setting.partition(".")
    problems: list[str] = []
    if field not in EVICTION_FIELDS:
        problems.append(f"{setting}: unknown eviction setting (known: {', '.join(EVICTION_FIELDS)})")
    elif field in PER_SIGNAL and not signal:
        problems.append(f"{setting}: {field} is per signal: give {field}.SIGNAL (e.g. {field}.memory.available)")
    elif field in PER_SIGNAL and parse_signal(signal) is None:
        problems.append(f"{setting}: unknown signal {signal!r}")
    elif field not in PER_SIGNAL and signal:
        problems.append(f"{setting}: {field} is not per signal: give it without .{signal}")
    values = tuple(v.strip() for v in listed.split(","))
    if any(not v for v in values):
        problems.append(f"{setting}: an empty value in {listed!r}")
    elif len(set(values)) != len(values):
        problems.append(f"{setting}: a value is given twice in {listed!r}")
    if problems:
        raise ScenarioError("--sweep", problems)
    return SweepSpec(field, signal or None, values)


def _value(field: str, text: str) -> Any:
    # As YAML would read it from a scenario: evictionMaxPodGracePeriod is an integer; the rest are quantities,
    # durations or percentages, which a scenario gives as strings.
    if field == "evictionMaxPodGracePeriod" and re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def scenario_doc(doc: Mapping[str, Any], spec: SweepSpec, value: str) -> dict[str, Any]:
    """The scenario document with the swept setting at `value` (a copy: `doc` is left as it was)."""
    result = copy.deepcopy(dict(doc))
    eviction = result.get("eviction")
    eviction = dict(eviction) if isinstance(eviction, Mapping) else {}
    if spec.signal is None:
        eviction[spec.field] = _value(spec.field, value)
    else:
        per_signal = eviction.get(spec.field)
        per_signal = dict(per_signal) if isinstance(per_signal, Mapping) else {}
        per_signal[spec.signal] = value
        eviction[spec.field] = per_signal
    result["eviction"] = eviction
    return result


def sweep_scenarios(doc: Mapping[str, Any], spec: SweepSpec, source: str) -> list[tuple[str, dict[str, Any]]]:
    """Each value's scenario document, all checked first: raises ScenarioError naming the value and every
    problem, before anything runs."""
    result = []
    problems: list[str] = []
    for value in spec.values:
        one = scenario_doc(doc, spec, value)
        try:
            parse_scenario(one, f"{source} with {spec.setting}={value}")
        except ScenarioError as exc:
            problems.extend(f"{spec.setting}={value}: {p}" for p in exc.problems)
        result.append((value, one))
    if problems:
        raise ScenarioError(source, problems)
    return result


def run_dir_name(index: int, value: str) -> str:
    """A run's directory: its place in the sweep and the value, readable and safe as a file name."""
    return f"{index + 1:02d}-{_UNSAFE.sub('_', value).strip('_') or 'value'}"


def sweep_row(spec: SweepSpec, value: str, records: Sequence[Record]) -> SweepRow:
    """What one run came to: its threshold, its first eviction at or after second 0, its victims in order."""
    threshold = None
    key = THRESHOLD_KEY.get(spec.field)
    if key is not None:
        threshold = next(
            (int(r[key]) for r in records if r["kind"] == "signal" and r.get("signal") == spec.signal and r.get(key)
             is not None),
            None,
        )  # fmt: skip
    crossing = None
    if key is not None:
        crossing = next(
            (float(r["t"]) for r in records if r["kind"] == "signal" and r.get("signal") == spec.signal
             and float(r["t"]) >= 0 and r.get(key) is not None and int(r["available"]) < int(r[key])),
            None,
        )  # fmt: skip
    evictions = sorted((r for r in records if r["kind"] == "eviction"), key=lambda r: float(r["t"]))
    first = next((float(r["t"]) for r in evictions if float(r["t"]) >= 0), None)
    refused = sorted((r for r in records if r["kind"] == "admission-refused"), key=lambda r: float(r["t"]))
    return SweepRow(
        value=value,
        threshold=threshold,
        first_eviction=first,
        victims=tuple(str(r.get("pod")) for r in evictions),
        refused=tuple(str(r.get("pod")) for r in refused),
        crossing=crossing,
    )


def format_threshold(spec: SweepSpec, amount: int | None) -> str:
    if amount is None:
        return "-"
    if spec.signal is not None and parse_signal(spec.signal) in BYTE_SIGNALS:
        return f"{amount / MI:.0f}Mi"
    return str(amount)


def table_cells(spec: SweepSpec, row: SweepRow) -> tuple[str, ...]:
    """A row of the summary, as the table and the figure show it."""
    return (
        row.value,
        format_threshold(spec, row.threshold),
        "-" if row.crossing is None else f"{row.crossing:.1f}",
        "none" if row.first_eviction is None else f"{row.first_eviction:.1f}",
        ", ".join(row.victims) or "-",
        ", ".join(row.refused) or "-",
    )


def sweep_table(scenario: Scenario, spec: SweepSpec, rows: Sequence[SweepRow]) -> str:
    """The summary: one line per value, in the order they were given."""
    header = (
        spec.setting,
        "threshold",
        "crossed (s)",
        "first eviction (s)",
        "victims, in order",
        "refused at admission",
    )
    cells = [header, *(table_cells(spec, row) for row in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = [f"sweep of {spec.setting} over scenario {scenario.name}: {len(rows)} runs"]
    lines.extend("  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip() for line in cells)
    return "\n".join(lines)


__all__ = [
    "COLUMNS",
    "SweepRow",
    "SweepSpec",
    "format_threshold",
    "parse_sweep",
    "run_dir_name",
    "scenario_doc",
    "sweep_row",
    "sweep_scenarios",
    "sweep_table",
    "table_cells",
]
