"""An eviction scenario: the YAML file `nodeagent experiment eviction` runs, parsed and checked.

    name: memory-hog-among-qos
    description: A BestEffort memory hog beside pods of each QoS class.
    duration: 90s                      # recorded from second 0 (when the pods run); a Go duration or seconds
    eviction:                          # KubeletConfiguration fields, as the agent reads them
      evictionHard: {memory.available: 100Mi}        # or "current-400Mi": what the machine has now, less 400Mi
      evictionPressureTransitionPeriod: 20s
    inject:                            # optional: signals that replace the observed ones (eviction/injection.py)
      memory.available: [[20, 80Mi], [50, observed]]
    injectCapacity: {}                 # optional: the capacity of an injected signal the node does not observe
    pods:
      - name: hog
        requests: {memory: 16Mi}       # requests and limits decide the QoS class, as for any pod
        priority: 1000                 # optional: a PriorityClass of that value is made for the run
        startAt: 0                     # seconds; 0 (the default) runs before second 0, later ones are created then
        workload: {type: memory-hog, rate: 4Mi, max: 40Mi}   # sleeper | memory-hog | disk-filler | process-spawner
    expect:                            # optional: checked at the end (the exit status says)
      evicted: [hog]                   # evicted, in this order
      notEvicted: [guaranteed]
      refused: []                      # refused at admission

Every problem is reported, each naming its field (`pods[1].workload.rate: ...`). Relative thresholds
(`current-Q`, `current+Q`) are checked here and resolved by the runner (`resolve_eviction`) just before the agent
starts, from what the machine has then, so one scenario suits a 2 GB VM and a 256 GB server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from eviction.injection import InjectionError, injection_document, parse_injection
from eviction.signals import BYTE_SIGNALS, Signal, parse_signal
from eviction.thresholds import ThresholdError, parse_thresholds
from nodeagent.config.durations import parse_go_duration
from nodeagent.config.quantity import INT64_MAX, INT64_MIN, parse_quantity
from nodeagent.experiment.errors import ScenarioError

MI = 1 << 20
EVICTION_FIELDS = (
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMinimumReclaim",
    "evictionMaxPodGracePeriod",
    "evictionPressureTransitionPeriod",
)
# Image garbage collection's settings, for scenarios where reclaim frees images before any pod goes.
IMAGE_GC_FIELDS = (
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
)
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RELATIVE = re.compile(r"current\s*(?:([+-])\s*(\S+))?")
_THRESHOLD = re.compile(r"threshold\s*(?:([+-])\s*(\S+))?")


class WorkloadType(StrEnum):
    SLEEPER = "sleeper"
    MEMORY_HOG = "memory-hog"  # rate: bytes per second, max: bytes (tmpfs, charged to the pod's memory)
    DISK_FILLER = "disk-filler"  # rate: bytes per second, max: bytes (an emptyDir on the node's disk)
    PROCESS_SPAWNER = "process-spawner"  # rate: processes per second, max: processes


@dataclass(frozen=True)
class Workload:
    type: WorkloadType = WorkloadType.SLEEPER
    rate: int = 0
    max: int = 0


@dataclass(frozen=True)
class PodPlan:
    name: str
    workload: Workload = field(default_factory=Workload)
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None
    priority_class_name: str | None = None
    start_at: float = 0.0
    termination_grace_period_seconds: int | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    image: str | None = None  # "{registry}" stands for the testbed's registry
    stop_at: float | None = None  # deleted then (its image becomes unused, for image GC)


@dataclass(frozen=True)
class Expectations:
    evicted: tuple[str, ...] = ()
    not_evicted: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.evicted or self.not_evicted or self.refused)


@dataclass(frozen=True)
class Scenario:
    name: str
    duration: float
    pods: tuple[PodPlan, ...]
    description: str = ""
    eviction: Mapping[str, Any] = field(default_factory=dict)
    inject: Mapping[str, tuple[tuple[float, str], ...]] = field(default_factory=dict)
    inject_capacity: Mapping[str, str] = field(default_factory=dict)
    expect: Expectations = field(default_factory=Expectations)
    image: str | None = None
    # Environment for the agent the runner starts (the GC periods' test knobs, nodeagent/gc/periods.py).
    agent_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def relative_thresholds(self) -> dict[str, dict[str, str]]:
        """{field: {signal: "current-Q"}} for the thresholds the runner must resolve."""
        return {
            f: {s: v for s, v in (self.eviction.get(f) or {}).items() if is_relative(v)}
            for f in ("evictionHard", "evictionSoft")
            if any(is_relative(v) for v in (self.eviction.get(f) or {}).values())
        }

    def injection(self) -> dict[str, Any]:
        """The injection document, not started (the runner sets the start when the pods run); a `threshold-Q` step
        is resolved only then, so until then it stands as `observed`."""
        steps = {
            name: [(at, "observed" if is_threshold_relative(value) else value) for at, value in series]
            for name, series in self.inject.items()
        }
        return injection_document(None, steps, self.inject_capacity)


def is_threshold_relative(value: Any) -> bool:
    return isinstance(value, str) and _THRESHOLD.fullmatch(value.strip()) is not None


def is_relative(value: Any) -> bool:
    return isinstance(value, str) and _RELATIVE.fullmatch(value.strip()) is not None


class _Problems:
    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, where: str, problem: str) -> None:
        self.found.append(f"{where}: {problem}")


def _whole(value: Decimal) -> int:
    # Saturated at int64: an int of 1e999999 (a valid quantity) takes minutes.
    if not INT64_MIN <= value <= INT64_MAX:
        return INT64_MAX if value > 0 else INT64_MIN
    return int(value.to_integral_value(rounding=ROUND_FLOOR))


def _quantity(problems: _Problems, where: str, value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        problems.add(where, f"expected a quantity, got {value!r}")
        return None
    try:
        return _whole(parse_quantity(str(value)))
    except ValueError as exc:
        problems.add(where, str(exc))
        return None


def _seconds(problems: _Problems, where: str, value: Any) -> float | None:
    if isinstance(value, bool):
        problems.add(where, f"expected seconds or a duration, got {value!r}")
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = parse_go_duration(value).total_seconds()
        except ValueError as exc:
            problems.add(where, str(exc))
            return None
    else:
        problems.add(where, f"expected seconds or a duration, got {value!r}")
        return None
    if seconds < 0:
        problems.add(where, f"must not be negative: {value}")
        return None
    return seconds


def _mapping(problems: _Problems, where: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(where, f"expected a mapping, got {type(value).__name__}")
        return {}
    return value


def _unknown(problems: _Problems, where: str, doc: Mapping[str, Any], known: tuple[str, ...]) -> None:
    for key in doc:
        if key not in known:
            problems.add(f"{where}{key}", f"unknown field (known: {', '.join(known)})")


def _workload(problems: _Problems, where: str, raw: Any) -> Workload:
    doc = _mapping(problems, where, raw)
    _unknown(problems, f"{where}.", doc, ("type", "rate", "max"))
    try:
        kind = WorkloadType(str(doc.get("type", WorkloadType.SLEEPER)))
    except ValueError:
        problems.add(f"{where}.type", f"unknown workload {doc.get('type')!r} (known: {', '.join(WorkloadType)})")
        return Workload()
    if kind == WorkloadType.SLEEPER:
        return Workload()
    rate = _quantity(problems, f"{where}.rate", doc.get("rate"))
    most = _quantity(problems, f"{where}.max", doc.get("max"))
    if rate is None or most is None:
        return Workload(kind)
    if rate <= 0 or most <= 0:
        problems.add(where, f"rate and max must be positive (rate {doc.get('rate')}, max {doc.get('max')})")
    unit = 1 if kind == WorkloadType.PROCESS_SPAWNER else 1024  # bytes are written in KiB blocks
    if rate % unit or most % unit:
        problems.add(where, "rate and max must be whole KiB")
    return Workload(kind, rate, most)


def _resources(problems: _Problems, where: str, raw: Any) -> dict[str, str]:
    doc = _mapping(problems, where, raw)
    result = {}
    for name, value in doc.items():
        if name not in RESOURCE_NAMES:
            problems.add(f"{where}.{name}", f"unsupported resource (known: {', '.join(RESOURCE_NAMES)})")
            continue
        if _quantity(problems, f"{where}.{name}", value) is not None:
            result[str(name)] = str(value)
    return result


def _pod(problems: _Problems, index: int, raw: Any) -> PodPlan | None:
    where = f"pods[{index}]"
    doc = _mapping(problems, where, raw)
    known = (
        "name",
        "workload",
        "requests",
        "limits",
        "priority",
        "priorityClassName",
        "startAt",
        "terminationGracePeriodSeconds",
        "tolerations",
        "image",
        "stopAt",
    )
    _unknown(problems, f"{where}.", doc, known)
    name = doc.get("name")
    if not isinstance(name, str) or len(name) > 50 or _NAME.fullmatch(name) is None:
        problems.add(f"{where}.name", f"expected a DNS label of at most 50 characters, got {name!r}")
        return None
    where = f"pods[{index}] ({name})"
    priority = doc.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        problems.add(f"{where}.priority", f"expected an integer, got {priority!r}")
        priority = None
    elif priority is not None and not -(2**31) <= priority <= 1_000_000_000:
        problems.add(f"{where}.priority", "a user PriorityClass value is at most 1000000000")
        priority = None
    class_name = doc.get("priorityClassName")
    if class_name is not None and priority is not None:
        problems.add(where, "give priority or priorityClassName, not both")
    grace = doc.get("terminationGracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or grace < 0):
        problems.add(f"{where}.terminationGracePeriodSeconds", f"expected an integer >= 0, got {grace!r}")
        grace = None
    tolerations = doc.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        problems.add(f"{where}.tolerations", "expected a list of tolerations")
        tolerations = []
    start_at = _seconds(problems, f"{where}.startAt", doc.get("startAt", 0))
    stop_at = _seconds(problems, f"{where}.stopAt", doc["stopAt"]) if doc.get("stopAt") is not None else None
    if stop_at is not None and stop_at <= (start_at or 0):
        problems.add(f"{where}.stopAt", "must come after startAt")
    image = doc.get("image")
    if image is not None and not isinstance(image, str):
        problems.add(f"{where}.image", f"expected an image reference, got {image!r}")
        image = None
    return PodPlan(
        name=name,
        workload=_workload(problems, f"{where}.workload", doc.get("workload")),
        requests=_resources(problems, f"{where}.requests", doc.get("requests")),
        limits=_resources(problems, f"{where}.limits", doc.get("limits")),
        priority=priority,
        priority_class_name=str(class_name) if class_name is not None else None,
        start_at=start_at or 0.0,
        termination_grace_period_seconds=grace,
        tolerations=tuple(tolerations),
        image=image,
        stop_at=stop_at,
    )


def _placeholder(signal: str) -> str:
    return "1Mi" if parse_signal(signal) in BYTE_SIGNALS else "1"


def _check_eviction(problems: _Problems, doc: Mapping[str, Any]) -> dict[str, Any]:
    _unknown(problems, "eviction.", doc, EVICTION_FIELDS + IMAGE_GC_FIELDS)
    result: dict[str, Any] = {k: v for k, v in doc.items() if k in EVICTION_FIELDS + IMAGE_GC_FIELDS}
    maps = {}
    for name in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim"):
        value = _mapping(problems, f"eviction.{name}", doc.get(name))
        maps[name] = {str(k): str(v) for k, v in value.items()}
        for signal, text in maps[name].items():
            match = _RELATIVE.fullmatch(text.strip())
            if match is None:
                continue
            if name not in ("evictionHard", "evictionSoft"):
                problems.add(f"eviction.{name}.{signal}", "only thresholds can be relative to what the node has")
            elif match.group(2) is not None:
                _quantity(problems, f"eviction.{name}.{signal}", match.group(2))
    # The rest as the agent will parse them; a relative threshold stands in as a small absolute one.
    try:
        parse_thresholds(
            hard={s: _placeholder(s) if is_relative(v) else v for s, v in maps["evictionHard"].items()},
            soft={s: _placeholder(s) if is_relative(v) else v for s, v in maps["evictionSoft"].items()},
            soft_grace_period=maps["evictionSoftGracePeriod"],
            minimum_reclaim=maps["evictionMinimumReclaim"],
            parse_quantity=parse_quantity,
            parse_duration=parse_go_duration,
        )
    except ThresholdError as exc:
        for problem in exc.problems:
            problems.add("eviction", problem)
    grace = doc.get("evictionMaxPodGracePeriod")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or grace < 0):
        problems.add("eviction.evictionMaxPodGracePeriod", f"expected seconds (an integer >= 0), got {grace!r}")
    period = doc.get("evictionPressureTransitionPeriod")
    if period is not None:
        _seconds(problems, "eviction.evictionPressureTransitionPeriod", period)
    return result


def _check_inject(
    problems: _Problems, raw: Any, capacity: Mapping[str, Any]
) -> dict[str, tuple[tuple[float, str], ...]]:
    doc = _mapping(problems, "inject", raw)
    # threshold-Q is resolved at second 0 (`resolve_injection`); here it stands in as the observed value.
    checked: dict[str, Any] = {}
    for name, steps in doc.items():
        if not isinstance(steps, list):
            checked[name] = steps
            continue
        checked[name] = []
        for index, step in enumerate(steps):
            if isinstance(step, list) and len(step) == 2 and is_threshold_relative(step[1]):
                match = _THRESHOLD.fullmatch(str(step[1]).strip())
                if match is not None and match.group(2) is not None:
                    _quantity(problems, f"inject.{name}[{index}]", match.group(2))
                checked[name].append([step[0], "observed"])
            else:
                checked[name].append(step)
    try:
        parse_injection({"start": None, "signals": checked, "capacity": dict(capacity)}, parse_quantity)
    except InjectionError as exc:
        for problem in exc.problems:
            problems.add("inject", problem)
        return {}
    return {str(s): tuple((float(t), str(v)) for t, v in steps) for s, steps in doc.items()}


def _names(problems: _Problems, where: str, raw: Any, known: set[str]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        problems.add(where, "expected a list of pod names")
        return ()
    for name in raw:
        if name not in known:
            problems.add(where, f"no pod named {name!r} in pods")
    return tuple(raw)


def parse_scenario(doc: Any, source: str = "scenario") -> Scenario:
    """The scenario a YAML document describes. Raises ScenarioError listing every problem."""
    problems = _Problems()
    if not isinstance(doc, Mapping):
        raise ScenarioError(source, ["expected a mapping with name, duration, eviction, pods"])
    known = (
        "name",
        "description",
        "duration",
        "eviction",
        "inject",
        "injectCapacity",
        "pods",
        "expect",
        "image",
        "agentEnv",
    )
    _unknown(problems, "", doc, known)
    name = doc.get("name")
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        problems.add("name", f"expected a DNS label (lower case, digits, '-'), got {name!r}")
        name = "scenario"
    duration = _seconds(problems, "duration", doc.get("duration")) if "duration" in doc else None
    if duration is None and "duration" not in doc:
        problems.add("duration", "required: how long to record from second 0 (a Go duration or seconds)")
    elif duration is not None and duration <= 0:
        problems.add("duration", "must be positive")
    eviction = _check_eviction(problems, _mapping(problems, "eviction", doc.get("eviction")))
    capacity = _mapping(problems, "injectCapacity", doc.get("injectCapacity"))
    inject = _check_inject(problems, doc.get("inject"), capacity)
    raw_pods = doc.get("pods")
    if not isinstance(raw_pods, list) or not raw_pods:
        problems.add("pods", "required: a list of at least one pod")
        raw_pods = []
    pods = [p for i, raw in enumerate(raw_pods) if (p := _pod(problems, i, raw)) is not None]
    seen: set[str] = set()
    for pod in pods:
        if pod.name in seen:
            problems.add("pods", f"two pods are named {pod.name!r}")
        seen.add(pod.name)
    expect_doc = _mapping(problems, "expect", doc.get("expect"))
    _unknown(problems, "expect.", expect_doc, ("evicted", "notEvicted", "refused"))
    expect = Expectations(
        evicted=_names(problems, "expect.evicted", expect_doc.get("evicted"), seen),
        not_evicted=_names(problems, "expect.notEvicted", expect_doc.get("notEvicted"), seen),
        refused=_names(problems, "expect.refused", expect_doc.get("refused"), seen),
    )
    image = doc.get("image")
    if image is not None and not isinstance(image, str):
        problems.add("image", f"expected an image reference, got {image!r}")
        image = None
    agent_env = _mapping(problems, "agentEnv", doc.get("agentEnv"))
    for key, value in agent_env.items():
        if not isinstance(key, str) or not isinstance(value, (str, int, float)) or isinstance(value, bool):
            problems.add(f"agentEnv.{key}", f"expected a variable name and a string or number, got {value!r}")
    description = doc.get("description", "")
    if problems.found:
        raise ScenarioError(source, problems.found)
    return Scenario(
        name=name,
        description=str(description or "").strip(),
        duration=duration or 0.0,
        pods=tuple(pods),
        eviction=eviction,
        inject=inject,
        inject_capacity={str(k): str(v) for k, v in capacity.items()},
        expect=expect,
        image=image,
        agent_env={str(k): str(v) for k, v in agent_env.items()},
    )


def load_scenario(path: Path) -> Scenario:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScenarioError(str(path), [f"cannot read it: {exc.strerror or exc}"]) from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(str(path), [f"not YAML: {exc}"]) from exc
    except RecursionError as exc:  # PyYAML's composer recurses once per nesting level
        raise ScenarioError(str(path), ["not YAML: it nests too deeply"]) from exc
    return parse_scenario(doc, str(path))


def resolve_injection(
    inject: Mapping[str, tuple[tuple[float, str], ...]],
    *,
    observed: Mapping[Signal, int],
    thresholds: Mapping[Signal, int],
) -> dict[str, tuple[tuple[float, str], ...]]:
    """At second 0: each `threshold-Q` step becomes `observed-D`, D chosen so that it reads Q below the hard
    threshold now and then moves with what the node really frees or uses (image GC, say). Raises ScenarioError."""
    problems = _Problems()
    result = {}
    for name, steps in inject.items():
        signal = parse_signal(name)
        resolved = []
        for at, value in steps:
            match = _THRESHOLD.fullmatch(value.strip())
            if match is None or signal is None:
                resolved.append((at, value))
                continue
            if signal not in observed or signal not in thresholds:
                problems.add(f"inject.{name}", f"{value} needs both an observed value and a hard threshold")
                continue
            offset = _whole(parse_quantity(match.group(2))) if match.group(2) else 0
            target = thresholds[signal] + (offset if match.group(1) == "+" else -offset)
            delta = observed[signal] - target
            resolved.append((at, f"observed{'-' if delta >= 0 else '+'}{abs(delta)}"))
        result[name] = tuple(resolved)
    if problems.found:
        raise ScenarioError("inject", problems.found)
    return result


def _format_threshold(signal: Signal | None, value: int) -> str:
    if signal in BYTE_SIGNALS:
        return f"{value // MI}Mi"  # whole MiB: readable, and what the node has moves more than that anyway
    return str(value)


def resolve_eviction(scenario: Scenario, current: Mapping[Signal, int]) -> tuple[dict[str, Any], dict[str, str]]:
    """The eviction fields with each relative threshold made absolute from `current` (available now, per signal),
    and a note per resolved one ("memory.available: current-400Mi = 1234Mi"). Raises ScenarioError."""
    problems = _Problems()
    fields = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in scenario.eviction.items()}
    notes = {}
    for name, relative in scenario.relative_thresholds.items():
        for signal_name, text in relative.items():
            where = f"eviction.{name}.{signal_name}"
            signal = parse_signal(signal_name)
            match = _RELATIVE.fullmatch(text.strip())
            if signal is None or match is None:
                continue
            if signal not in current:
                problems.add(where, f"the node does not report {signal_name} now: {text} cannot be resolved")
                continue
            offset = _whole(parse_quantity(match.group(2))) if match.group(2) else 0
            value = current[signal] + (offset if match.group(1) == "+" else -offset)
            if value <= 0:
                problems.add(where, f"{text} is {value} with {current[signal]} available now: not a threshold")
                continue
            resolved = _format_threshold(signal, value)
            fields[name][signal_name] = resolved
            notes[f"{name}.{signal_name}"] = f"{text} = {resolved} ({_format_threshold(signal, current[signal])} now)"
    if problems.found:
        raise ScenarioError(scenario.name, problems.found)
    return fields, notes


__all__ = [
    "EVICTION_FIELDS",
    "Expectations",
    "PodPlan",
    "Scenario",
    "Workload",
    "WorkloadType",
    "is_relative",
    "load_scenario",
    "parse_scenario",
    "resolve_eviction",
    "resolve_injection",
]
