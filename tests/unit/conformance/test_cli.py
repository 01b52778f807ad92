"""`nodeagent conformance`'s command line: the defaults the issue asks for, and what the flags change."""

from __future__ import annotations

from pathlib import Path

from nodeagent.cli import build_parser
from nodeagent.conformance.run import DEFAULT_FOCUS, default_skip


def test_defaults() -> None:
    args = build_parser().parse_args(["conformance"])
    assert args.focus == DEFAULT_FOCUS == r"\[NodeConformance\]"
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
