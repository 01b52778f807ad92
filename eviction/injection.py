"""Injected eviction signals: a time series that replaces what the node observes, for experiments.

An eviction experiment is deterministic only when the signals are: a real memory hog on a shared machine crosses a
threshold when the machine decides. With injection, a scenario says "memory.available is 80Mi from second 30 to
second 55", and the eviction manager decides on that, on any machine, while the pods, their usage (which ranks them)
and the kills stay real.

The injection document (JSON, the file `nodeagent run --eviction-signal-injection` reads):

    {"start": "2026-11-25T10:00:00+00:00",          # when second 0 is; null: not started (nothing injected yet)
     "signals": {"memory.available": [[0, "observed"], [30, "80Mi"], [55, "1Gi"]]},
     "capacity": {"imagefs.available": "20Gi"}}     # optional: for a signal the node does not observe

A step holds from its second until the next one, the last one until the end. A value is a quantity ("80Mi", "200"
for pids), a percentage of the capacity ("5%"), `observed` (the observed value itself) or `observed-Q` /
`observed+Q` (the observed value moved by Q: real reclaim, image GC for one, still shows through). Before the first
step, and before the start, the observed value is kept. The capacity stays the observed one (the file's only when the
node does not observe the signal), and so does the time of the reading, so the manager's stale-stats rule still sees
fresh stats each cycle.

Quantities are parsed by a function the caller passes in, as for the thresholds (its parser lives in nodeagent's
config, which this package must not import).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Protocol

from eviction.signals import Observation, Observations, Signal, parse_signal
from eviction.thresholds import parse_percentage

OBSERVED = "observed"
_OFFSET = re.compile(r"observed\s*([+-])\s*(\S+)")


class InjectionError(ValueError):
    """The injection document cannot be used. `problems` lists each as `<where>: <problem>`."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class InjectedValue:
    """One of: a quantity, a fraction of the capacity, or the observed value plus an offset (`relative`)."""

    quantity: int | None = None
    percentage: float | None = None
    relative: bool = False
    offset: int = 0
    text: str = ""

    def resolve(self, observed: Observation | None, capacity: int) -> int | None:
        """The available amount this value stands for; None when it needs an observation there is not."""
        if self.relative:
            return None if observed is None else max(0, observed.available + self.offset)
        if self.percentage is not None:
            return int(float(capacity) * self.percentage)
        return self.quantity

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Step:
    at: float  # seconds since the start
    value: InjectedValue


@dataclass(frozen=True)
class SignalInjection:
    """What the document says; `apply` is the whole effect."""

    start: datetime | None
    series: Mapping[Signal, tuple[Step, ...]] = field(default_factory=dict)
    capacity: Mapping[Signal, int] = field(default_factory=dict)

    @property
    def signals(self) -> tuple[Signal, ...]:
        return tuple(self.series)

    def value_at(self, signal: Signal, elapsed: float) -> InjectedValue | None:
        """The step in force `elapsed` seconds after the start, or None (the observed value stays)."""
        current = None
        for step in self.series.get(signal, ()):
            if step.at > elapsed:
                break
            current = step.value
        return current

    def elapsed(self, now: datetime) -> float | None:
        return None if self.start is None else (now - self.start).total_seconds()

    def apply(self, observations: Observations, now: datetime) -> dict[Signal, Observation]:
        """The observations with each injected signal in force replacing the observed one."""
        result = dict(observations)
        elapsed = self.elapsed(now)
        if elapsed is None or elapsed < 0:
            return result
        for signal in self.series:
            value = self.value_at(signal, elapsed)
            if value is None:
                continue
            observed = observations.get(signal)
            capacity = observed.capacity if observed is not None else self.capacity.get(signal)
            available = value.resolve(observed, capacity or 0)
            if available is None or (capacity is None and value.percentage is not None):
                continue  # nothing to measure a percentage against, nothing to move: the signal stays unobserved
            result[signal] = Observation(
                available=available,
                capacity=capacity if capacity is not None else available,
                time=observed.time if observed is not None and observed.time is not None else now,
            )
        return result


class Injector(Protocol):
    """What the eviction manager calls after observing: the observations it decides on."""

    def apply(self, observations: Observations, now: datetime) -> dict[Signal, Observation]: ...


_INT64_MAX = (1 << 63) - 1


def _amount(value: Decimal) -> int:
    # Saturated at int64, as a signal's amount (bytes, a count) is upstream: an int of 1e999999 takes minutes.
    if value > _INT64_MAX:
        return _INT64_MAX
    if value < -_INT64_MAX - 1:
        return -_INT64_MAX - 1
    return int(value.to_integral_value(rounding=ROUND_FLOOR))


