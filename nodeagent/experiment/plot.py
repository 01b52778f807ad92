"""The PNG of a run, made to show why each pod went.

- A strip on top names each eviction (and admission refused) at its time: the pod's name when the names fit side by
  side, else its number. Labels are laid out in rows so that none overlaps another or leaves the strip
  (`place_labels`).
- The top panel: the scenario's signal as the eviction manager decided on it, its thresholds, and the node's
  pressure condition as a band.
- The bottom panel, on the same time axis: each pod's usage of what that signal ranks pods by (memory working set,
  ephemeral storage, or processes) against its request (dashed), so a victim above its request shows why it went.
- Under the plot, a table of the evictions and refusals with their number, time, pod, QoS, priority and usage
  against request at that moment.
- Legends sit to the right of the panels, never over the data. The scenario's description goes to the report
  (summary.txt), not onto the figure.

matplotlib is the `experiment` extra, imported here only (the Agg backend: no display needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eviction.signals import BYTE_SIGNALS, SIGNAL_TO_CONDITION, parse_signal
from nodeagent.experiment.errors import MissingDependency
from nodeagent.experiment.report import pressure_intervals
from nodeagent.experiment.timeline import RESOURCE_OF_SIGNAL, Record

MI = 1 << 20
INSTALL_HINT = "matplotlib is needed for the plot: pip install 'nodeagent[experiment]'"

WIDTH_IN = 12.0
DPI = 100
LEFT, RIGHT = 0.07, 0.74  # the panels' share of the width; the legends go right of them
LABEL_FONT = 8
CHAR_PX = LABEL_FONT * 0.62 * DPI / 72  # a generous average glyph width of the label font
LABEL_GAP_PX = 6.0
MAX_NAME_ROWS = 3  # more rows of names than this and the strip shows numbers instead

RESOURCE_WORDS = {
    "memory": ("memory used (working set)", "MiB"),
    "ephemeral-storage": ("local storage used (ephemeral storage)", "MiB"),
    "pids": ("processes", "count"),
}


@dataclass(frozen=True)
class Marker:
    """An eviction or an admission refused, as the figure shows it."""

    number: int
    t: float
    pod: str
    what: str  # "evicted" | "refused at admission"
    qos: str
    priority: int | None


@dataclass(frozen=True)
class Placed:
    left: float  # pixels from the strip's left edge
    row: int  # 0 is the row next to the panel


def place_labels(
    centres: Sequence[float], widths: Sequence[float], span: float, *, gap: float = LABEL_GAP_PX, max_rows: int
) -> list[Placed] | None:
    """Where each label goes: centred on its marker but kept inside [0, span], in the first row where it does not
    come within `gap` of a label already there. Labels are taken in the order of their centres. None when more than
    `max_rows` rows would be needed."""
    order = sorted(range(len(centres)), key=lambda i: centres[i])
    rows: list[list[tuple[float, float]]] = []
    placed: dict[int, Placed] = {}
    for i in order:
        width = widths[i]
        left = min(max(centres[i] - width / 2, 0.0), max(span - width, 0.0))
        for row, taken in enumerate(rows):
            if all(left >= r + gap or left + width + gap <= lo for lo, r in taken):
                taken.append((left, left + width))
                placed[i] = Placed(left, row)
                break
        else:
            if len(rows) == max_rows:
                return None
            rows.append([(left, left + width)])
            placed[i] = Placed(left, len(rows) - 1)
    return [placed[i] for i in range(len(centres))]


def pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415  (an optional dependency: only a plot needs it)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise MissingDependency(INSTALL_HINT) from exc
    return plt


def require_matplotlib() -> None:
    """Fails early (before a testbed comes up) when the plot could not be drawn."""
    pyplot()


def main_signal(records: Sequence[Record]) -> str | None:
    """The signal the figure is about: the one the first eviction was for, else one that was injected, else one
    with a threshold, else the first one seen."""
    seen = list(dict.fromkeys(str(r["signal"]) for r in records if r["kind"] == "signal"))
    evicted = [str(r["signal"]) for r in records if r["kind"] == "eviction" and r.get("signal") in seen]
    if evicted:
        return evicted[0]
    for test in (lambda r: r.get("injected"), lambda r: r.get("threshold") is not None):
        found = [str(r["signal"]) for r in records if r["kind"] == "signal" and test(r)]
        if found:
            return found[0]
    return seen[0] if seen else None


def markers(records: Sequence[Record]) -> list[Marker]:
    found = [r for r in records if r["kind"] in ("eviction", "admission-refused")]
    found.sort(key=lambda r: r["t"])
    return [
        Marker(
            number=n,
            t=float(r["t"]),
            pod=str(r.get("pod", "")),
            what="evicted" if r["kind"] == "eviction" else "refused at admission",
            qos=str(r.get("qos") or ""),
            priority=r.get("priority"),
        )
        for n, r in enumerate(found, start=1)
    ]


def _scale(signal: str) -> tuple[float, str]:
    parsed = parse_signal(signal)
    return (MI, "MiB") if parsed in BYTE_SIGNALS else (1, "count")


def _amount(value: float | None, resource: str) -> str:
    if value is None:
        return "-"
    if resource == "pids":
        return f"{int(value)}"
    mib = value / MI
    return f"{mib:.1f} MiB" if mib < 10 else f"{mib:.0f} MiB"


def usage_at(records: Sequence[Record], pod: str, resource: str, t: float) -> tuple[int | None, int | None]:
    """The pod's last recorded usage and request of `resource` at or before `t` (or its first after, when none)."""
    mine = [r for r in records if r["kind"] == "usage" and r.get("pod") == pod and r.get("resource") == resource]
    before = [r for r in mine if r["t"] <= t]
    chosen = before[-1] if before else (mine[0] if mine else None)
    if chosen is None:
        return None, None
    return chosen.get("used"), chosen.get("request")


