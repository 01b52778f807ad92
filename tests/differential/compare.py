"""Two recordings of one scenario compared: sequences of distinct states per pod, the set of event lines, and the
outcome of each action. Known differences (globs over state paths and event lines, `*` the only wildcard) are
dropped from both sides first. Pure functions."""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field

from tests.differential.normalise import State
from tests.differential.scenario import KnownDifference


@functools.cache
def _pattern(glob: str) -> re.Pattern[str]:
    """A known difference's glob: `*` matches anything, every other character itself (paths hold brackets)."""
    return re.compile(".*".join(re.escape(part) for part in glob.split("*")), re.DOTALL)


def fnmatchcase(text: str, glob: str) -> bool:
    return _pattern(glob).fullmatch(text) is not None


@dataclass
class Recording:
    """What one agent did with one scenario."""

    agent: str
    states: dict[str, list[State]] = field(default_factory=dict)  # pod name -> states in watch order
    events: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)  # one line per action played
    error: str = ""
    # The runtime spec of the scenario's sandboxes and containers (runtimespec.py): `sandbox[POD].…` and
    # `container[POD/NAME].…` paths, each object as the first snapshot that found it held it.
    runtime: State = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    scenario: str
    same: bool
    diff: str
    kept: tuple[str, ...]  # the reasons of known differences that matched something


def drop_known(state: State, known: tuple[KnownDifference, ...]) -> State:
    return {k: v for k, v in state.items() if not any(d.path and fnmatchcase(k, d.path) for d in known)}


def distinct(states: list[State], known: tuple[KnownDifference, ...] = ()) -> list[State]:
    """The states with known paths dropped and consecutive repeats removed."""
    out: list[State] = []
    for state in states:
        kept = drop_known(state, known)
        if not out or out[-1] != kept:
            out.append(kept)
    return out


# A status write that one kubelet coalesced with the next: the waiting "ContainerCreating" state between a pod's
# first status and its running one is posted or not depending on whether the status manager's write came before the
# container started (upstream's kubelet skipped it in 1 of many runs of running-delete-grace). Only that state, only
# when the other side lacks it, and only when the rest is then equal, is timing.
COALESCED = "a status write coalesced with the next (the waiting ContainerCreating state skipped by one side: timing)"
_CREATING = '"ContainerCreating"'


def _creating(state: State) -> bool:
    if state.get("phase") in ('"Succeeded"', '"Failed"'):
        return False  # a terminal state is never a write that a later one coalesced (see LOST below)
    return any(key.endswith(".state.waiting.reason") and value == _CREATING for key, value in state.items())


def without_skipped(states: list[State], other: list[State]) -> list[State]:
    """`states` without the ContainerCreating states that `other` does not have, consecutive repeats removed."""
    out: list[State] = []
    for state in states:
        if _creating(state) and state not in other:
            continue
        if not out or out[-1] != state:
            out.append(state)
    return out


# The upstream kubelet removes every dead container of a pod it evicted at the first ContainerDied its relist sees
# (cleanUpContainersInPod, ShouldPodContentBeRemoved), while SyncTerminatingPod is still stopping the sandbox. When
# that relist falls between the container's exit and SyncTerminatingPod's GetPodStatus, the terminal status is
# generated without the container: it shows lastState ContainerStatusUnknown ("could not be located"), waiting
# ContainerCreating, restartCount + 1, and so phase Failed. Otherwise it shows the container's real end. Seen in 6 of
# 20 evictions on one testbed (tests/differential/scenarios/evict-*; docs/differential.md). Only that final state,
# only for a pod with an Evicted event on that side, and only when everything before it is the same, is timing.
LOST = (
    "an evicted pod's container removed before its terminal status (upstream's ContainerDied clean-up racing "
    "SyncTerminatingPod: ContainerStatusUnknown; the final state not compared)"
)
_UNKNOWN = '"ContainerStatusUnknown"'
_TERMINAL = ('"Succeeded"', '"Failed"')


def _lost(state: State) -> bool:
    return any(key.endswith(".lastState.terminated.reason") and value == _UNKNOWN for key, value in state.items())


def lost_at_the_end(states: list[State], other: list[State]) -> bool:
    """Whether `states` and `other` are the same but their last state, both terminal, and only `states`' last one
    shows a container the runtime had lost."""
    return (
        bool(states)
        and len(states) == len(other)
        and states[:-1] == other[:-1]
        and states[-1].get("phase") in _TERMINAL
        and other[-1].get("phase") in _TERMINAL
        and _lost(states[-1])
        and not _lost(other[-1])
    )


