"""Start the testbed's daemons detached, remember them by PID, and stop exactly those PIDs.

A daemon outlives the `nodeagent testbed up` command that started it (it gets its own session), so its PID and
command line go to `DIR/pids/NAME.json`. `stop` checks that the PID still runs the same command line before it
signals, so a recycled PID is never hit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class ComponentFailed(RuntimeError):
    """A testbed component did not start or did not become ready. The message ends with the tail of its log."""

    def __init__(self, name: str, reason: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        super().__init__(f"testbed component {name} {reason}\n--- tail of {log_path} ---\n{tail(log_path)}")


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Process:
    name: str
    pid: int
    argv: tuple[str, ...]
    log_path: Path

    def alive(self) -> bool:
        return _cmdline(self.pid) == self.argv


def _cmdline(pid: int) -> tuple[str, ...] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    if state == "Z":
        return None
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0")[:-1])


def start(
    name: str,
    argv: Sequence[str],
    *,
    pid_dir: Path,
    log_dir: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Process:
    pid_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    merged = dict(os.environ)
    if env:
        merged.update(env)
    with log_path.open("ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=merged,
            cwd=cwd,
            start_new_session=True,
        )
    proc = Process(name=name, pid=popen.pid, argv=tuple(argv), log_path=log_path)
    # Right after the spawn /proc/PID/cmdline can still read empty (seen under load); `alive()` compares it, so
    # wait until the kernel shows the new command line (or the process has already exited).
    deadline = time.monotonic() + 2.0
    while _cmdline(proc.pid) == () and popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    (pid_dir / f"{name}.json").write_text(json.dumps({"pid": proc.pid, "argv": list(proc.argv), "log": str(log_path)}))
    # The Popen object is dropped on purpose: the daemon belongs to the testbed, not to this Python process.
    popen.returncode = 0
    log.info("testbed component started name=%s pid=%d log=%s", name, proc.pid, log_path)
    return proc


def load(pid_dir: Path, name: str) -> Process | None:
    path = pid_dir / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return Process(name=name, pid=int(data["pid"]), argv=tuple(data["argv"]), log_path=Path(data["log"]))


def stop(proc: Process, *, pid_dir: Path, grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace`, then SIGKILL; only if the PID still runs the command we started."""
    if proc.alive():
        _signal(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.alive():
            log.warning("testbed component did not stop on SIGTERM name=%s pid=%d", proc.name, proc.pid)
            _signal(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while proc.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
    _reap(proc.pid)
    (pid_dir / f"{proc.name}.json").unlink(missing_ok=True)
    log.info("testbed component stopped name=%s pid=%d", proc.name, proc.pid)


def stop_children(children: Sequence[subprocess.Popen[bytes]], *, grace: float = 10.0) -> None:
    """Our own child processes (a sample plugin or driver beside an agent): SIGTERM, wait up to `grace` each, then
    SIGKILL; each is reaped."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(grace)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(pid: int) -> None:
    # When the daemon is our own child (up and down in one Python process, as in tests), collect its exit status.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def pids_with_arg(binary_name: str, arg: str) -> list[int]:
    """PIDs of processes named `binary_name` whose command line contains `arg` (e.g. containerd shims)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if argv and Path(argv[0]).name == binary_name and any(arg in a for a in argv):
            found.append(int(entry.name))
    return found