def table_rows(records: Sequence[Record], resource: str | None) -> list[list[str]]:
    """The table under the plot: one row per eviction or refusal."""
    rows = []
    for m in markers(records):
        used, request = usage_at(records, m.pod, resource, m.t) if resource else (None, None)
        if resource is not None and used is None:
            versus = "not recorded"
        elif resource == "pids":
            versus = f"{_amount(used, resource)} (no request for processes)"
        elif resource is not None:
            versus = f"{_amount(used, resource)} of {_amount(request, resource) if request else 'no'} request"
        else:
            versus = "-"
        priority = "" if m.priority is None else str(m.priority)
        rows.append([str(m.number), f"{m.t:.1f}", m.pod, m.what, m.qos or "-", priority or "-", versus])
    return rows


def render(records: Sequence[Record], path: Path, *, title: str, duration: float | None = None) -> Path:
    plt = pyplot()
    signal = main_signal(records)
    resource = RESOURCE_OF_SIGNAL.get(parse_signal(signal)) if signal else None  # type: ignore[arg-type]
    found = markers(records)
    rows = table_rows(records, resource)
    start = float(min([r["t"] for r in records if r["kind"] in ("signal", "usage")] + [0.0]))
    end = float(max([r["t"] for r in records] + [duration or 0.0]))

    # Labels: names if they fit in a few rows, else numbers (always in the table below).
    span_px = WIDTH_IN * DPI * (RIGHT - LEFT)

    def px(t: float) -> float:
        return (t - start) / max(end - start, 1e-9) * span_px

    names = [f"{m.number} {m.pod}" for m in found]
    layout = place_labels([px(m.t) for m in found], [len(n) * CHAR_PX for n in names], span_px, max_rows=MAX_NAME_ROWS)
    if layout is None:
        names = [str(m.number) for m in found]
        layout = place_labels(
            [px(m.t) for m in found], [len(n) * CHAR_PX for n in names], span_px, max_rows=max(len(found), 1)
        )
    assert layout is not None
    label_rows = max((p.row for p in layout), default=0) + 1

    strip_in = 0.22 * label_rows + 0.1
    table_in = 0.25 * (len(rows) + 1) if rows else 0.0
    gap_in = 0.4 if rows else 0.0  # the bottom panel's axis label, between it and the table
    height = strip_in + 3.0 + 3.0 + gap_in + table_in + 1.2
    fig = plt.figure(figsize=(WIDTH_IN, height), dpi=DPI)
    ratios = [strip_in, 3.0, 3.0] + ([gap_in, table_in] if rows else [])
    grid = fig.add_gridspec(len(ratios), 1, height_ratios=ratios, left=LEFT, right=RIGHT,
                            top=1 - 0.45 / height, bottom=0.25 / height if rows else 0.6 / height,
                            hspace=0.35 / 3.0 * len(ratios) / 3)  # fmt: skip
    strip = fig.add_subplot(grid[0])
    top = fig.add_subplot(grid[1], sharex=strip)
    bottom = fig.add_subplot(grid[2], sharex=strip)
    strip.set_xlim(start, end)
    strip.set_ylim(0, label_rows)
    strip.axis("off")

    for m, name, place in zip(found, names, layout, strict=True):
        color = "black" if m.what == "evicted" else "tab:purple"
        x = start + place.left / span_px * (end - start)
        strip.text(x, place.row + 0.5, name, ha="left", va="center", fontsize=LABEL_FONT, color=color,
                   clip_on=False)  # fmt: skip
        # A leader from the label down to the marker's time, so a label moved aside still points at it.
        strip.plot([m.t, m.t], [0, place.row + 0.2], color=color, lw=0.6)
        for ax in (top, bottom):
            ax.axvline(m.t, color=color, lw=1.0, ls="-" if m.what == "evicted" else ":")

    signal_panel(plt, top, records, signal, end)
    usage_panel(plt, bottom, records, resource)
    plt.setp(top.get_xticklabels(), visible=False)
    bottom.set_xlabel("seconds since the pods ran (second 0)")
    fig.suptitle(title, fontsize=11, x=LEFT, ha="left")

    if rows:
        table_ax = fig.add_subplot(grid[4])
        table_ax.axis("off")
        header = ["#", "at (s)", "pod", "what happened", "QoS", "priority", f"{_resource_word(resource)} at the time"]
        table = table_ax.table(cellText=rows, colLabels=header, bbox=(0, 0, 1, 1), cellLoc="left",
                               colWidths=[0.04, 0.07, 0.17, 0.2, 0.1, 0.08, 0.34])  # fmt: skip
        table.auto_set_font_size(False)
        table.set_fontsize(8)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _resource_word(resource: str | None) -> str:
    if resource is None:
        return "usage"
    return {"memory": "memory used", "ephemeral-storage": "local storage used", "pids": "processes"}[resource]


