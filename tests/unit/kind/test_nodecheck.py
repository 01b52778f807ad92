"""The node container's arguments (kind's), and the verdict from the attempts."""

from __future__ import annotations

import itertools
from pathlib import Path

from nodeagent.kind import nodecheck


def test_node_run_args_are_kinds() -> None:
    args = nodecheck.node_run_args("n", "img", None)
    for flag in ("--privileged", "--cgroupns=private", "--init=false", "--tty", "--detach"):
        assert flag in args
    pairs = list(itertools.pairwise(args))
    for pair in (
        ("--tmpfs", "/tmp"),
        ("--tmpfs", "/run"),
        ("--volume", "/var"),
        ("--volume", "/lib/modules:/lib/modules:ro"),
        ("--network", "none"),
        ("--security-opt", "seccomp=unconfined"),
        ("--security-opt", "apparmor=unconfined"),
        ("--stop-signal", "SIGRTMIN+3"),
        ("--env", "container=docker"),
    ):
        assert pair in pairs, pair
    assert args[-2:] == ["img", "/sbin/init"]
    assert "--runtime" not in args
    assert nodecheck.node_run_args("n", "img", "runc")[-4:] == ["--runtime", "runc", "img", "/sbin/init"]


def test_rootfs_is_cached_by_recipe(tmp_path: Path) -> None:
    path = nodecheck.rootfs_path(tmp_path)
    assert path.parent == tmp_path / "kind"
    assert path.name.startswith("check-rootfs-") and path.suffix == ".tar"


def booted() -> nodecheck.Attempt:
    return nodecheck.Attempt(
        runtime="nodeagent-runc",
        started=True,
        state="degraded",
        probes={p: "ok" for p in nodecheck.PROBES},
    )


def test_verdict() -> None:
    failed = nodecheck.Attempt(runtime="runc", error="unable to apply caps: operation not permitted")
    go = nodecheck.CheckResult(attempts=[failed, booted()], timings={"docker import": 3.6}, refused=[], noted=[])
    assert go.go
    text = nodecheck.report(go)
    assert "docker run failed: unable to apply caps" in text and text.endswith("VERDICT: GO")
    broken = booted()
    broken.probes["systemd-run --scope"] = "exit 1: Failed to start transient scope unit"
    assert not nodecheck.CheckResult(attempts=[failed, broken], timings={}, refused=[], noted=[]).go
    dirty = nodecheck.CheckResult(attempts=[booted()], timings={}, refused=["link added: docker0"], noted=[])
    assert not dirty.go
    assert nodecheck.report(dirty).endswith("REFUSED link added: docker0\nVERDICT: NO-GO")
