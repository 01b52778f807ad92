"""The agent's injection file: read at start (a bad one refused), re-read when it changes (a bad rewrite keeps the
last good one), and the hidden `run` option and the `experiment eviction` command on the command line."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from eviction.injection import InjectionError, injection_document
from eviction.signals import Observation, Signal
from nodeagent.cli import build_parser
from nodeagent.experiment.injectionfile import InjectionFile

MI = 1 << 20
START = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
OBSERVED = {Signal.MEMORY_AVAILABLE: Observation(900 * MI, 2048 * MI, START)}


def _write(path: Path, start: datetime | None, value: str, mtime: int) -> None:
    path.write_text(json.dumps(injection_document(start, {"memory.available": [(0.0, value)]})))
    os.utime(path, ns=(mtime, mtime))  # a distinct stamp: the same second's rewrite must still be seen


def test_not_started_then_started_then_a_bad_rewrite_keeps_the_last(tmp_path: Path) -> None:
    path = tmp_path / "injection.json"
    _write(path, None, "80Mi", 1)
    injection = InjectionFile(path)
    now = START + timedelta(seconds=5)
    assert injection.apply(OBSERVED, now) == OBSERVED
    _write(path, START, "80Mi", 2)
    assert injection.apply(OBSERVED, now)[Signal.MEMORY_AVAILABLE].available == 80 * MI
    path.write_text("{not json")
    os.utime(path, ns=(3, 3))
    assert injection.apply(OBSERVED, now)[Signal.MEMORY_AVAILABLE].available == 80 * MI


@pytest.mark.parametrize("text", ["{not json", '{"signals": {"memory.free": [[0, "1Mi"]]}}'])
def test_a_bad_file_at_start_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "injection.json"
    path.write_text(text)
    with pytest.raises(InjectionError):
        InjectionFile(path)


def test_the_command_line() -> None:
    parser = build_parser()
    run = parser.parse_args(["run", "--config", "c.yaml", "--eviction-signal-injection", "i.json"])
    assert run.eviction_signal_injection == Path("i.json")
    assert "--eviction-signal-injection" not in parser._subparsers._group_actions[0].choices["run"].format_help()  # type: ignore[union-attr]
    experiment = parser.parse_args(
        ["experiment", "eviction", "s.yaml", "--out", "o", "--kubeconfig", "k", "--node", "n"]
    )
    assert (experiment.scenario, experiment.out, experiment.kubeconfig, experiment.node) == (
        Path("s.yaml"),
        Path("o"),
        Path("k"),
        "n",
    )