def signal_panel(
    plt: Any, ax: Any, records: Sequence[Record], signal: str | None, end: float, *, legend: bool = True
) -> None:
    if signal is None:
        ax.text(0.5, 0.5, "no signal observed", transform=ax.transAxes, ha="center")
        return
    scale, unit = _scale(signal)
    samples = [r for r in records if r["kind"] == "signal" and r.get("signal") == signal]
    injected = any(r.get("injected") for r in samples)
    ax.step([r["t"] for r in samples], [r["available"] / scale for r in samples], where="post", color="tab:blue",
            lw=2, label=f"{signal}" + (" (injected)" if injected else ""))  # fmt: skip
    if injected:
        observed = [r for r in samples if r.get("observed") is not None]
        ax.plot([r["t"] for r in observed], [r["observed"] / scale for r in observed], color="tab:gray", lw=1,
                ls=":", label="what the node really had")  # fmt: skip
    for key, style, color, label in (
        ("threshold", "--", "tab:red", "hard threshold"),
        ("soft_threshold", "-.", "tab:orange", "soft threshold"),
    ):
        points = [(r["t"], r[key] / scale) for r in samples if r.get(key) is not None]
        if points:
            ax.step([p[0] for p in points], [p[1] for p in points], where="post", ls=style, color=color, lw=1.5,
                    label=label)  # fmt: skip
    condition = SIGNAL_TO_CONDITION.get(parse_signal(signal))  # type: ignore[arg-type]
    labelled = False
    for interval in pressure_intervals(records):
        if condition is not None and interval.condition == str(condition):
            ax.axvspan(interval.start, end if interval.end is None else interval.end, color="tab:red", alpha=0.12,
                       label=None if labelled else f"node reported {condition}")  # fmt: skip
            labelled = True
    values = [r[k] / scale for r in samples for k in ("available", "threshold", "soft_threshold") if r.get(k)]
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")  # a threshold of 100Mi under 20Gi available: only a log scale shows both
        unit += ", log scale"
    handles, labels = ax.get_legend_handles_labels()
    reclaims = [r for r in records if r["kind"] == "reclaim"]
    for r in reclaims:
        ax.axvline(r["t"], color="tab:green", lw=0.8, alpha=0.6)
    if reclaims:
        handles.append(plt.Line2D([], [], color="tab:green", lw=0.8))
        labels.append("eviction manager tried to reclaim")
    if any(r["kind"] == "eviction" for r in records):
        handles.append(plt.Line2D([], [], color="black", lw=1.0))
        labels.append("pod evicted")
    if any(r["kind"] == "admission-refused" for r in records):
        handles.append(plt.Line2D([], [], color="tab:purple", lw=1.0, ls=":"))
        labels.append("pod refused at admission")
    if legend:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_ylabel(f"available ({unit})")
    ax.set_title(f"the node: {signal} against the thresholds", fontsize=10, loc="left")
    ax.grid(alpha=0.3)


