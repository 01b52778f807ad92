"""The command line's own checks, before anything is started or connected."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.cli import main


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "nodeagent.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n")
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--kubeconfig is required (or --standalone for static pods only)"),
        (["--standalone", "--kubeconfig", "/nonexistent"], "--standalone runs without an apiserver: drop --kubeconfig"),
    ],
)
def test_run_needs_exactly_one_of_kubeconfig_and_standalone(
    config: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--config", str(config), *extra]) == 1
    assert message in capsys.readouterr().err


def test_pods_says_when_the_config_turns_the_endpoint_off(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pods", "--config", str(config)]) == 1
    assert "healthzPort is 0" in capsys.readouterr().err


def test_a_bad_eviction_threshold_names_the_field_and_signal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "evictionHard:\n  memory.available: lots\n  nodefs.available: '120%'\n"
    )
    assert main(["run", "--config", str(path), "--standalone"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"nodeagent: {path}: invalid KubeletConfiguration"
    assert lines[1].startswith('nodeagent: evictionHard: memory.available: invalid quantity "lots"')
    assert (
        lines[2]
        == 'nodeagent: evictionHard: nodefs.available: eviction percentage threshold must be <= 100%, got "120%"'
    )


@pytest.mark.parametrize("extra", [["--preset", "devices"], ["--skip", "x"], ["--kubeconfig", "/k"], ["--certified"]])
def test_the_node_suite_refuses_what_it_cannot_honour(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--suite", "node-eviction", *extra]) == 1
    assert "--suite runs its own selection on a testbed of its own" in capsys.readouterr().err


def test_the_node_suite_passes_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.conformance import noderun  # noqa: PLC0415
    from nodeagent.conformance.systemctl_shim import Kubelet  # noqa: PLC0415

    seen: list[noderun.NodeRunOptions] = []

    async def fake(options: noderun.NodeRunOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(noderun, "node_conformance", fake)
    argv = ["conformance", "--suite", "node-eviction", "--dir", "/tmp/x", "--kubelet", "upstream", "--focus", "Inode"]
    assert main(argv) == 0
    assert seen == [noderun.NodeRunOptions(focus="Inode", dir=Path("/tmp/x"), kubelet=Kubelet.UPSTREAM)]
    assert main(["conformance", "--suite", "node-eviction"]) == 0
    assert seen[1] == noderun.NodeRunOptions()  # the 22 specs' focus, a 4 h timeout
    argv = ["conformance", "--suite", "node-eviction", "--resume", "/tmp/x", "--shard", "2", "--time-budget", "30"]
    assert main(argv) == 0
    assert seen[2] == noderun.NodeRunOptions(dir=Path("/tmp/x"), shard=2, time_budget_minutes=30.0)
    assert main(["conformance", "--suite", "node-eviction", "--report", "/tmp/x"]) == 0
    assert seen[3] == noderun.NodeRunOptions(dir=Path("/tmp/x"), report_only=True)
    assert main(["conformance", "--suite", "node-eviction", "--dir", "/tmp/x", "--resume", "/tmp/y"]) == 1
