"""The experiment's figure: labels that never overlap each other nor leave the strip, the table under the plot,
which signal and which per-pod resource it shows, and a rendered PNG with both panels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nodeagent.experiment.plot import main_signal, markers, place_labels, render, table_rows, usage_at
from nodeagent.experiment.timeline import Record, Timeline

MI = 1 << 20
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _overlaps(a: tuple[float, float], b: tuple[float, float], gap: float) -> bool:
    return not (a[0] >= b[1] + gap or a[1] + gap <= b[0])


@pytest.mark.parametrize(
    ("centres", "widths", "rows"),
    [
        ([100.0, 400.0, 700.0], [60.0, 60.0, 60.0], 1),  # far apart: one row
        ([100.0, 110.0, 120.0], [80.0, 80.0, 80.0], 3),  # three pods within a few seconds: a row each
        ([0.0, 5.0], [120.0, 120.0], 2),  # at the left edge: kept inside the strip
        ([995.0, 999.0], [120.0, 40.0], 2),  # at the right edge too
    ],
)
def test_labels_never_overlap_nor_leave_the_strip(centres: list[float], widths: list[float], rows: int) -> None:
    span, gap = 1000.0, 6.0
    placed = place_labels(centres, widths, span, gap=gap, max_rows=5)
    assert placed is not None
    assert max(p.row for p in placed) + 1 == rows
    boxes = [(p.left, p.left + w, p.row) for p, w in zip(placed, widths, strict=True)]
    for left, right, _ in boxes:
        assert left >= 0.0 and right <= span
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] != b[2] or not _overlaps((a[0], a[1]), (b[0], b[1]), gap), (a, b)


def test_too_many_close_labels_give_up_so_that_numbers_are_used() -> None:
    assert place_labels([100.0] * 5, [80.0] * 5, 1000.0, max_rows=3) is None


def _run(*, signal: str = "memory.available", resource: str = "memory") -> list[Record]:
    timeline = Timeline(T0)
    add = timeline.add
    for second in range(0, 30, 2):
        at = T0 + timedelta(seconds=second)
        add(at, "signal", signal=signal, available=60 * MI, capacity=24000 * MI, threshold=100 * MI)
        add(at, "usage", pod="hog", resource=resource, used=(40 + second) * MI, request=0)
        add(at, "usage", pod="calm", resource=resource, used=10 * MI, request=32 * MI)
    add(T0 + timedelta(seconds=10), "condition", condition="MemoryPressure", status="True")
    add(T0 + timedelta(seconds=11), "eviction", pod="hog", signal=signal, qos="BestEffort", priority=0, rank=0)
    add(T0 + timedelta(seconds=12), "eviction", pod="calm", signal=signal, qos="Burstable", priority=0, rank=0)
    add(T0 + timedelta(seconds=13), "admission-refused", pod="late", qos="BestEffort", priority=0)
    return timeline.records


def test_the_table_says_what_happened_and_the_usage_against_the_request() -> None:
    records = _run()
    assert [m.pod for m in markers(records)] == ["hog", "calm", "late"]
    assert table_rows(records, "memory") == [
        ["1", "11.0", "hog", "evicted", "BestEffort", "0", "50 MiB of no request"],
        ["2", "12.0", "calm", "evicted", "Burstable", "0", "10 MiB of 32 MiB request"],
        ["3", "13.0", "late", "refused at admission", "BestEffort", "0", "not recorded"],
    ]
    assert usage_at(records, "hog", "memory", 0.5) == (40 * MI, 0)


def test_the_figure_is_about_the_signal_the_pods_were_evicted_for() -> None:
    records = _run()
    records.insert(0, {"t": 0.0, "kind": "signal", "signal": "pid.available", "available": 4000, "capacity": 5000})
    assert main_signal(records) == "memory.available"


def test_a_pid_run_shows_processes_without_a_request() -> None:
    rows = table_rows(_run(signal="pid.available", resource="pids"), "pids")
    assert rows[0][-1].endswith("(no request for processes)")


def test_render_writes_a_png_with_the_strip_two_panels_and_the_table(tmp_path: Path) -> None:
    path = render(_run(), tmp_path / "run.png", title="eviction experiment: t", duration=30)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    assert width == 1200 and height > 800  # two panels and a table of three rows under them


def test_a_run_is_drawn_again_from_its_directory(tmp_path: Path) -> None:
    from nodeagent.experiment.runner import replot  # noqa: PLC0415
    from nodeagent.experiment.timeline import write_jsonl  # noqa: PLC0415

    (tmp_path / "scenario.yaml").write_text(
        "name: s\ndescription: Two pods, the hog above its request.\nduration: 30s\n"
        "pods: [{name: hog}, {name: calm}]\nexpect: {evicted: [hog, calm]}\n"
    )
    write_jsonl(_run(), tmp_path / "timeline.jsonl")
    png, table = replot(tmp_path)
    assert png == tmp_path / "s.png" and png.read_bytes()[:4] == b"\x89PNG"
    assert table.splitlines()[1] == "  Two pods, the hog above its request."  # the description is in the report
    assert "expectations: PASS" in (tmp_path / "summary.txt").read_text()
