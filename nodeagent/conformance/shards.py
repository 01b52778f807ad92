"""The certified run's plan: its specs cut into shards that each take about `budget` seconds, saved as plan.json.

How long a shard takes is estimated, not known, until it has run:
- a spec's seconds (of one process) are the ones recorded for it: the JUnit reports given by `--durations` (a
  previous certified run's directory, or any run's report), else the table shipped in `durations.json` (the
  `[NodeConformance]` run of 2026-11-28: 140 of the certified specs), else a guess by its tags: DEFAULT_SECONDS,
  SERIAL_SECONDS for `[Serial]`, SLOW_SECONDS for `[Slow]`;
- a shard of P processes takes OVERHEAD_SECONDS + (its specs' seconds) / P. On the [NodeConformance] run the specs'
  seconds summed to 2207 and the two processes took 1105 s: the sum over P holds when the machine is not the limit.

`[Serial]` specs go in shards of their own, run with one process; the others with `procs`. Each kind is cut into
as few shards as the budget allows, as even as their order lets them (specs stay sorted by name, so a shard holds
neighbours: one area of the suite). The plan never changes once written: `--resume` runs what is missing of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.junit import Outcome, SpecResult
from nodeagent.conformance.speclist import ListedSpec, SpecList

PLAN_FILE = "plan.json"
DEFAULT_BUDGET_SECONDS = 45 * 60
# Guesses for specs with no recorded time (upstream's certified specs beyond [NodeConformance] have never run here):
# many wait for controllers, Services or several pods; [Slow] ones wait minutes by design (CronJob schedules,
# StatefulSet scaling); [Serial] ones fill or taint the nodes.
DEFAULT_SECONDS = 30.0
SERIAL_SECONDS = 60.0
SLOW_SECONDS = 300.0
# ginkgo's start, the framework's BeforeSuite, the report at the end.
OVERHEAD_SECONDS = 60.0


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as `--shard K` names it
    serial: bool
    procs: int
    specs: tuple[str, ...]
    estimate_seconds: float

    @property
    def label(self) -> str:
        kind = "serial, 1 process" if self.serial else f"{self.procs} processes"
        return f"shard {self.index} ({kind}, {len(self.specs)} specs, ~{self.estimate_seconds / 60:.0f} min)"


@dataclass(frozen=True)
class Plan:
    description: str  # the suite's, for the focus (speclist.exact_focus)
    focus: str
    label_filter: str
    narrow: str  # the Python regex that narrowed the dry run's list, "" for none
    budget_seconds: float
    shards: tuple[Shard, ...]
    created: str  # ISO time
    version: str  # nodeagent's version and commit, and the release of the suite
    suite: str = "certified"  # the selection: "certified", or a node suite's name ("node-eviction")

    @property
    def total(self) -> int:
        return sum(len(shard.specs) for shard in self.shards)

    def shard(self, index: int) -> Shard:
        for shard in self.shards:
            if shard.index == index:
                return shard
        raise ConformanceError(f"no shard {index}: the plan has shards 1 to {len(self.shards)}")

    def save(self, root: Path) -> Path:
        path = root / PLAN_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, root: Path) -> Plan:
        path = root / PLAN_FILE
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            shards = tuple(Shard(**{**s, "specs": tuple(s["specs"])}) for s in data.pop("shards"))
            return cls(**data, shards=shards)
        except FileNotFoundError as exc:
            raise ConformanceError(f"no certified run in {root}: {PLAN_FILE} is missing") from exc
        except (ValueError, TypeError, KeyError) as exc:
            raise ConformanceError(f"{path} cannot be read: {exc}") from exc


def shipped_durations() -> dict[str, float]:
    """The recorded seconds shipped with the package (durations.json: spec text → seconds of one process)."""
    text = resources.files("nodeagent.conformance").joinpath("durations.json").read_text()
    data = json.loads(text)
    return {str(name): float(seconds) for name, seconds in data["seconds"].items()}


def recorded_durations(results: Iterable[SpecResult]) -> dict[str, float]:
    """Seconds of the specs that ran to an end (passed or failed) in these results; the last one wins."""
    seconds: dict[str, float] = {}
    for result in results:
        if result.is_spec and result.outcome in (Outcome.PASSED, Outcome.FAILED) and result.state != "interrupted":
            seconds[result.name] = result.seconds
    return seconds


def estimate(spec: ListedSpec, recorded: Mapping[str, float]) -> float:
    if spec.name in recorded:
        return recorded[spec.name]
    if spec.slow:
        return SLOW_SECONDS
    if spec.serial:
        return SERIAL_SECONDS
    return DEFAULT_SECONDS


def shard_seconds(spec_seconds: float, procs: int) -> float:
    return OVERHEAD_SECONDS + spec_seconds / procs


def cut(seconds: Sequence[float], procs: int, budget: float) -> list[range]:
    """Consecutive runs of `seconds` (indices), as few as keep each under `budget` (with the overhead), as even as
    the order lets them: the number of shards is fixed first, then each is filled up to an even share."""
    if not seconds:
        return []
    room = max(budget - OVERHEAD_SECONDS, 1.0) * procs  # one process's seconds a shard holds
    count = max(1, math.ceil(sum(seconds) / room))
    while True:
        share = sum(seconds) / count
        ranges: list[range] = []
        start, filled = 0, 0.0
        for i, value in enumerate(seconds):
            # Close the shard before a spec that would take it past its share by more than half the spec.
            if i > start and filled + value / 2 > share and len(ranges) < count - 1:
                ranges.append(range(start, i))
                start, filled = i, 0.0
            filled += value
        ranges.append(range(start, len(seconds)))
        over = any(sum(seconds[r.start : r.stop]) > room and len(r) > 1 for r in ranges)
        if not over or count >= len(seconds):
            return ranges
        count += 1


def plan_shards(
    specs: SpecList, recorded: Mapping[str, float], *, procs: int, budget: float
) -> tuple[tuple[Shard, ...], dict[str, float]]:
    """The shards (parallel ones first, then serial ones) and each spec's estimated seconds."""
    estimates = {spec.name: estimate(spec, recorded) for spec in specs.specs}
    shards: list[Shard] = []
    for serial in (False, True):
        kind = [spec for spec in specs.specs if spec.serial is serial]
        kind_procs = 1 if serial else procs
        seconds = [estimates[spec.name] for spec in kind]
        for run in cut(seconds, kind_procs, budget):
            names = tuple(spec.name for spec in kind[run.start : run.stop])
            total = sum(seconds[run.start : run.stop])
            shards.append(Shard(len(shards) + 1, serial, kind_procs, names, round(shard_seconds(total, kind_procs))))
    return tuple(shards), estimates


def format_plan(plan: Plan) -> str:
    lines = [
        f"certified plan: {plan.total} specs in {len(plan.shards)} shards of about "
        f"{plan.budget_seconds / 60:.0f} min (estimated; see docs/conformance.md)"
    ]
    lines.extend(f"  {shard.label}" for shard in plan.shards)
    return "\n".join(lines)
