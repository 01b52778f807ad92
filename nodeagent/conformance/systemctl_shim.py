"""`systemctl` for the node e2e suite, on a host without systemd: one unit, the testbed's agent process.

`e2e_node.test` (test/e2e_node/util.go at v1.34.4) drives its kubelet as a systemd service, always through
`sudo systemctl`. It calls exactly these:
- `list-units '*kubelet*' [--state=running]` (findKubeletServiceName): the unit is the first `kubelet-\\w+` in the
  output;
- `reset-failed U` (before each stop and restart: clears systemd's start limit);
- `kill U` (mustStopKubelet; the suite then waits until 127.0.0.1:10248/healthz stops answering);
- `restart U` (restartKubelet, and the closure mustStopKubelet returns; the suite then waits for healthz and a
  Ready node).
U is `kubelet-nodeagent` (the regex's match, without `.service`). For a person at the terminal the shim also does
`stop`, `start` and `is-active`. Anything else exits 1 and names itself, so a spec's failure says what the suite
wanted.

The unit's process: `nodeagent run` started by `Testbed.start_agent(config=...)` (the testbed's pid file), or the
upstream kubelet (`upstreamkubelet.start_kubelet`) for a judge run. `kill` and `stop` end it (SIGTERM, SIGKILL after
20 s) and leave its pods running, as systemd does with a kubelet. `start` and `restart` start it with the config the
suite rewrites (`$CWD/kubelet-config`), read afresh at each start, and return once the node is Ready.

State (`ShimState`, JSON, written by `nodeadapter.prepare`): the unit name, the testbed directory, the config path,
which kubelet, and the log where every call is recorded as one key=value line.
Run as `python3 -m nodeagent.conformance.systemctl_shim --state FILE ARGS...` (the `systemctl` script in the run's
`bin/` does that).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from nodeagent.testbed import processes
from nodeagent.testbed.layout import Layout

log = logging.getLogger("nodeagent.conformance.systemctl_shim")

UNIT = "kubelet-nodeagent.service"
STOP_GRACE = 20.0
# systemctl's exit code for is-active on an inactive unit (LSB "program is not running").
EXIT_INACTIVE = 3


class Kubelet(Enum):
    NODEAGENT = "nodeagent"
    UPSTREAM = "upstream"


# The pid-file names the testbed records each under (testbed.AGENT, testbed.UPSTREAM_KUBELET; a unit test holds
# them equal). Not imported: the testbed module costs seconds to import on a loaded machine, and every call but a
# start needs only the pid file.
PID_NAMES = {Kubelet.NODEAGENT: "nodeagent", Kubelet.UPSTREAM: "kubelet"}


@dataclass(frozen=True)
class ShimState:
    testbed: Path
    config: Path
    log: Path
    kubelet: Kubelet = Kubelet.NODEAGENT
    unit: str = UNIT

    def save(self, path: Path) -> None:
        doc = {k: str(v) for k, v in asdict(self).items()}
        doc["kubelet"] = self.kubelet.value
        path.write_text(json.dumps(doc, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> ShimState:
        doc = json.loads(path.read_text())
        return cls(
            testbed=Path(doc["testbed"]),
            config=Path(doc["config"]),
            log=Path(doc["log"]),
            kubelet=Kubelet(doc["kubelet"]),
            unit=str(doc["unit"]),
        )


class Verb(Enum):
    LIST_UNITS = "list-units"
    RESET_FAILED = "reset-failed"
    KILL = "kill"
    STOP = "stop"
    START = "start"
    RESTART = "restart"
    IS_ACTIVE = "is-active"


@dataclass(frozen=True)
class Command:
    verb: Verb
    unit: str = ""  # the unit named (list-units: none)
    pattern: str = ""  # list-units' pattern (empty: every unit)
    running_only: bool = False  # list-units --state=running


class ShimError(Exception):
    """A call the shim does not serve: exit 1 with this text."""


def unit_name(name: str) -> str:
    """systemctl's unit name: `.service` added to a bare name."""
    return name if "." in name else f"{name}.service"


