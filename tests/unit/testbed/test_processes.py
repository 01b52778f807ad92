"""Testbed daemons are stopped by PID, and only when the PID still runs what the testbed started."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from nodeagent.testbed import processes


def test_start_then_stop_by_pid(tmp_path: Path) -> None:
    proc = processes.start("sleeper", ["sleep", "300"], pid_dir=tmp_path / "pids", log_dir=tmp_path / "logs")
    try:
        assert proc.alive()
        loaded = processes.load(tmp_path / "pids", "sleeper")
        assert loaded == proc
    finally:
        processes.stop(proc, pid_dir=tmp_path / "pids", grace=2)
    assert not proc.alive()
    assert processes.load(tmp_path / "pids", "sleeper") is None


def test_stop_leaves_a_recycled_pid_alone(tmp_path: Path) -> None:
    real = processes.start("real", ["sleep", "300"], pid_dir=tmp_path / "pids", log_dir=tmp_path / "logs")
    try:
        # Same PID, other command line: what a recycled PID looks like.
        impostor = processes.Process("impostor", real.pid, ("not-sleep", "1"), tmp_path / "logs" / "x.log")
        processes.stop(impostor, pid_dir=tmp_path / "pids", grace=0.5)
        assert real.alive()
    finally:
        processes.stop(real, pid_dir=tmp_path / "pids", grace=2)


def test_component_failed_carries_log_tail(tmp_path: Path) -> None:
    proc = processes.start(
        "crasher", ["sh", "-c", "echo boom-marker; exit 3"], pid_dir=tmp_path / "pids", log_dir=tmp_path / "logs"
    )
    deadline = time.monotonic() + 5
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    processes.stop(proc, pid_dir=tmp_path / "pids")
    error = processes.ComponentFailed("crasher", "exited during start-up", proc.log_path)
    assert "boom-marker" in str(error)


def test_stop_children_terms_then_kills_and_reaps() -> None:
    polite = subprocess.Popen(["sleep", "60"])
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
    time.sleep(0.3)  # the trap is set
    done = subprocess.Popen(["true"])
    done.wait()
    processes.stop_children([polite, stubborn, done], grace=0.5)
    assert polite.returncode == -15  # SIGTERM was enough
    assert stubborn.returncode == -9  # killed after the grace
    assert done.returncode == 0  # already ended: left as it was
