"""The PNG of a run: per signal, what the eviction manager decided on against its thresholds over time, the node's
pressure condition as a band, and each eviction (and admission refused) marked with the pod's name.

matplotlib is the `experiment` extra, imported here only (the Agg backend: no display needed).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eviction.signals import BYTE_SIGNALS, SIGNAL_TO_CONDITION, parse_signal
from nodeagent.experiment.errors import MissingDependency
from nodeagent.experiment.report import pressure_intervals
from nodeagent.experiment.timeline import Record

MI = 1 << 20
INSTALL_HINT = "matplotlib is needed for the plot: pip install 'nodeagent[experiment]'"


def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415  (an optional dependency: only a plot needs it)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise MissingDependency(INSTALL_HINT) from exc
    return plt


def require_matplotlib() -> None:
    """Fails early (before a testbed comes up) when the plot could not be drawn."""
    _pyplot()


def _signals(records: Sequence[Record]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        if r["kind"] == "signal":
            seen.setdefault(str(r["signal"]), None)
    return list(seen)


def _scale(signal: str) -> tuple[float, str]:
    parsed = parse_signal(signal)
    return (MI, "MiB") if parsed in BYTE_SIGNALS else (1, "count")


def render(records: Sequence[Record], path: Path, *, title: str, duration: float | None = None) -> Path:
    plt = _pyplot()
    signals = _signals(records) or ["(no signal observed)"]
    fig, axes = plt.subplots(len(signals), 1, figsize=(11, 3.6 * len(signals)), sharex=True, squeeze=False)
    intervals = pressure_intervals(records)
    evictions = [r for r in records if r["kind"] == "eviction"]
    refusals = [r for r in records if r["kind"] == "admission-refused"]
    reclaims = [r for r in records if r["kind"] == "reclaim"]
    end = max([r["t"] for r in records] + [duration or 0.0])
    for ax, signal in zip((a[0] for a in axes), signals, strict=True):
        scale, unit = _scale(signal)
        samples = [r for r in records if r["kind"] == "signal" and r.get("signal") == signal]
        ts = [r["t"] for r in samples]
        ax.step(ts, [r["available"] / scale for r in samples], where="post", color="tab:blue", lw=2,
                label=f"{signal} (decided on)")  # fmt: skip
        if any(r.get("injected") for r in samples):
            observed = [r for r in samples if r.get("observed") is not None]
            ax.plot([r["t"] for r in observed], [r["observed"] / scale for r in observed], color="tab:gray", lw=1,
                    ls=":", label="observed by the node")  # fmt: skip
        for key, style, color, label in (
            ("threshold", "--", "tab:red", "hard threshold"),
            ("soft_threshold", "-.", "tab:orange", "soft threshold"),
        ):
            points = [(r["t"], r[key] / scale) for r in samples if r.get(key) is not None]
            if points:
                ax.step([p[0] for p in points], [p[1] for p in points], where="post", ls=style, color=color,
                        lw=1.5, label=label)  # fmt: skip
        condition = SIGNAL_TO_CONDITION.get(parse_signal(signal))  # type: ignore[arg-type]
        labelled = False
        for interval in intervals:
            if condition is not None and interval.condition == str(condition):
                ax.axvspan(interval.start, end if interval.end is None else interval.end, color="tab:red",
                           alpha=0.12, label=None if labelled else f"{condition}=True")  # fmt: skip
                labelled = True
        values = [r[k] / scale for r in samples for k in ("available", "threshold", "soft_threshold") if r.get(k)]
        if values and min(values) > 0 and max(values) / min(values) > 20:
            # A threshold of 100Mi under 20Gi available: only a log scale shows both.
            ax.set_yscale("log")
            unit += " (log)"
        top = ax.get_ylim()[1]
        for r in reclaims:
            ax.axvline(r["t"], color="tab:green", lw=0.8, alpha=0.6)
        for r in evictions:
            ax.axvline(r["t"], color="black", lw=1.2)
            rank = f" (rank {r['rank']})" if r.get("rank") is not None else ""
            ax.text(r["t"], top, f" evicted {r['pod']}{rank}", rotation=90, va="top", ha="right", fontsize=8)
        for r in refusals:
            ax.axvline(r["t"], color="tab:purple", lw=1, ls=":")
            ax.text(r["t"], top, f" refused {r['pod']}", rotation=90, va="top", ha="right", fontsize=8,
                    color="tab:purple")  # fmt: skip
        ax.set_ylabel(unit)
        ax.set_title(signal, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if reclaims:
            handles.append(plt.Line2D([], [], color="tab:green", lw=0.8))
            labels.append("reclaim attempt")
        if handles:
            ax.legend(handles, labels, fontsize=8, loc="lower left")
    axes[-1][0].set_xlabel("seconds since the pods ran (second 0)")
    fig.suptitle(textwrap.fill(title, 120), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["INSTALL_HINT", "render", "require_matplotlib"]
