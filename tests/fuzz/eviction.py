"""Eviction scenarios and thresholds: `nodeagent experiment eviction SCENARIO.yaml`'s reading of a scenario
(`load_scenario`: YAML, then `parse_scenario`, which also checks its eviction fields and injections) and its
resolution against the node's current values (`resolve_eviction`, `resolve_injection`); and the eviction manager's
`eviction.thresholds.parse_thresholds` with the agent's own quantity and duration parsers, as `evictionmanager`
calls it. Documented errors: `ScenarioError` (an `ExperimentError`) and `ThresholdError`."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from eviction.signals import Signal
from eviction.thresholds import ThresholdError, parse_thresholds
from nodeagent.config.durations import parse_go_duration
from nodeagent.config.quantity import parse_quantity
from nodeagent.experiment.errors import ScenarioError
from nodeagent.experiment.scenario import load_scenario, parse_scenario, resolve_eviction, resolve_injection
from tests.fuzz.engine import Target
from tests.fuzz.strategies import dump_yaml, hostile_documents, json_values, mutated, strings

_EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
_SCENARIOS: list[Any] = [yaml.safe_load(p.read_text()) for p in sorted(_EXPERIMENTS.glob("*.yaml"))]
_SIGNALS = [s.value for s in Signal]
_CURRENT = dict(zip(Signal, (1 << 30, 1 << 28, 1 << 33, 1 << 20, 1 << 32, 1 << 19, 4000, 1 << 30, 0), strict=True))
_THRESHOLDS = {s: 100 << 20 for s in Signal}

_values = st.one_of(
    strings,
    st.sampled_from(["100Mi", "10%", "current-400Mi", "current+1Gi", "current", "threshold-20Mi", "observed-5Mi",
                     "1m30s", "0%", "100%", "1e40%", "-1Mi", "0"]),
)  # fmt: skip
_maps = st.dictionaries(st.one_of(st.sampled_from(_SIGNALS), strings), _values, max_size=4)
_scenario_docs = st.one_of(
    st.sampled_from(_SCENARIOS).flatmap(lambda doc: mutated(doc, values=st.one_of(_values, json_values(6)))),
    json_values(12),
)


def _load_text(text: str) -> Any:
    fd, name = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        return load_scenario(Path(name))
    finally:
        os.unlink(name)


def run(case: tuple[str, Any, dict[str, str], dict[str, str], dict[str, str], dict[str, str]]) -> None:
    kind, doc, hard, soft, grace, reclaim = case
    with contextlib.suppress(ThresholdError):
        parse_thresholds(
            hard=hard,
            soft=soft,
            soft_grace_period=grace,
            minimum_reclaim=reclaim,
            enforce_node_allocatable=["pods"],
            parse_quantity=parse_quantity,
            parse_duration=parse_go_duration,
        )
    scenario = _load_text(doc) if kind == "text" else parse_scenario(doc)
    resolve_eviction(scenario, _CURRENT)
    scenario.injection()
    steps = {name: tuple(series) for name, series in scenario.inject.items()} if scenario.inject else {}
    resolve_injection(steps, observed=_CURRENT, thresholds=_THRESHOLDS)


strategy = st.tuples(
    st.sampled_from(["doc", "text"]),
    st.just(""),
    _maps,
    _maps,
    _maps,
    _maps,
).flatmap(
    lambda t: st.tuples(
        st.just(t[0]),
        st.one_of(_scenario_docs.map(dump_yaml), hostile_documents, st.text(max_size=100))
        if t[0] == "text"
        else _scenario_docs,
        *(st.just(x) for x in t[2:]),
    )
)

TARGET = Target("eviction", strategy, run, (ScenarioError, ThresholdError), __doc__ or "")
