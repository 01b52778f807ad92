"""Injected signals (eviction/injection.py): parsing the document, the step in force, and the observations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from eviction.injection import InjectionError, injection_document, parse_injection, parse_value
from eviction.signals import Observation, Signal
from nodeagent.config.quantity import parse_quantity

MI = 1 << 20
START = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
OBSERVED_AT = START + timedelta(seconds=3)


def _injection(signals: dict[str, Any], capacity: dict[str, str] | None = None, start: datetime | None = START) -> Any:
    return parse_injection(injection_document(start, signals, capacity), parse_quantity)


@pytest.mark.parametrize(
    ("text", "observed", "capacity", "expected"),
    [
        ("80Mi", 500 * MI, 1000 * MI, 80 * MI),
        ("10%", 500 * MI, 1000 * MI, 100 * MI + 1),  # the float32 percentage, as thresholds compute it
        ("observed", 500 * MI, 1000 * MI, 500 * MI),
        ("observed-100Mi", 500 * MI, 1000 * MI, 400 * MI),
        ("observed+1Gi", 500 * MI, 4096 * MI, 1524 * MI),
        ("observed-1Gi", 500 * MI, 1000 * MI, 0),  # clamped: nothing is negative
        ("200", 30000, 32768, 200),  # a count (pids)
    ],
)
def test_value_resolves(text: str, observed: int, capacity: int, expected: int) -> None:
    value = parse_value(text, parse_quantity)
    assert value.resolve(Observation(observed, capacity), capacity) == expected


@pytest.mark.parametrize("text", ["lots", "-5Mi", "150%", "observed*2", True, None, 1.5])
def test_bad_values(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_value(text, parse_quantity)


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [(-5.0, None), (0.0, None), (19.9, None), (20.0, "80Mi"), (39.0, "80Mi"), (40.0, "observed"), (500.0, "observed")],
)
def test_step_in_force(elapsed: float, expected: str | None) -> None:
    injection = _injection({"memory.available": [[20, "80Mi"], [40, "observed"]]})
    value = injection.value_at(Signal.MEMORY_AVAILABLE, elapsed)
    assert (None if value is None else str(value)) == expected


def _observed() -> dict[Signal, Observation]:
    return {
        Signal.MEMORY_AVAILABLE: Observation(900 * MI, 2048 * MI, OBSERVED_AT),
        Signal.NODEFS_AVAILABLE: Observation(10_000 * MI, 20_000 * MI, OBSERVED_AT),
    }


def test_apply_replaces_only_the_injected_signal_and_keeps_capacity_and_time() -> None:
    injection = _injection({"memory.available": [[20, "80Mi"]]})
    result = injection.apply(_observed(), START + timedelta(seconds=25))
    assert result[Signal.MEMORY_AVAILABLE] == Observation(80 * MI, 2048 * MI, OBSERVED_AT)
    assert result[Signal.NODEFS_AVAILABLE] == _observed()[Signal.NODEFS_AVAILABLE]


@pytest.mark.parametrize(
    ("start", "now"),
    [
        (None, START + timedelta(seconds=25)),
        (START, START - timedelta(seconds=1)),
        (START, START + timedelta(seconds=5)),
    ],
)
def test_apply_keeps_the_observations_before_the_start_or_the_first_step(start: datetime | None, now: datetime) -> None:
    injection = _injection({"memory.available": [[20, "80Mi"]]}, start=start)
    assert injection.apply(_observed(), now) == _observed()


def test_a_signal_the_node_does_not_observe_takes_the_file_capacity_and_now() -> None:
    injection = _injection({"imagefs.available": [[0, "50%"]]}, capacity={"imagefs.available": "20Gi"})
    now = START + timedelta(seconds=1)
    assert injection.apply(_observed(), now)[Signal.IMAGEFS_AVAILABLE] == Observation(10240 * MI, 20480 * MI, now)


def test_a_percentage_without_any_capacity_or_an_offset_without_an_observation_injects_nothing() -> None:
    injection = _injection({"imagefs.available": [[0, "5%"]], "pid.available": [[0, "observed-10"]]})
    result = injection.apply(_observed(), START + timedelta(seconds=1))
    assert Signal.IMAGEFS_AVAILABLE not in result and Signal.PID_AVAILABLE not in result


def test_a_relative_value_follows_the_observation() -> None:
    injection = _injection({"nodefs.available": [[0, "observed-1Gi"]]})
    observed = _observed()
    now = START + timedelta(seconds=1)
    before = injection.apply(observed, now)[Signal.NODEFS_AVAILABLE].available
    observed[Signal.NODEFS_AVAILABLE] = Observation(10_100 * MI, 20_000 * MI, OBSERVED_AT)  # 100Mi freed
    assert injection.apply(observed, now)[Signal.NODEFS_AVAILABLE].available - before == 100 * MI


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"start": "yesterday", "signals": {}}, "start: "),
        ({"start": "2026-11-25T10:00:00", "signals": {}}, "start: the time needs a zone"),
        ({"signals": {"memory.free": [[0, "1Mi"]]}}, "signals: memory.free: unsupported eviction signal"),
        ({"signals": {"memory.available": []}}, "expected a list of [seconds, value] steps"),
        ({"signals": {"memory.available": [[10, "1Mi"], [5, "2Mi"]]}}, "increasing time order"),
        ({"signals": {"memory.available": [[-1, "1Mi"]]}}, "seconds must be a number >= 0"),
        ({"signals": {"memory.available": [[0, "lots"]]}}, "signals: memory.available[0]: "),
        ({"signals": {}, "capacity": {"pid.available": "many"}}, "capacity: pid.available: "),
        ({"signals": {}, "extra": 1}, "unknown field(s): extra"),
        ([], "expected an object"),
    ],
)
def test_bad_documents_name_the_field(document: Any, problem: str) -> None:
    with pytest.raises(InjectionError) as raised:
        parse_injection(document, parse_quantity)
    assert any(problem in p for p in raised.value.problems), raised.value.problems


def test_the_document_round_trips() -> None:
    document = injection_document(START, {"pid.available": [(0.0, "observed"), (30.0, "100")]}, {"pid.available": "4M"})
    injection = parse_injection(document, lambda text: Decimal(parse_quantity(text)))
    assert injection.start == START
    assert injection.capacity == {Signal.PID_AVAILABLE: 4_000_000}
    assert [str(s.value) for s in injection.series[Signal.PID_AVAILABLE]] == ["observed", "100"]
