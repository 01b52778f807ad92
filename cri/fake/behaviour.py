"""What the fake runtime's containers do, since it runs no process: a fleet-wide `Behaviour` and per-pod overrides.

A container's fate is decided when it starts, the first that answers wins:
- the pod's behaviour: the fleet-wide `Behaviour` with the pod's annotations (`fake.cri.nodeagent.io/...`, copied
  to the sandbox config by the kubelet) applied, like KWOK's stages but per pod: `exit-after` seconds with
  `exit-code`, or `oom-after` seconds (exit 137, reason OOMKilled);
- a few well-known commands, so that the CRI contract holds for them on both runtimes: `true` exits 0 at once,
  `false` exits 1, `sleep N` exits 0 after N seconds, `sh -c "exit N"` exits N;
- otherwise the container runs until it is stopped.
Latencies (pull, sandbox, start) and usage figures for the stats calls come from the Behaviour, overridable per pod.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

PREFIX = "fake.cri.nodeagent.io/"
EXIT_AFTER = PREFIX + "exit-after"
EXIT_CODE = PREFIX + "exit-code"
OOM_AFTER = PREFIX + "oom-after"
START_LATENCY = PREFIX + "start-latency"
CPU_MILLICORES = PREFIX + "cpu-millicores"
MEMORY_BYTES = PREFIX + "memory-bytes"

OOM_EXIT_CODE = 137


@dataclass(frozen=True)
class Behaviour:
    """Fleet-wide defaults. Seconds are floats; `None` means never."""

    pull_latency: float = 0.0
    sandbox_latency: float = 0.0
    start_latency: float = 0.0
    exit_after: float | None = None
    exit_code: int = 0
    oom_after: float | None = None
    cpu_millicores: int = 1
    memory_bytes: int = 4 << 20
    # Images whose reference contains one of these fail to pull with NotFound (as a registry without them).
    unpullable: tuple[str, ...] = ("absent", "does-not-exist", "nonexistent")


DEFAULT_BEHAVIOUR = Behaviour()


@dataclass(frozen=True)
class Fate:
    """What one started container does: exit with `exit_code` (reason `reason`) after `after` seconds, or never."""

    after: float | None
    exit_code: int = 0
    reason: str = ""


class BehaviourError(ValueError):
    """An override annotation that is not a number."""


def _number(annotations: Mapping[str, str], key: str) -> float | None:
    value = annotations.get(key)
    if value is None:
        return None
    try:
        return float(value.removesuffix("s"))
    except ValueError as exc:
        raise BehaviourError(f"annotation {key}={value!r} is not a number of seconds") from exc


def for_pod(default: Behaviour, annotations: Mapping[str, str]) -> Behaviour:
    """The behaviour of one pod: the default with the pod's annotations applied (bad values are ignored)."""
    changes: dict[str, float | int] = {}
    for key, name in ((EXIT_AFTER, "exit_after"), (OOM_AFTER, "oom_after"), (START_LATENCY, "start_latency")):
        try:
            number = _number(annotations, key)
        except BehaviourError:
            continue
        if number is not None:
            changes[name] = number
    for key, name in ((EXIT_CODE, "exit_code"), (CPU_MILLICORES, "cpu_millicores"), (MEMORY_BYTES, "memory_bytes")):
        try:
            number = _number(annotations, key)
        except BehaviourError:
            continue
        if number is not None:
            changes[name] = int(number)
    return replace(default, **changes) if changes else default  # type: ignore[arg-type]


_EXIT = re.compile(r"^\s*exit\s+(\d+)\s*$")


def command_fate(argv: Sequence[str]) -> Fate | None:
    """The fate of the few commands the fake understands, or None."""
    if not argv:
        return None
    name = argv[0].rsplit("/", 1)[-1]
    if name == "true" and len(argv) == 1:
        return Fate(0.0, 0)
    if name == "false" and len(argv) == 1:
        return Fate(0.0, 1)
    if name == "sleep" and len(argv) == 2:
        try:
            return Fate(float(argv[1]), 0)
        except ValueError:
            return None
    if name in ("sh", "bash") and len(argv) == 3 and argv[1] == "-c" and (match := _EXIT.match(argv[2])):
        return Fate(0.0, int(match.group(1)))
    return None


def exit_reason(exit_code: int) -> str:
    """containerd's reason for an exit: Completed for 0, Error otherwise (OOMKilled is set by the OOM path)."""
    return "Completed" if exit_code == 0 else "Error"


def fate(behaviour: Behaviour, argv: Sequence[str]) -> Fate:
    """What a container started with `argv` under `behaviour` does."""
    if behaviour.oom_after is not None and (
        behaviour.exit_after is None or behaviour.oom_after <= behaviour.exit_after
    ):
        return Fate(behaviour.oom_after, OOM_EXIT_CODE, "OOMKilled")
    if behaviour.exit_after is not None:
        return Fate(behaviour.exit_after, behaviour.exit_code, exit_reason(behaviour.exit_code))
    known = command_fate(argv)
    if known is not None and known.after is not None:
        return Fate(known.after, known.exit_code, exit_reason(known.exit_code))
    return Fate(None)
