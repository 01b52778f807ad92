"""The node's versions: the emulated Kubernetes release (kubeletVersion, probe User-Agent) and nodeagent's own
(`nodeagent --version`, the Starting event, the node annotation)."""

from __future__ import annotations

import dataclasses

import pytest

from nodeagent import __version__
from nodeagent.cli import main
from nodeagent.config import defaults
from nodeagent.nodestatus import NodeFacts
from nodeagent.nodestatus.node import build_node_status, initial_node
from nodeagent.prober.httpprobe import http_request
from nodeagent.prober.spec import HTTPGetAction
from nodeagent.testbed.versions import KUBERNETES_VERSION
from nodeagent.version import (
    DEFAULT_KUBERNETES_VERSION,
    VERSION_ANNOTATION,
    parse_kubernetes_version,
    probe_user_agent,
    version_text,
)


def test_the_default_is_the_testbeds_release() -> None:
    assert DEFAULT_KUBERNETES_VERSION == KUBERNETES_VERSION == "v1.34.4"
    assert defaults().emulated_kubernetes_version == "v1.34.4"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("v1.34.4", (1, 34, 4)),
        ("v1.35.0-alpha.1", (1, 35, 0)),
        ("v1.34.4+build.7", (1, 34, 4)),
        ("v0.0.0", (0, 0, 0)),
    ],
)
def test_parse_kubernetes_version(text: str, parsed: tuple[int, int, int]) -> None:
    assert parse_kubernetes_version(text) == parsed


@pytest.mark.parametrize(
    "text", ["1.34.4", "v1.34", "v1.34.4-", "v01.34.4", "v1.34.4-alpha..1", " v1.34.4", "", "latest"]
)
def test_parse_kubernetes_version_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="must be a Kubernetes release such as"):
        parse_kubernetes_version(text)


@pytest.mark.parametrize(
    ("version", "agent"),
    [("v1.34.4", "kube-probe/1.34"), ("v1.33.0-rc.1", "kube-probe/1.33"), ("v2.0.1", "kube-probe/2.0")],
)
def test_probe_user_agent(version: str, agent: str) -> None:
    assert probe_user_agent(version) == agent


def test_http_probes_carry_the_configured_release() -> None:
    action = HTTPGetAction(8080, "/healthz")
    assert ("User-Agent", "kube-probe/1.34") in http_request(action, {}, "198.18.0.9").headers
    request = http_request(action, {}, "198.18.0.9", user_agent=probe_user_agent("v1.33.2"))
    assert ("User-Agent", "kube-probe/1.33") in request.headers
    # A probe's own User-Agent still wins.
    own = HTTPGetAction(8080, "/", headers=(("User-Agent", "mine"),))
    assert [
        v for k, v in http_request(own, {}, "198.18.0.9", user_agent="kube-probe/1.33").headers if k == "User-Agent"
    ] == ["mine"]


def test_version_text() -> None:
    assert version_text() == f"nodeagent {__version__} (Kubernetes v1.34.4)"
    assert version_text("v1.33.2") == f"nodeagent {__version__} (Kubernetes v1.33.2)"


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"nodeagent {__version__} (Kubernetes v1.34.4)"


FACTS = NodeFacts(
    cpu_count=2,
    memory_bytes=4 << 30,
    ephemeral_storage_bytes=10 << 30,
    hostname="n1",
    internal_ip="127.0.0.1",
    machine_id="m",
    system_uuid="s",
    boot_id="b",
    kernel_version="6.1.0",
    os_image="Debian",
    container_runtime_version="containerd://1.7.24",
    kubelet_version="v1.34.4",
    operating_system="linux",
    architecture="amd64",
    daemon_port=10250,
)


def test_the_node_reports_the_emulated_release_and_carries_our_version() -> None:
    node = initial_node("n1", FACTS, defaults())
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.34.4"
    assert node["metadata"]["annotations"][VERSION_ANNOTATION] == __version__
    older = dataclasses.replace(FACTS, kubelet_version="v1.33.2")
    assert build_node_status(older, defaults(), [])["nodeInfo"]["kubeletVersion"] == "v1.33.2"
