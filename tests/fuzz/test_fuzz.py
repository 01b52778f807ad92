"""The fuzzer in the normal pytest run: a fixed-seed budget per target, every input that ever crashed, and the
engine's own verdicts (an undocumented exception, a hang and runaway memory are crashes; a documented error is
not)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz.engine import Target, run_case, run_target
from tests.fuzz.regressions import REGRESSIONS, Regression
from tests.fuzz.targets import MODULES, load

# A few hundred cases per target, one seed: about 25 s for all eight on this machine.
BUDGET = 250
SEED = 20261128


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    # The targets log every refusal (the CNI plugin warns on each error); thousands of records only slow pytest.
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name", MODULES)
def test_fixed_seed_budget_has_no_crash(name: str) -> None:
    result = run_target(load(name), cases=BUDGET, seed=SEED)
    assert result.cases == BUDGET
    found = result.unique
    assert not found, "\n".join(f"{s}: {c.error}\n  input: {c.input[:1000]}" for s, c in found.items())


@pytest.mark.parametrize("case", REGRESSIONS, ids=[f"{r.target}-{i}" for i, r in enumerate(REGRESSIONS)])
def test_regression_does_not_crash(case: Regression) -> None:
    assert run_case(load(case.target), case.input) is None, case.found


class _Documented(ValueError):
    pass


def _target(run: Any, expected: tuple[type[BaseException], ...] = (_Documented,)) -> Target:
    return Target("engine", st.integers(), run, expected)


def _raise_documented(case: int) -> None:
    raise _Documented(case)


def _raise_key_error(case: int) -> None:
    empty: dict[int, int] = {}
    empty[case] += 1


def _spin(case: int) -> None:
    while True:
        pass


def _hog(case: int) -> None:
    blocks = []
    while True:
        blocks.append(bytearray(64 << 20))


def test_a_documented_error_is_no_crash() -> None:
    assert run_case(_target(_raise_documented), 1) is None


def test_an_undocumented_exception_is_a_crash_with_its_input() -> None:
    crash = run_case(_target(_raise_key_error), 7)
    assert crash is not None
    assert (crash.kind, crash.error, crash.input) == ("exception", "KeyError: 7", "7")


def test_a_case_over_its_cpu_time_is_a_hang() -> None:
    crash = run_case(_target(_spin), 1, case_seconds=0.2)
    assert crash is not None
    assert crash.kind == "hang"


def test_runaway_memory_is_a_crash_under_the_cap() -> None:
    result = run_target(_target(_hog), cases=2, seed=1, memory_bytes=256 << 20)
    assert [c.kind for c in result.crashes] == ["memory", "memory"]


def test_every_case_runs_although_cases_crash() -> None:
    result = run_target(_target(_raise_key_error), cases=30, seed=1)
    assert result.cases == 30
    assert len(result.crashes) == 30
