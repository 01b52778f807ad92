"""`nodeagent conformance`'s command line: the defaults the issue asks for, and what the flags change."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.cli import build_parser, main
from nodeagent.conformance.run import DEFAULT_FOCUS, default_skip
from nodeagent.conformance.shards import Plan, Shard


def test_defaults() -> None:
    args = build_parser().parse_args(["conformance"])
    assert args.focus is None and DEFAULT_FOCUS == r"\[NodeConformance\]"  # the handler then uses DEFAULT_FOCUS
    assert args.skip is None and args.slow is False  # the handler then skips [Slow] too
    assert (args.procs, args.provider, args.timeout, args.keep) == (2, "skeleton", "3h", False)
    assert (args.kubeconfig, args.registry, args.dir) == (None, None, None)


def test_flags() -> None:
    args = build_parser().parse_args(
        [
            "conformance",
            "--focus",
            "Pods should get a host IP",
            "--skip",
            r"\[Serial\]",
            "--slow",
            "-p",
            "4",
            "--kubeconfig",
            "/k",
            "--registry",
            "127.0.0.1:5000",
            "--dir",
            "/d",
            "--keep",
        ]
    )
    assert args.focus == "Pods should get a host IP"
    assert args.skip == r"\[Serial\]"
    assert (args.slow, args.procs, args.kubeconfig, args.registry, args.dir, args.keep) == (
        True,
        4,
        Path("/k"),
        "127.0.0.1:5000",
        Path("/d"),
        True,
    )


def test_slow_drops_only_the_slow_skip() -> None:
    assert default_skip(slow=True) + r"|\[Slow\]" == default_skip(slow=False)


def test_certified_flags() -> None:
    args = build_parser().parse_args(
        [
            "conformance",
            "--certified",
            "--dir",
            "/d",
            "--cluster",
            "/c",
            "--shard",
            "3",
            "--shard-minutes",
            "30",
            "--durations",
            "/r1",
            "--durations",
            "/r2/junit_01.xml",
            "--focus",
            "Pods",
        ]
    )
    assert (args.certified, args.dir, args.cluster, args.shard, args.shard_minutes) == (
        True,
        Path("/d"),
        Path("/c"),
        3,
        30.0,
    )
    assert args.durations == [Path("/r1"), Path("/r2/junit_01.xml")] and args.focus == "Pods"
    resume = build_parser().parse_args(["conformance", "--resume", "/d"])
    assert (resume.certified, resume.resume, resume.report, resume.shard_minutes) == (False, Path("/d"), None, 45.0)


def test_certified_is_its_own_selection() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["conformance", "--certified", "--subset", "ci"])


def test_certified_skips_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--certified", "--skip", r"\[Serial\]"]) == 1
    assert "--certified skips nothing" in capsys.readouterr().err


def test_report_prints_a_run_without_running_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = Plan("Kubernetes e2e suite", r"\[Conformance\]", "", "", 2700, (Shard(1, False, 2, ("a",), 120),), "t", "v")
    plan.save(tmp_path)
    assert main(["conformance", "--report", str(tmp_path)]) == 1  # its one spec has not run
    out = capsys.readouterr().err
    assert "passed 0, failed 0, skipped 0, not run 1 (of 1 specs)" in out and "  shard 1: a" in out
    assert (tmp_path / "report.txt").exists()
