"""What the fake runtime's containers do, since it runs no process: a fleet-wide `Behaviour` and per-pod overrides.

A container's fate is decided when it starts, the first that answers wins:
- the pod's behaviour: the fleet-wide `Behaviour` with the pod's annotations (`fake.cri.nodeagent.io/...`, copied
  to the sandbox config by the kubelet) applied, like KWOK's stages but per pod: `exit-after` seconds with
  `exit-code`, or `oom-after` seconds (exit 137, reason OOMKilled);
- a few well-known commands, so that the CRI contract holds for them on both runtimes: `true` exits 0 at once,
  `false` exits 1, `sleep N` exits 0 after N seconds, `sh -c "exit N"` exits N, `echo ...` (or `sh -c "echo ..."`)
  exits 0 at once;
- otherwise the container runs until it is stopped.
What a container writes to its CRI log file (`cri.fake.logs`, at StartContainer, once) is decided the same way: the
pod's `log` annotation (`fake.cri.nodeagent.io/log`: its text, each of its lines one stdout line), else what `echo`
prints (its words joined by one space and a newline; none with `-n`), else nothing (an empty file, as a silent
container has). The annotation applies to every container of the pod, init containers too.
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
LOG = PREFIX + "log"

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
    # What every container writes to stdout at start (each line one record), instead of what its command writes.
    log: str | None = None
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
    text = annotations.get(LOG)
    if text is not None:
        return replace(default, log=text, **changes)  # type: ignore[arg-type]
    return replace(default, **changes) if changes else default  # type: ignore[arg-type]


_EXIT = re.compile(r"^\s*exit\s+(\d+)\s*$")
# A script that is only an echo of plain words: no expansion, redirection, quoting or second command in it.
_ECHO = re.compile(r"^\s*echo(?:\s+[^\s$`;|&<>()*?\[\]{}~\\'\"#]+)*\s*$")


def echo_output(argv: Sequence[str]) -> str | None:
    """What `echo ARGS...` (or `sh -c "echo WORDS"`) prints, as busybox's echo does: the words joined by one space,
    then a newline unless the first argument is `-n`; None for any other command (and for `-e`/`-E`, not
    emulated)."""
    if not argv:
        return None
    name = argv[0].rsplit("/", 1)[-1]
    if name in ("sh", "bash") and len(argv) == 3 and argv[1] == "-c" and _ECHO.match(argv[2]):
        return echo_output(argv[2].split())
    if name != "echo":
        return None
    words = list(argv[1:])
    newline = "\n"
    if words and words[0] == "-n":
        words, newline = words[1:], ""
    if words and words[0] in ("-e", "-E", "-ne", "-en", "-nE", "-En"):
        return None
    return " ".join(words) + newline


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
    if echo_output(argv) is not None:
        return Fate(0.0, 0)
    return None


def output(behaviour: Behaviour, argv: Sequence[str]) -> str:
    """What a container started with `argv` under `behaviour` writes to stdout: the `log` text (a newline added
    after its last line), else echo's output, else nothing."""
    if behaviour.log is not None:
        return behaviour.log if not behaviour.log or behaviour.log.endswith("\n") else behaviour.log + "\n"
    return echo_output(argv) or ""


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
