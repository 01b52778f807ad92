"""`--versus-upstream`: the comparison's rows and table (who was evicted, when, in which order, on each agent), the
refusal of a scenario that injects, and the side-by-side figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nodeagent.experiment import compare
from nodeagent.experiment.errors import ExperimentError
from nodeagent.experiment.scenario import parse_scenario
from nodeagent.experiment.summaryplot import render_comparison
from nodeagent.experiment.timeline import Record, Timeline

MI = 1 << 20
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCENARIO = parse_scenario(
    {
        "name": "real",
        "duration": "40s",
        "eviction": {"evictionHard": {"memory.available": "current-200Mi"}},
        "pods": [{"name": "guaranteed"}, {"name": "hog"}, {"name": "calm"}, {"name": "late", "startAt": 20}],
    }
)


def _run(evicted: list[tuple[float, str]], *, refused: tuple[str, ...] = ()) -> list[Record]:
    timeline = Timeline(T0)
    for pod in ("guaranteed", "hog", "calm"):
        timeline.add(T0, "pod", pod=pod, phase="Running", qos="BestEffort")
    for second in range(0, 40, 2):
        timeline.add(T0 + timedelta(seconds=second), "signal", signal="memory.available", available=(900 - second)
                     * MI, threshold=800 * MI, capacity=24000 * MI)  # fmt: skip
        timeline.add(T0 + timedelta(seconds=second), "usage", pod="hog", resource="memory", used=second * 10 * MI,
                     request=None)  # fmt: skip
    for at, pod in evicted:
        timeline.add(T0 + timedelta(seconds=at), "eviction", pod=pod, qos="BestEffort")
    for pod in refused:
        timeline.add(T0 + timedelta(seconds=25), "admission-refused", pod=pod, qos="BestEffort")
    return timeline.records


def test_the_same_victims_in_the_same_order_agree_whatever_the_times() -> None:
    rows = compare.comparison_rows(
        SCENARIO,
        {
            compare.NODEAGENT: _run([(21.0, "hog"), (23.0, "calm")], refused=("late",)),
            compare.UPSTREAM: _run([(24.5, "hog"), (31.0, "calm")], refused=("late",)),
        },
    )
    assert [r.pod for r in rows] == ["guaranteed", "hog", "calm", "late"]
    hog = rows[1]
    assert hog.seen[compare.NODEAGENT] == compare.Seen("evicted", 21.0, 1)
    assert hog.seen[compare.UPSTREAM] == compare.Seen("evicted", 24.5, 1)
    assert rows[2].seen[compare.UPSTREAM] == compare.Seen("evicted", 31.0, 2)
    assert rows[0].seen[compare.NODEAGENT] == compare.Seen("running", None, None)
    assert rows[3].seen[compare.UPSTREAM] == compare.Seen("refused", 25.0, None)
    assert compare.victims(rows, compare.NODEAGENT) == compare.victims(rows, compare.UPSTREAM) == ["hog", "calm"]
    assert compare.agree(rows)
    table = compare.comparison_table(SCENARIO, rows)
    assert "hog         evicted #1 at 21.0 s  evicted #1 at 24.5 s" in table
    assert "late        refused at 25.0 s     refused at 25.0 s" in table
    assert table.splitlines()[-1] == "same victims in the same order: yes"
    assert "differs" not in table


@pytest.mark.parametrize(
    ("upstream", "differs"),
    [
        ([(22.0, "calm"), (24.0, "hog")], {"hog", "calm"}),  # the same pods, another order
        ([(22.0, "hog")], {"calm"}),  # one victim fewer
        ([(22.0, "hog"), (23.0, "calm"), (25.0, "guaranteed")], {"guaranteed"}),  # one more
    ],
)
def test_a_different_victim_or_order_is_marked(upstream: list[tuple[float, str]], differs: set[str]) -> None:
    rows = compare.comparison_rows(
        SCENARIO, {compare.NODEAGENT: _run([(21.0, "hog"), (23.0, "calm")]), compare.UPSTREAM: _run(upstream)}
    )
    assert not compare.agree(rows)
    assert {r.pod for r in rows if not r.same_outcome} == differs
    table = compare.comparison_table(SCENARIO, rows)
    assert table.splitlines()[-1] == "same victims in the same order: NO"
    assert [line.split()[0] for line in table.splitlines() if line.endswith("differs")] == [
        r.pod for r in rows if r.pod in differs
    ]


def test_a_scenario_that_injects_cannot_be_compared() -> None:
    compare.check_comparable(SCENARIO)
    injected = parse_scenario(
        {"name": "inj", "duration": 10, "inject": {"memory.available": [[1, "60Mi"]]}, "pods": [{"name": "a"}]}
    )
    with pytest.raises(ExperimentError, match="upstream kubelet has no signal injection"):
        compare.check_comparable(injected)


def test_the_side_by_side_figure_is_a_png(tmp_path: Path) -> None:
    records = {compare.NODEAGENT: _run([(21.0, "hog")]), compare.UPSTREAM: _run([(27.0, "hog")], refused=("late",))}
    rows = compare.comparison_rows(SCENARIO, records)
    png = render_comparison(records, rows, tmp_path / "comparison.png", title="compare", duration=40.0)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_comparison_is_drawn_again_from_its_directory(tmp_path: Path) -> None:
    from nodeagent.experiment.runner import replot_summary  # noqa: PLC0415
    from nodeagent.experiment.timeline import write_jsonl  # noqa: PLC0415

    scenario = "name: real\nduration: 40s\npods: [{name: guaranteed}, {name: hog}, {name: calm}]\n"
    (tmp_path / "scenario.yaml").write_text(scenario)
    for agent, evicted in ((compare.NODEAGENT, [(21.0, "hog")]), (compare.UPSTREAM, [(21.0, "hog"), (30.0, "calm")])):
        (tmp_path / agent).mkdir()
        (tmp_path / agent / "scenario.yaml").write_text(scenario)
        write_jsonl(_run(evicted), tmp_path / agent / "timeline.jsonl")
    drawn = replot_summary(tmp_path)
    assert drawn is not None
    png, table = drawn
    assert png == tmp_path / "comparison.png" and png.read_bytes()[:4] == b"\x89PNG"
    assert "calm        running               evicted #2 at 30.0 s  differs" in table
    assert (tmp_path / "comparison.txt").read_text() == table + "\n"
