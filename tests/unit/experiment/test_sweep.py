"""`--sweep SETTING=V1,V2,...`: its parsing, each run's scenario document, the summary's numbers and table, and the
summary figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodeagent.experiment.errors import ScenarioError
from nodeagent.experiment.scenario import parse_scenario
from nodeagent.experiment.summaryplot import render_sweep
from nodeagent.experiment.sweep import (
    SweepRow,
    SweepSpec,
    parse_sweep,
    run_dir_name,
    scenario_doc,
    sweep_row,
    sweep_scenarios,
    sweep_table,
)
from nodeagent.experiment.timeline import Record, Timeline

MI = 1 << 20
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DOC: dict[str, Any] = {
    "name": "hog",
    "duration": "50s",
    "eviction": {"evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"}},
    "pods": [{"name": "hog"}],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("evictionHard.memory.available=100Mi,200Mi",
         SweepSpec("evictionHard", "memory.available", ("100Mi", "200Mi"))),
        (" evictionHard.memory.available = current-100Mi , current-200Mi",
         SweepSpec("evictionHard", "memory.available", ("current-100Mi", "current-200Mi"))),
        ("evictionSoftGracePeriod.memory.available=10s",
         SweepSpec("evictionSoftGracePeriod", "memory.available", ("10s",))),
        ("evictionPressureTransitionPeriod=5s,30s",
         SweepSpec("evictionPressureTransitionPeriod", None, ("5s", "30s"))),
    ],
)  # fmt: skip
def test_parse_sweep(text: str, expected: SweepSpec) -> None:
    assert parse_sweep(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("evictionHard.memory.available", "expected SETTING=V1,V2"),
        ("evictionHarder.memory.available=1Mi", "unknown eviction setting"),
        ("evictionHard=100Mi", "is per signal"),
        ("evictionHard.memory.avail=100Mi", "unknown signal 'memory.avail'"),
        ("evictionPressureTransitionPeriod.memory.available=5s", "is not per signal"),
        ("evictionHard.memory.available=100Mi,,200Mi", "an empty value"),
        ("evictionHard.memory.available=", "an empty value"),
        ("evictionHard.memory.available=100Mi,100Mi", "given twice"),
    ],
)
def test_parse_sweep_names_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ScenarioError, match="--sweep") as caught:
        parse_sweep(text)
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_each_run_gets_the_scenario_with_one_value_set_and_the_rest_left_alone() -> None:
    spec = parse_sweep("evictionHard.memory.available=200Mi,current-300Mi")
    runs = sweep_scenarios(DOC, spec, "hog.yaml")
    assert [v for v, _ in runs] == ["200Mi", "current-300Mi"]
    scenarios = [parse_scenario(doc) for _, doc in runs]
    assert [s.eviction["evictionHard"] for s in scenarios] == [
        {"memory.available": "200Mi", "nodefs.available": "10%"},
        {"memory.available": "current-300Mi", "nodefs.available": "10%"},
    ]
    assert DOC["eviction"]["evictionHard"]["memory.available"] == "100Mi"  # the original is not changed
    # A field the scenario does not set yet, and an integer one.
    assert scenario_doc(DOC, parse_sweep("evictionSoft.memory.available=300Mi"), "300Mi")["eviction"][
        "evictionSoft"
    ] == {"memory.available": "300Mi"}
    grace = scenario_doc(DOC, parse_sweep("evictionMaxPodGracePeriod=5"), "5")
    assert grace["eviction"]["evictionMaxPodGracePeriod"] == 5


def test_a_bad_value_is_named_before_anything_runs() -> None:
    spec = parse_sweep("evictionHard.memory.available=100Mi,lots,200Mi")
    with pytest.raises(ScenarioError) as caught:
        sweep_scenarios(DOC, spec, "hog.yaml")
    assert all(p.startswith("evictionHard.memory.available=lots: ") for p in caught.value.problems)


@pytest.mark.parametrize(
    ("index", "value", "name"),
    [(0, "100Mi", "01-100Mi"), (9, "current-200Mi", "10-current-200Mi"), (1, "10%", "02-10"), (2, "a/b c", "03-a_b_c")],
)
def test_run_dir_names_are_ordered_and_safe(index: int, value: str, name: str) -> None:
    assert run_dir_name(index, value) == name


def _records(threshold: int | None, evictions: list[tuple[float, str]], refused: tuple[str, ...] = ()) -> list[Record]:
    timeline = Timeline(T0)
    timeline.add(T0 - timedelta(seconds=3), "eviction", pod="before", signal="memory.available")
    # Below any threshold before second 0 (not counted), then falling by 25Mi a second from 500Mi.
    timeline.add(T0 - timedelta(seconds=2), "signal", signal="memory.available", available=10 * MI, threshold=threshold)
    for second in range(0, 20, 2):
        timeline.add(T0 + timedelta(seconds=second), "signal", signal="memory.available",
                     available=(500 - 25 * second) * MI, threshold=threshold)  # fmt: skip
        timeline.add(T0 + timedelta(seconds=second), "signal", signal="nodefs.available", available=5000 * MI,
                     threshold=1000 * MI)  # fmt: skip
    # Out of order on purpose: the row orders by time.
    for at, pod in reversed(evictions):
        timeline.add(T0 + timedelta(seconds=at), "eviction", pod=pod, signal="memory.available")
    for pod in refused:
        timeline.add(T0 + timedelta(seconds=15), "admission-refused", pod=pod)
    return timeline.records


def test_the_summary_row_has_the_threshold_the_first_eviction_after_second_0_and_the_victims_in_order() -> None:
    spec = parse_sweep("evictionHard.memory.available=current-200Mi")
    row = sweep_row(spec, "current-200Mi", _records(300 * MI, [(12.5, "hog"), (14.0, "calm")], ("late",)))
    # 500 - 25 * 10 = 250Mi: the first sample below 300Mi at or after second 0 (300Mi at 8 s is not below it).
    assert row == SweepRow("current-200Mi", 300 * MI, 12.5, ("before", "hog", "calm"), ("late",), crossing=10.0)
    nothing = sweep_row(spec, "50Mi", _records(50 * MI, []))
    assert nothing.first_eviction is None and nothing.threshold == 50 * MI
    assert nothing.crossing is None  # the last sample, at 18 s, is 50Mi: not below 50Mi

    # A setting that is no threshold has none in the row.
    assert sweep_row(parse_sweep("evictionPressureTransitionPeriod=5s"), "5s", _records(1, [])).threshold is None
    soft = sweep_row(parse_sweep("evictionSoft.memory.available=1Mi"), "1Mi", _records(300 * MI, []))
    assert soft.threshold is None  # the records carry no soft_threshold


def test_the_summary_table() -> None:
    spec = parse_sweep("evictionHard.memory.available=current-100Mi,current-300Mi")
    scenario = parse_scenario(DOC)
    rows = [
        SweepRow("current-100Mi", 400 * MI, 9.25, ("hog",), crossing=4.0),
        SweepRow("current-300Mi", 200 * MI, None, (), ("late",)),
    ]
    lines = sweep_table(scenario, spec, rows).splitlines()
    assert lines[0] == "sweep of evictionHard.memory.available over scenario hog: 2 runs"
    assert lines[1].split() == ["evictionHard.memory.available", "threshold", "crossed", "(s)", "first", "eviction",
                                "(s)", "victims,", "in", "order", "refused", "at", "admission"]  # fmt: skip
    assert lines[2].split() == ["current-100Mi", "400Mi", "4.0", "9.2", "hog", "-"]
    assert lines[3].split() == ["current-300Mi", "200Mi", "-", "none", "-", "late"]


def test_the_summary_figure_is_a_png(tmp_path: Path) -> None:
    spec = parse_sweep("evictionHard.memory.available=100Mi,current-200Mi,300Mi")
    rows = [
        SweepRow("100Mi", 100 * MI, 20.0, ("hog", "calm")),
        SweepRow("current-200Mi", 300 * MI, 12.0, ("hog",)),
        SweepRow("300Mi", 300 * MI, None, ()),
    ]
    png = render_sweep(spec, rows, tmp_path / "sweep.png", title="sweep", duration=50.0)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sweep_is_drawn_again_from_its_directory(tmp_path: Path) -> None:
    from nodeagent.experiment.runner import replot_summary  # noqa: PLC0415
    from nodeagent.experiment.timeline import write_jsonl  # noqa: PLC0415

    scenario = "name: hog\nduration: 50s\npods: [{name: hog}, {name: calm}]\n"
    (tmp_path / "scenario.yaml").write_text(scenario)
    runs = {"01-200Mi": (200 * MI, [(12.0, "hog")]), "02-400Mi": (400 * MI, [(7.5, "hog"), (9.0, "calm")])}
    for name, (threshold, evictions) in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "scenario.yaml").write_text(scenario)
        write_jsonl(_records(threshold, evictions), tmp_path / name / "timeline.jsonl")
    (tmp_path / "sweep.json").write_text(
        '{"setting": "evictionHard.memory.available", "runs": [{"value": "200Mi", "dir": "01-200Mi"}, '
        '{"value": "400Mi", "dir": "02-400Mi"}]}'
    )
    drawn = replot_summary(tmp_path)
    assert drawn is not None
    png, table = drawn
    assert png == tmp_path / "sweep.png" and png.read_bytes()[:4] == b"\x89PNG"
    # The threshold, when the signal first read below it, the first eviction (the records' signal falls 25Mi a second).
    assert [line.split()[:4] for line in table.splitlines()[2:]] == [
        ["200Mi", "200Mi", "14.0", "12.0"],
        ["400Mi", "400Mi", "6.0", "7.5"],
    ]
    assert table.splitlines()[3].split()[4:] == ["before,", "hog,", "calm", "-"]
    assert (tmp_path / "sweep.txt").read_text() == table + "\n"
    assert (tmp_path / "01-200Mi" / "hog.png").exists()  # each run's own plot again too
    assert replot_summary(tmp_path / "01-200Mi") is None  # a single run is not a summary
