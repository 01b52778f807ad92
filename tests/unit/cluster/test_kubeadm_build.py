"""kubeadm's build step (testbed/kubeadm.py): only with --with-kubeadm, after the control plane whose build module it
is built in, into the versioned cache beside the release's other commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent import cli
from nodeagent.testbed import install
from nodeagent.testbed.kubeadm import KUBEADM_PACKAGE, kubeadm_path
from nodeagent.testbed.versions import kubernetes_bin_dir


def test_install_builds_kubeadm_only_when_asked_right_after_the_control_plane() -> None:
    names = [step.__name__ for step in install.install_steps(with_kubeadm=True)]
    assert names.index("build_kubeadm") == names.index("build_kubernetes") + 1
    assert "build_kubeadm" not in [step.__name__ for step in install.install_steps()]


def test_kubeadm_is_the_releases_command_in_the_versioned_cache() -> None:
    assert KUBEADM_PACKAGE == "k8s.io/kubernetes/cmd/kubeadm"
    assert kubeadm_path() == kubernetes_bin_dir() / "kubeadm"


async def test_with_kubeadm_reaches_the_installer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(install, "install", lambda **kwargs: calls.append(kwargs))
    args = cli.build_parser().parse_args(["testbed", "install", "--with-kubeadm"])
    assert await cli._testbed(args) == 0
    assert calls == [
        {"with_kubelet": False, "with_csi": False, "with_kubeadm": True, "with_certified": False, "with_kwok": False}
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["cluster", "up"], {"action": "up", "nodes": 1, "skip_kube_proxy": False}),
        (["cluster", "up", "--nodes", "3", "--skip-kube-proxy"], {"action": "up", "nodes": 3, "skip_kube_proxy": True}),
        (["cluster", "down"], {"action": "down"}),
    ],
)
def test_cluster_command_line(argv: list[str], expected: dict[str, Any]) -> None:
    args = cli.build_parser().parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected
    assert args.dir == Path("/var/tmp/nodeagent-cluster")
