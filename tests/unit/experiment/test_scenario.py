"""Scenario files (nodeagent/experiment/scenario.py): what parses, every problem named by its field, and the
resolution of relative thresholds and threshold-relative injections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from eviction.signals import Signal
from nodeagent.experiment.errors import ScenarioError
from nodeagent.experiment.scenario import (
    Workload,
    WorkloadType,
    load_scenario,
    parse_scenario,
    resolve_eviction,
    resolve_injection,
)

MI = 1 << 20
EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"


def _doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "s",
        "duration": "1m",
        "eviction": {"evictionHard": {"memory.available": "100Mi"}},
        "pods": [{"name": "hog", "workload": {"type": "memory-hog", "rate": "4Mi", "max": "40Mi"}}],
    }
    doc.update(overrides)
    return doc


def test_a_scenario_parses() -> None:
    scenario = parse_scenario(
        _doc(
            inject={"memory.available": [[20, "60Mi"], [40, "observed"]]},
            expect={"evicted": ["hog"]},
        )
    )
    assert scenario.duration == 60.0
    assert scenario.pods[0].workload == Workload(WorkloadType.MEMORY_HOG, 4 * MI, 40 * MI)
    assert scenario.inject == {"memory.available": ((20.0, "60Mi"), (40.0, "observed"))}
    assert scenario.injection() == {
        "start": None,
        "signals": {"memory.available": [[20.0, "60Mi"], [40.0, "observed"]]},
    }


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_scenarios_parse(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert scenario.duration <= 180  # each short, as the issue asks
    assert scenario.expect.any


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"name": "Bad Name"}, "name: expected a DNS label"),
        ({"duration": "soon"}, "duration: "),
        ({"duration": None}, "duration: expected seconds or a duration"),
        ({"pods": []}, "pods: required"),
        ({"pods": [{"name": "a"}, {"name": "a"}]}, "pods: two pods are named 'a'"),
        ({"pods": [{"name": "a", "workload": {"type": "fork-bomb"}}]}, "pods[0] (a).workload.type: unknown workload"),
        (
            {"pods": [{"name": "a", "workload": {"type": "memory-hog", "rate": "x", "max": "1Mi"}}]},
            "pods[0] (a).workload.rate: ",
        ),
        (
            {"pods": [{"name": "a", "workload": {"type": "disk-filler", "rate": "1500", "max": "3000"}}]},
            "rate and max must be whole KiB",
        ),
        ({"pods": [{"name": "a", "requests": {"gpu": "1"}}]}, "pods[0] (a).requests.gpu: unsupported resource"),
        ({"pods": [{"name": "a", "priority": 2_000_000_000}]}, "pods[0] (a).priority: a user PriorityClass"),
        ({"pods": [{"name": "a", "startAt": 5, "stopAt": 3}]}, "pods[0] (a).stopAt: must come after startAt"),
        ({"pods": [{"name": "a", "color": "red"}]}, "pods[0].color: unknown field"),
        ({"eviction": {"evictionHard": {"memory.available": "lots"}}}, "eviction: evictionHard: memory.available: "),
        ({"eviction": {"evictionHard": {"memory.free": "1Mi"}}}, "unsupported eviction signal memory.free"),
        (
            {"eviction": {"evictionHard": {"memory.available": "current-many"}}},
            "eviction.evictionHard.memory.available",
        ),
        ({"eviction": {"evictionMinimumReclaim": {"memory.available": "current"}}}, "only thresholds can be relative"),
        ({"eviction": {"evictionSoft": {"memory.available": "1Gi"}}}, "grace period must be specified"),
        ({"eviction": {"evictionMaxPodGracePeriod": "5s"}}, "eviction.evictionMaxPodGracePeriod: expected seconds"),
        ({"eviction": {"evictionHardest": {}}}, "eviction.evictionHardest: unknown field"),
        ({"inject": {"memory.available": [[10, "1Mi"], [5, "2Mi"]]}}, "inject: signals: memory.available[1]"),
        ({"inject": {"memory.available": [[10, "threshold-lots"]]}}, "inject.memory.available[0]: "),
        ({"expect": {"evicted": ["ghost"]}}, "expect.evicted: no pod named 'ghost'"),
        ({"agentEnv": {"NODEAGENT_IMAGE_GC_PERIOD": [10]}}, "agentEnv.NODEAGENT_IMAGE_GC_PERIOD: expected"),
        ({"agentEnv": ["X=1"]}, "agentEnv: "),
    ],
)
def test_problems_name_their_field(overrides: dict[str, Any], problem: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(_doc(**overrides))
    assert any(problem in p for p in raised.value.problems), raised.value.problems


def test_every_problem_is_reported() -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(_doc(name="X", duration="never", pods=[{"name": "a", "workload": {"type": "?"}}]))
    assert len(raised.value.problems) == 3
    assert "3 problems" in str(raised.value)


def test_a_file_that_is_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not YAML"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("hard", "current", "expected"),
    [
        ({"memory.available": "current-400Mi"}, {Signal.MEMORY_AVAILABLE: 2000 * MI}, {"memory.available": "1600Mi"}),
        ({"memory.available": "current+1Gi"}, {Signal.MEMORY_AVAILABLE: 2000 * MI + 5}, {"memory.available": "3024Mi"}),
        ({"pid.available": "current-200"}, {Signal.PID_AVAILABLE: 32000}, {"pid.available": "31800"}),
        (
            {"nodefs.available": "10%", "memory.available": "100Mi"},
            {},
            {"nodefs.available": "10%", "memory.available": "100Mi"},
        ),
    ],
)
def test_relative_thresholds_resolve(
    hard: dict[str, str], current: dict[Signal, int], expected: dict[str, str]
) -> None:
    scenario = parse_scenario(_doc(eviction={"evictionHard": hard}))
    fields, _ = resolve_eviction(scenario, current)
    assert fields["evictionHard"] == expected


@pytest.mark.parametrize(
    ("current", "problem"),
    [({}, "does not report memory.available"), ({Signal.MEMORY_AVAILABLE: 300 * MI}, "not a threshold")],
)
def test_relative_thresholds_that_cannot_resolve(current: dict[Signal, int], problem: str) -> None:
    scenario = parse_scenario(_doc(eviction={"evictionHard": {"memory.available": "current-400Mi"}}))
    with pytest.raises(ScenarioError, match=problem):
        resolve_eviction(scenario, current)


def test_the_document_before_second_zero_has_no_unresolved_step() -> None:
    scenario = parse_scenario(_doc(inject={"imagefs.available": [[20, "threshold-20Mi"]]}))
    assert scenario.injection()["signals"] == {"imagefs.available": [[20.0, "observed"]]}


def test_threshold_relative_injection_resolves_to_an_offset_from_the_observation() -> None:
    resolved = resolve_injection(
        {"imagefs.available": ((0.0, "observed"), (20.0, "threshold-20Mi"))},
        observed={Signal.IMAGEFS_AVAILABLE: 5000 * MI},
        thresholds={Signal.IMAGEFS_AVAILABLE: 3000 * MI},
    )
    # 20Mi below the threshold now: observed - (5000 - 2980) Mi.
    assert resolved == {"imagefs.available": ((0.0, "observed"), (20.0, f"observed-{2020 * MI}"))}


def test_shipped_scenarios_are_yaml_mappings() -> None:
    for path in EXPERIMENTS.glob("*.yaml"):
        assert isinstance(yaml.safe_load(path.read_text()), dict)


def test_agent_env_is_passed_as_strings() -> None:
    scenario = parse_scenario(_doc(agentEnv={"NODEAGENT_IMAGE_GC_PERIOD": 10}))
    assert scenario.agent_env == {"NODEAGENT_IMAGE_GC_PERIOD": "10"}
    assert parse_scenario(_doc()).agent_env == {}