def parse(argv: list[str]) -> Command:
    """The command a systemctl argument list asks for. Options systemctl would take for display (`--no-pager`,
    `--no-legend`, `--plain`, `--all`) are accepted and ignored; any other option, verb or unit is refused."""
    words = [a for a in argv if not a.startswith("-")]
    options = [a for a in argv if a.startswith("-")]
    if not words:
        raise ShimError("systemctl shim: no verb (the shim serves: " + ", ".join(v.value for v in Verb) + ")")
    try:
        verb = Verb(words[0])
    except ValueError:
        raise ShimError(f"systemctl shim: verb {words[0]!r} is not served (only {UNIT})") from None
    running_only = False
    for option in options:
        if option in ("--state=running", "--state=active"):
            running_only = True
        elif option not in ("--no-pager", "--no-legend", "--plain", "--all", "--quiet", "-q", "--full"):
            raise ShimError(f"systemctl shim: option {option!r} is not served")
    args = words[1:]
    if verb is Verb.LIST_UNITS:
        if len(args) > 1:
            raise ShimError("systemctl shim: list-units takes at most one pattern")
        return Command(verb, pattern=args[0] if args else "", running_only=running_only)
    if running_only:
        raise ShimError(f"systemctl shim: --state is not served with {verb.value}")
    if len(args) != 1:
        raise ShimError(f"systemctl shim: {verb.value} takes one unit, got {len(args)}")
    return Command(verb, unit=unit_name(args[0]))


def list_units_output(unit: str, *, active: bool, pattern: str, running_only: bool) -> str:
    """What `systemctl list-units` prints: the unit's line when it matches (and runs, with --state=running)."""
    shown = (not pattern or fnmatch.fnmatch(unit, pattern)) and (active or not running_only)
    lines = ["  UNIT LOAD ACTIVE SUB DESCRIPTION"]
    if shown:
        state = "active running" if active else "inactive dead"
        lines.append(f"  {unit} loaded {state} node agent (node e2e shim)")
    lines += ["", f"{1 if shown else 0} loaded units listed."]
    return "\n".join(lines) + "\n"


def _agent_running(state: ShimState) -> bool:
    proc = processes.load(Layout(state.testbed).pids, PID_NAMES[state.kubelet])
    return proc is not None and proc.alive()


def _stop(state: ShimState) -> bool:
    """End the unit's process (pods stay, as with a kubelet that systemd stops); whether one ran."""
    layout = Layout(state.testbed)
    proc = processes.load(layout.pids, PID_NAMES[state.kubelet])
    if proc is None or not proc.alive():
        return False
    processes.stop(proc, pid_dir=layout.pids, grace=STOP_GRACE)
    return True


async def _start(state: ShimState) -> int:
    from nodeagent.testbed.testbed import Testbed  # noqa: PLC0415 (seconds: only a start needs it)

    bed = Testbed(state.testbed)
    if state.kubelet is Kubelet.NODEAGENT:
        proc = await bed.start_agent(config=state.config)
        return proc.pid
    from nodeagent.testbed import upstreamkubelet  # noqa: PLC0415

    kubelet = await upstreamkubelet.start_kubelet(bed, bed.layout.logs / "upstream-kubelet.log", config=state.config)
    return kubelet.pid


def execute(state: ShimState, command: Command) -> tuple[int, str]:
    """Carry out one call; (exit code, output)."""
    if command.verb is Verb.LIST_UNITS:
        active = _agent_running(state)
        return 0, list_units_output(
            state.unit, active=active, pattern=command.pattern, running_only=command.running_only
        )
    if command.unit != state.unit:
        return 5, f"Unit {command.unit} not loaded (the systemctl shim serves only {state.unit}).\n"
    if command.verb is Verb.RESET_FAILED:
        return 0, ""
    if command.verb is Verb.IS_ACTIVE:
        return (0, "active\n") if _agent_running(state) else (EXIT_INACTIVE, "inactive\n")
    if command.verb in (Verb.KILL, Verb.STOP):
        stopped = _stop(state)
        log.info("systemctl shim stopped unit=%s was_running=%s", state.unit, stopped)
        return 0, ""
    if command.verb is Verb.START and _agent_running(state):
        return 0, ""
    _stop(state)  # restart (and a start after a crash that left a pid file)
    pid = asyncio.run(_start(state))
    log.info("systemctl shim started unit=%s pid=%d config=%s", state.unit, pid, state.config)
    return 0, ""


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--state":
        print("usage: systemctl_shim --state FILE ARGS...", file=sys.stderr)
        return 2
    state = ShimState.load(Path(argv[1]))
    args = argv[2:]
    # Every call, and what the testbed logs while starting the agent, goes to the run's systemctl.log; the suite
    # sees only what systemctl would print.
    handler = logging.FileHandler(state.log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the Ready polls of a start: one line per request
    started = time.monotonic()
    try:
        code, output = execute(state, parse(args))
    except ShimError as exc:
        code, output = 1, f"{exc}\n"
    except Exception as exc:  # a start that failed: the suite shows the text
        log.exception("systemctl shim failed args=%r", args)
        code, output = 1, f"systemctl shim: {' '.join(args)}: {exc}\n"
    log.info("systemctl call args=%r exit=%d seconds=%.1f", " ".join(args), code, time.monotonic() - started)
    root.removeHandler(handler)
    handler.close()
    sys.stdout.write(output)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
