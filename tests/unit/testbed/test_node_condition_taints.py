"""Testbed(node_condition_taints=False): the control plane as upstream's node e2e services run it (no taints from the
node's conditions), and the default unchanged. The components' command lines, with `_start` and the binaries faked."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.testbed import testbed as testbed_module
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.pki import CertPair
from nodeagent.testbed.testbed import Pki, Testbed


def _settings() -> Settings:
    return Settings(
        node_name="n",
        etcd_client_port=20001,
        etcd_peer_port=20002,
        apiserver_port=20003,
        controller_manager_port=20004,
        scheduler_port=20005,
        registry_port=20006,
        stream_port=20007,
        bridge="nab0",
        pod_cidr="198.18.0.0/24",
        service_cidr="198.19.0.0/24",
    )


def _argv(bed: Testbed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    started: list[str] = []
    monkeypatch.setattr(testbed_module, "_binary", lambda name: f"/bin/{name}")
    monkeypatch.setattr(bed, "_start", lambda _name, argv: started.extend(argv))
    pair = CertPair(cert=tmp_path / "c.crt", key=tmp_path / "c.key")
    pki = Pki(**{name: pair for name in Pki.__dataclass_fields__})
    bed._start_apiserver(_settings(), pki)
    bed._start_controller_manager(_settings(), pki)
    return started


def test_by_default_the_control_plane_taints_as_usual(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv = _argv(Testbed(tmp_path), monkeypatch, tmp_path)
    assert not [a for a in argv if a.startswith(("--controllers", "--disable-admission-plugins"))]


def test_without_node_condition_taints(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv = _argv(Testbed(tmp_path, node_condition_taints=False), monkeypatch, tmp_path)
    assert "--controllers=*,-node-lifecycle-controller" in argv
    assert "--disable-admission-plugins=TaintNodesByCondition" in argv
    assert "--enable-admission-plugins=NodeRestriction" in argv
