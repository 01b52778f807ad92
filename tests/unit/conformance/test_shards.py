"""Planning the certified run: estimates, shards of about the budget, [Serial] apart, the plan saved and read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.junit import parse_junit
from nodeagent.conformance.shards import (
    DEFAULT_SECONDS,
    OVERHEAD_SECONDS,
    SERIAL_SECONDS,
    SLOW_SECONDS,
    Plan,
    Shard,
    cut,
    estimate,
    format_plan,
    plan_shards,
    recorded_durations,
    shard_seconds,
    shipped_durations,
)
from nodeagent.conformance.speclist import ListedSpec, SpecList

TESTDATA = Path(__file__).with_name("testdata") / "certified"


def spec(name: str, *labels: str) -> ListedSpec:
    return ListedSpec(name, labels)


@pytest.mark.parametrize(
    ("listed", "recorded", "expected"),
    [
        (spec("[sig-a] x [Conformance]"), {}, DEFAULT_SECONDS),
        (spec("[sig-a] x [Serial] [Conformance]", "Serial"), {}, SERIAL_SECONDS),
        (spec("[sig-a] x [Slow] [Conformance]", "Slow"), {}, SLOW_SECONDS),
        (spec("[sig-a] x [Serial] [Slow] [Conformance]", "Serial", "Slow"), {}, SLOW_SECONDS),
        # A recorded time wins over any guess.
        (spec("[sig-a] x [Slow] [Conformance]", "Slow"), {"[sig-a] x [Slow] [Conformance]": 4.5}, 4.5),
    ],
)
def test_estimate(listed: ListedSpec, recorded: dict[str, float], expected: float) -> None:
    assert estimate(listed, recorded) == expected


def test_shard_seconds_is_the_overhead_and_the_sum_over_the_processes() -> None:
    assert shard_seconds(2207, 2) == OVERHEAD_SECONDS + 1103.5  # the [NodeConformance] run: 1105 s measured


@pytest.mark.parametrize(
    ("seconds", "procs", "budget", "expected"),
    [
        ([], 2, 600, []),
        # Everything fits one shard.
        ([10.0] * 5, 2, 600, [range(0, 5)]),
        # 20 x 60 s over 2 processes is 600 s of shard time beside 60 s of overhead; 300 s shards hold 480 s of
        # specs: 3 shards, as even as the order allows (7, 7, 6 specs).
        ([60.0] * 20, 2, 300, [range(0, 7), range(7, 14), range(14, 20)]),
        # One process: a shard holds 240 s of specs, so 10 x 60 s need 3 (3, 3, 4 specs: none over 240 s).
        ([60.0] * 10, 1, 300, [range(0, 3), range(3, 6), range(6, 10)]),
        # A spec longer than the budget gets a shard of its own rather than none.
        ([10.0, 5000.0, 10.0], 1, 300, [range(0, 1), range(1, 2), range(2, 3)]),
    ],
)
def test_cut(seconds: list[float], procs: int, budget: float, expected: list[range]) -> None:
    assert cut(seconds, procs, budget) == expected


def test_cut_keeps_every_spec_once_and_in_order() -> None:
    seconds = [float((i * 37) % 90 + 1) for i in range(300)]
    ranges = cut(seconds, 2, 45 * 60)
    assert [i for r in ranges for i in r] == list(range(300))
    room = (45 * 60 - OVERHEAD_SECONDS) * 2
    assert all(sum(seconds[r.start : r.stop]) <= room for r in ranges)


def test_plan_puts_serial_specs_in_shards_of_their_own_with_one_process() -> None:
    parallel = [spec(f"[sig-a] p{i:03d} [Conformance]") for i in range(100)]
    serial = [spec(f"[sig-b] s{i:02d} [Serial] [Conformance]", "Serial") for i in range(30)]
    listed = SpecList("Kubernetes e2e suite", tuple(sorted(parallel + serial, key=lambda s: s.name)))
    shards, estimates = plan_shards(listed, {}, procs=2, budget=20 * 60)
    assert [s.index for s in shards] == list(range(1, len(shards) + 1))
    parallel_shards = [s for s in shards if not s.serial]
    serial_shards = [s for s in shards if s.serial]
    assert shards[: len(parallel_shards)] == tuple(parallel_shards)  # parallel ones first
    assert {s.procs for s in parallel_shards} == {2} and {s.procs for s in serial_shards} == {1}
    assert sorted(n for s in parallel_shards for n in s.specs) == [p.name for p in parallel]
    assert sorted(n for s in serial_shards for n in s.specs) == [p.name for p in serial]
    # 100 x 30 s over 2 processes: 1500 s of specs, 1080 s a shard holds beside the overhead: 2 shards.
    # 30 x 60 s on one process: 1800 s of specs, 1080 s a shard: 2 shards.
    assert (len(parallel_shards), len(serial_shards)) == (2, 2)
    assert all(s.estimate_seconds <= 20 * 60 for s in shards)
    assert estimates[serial[0].name] == SERIAL_SECONDS


def test_plan_uses_recorded_times() -> None:
    listed = SpecList("d", (spec("[a] one [Conformance]"), spec("[a] two [Conformance]")))
    shards, _ = plan_shards(
        listed, {"[a] one [Conformance]": 100.0, "[a] two [Conformance]": 20.0}, procs=2, budget=2700
    )
    assert shards == (Shard(1, False, 2, ("[a] one [Conformance]", "[a] two [Conformance]"), 120),)


def test_the_shipped_durations_are_certified_specs() -> None:
    recorded = shipped_durations()
    assert len(recorded) == 140  # the certified specs that are also NodeConformance, from one recorded run
    assert all("[Conformance]" in name and seconds > 0 for name, seconds in recorded.items())


def test_recorded_durations_skip_what_did_not_end() -> None:
    results = parse_junit((TESTDATA / "shard2-attempt1-interrupted.xml").read_text())
    recorded = recorded_durations(results)
    assert recorded == {
        "[sig-storage] Downward API volume should provide podname only [NodeConformance] [Conformance]": 2.140726151,
        "[sig-storage] Downward API volume should set DefaultMode on files [LinuxOnly] [NodeConformance] "
        "[Conformance]": 4.310852654,
        "[sig-storage] Downward API volume should update annotations on modification [NodeConformance] "
        "[Conformance]": 4.6543778,
    }


def _plan() -> Plan:
    return Plan(
        description="Kubernetes e2e suite",
        focus=r"\[Conformance\]",
        label_filter="",
        narrow="",
        budget_seconds=2700,
        shards=(Shard(1, False, 2, ("a", "b"), 1500), Shard(2, True, 1, ("c",), 120)),
        created="2026-11-28T22:00:00+00:00",
        version="nodeagent 0.1.0 (commit abc), e2e.test v1.34.4",
    )


def test_plan_saved_and_loaded(tmp_path: Path) -> None:
    plan = _plan()
    plan.save(tmp_path)
    assert Plan.load(tmp_path) == plan
    assert plan.total == 3 and plan.shard(2).serial
    with pytest.raises(ConformanceError, match="no shard 3"):
        plan.shard(3)
    assert "shard 2 (serial, 1 process, 1 specs, ~2 min)" in format_plan(plan)


def test_plan_load_says_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConformanceError, match=r"plan\.json is missing"):
        Plan.load(tmp_path)
    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(ConformanceError, match="cannot be read"):
        Plan.load(tmp_path)
