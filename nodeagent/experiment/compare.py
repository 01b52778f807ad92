"""`nodeagent experiment eviction S.yaml --versus-upstream`: the scenario on nodeagent and then on the upstream
kubelet, on one testbed, and what each did with every pod (pure: the comparison's rows and table).

Upstream has no signal injection, so only a scenario under real pressure (no `inject`) can be compared; the runner
refuses one that injects before a testbed comes up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeagent.experiment.errors import ExperimentError
from nodeagent.experiment.report import PodOutcome, pod_outcomes
from nodeagent.experiment.scenario import Scenario
from nodeagent.experiment.timeline import Record

NODEAGENT = "nodeagent"
UPSTREAM = "kubelet"  # the upstream kubelet
AGENTS = (NODEAGENT, UPSTREAM)


@dataclass(frozen=True)
class Seen:
    """One pod on one agent."""

    outcome: str  # as report.pod_outcomes says: evicted | refused | running | ...
    t: float | None  # when it was evicted or refused
    order: int | None  # 1 for the first pod evicted on that agent, and so on


@dataclass(frozen=True)
class ComparisonRow:
    pod: str
    seen: Mapping[str, Seen]  # agent -> what happened to the pod there

    @property
    def same_outcome(self) -> bool:
        return len({(s.outcome, s.order) for s in self.seen.values()}) == 1


def check_comparable(scenario: Scenario) -> None:
    if scenario.inject:
        raise ExperimentError(
            f"scenario {scenario.name} injects {', '.join(scenario.inject)}: the upstream kubelet has no signal "
            "injection, so --versus-upstream needs a scenario under real pressure (thresholds such as "
            '"current-200Mi" and a workload that crosses them; see experiments/real-memory-hog.yaml)'
        )


def _seen(outcomes: Sequence[PodOutcome]) -> dict[str, Seen]:
    evicted = sorted((o for o in outcomes if o.outcome == "evicted" and o.t is not None), key=lambda o: o.t or 0.0)
    order = {o.name: n for n, o in enumerate(evicted, start=1)}
    return {
        o.name: Seen(o.outcome, o.t if o.outcome in ("evicted", "refused") else None, order.get(o.name))
        for o in outcomes
    }


def comparison_rows(scenario: Scenario, records: Mapping[str, Sequence[Record]]) -> list[ComparisonRow]:
    """One row per pod of the scenario, in the scenario's order: its outcome, time and place among the evictions
    on each agent."""
    by_agent = {agent: _seen(pod_outcomes(scenario, agent_records)) for agent, agent_records in records.items()}
    return [ComparisonRow(plan.name, {agent: seen[plan.name] for agent, seen in by_agent.items()})
            for plan in scenario.pods]  # fmt: skip


def victims(rows: Sequence[ComparisonRow], agent: str) -> list[str]:
    """The pods evicted on `agent`, in the order they were."""
    found = [(r.seen[agent].order, r.pod) for r in rows if r.seen[agent].order is not None]
    return [pod for _, pod in sorted(found)]


def agree(rows: Sequence[ComparisonRow]) -> bool:
    """The same pods evicted in the same order, and the same refused, on every agent (times may differ)."""
    return all(r.same_outcome for r in rows)


def describe(seen: Seen) -> str:
    """A pod's outcome on one agent, as the table and the figure word it."""
    if seen.outcome == "evicted":
        return f"evicted #{seen.order} at {seen.t:.1f} s"
    if seen.outcome == "refused" and seen.t is not None:
        return f"refused at {seen.t:.1f} s"
    return seen.outcome


def comparison_table(scenario: Scenario, rows: Sequence[ComparisonRow], agents: Sequence[str] = AGENTS) -> str:
    header = ("pod", *agents, "")
    cells = [header]
    for row in rows:
        cells.append((row.pod, *(describe(row.seen[a]) for a in agents), "" if row.same_outcome else "differs"))
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = [f"scenario {scenario.name} on {' and '.join(agents)} (times in seconds since second 0 of each run)"]
    lines.extend("  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip() for line in cells)
    for agent in agents:
        lines.append(f"{agent}: evicted {', '.join(victims(rows, agent)) or 'nothing'}")
    lines.append("same victims in the same order: " + ("yes" if agree(rows) else "NO"))
    return "\n".join(lines)


__all__ = [
    "AGENTS",
    "NODEAGENT",
    "UPSTREAM",
    "ComparisonRow",
    "Seen",
    "agree",
    "check_comparable",
    "comparison_rows",
    "comparison_table",
    "describe",
    "victims",
]