def _evicted(recording: Recording) -> bool:
    return any(line.startswith("Warning Evicted ") for line in recording.events)


def render(states: list[State]) -> list[str]:
    """The first state in full, then each next one as what changed (+ set, - gone)."""
    lines: list[str] = []
    previous: State = {}
    for i, state in enumerate(states, 1):
        lines.append(f"state {i}:")
        for key in sorted(set(state) | set(previous)):
            if key not in state:
                lines.append(f"  - {key}")
            elif previous.get(key) != state[key]:
                lines.append(f"  {'+' if i > 1 else ' '} {key} = {state[key]}")
        previous = state
    return lines


def _matches_event(line: str, known: tuple[KnownDifference, ...]) -> bool:
    return any(d.event and fnmatchcase(line, d.event) for d in known)


def _used(a: Recording, b: Recording, known: tuple[KnownDifference, ...]) -> tuple[str, ...]:
    reasons = []
    for d in known:
        hit = False
        if d.path:
            hit = any(fnmatchcase(k, d.path) for r in (a, b) for ss in r.states.values() for s in ss for k in s)
            hit = hit or any(fnmatchcase(k, d.path) for r in (a, b) for k in r.runtime)
        if d.event:
            hit = hit or any(fnmatchcase(e, d.event) for r in (a, b) for e in r.events)
        if hit:
            reasons.append(d.reason)
    return tuple(dict.fromkeys(reasons))


def runtime_diff(a: Recording, b: Recording, known: tuple[KnownDifference, ...]) -> list[str]:
    """The runtime specs' lines that differ (known paths dropped), one unified diff per sandbox or container."""
    left, right = drop_known(a.runtime, known), drop_known(b.runtime, known)
    if left == right:
        return []
    out: list[str] = []
    for obj in sorted({k.partition("].")[0] + "]" for k in (*left, *right)}):
        mine = [f"{k} = {v}" for k, v in sorted(left.items()) if k.startswith(obj + ".")]
        theirs = [f"{k} = {v}" for k, v in sorted(right.items()) if k.startswith(obj + ".")]
        if mine != theirs:
            out.extend(
                difflib.unified_diff(
                    mine, theirs, f"{a.agent} runtime {obj}", f"{b.agent} runtime {obj}", lineterm="", n=0
                )
            )
    return out


def compare(scenario: str, a: Recording, b: Recording, known: tuple[KnownDifference, ...]) -> Comparison:
    parts: list[str] = []
    if a.error or b.error:
        parts.append(f"error: {a.agent}={a.error or '-'} {b.agent}={b.error or '-'}")
    if a.outcomes != b.outcomes:
        parts.extend(
            difflib.unified_diff(a.outcomes, b.outcomes, f"{a.agent} actions", f"{b.agent} actions", lineterm="")
        )
    coalesced = lost = False
    for pod in sorted(set(a.states) | set(b.states)):
        mine, theirs = distinct(a.states.get(pod, []), known), distinct(b.states.get(pod, []), known)
        left, right = render(mine), render(theirs)
        if left != right and without_skipped(mine, theirs) == without_skipped(theirs, mine):
            coalesced = True
            continue
        if left != right and (
            (_evicted(a) and lost_at_the_end(mine, theirs)) or (_evicted(b) and lost_at_the_end(theirs, mine))
        ):
            lost = True
            continue
        if left != right:
            parts.extend(
                difflib.unified_diff(left, right, f"{a.agent} pod {pod}", f"{b.agent} pod {pod}", lineterm="", n=2)
            )
    parts.extend(runtime_diff(a, b, known))
    left_events = sorted({e for e in a.events if not _matches_event(e, known)})
    right_events = sorted({e for e in b.events if not _matches_event(e, known)})
    if left_events != right_events:
        parts.extend(
            difflib.unified_diff(left_events, right_events, f"{a.agent} events", f"{b.agent} events", lineterm="")
        )
    kept = _used(a, b, known) + ((COALESCED,) if coalesced else ()) + ((LOST,) if lost else ())
    return Comparison(scenario=scenario, same=not parts, diff="\n".join(parts), kept=kept)


def table(comparisons: list[Comparison]) -> str:
    width = max([len(c.scenario) for c in comparisons] + [8])
    lines = [f"{'scenario':<{width}}  result", f"{'-' * width}  ------"]
    for c in comparisons:
        note = f"  (kept: {len(c.kept)})" if c.kept else ""
        lines.append(f"{c.scenario:<{width}}  {'same' if c.same else 'DIFFERS'}{note}")
    same = sum(c.same for c in comparisons)
    lines.append(f"{same}/{len(comparisons)} same")
    return "\n".join(lines)