def parse_value(text: Any, parse_quantity: Callable[[str], Decimal]) -> InjectedValue:
    """One step's value. Raises ValueError with the problem."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ValueError(f"expected a quantity, a percentage or {OBSERVED}[+-Q], got {text!r}")
    raw = str(text).strip()
    if raw == OBSERVED:
        return InjectedValue(relative=True, text=raw)
    offset = _OFFSET.fullmatch(raw)
    if offset is not None:
        amount = _amount(parse_quantity(offset.group(2)))
        return InjectedValue(relative=True, offset=amount if offset.group(1) == "+" else -amount, text=raw)
    if raw.endswith("%"):
        percentage = parse_percentage(raw)
        if not 0 <= percentage <= 1:
            raise ValueError(f"a percentage of the capacity must be within 0% and 100%: {raw}")
        return InjectedValue(percentage=percentage, text=raw)
    amount = _amount(parse_quantity(raw))
    if amount < 0:
        raise ValueError(f"an available amount cannot be negative: {raw}")
    return InjectedValue(quantity=amount, text=raw)


def _steps(name: str, raw: Any, parse_quantity: Callable[[str], Decimal], problems: list[str]) -> tuple[Step, ...]:
    if not isinstance(raw, list) or not raw:
        problems.append(f"signals: {name}: expected a list of [seconds, value] steps")
        return ()
    steps: list[Step] = []
    for index, item in enumerate(raw):
        where = f"signals: {name}[{index}]"
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            problems.append(f"{where}: expected [seconds, value], got {item!r}")
            continue
        at, text = item
        if isinstance(at, bool) or not isinstance(at, (int, float)) or at < 0:
            problems.append(f"{where}: seconds must be a number >= 0, got {at!r}")
            continue
        if steps and at <= steps[-1].at:
            problems.append(f"{where}: steps must be in increasing time order ({at} after {steps[-1].at})")
            continue
        try:
            steps.append(Step(float(at), parse_value(text, parse_quantity)))
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    return tuple(steps)


def parse_start(raw: Any) -> datetime | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValueError(f"expected an RFC 3339 time or null, got {raw!r}")
    start = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if start.tzinfo is None:
        raise ValueError(f"the time needs a zone (Z or +00:00): {raw}")
    return start


def parse_injection(document: Any, parse_quantity: Callable[[str], Decimal]) -> SignalInjection:
    """The injection a document describes. Raises `InjectionError` listing every problem."""
    problems: list[str] = []
    if not isinstance(document, Mapping):
        raise InjectionError(["expected an object with start, signals and (optionally) capacity"])
    unknown = sorted(set(document) - {"start", "signals", "capacity"})
    if unknown:
        problems.append(f"unknown field(s): {', '.join(unknown)}")
    start = None
    try:
        start = parse_start(document.get("start"))
    except ValueError as exc:
        problems.append(f"start: {exc}")
    series: dict[Signal, tuple[Step, ...]] = {}
    signals = document.get("signals") or {}
    if not isinstance(signals, Mapping):
        problems.append("signals: expected an object of signal name to steps")
        signals = {}
    for name, raw in signals.items():
        signal = parse_signal(str(name))
        if signal is None:
            problems.append(f"signals: {name}: unsupported eviction signal {name}")
            continue
        series[signal] = _steps(str(name), raw, parse_quantity, problems)
    capacity: dict[Signal, int] = {}
    capacities = document.get("capacity") or {}
    if not isinstance(capacities, Mapping):
        problems.append("capacity: expected an object of signal name to quantity")
        capacities = {}
    for name, text in capacities.items():
        signal = parse_signal(str(name))
        if signal is None:
            problems.append(f"capacity: {name}: unsupported eviction signal {name}")
            continue
        try:
            capacity[signal] = _amount(parse_quantity(str(text)))
        except ValueError as exc:
            problems.append(f"capacity: {name}: {exc}")
    if problems:
        raise InjectionError(problems)
    return SignalInjection(start=start, series=series, capacity=capacity)


def injection_document(
    start: datetime | None,
    signals: Mapping[str, Sequence[tuple[float, str]]],
    capacity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The document `parse_injection` reads (what an experiment runner writes for the agent)."""
    document: dict[str, Any] = {
        "start": None if start is None else start.isoformat(),
        "signals": {name: [[at, value] for at, value in steps] for name, steps in signals.items()},
    }
    if capacity:
        document["capacity"] = dict(capacity)
    return document


__all__ = [
    "OBSERVED",
    "InjectedValue",
    "InjectionError",
    "Injector",
    "SignalInjection",
    "Step",
    "injection_document",
    "parse_injection",
    "parse_value",
]