def usage_panel(
    plt: Any,
    ax: Any,
    records: Sequence[Record],
    resource: str | None,
    *,
    legend: bool = True,
    pods: Sequence[str] = (),
) -> None:
    """Each pod's usage against its request; `pods` fixes the colours' order (the same pod, the same colour in two
    panels side by side), else the pods come in the order they were first recorded."""
    usage = [r for r in records if r["kind"] == "usage" and r.get("resource") == resource]
    words, unit = RESOURCE_WORDS.get(resource or "", ("usage", ""))
    ax.set_title(f"each pod: {words} against its request", fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    if not usage:
        ax.text(0.5, 0.5, "no per-pod usage recorded in this run", transform=ax.transAxes, ha="center",
                va="center", color="tab:gray")  # fmt: skip
        return
    scale = 1 if resource == "pids" else MI
    largest = max([r["used"] for r in usage] + [r.get("request") or 0 for r in usage])
    if resource != "pids" and largest < MI:
        scale, unit = 1024, "KiB"  # a few KiB of logs: MiB would show only 0.0s
    recorded = set(str(r["pod"]) for r in usage)
    pods = [p for p in pods if p in recorded] + [
        p for p in dict.fromkeys(str(r["pod"]) for r in usage) if p not in pods
    ]
    priorities = {str(r["pod"]): r["priority"] for r in records if r["kind"] == "pod" and r.get("priority") is not None}
    # Priorities name the pod when they differ: upstream ranks by priority before usage.
    show_priority = len({priorities.get(p, 0) for p in pods}) > 1
    colors = plt.get_cmap("tab10")
    requested = False
    for i, pod in enumerate(pods):
        mine = [r for r in usage if r["pod"] == pod]
        color = colors(i % 10)
        request = next((r.get("request") for r in reversed(mine) if r.get("request") is not None), None)
        notes = [f"priority {priorities.get(pod, 0)}"] if show_priority else []
        if resource != "pids":
            notes.append(f"request {request / scale:.0f} {unit}" if request else "no request")
        label = f"{pod} ({', '.join(notes)})" if notes else pod
        ax.plot([r["t"] for r in mine], [r["used"] / scale for r in mine], color=color, lw=1.8, label=label)
        if request:
            requested = True
            ax.plot([r["t"] for r in mine], [(r.get("request") or 0) / scale for r in mine], color=color, lw=1.2,
                    ls="--")  # fmt: skip
    handles, labels = ax.get_legend_handles_labels()
    if requested:
        handles.append(plt.Line2D([], [], color="gray", lw=1.2, ls="--"))
        labels.append("its request (dashed)")
    if legend:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)


__all__ = [
    "INSTALL_HINT",
    "Marker",
    "Placed",
    "main_signal",
    "markers",
    "place_labels",
    "pyplot",
    "render",
    "require_matplotlib",
    "signal_panel",
    "table_rows",
    "usage_at",
    "usage_panel",
]
