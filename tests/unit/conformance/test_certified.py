"""Which cluster a certified run goes against: --kubeconfig, a `nodeagent cluster up` directory, or the saved one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nodeagent.cluster.cluster import STATE_FILE, ClusterState
from nodeagent.cluster.nodenet import Fabric
from nodeagent.conformance import build, certified
from nodeagent.conformance.certified import CertifiedOptions, Target, cluster_target, resolve_target, run_lock
from nodeagent.conformance.errors import ConformanceError
from nodeagent.testbed import install as installer


def _cluster(root: Path, registry: str) -> Path:
    root.mkdir(parents=True)
    fabric = Fabric(bridge="nafab0000000", cidr="198.18.5.0/24")
    ClusterState(registry=registry, service_cidr="198.19.0.0/16", nodes=(), fabric=fabric).save(root / STATE_FILE)
    return root


def test_cluster_target_reads_the_clusters_state(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path / "c", "127.0.0.1:5001")
    target = cluster_target(cluster)
    assert target.kubeconfig == cluster / "node0" / "etc-kubernetes" / "admin.conf"
    assert target.registry == "127.0.0.1:5001" and str(cluster) in target.source
    with pytest.raises(ConformanceError, match="nodeagent cluster up --nodes N"):
        cluster_target(tmp_path / "none")


def test_resolve_target_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    default = tmp_path / "default-cluster"
    monkeypatch.setattr(certified, "DEFAULT_CLUSTER", default)
    given = _cluster(tmp_path / "given", "127.0.0.1:5002")
    with pytest.raises(ConformanceError, match="no cluster to run against"):
        resolve_target(CertifiedOptions(dir=run), run)
    _cluster(default, "127.0.0.1:5003")
    assert resolve_target(CertifiedOptions(dir=run), run).registry == "127.0.0.1:5003"
    # A resumed run goes on against the cluster it was started on.
    Target(Path("/k"), "127.0.0.1:5004", "--kubeconfig").save(run)
    assert resolve_target(CertifiedOptions(dir=run), run) == Target(Path("/k"), "127.0.0.1:5004", "--kubeconfig")
    # What the command line says wins.
    assert resolve_target(CertifiedOptions(dir=run, cluster=given), run).registry == "127.0.0.1:5002"
    options = CertifiedOptions(dir=run, cluster=given, kubeconfig=Path("/other"), registry="127.0.0.1:5005")
    assert resolve_target(options, run) == Target(Path("/other"), "127.0.0.1:5005", "--kubeconfig")


def test_one_process_per_run_directory(tmp_path: Path) -> None:
    with run_lock(tmp_path), pytest.raises(ConformanceError, match="another"), run_lock(tmp_path):
        pass
    with run_lock(tmp_path):  # released
        pass


def test_certified_run_installs_the_certified_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The certified images (httpd, jessie-dnsutils, agnhost with dig ...) are built from what only
    `install(with_certified=True)` brings: a certified run asks for it, before it builds the suite."""
    calls: list[dict[str, object]] = []

    def install(**kwargs: object) -> None:
        calls.append(kwargs)

    def ensure_suite(progress: object) -> object:
        raise ConformanceError("stop here")

    monkeypatch.setattr(installer, "install", install)
    monkeypatch.setattr(build, "ensure_suite", ensure_suite)
    with pytest.raises(ConformanceError, match="stop here"):
        asyncio.run(certified.certified(CertifiedOptions(dir=tmp_path / "run")))
    assert calls == [{"with_certified": True}]
