"""The figures over several runs: a sweep's summary and the side-by-side comparison with the upstream kubelet.

- A sweep: the first eviction (seconds since second 0) against the swept value, one point per run in the order the
  values were given, each labelled with its victims in order; a run that evicted nothing is a hollow marker on the
  axis. The table under it is `sweep.sweep_table`'s.
- A comparison: one column per agent, each the single run's two panels (the signal against its thresholds, each
  pod's usage against its request: plot.signal_panel and plot.usage_panel) on one time axis and one y scale shared
  by both columns, each eviction a line through its column's panels with the pod's name over it; the table under
  them is `compare.comparison_table`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eviction.signals import parse_signal
from nodeagent.experiment import plot
from nodeagent.experiment.compare import ComparisonRow, describe
from nodeagent.experiment.sweep import COLUMNS, SweepRow, SweepSpec, format_threshold, table_cells
from nodeagent.experiment.timeline import RESOURCE_OF_SIGNAL, Record

DPI = 100


def render_sweep(spec: SweepSpec, rows: Sequence[SweepRow], path: Path, *, title: str, duration: float) -> Path:
    plt = plot.pyplot()
    table_in = 0.25 * (len(rows) + 1)
    height = 0.5 + 3.6 + 0.9 + table_in + 0.2
    fig = plt.figure(figsize=(10.0, height), dpi=DPI)
    # The gap between the panel and the table holds the ticks (a relative value and what it came to) and the label.
    grid = fig.add_gridspec(3, 1, height_ratios=[3.6, 0.9, table_in], left=0.08, right=0.97, top=1 - 0.5 / height,
                            bottom=0.2 / height, hspace=0.0)  # fmt: skip
    ax = fig.add_subplot(grid[0])
    xs = list(range(len(rows)))
    ticks = [
        row.value if format_threshold(spec, row.threshold) in ("-", row.value)
        else f"{row.value}\n(= {format_threshold(spec, row.threshold)})"
        for row in rows
    ]  # fmt: skip
    hit = [(x, r) for x, r in zip(xs, rows, strict=True) if r.first_eviction is not None]
    ax.plot([x for x, _ in hit], [r.first_eviction for _, r in hit], color="tab:blue", marker="o", lw=1.5,
            label="first eviction")  # fmt: skip
    for x, row in hit:
        ax.annotate(" → ".join(row.victims), (x, row.first_eviction or 0.0), textcoords="offset points",
                    xytext=(0, 9), ha="center", fontsize=8)  # fmt: skip
    crossed = [(x, r.crossing) for x, r in zip(xs, rows, strict=True) if r.crossing is not None]
    if crossed:
        ax.plot([x for x, _ in crossed], [t for _, t in crossed], ls="none", marker="v", color="tab:red",
                label="signal first read below the threshold (2 s samples)")  # fmt: skip
    missed = [x for x, r in zip(xs, rows, strict=True) if r.first_eviction is None]
    if missed:
        ax.plot(missed, [duration] * len(missed), ls="none", marker="o", mfc="none", color="tab:gray",
                label=f"nothing evicted in the {duration:.0f} s")  # fmt: skip
    ax.set_xticks(xs, ticks, fontsize=9)
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.set_ylim(0, duration * 1.12)
    ax.set_xlabel(spec.setting)
    ax.set_ylabel("seconds since the pods ran (second 0)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=11, x=0.08, ha="left")
    table_ax = fig.add_subplot(grid[2])
    table_ax.axis("off")
    cells = [list(table_cells(spec, row)) for row in rows]
    table = table_ax.table(cellText=cells, bbox=(0, 0, 1, 1), cellLoc="left",
                           colWidths=[0.25, 0.1, 0.1, 0.13, 0.27, 0.15],
                           colLabels=[spec.setting, *COLUMNS])  # fmt: skip
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def render_comparison(
    records: Mapping[str, Sequence[Record]],
    rows: Sequence[ComparisonRow],
    path: Path,
    *,
    title: str,
    duration: float,
) -> Path:
    plt = plot.pyplot()
    agents = list(records)
    table_in = 0.25 * (len(rows) + 1)
    height = 0.5 + 3.0 + 3.0 + 0.5 + table_in + 0.4
    fig = plt.figure(figsize=(15.0, height), dpi=DPI)
    grid = fig.add_gridspec(3, len(agents), height_ratios=[3.0, 3.0, 0.5 + table_in], left=0.05, right=0.84,
                            top=1 - 0.6 / height, bottom=0.2 / height, hspace=0.3, wspace=0.12)  # fmt: skip
    all_records = [r for agent in agents for r in records[agent]]
    signal = plot.main_signal(all_records)
    resource = RESOURCE_OF_SIGNAL.get(parse_signal(signal)) if signal else None  # type: ignore[arg-type]
    start = float(min([r["t"] for r in all_records if r["kind"] in ("signal", "usage")] + [0.0]))
    end = float(max([r["t"] for r in all_records] + [duration]))
    tops: list[Any] = []
    bottoms: list[Any] = []
    for column, agent in enumerate(agents):
        last = column == len(agents) - 1
        # Each top panel on its own y scale: a relative threshold resolves to another value on each run.
        top = fig.add_subplot(grid[0, column], sharex=tops[0] if tops else None)
        bottom = fig.add_subplot(grid[1, column], sharex=top)
        tops.append(top)
        bottoms.append(bottom)
        plot.signal_panel(plt, top, records[agent], signal, end, legend=last)
        plot.usage_panel(plt, bottom, records[agent], resource, legend=last, pods=[r.pod for r in rows])
        top.set_title(f"{agent}: {signal} against the thresholds", fontsize=10, loc="left")
        bottom.set_title(f"{agent}: each pod's {plot.RESOURCE_WORDS.get(resource or '', ('usage', ''))[0]}",
                         fontsize=10, loc="left")  # fmt: skip
        top.set_xlim(start, end)
        plt.setp(top.get_xticklabels(), visible=False)
        bottom.set_xlabel("seconds since the pods ran (second 0)")
        if column:
            top.set_ylabel("")
            bottom.set_ylabel("")
        for m in plot.markers(records[agent]):
            color = "black" if m.what == "evicted" else "tab:purple"
            for ax in (top, bottom):
                ax.axvline(m.t, color=color, lw=1.0, ls="-" if m.what == "evicted" else ":")
            # Right of its line, or left of it near the panel's right edge (where the legend is).
            late = m.t > start + 0.9 * (end - start)
            top.annotate(f"{m.number} {m.pod}", (m.t, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(-3 if late else 2, -3), textcoords="offset points", ha="right" if late else "left",
                         va="top", fontsize=8, color=color, rotation=90)  # fmt: skip
    # The pods' usage on one scale in both columns.
    highest = max(ax.get_ylim()[1] for ax in bottoms)
    for ax in bottoms:
        ax.set_ylim(0, highest)
    fig.suptitle(title, fontsize=11, x=0.05, ha="left")
    table_ax = fig.add_subplot(grid[2, :])
    table_ax.axis("off")
    cells = []
    for row in rows:
        line = [row.pod, *(describe(row.seen[agent]) for agent in agents)]
        line.append("same" if row.same_outcome else "DIFFERS")
        cells.append(line)
    share = 0.8 / len(agents)
    table = table_ax.table(cellText=cells, colLabels=["pod", *agents, ""], bbox=(0, 0, 1, 1), cellLoc="left",
                           colWidths=[0.12, *([share] * len(agents)), 0.08])  # fmt: skip
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


__all__ = ["render_comparison", "render_sweep"]
