"""kind's config, network and command line (cluster.py)."""

from __future__ import annotations

import ipaddress
import itertools
from pathlib import Path

import yaml

from nodeagent.kind import cluster

PROJECT_RANGE = ipaddress.ip_network("198.18.0.0/15")


def test_cluster_config_keeps_addresses_in_the_project_range() -> None:
    doc = yaml.safe_load(cluster.cluster_config())
    assert doc["kind"] == "Cluster" and doc["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    net = doc["networking"]
    assert net["disableDefaultCNI"] is True
    assert net["ipFamily"] == "ipv4"
    assert net["apiServerAddress"] == "127.0.0.1"
    pods = ipaddress.ip_network(net["podSubnet"])
    services = ipaddress.ip_network(net["serviceSubnet"])
    assert pods.subnet_of(PROJECT_RANGE) and services.subnet_of(PROJECT_RANGE)  # type: ignore[arg-type]
    assert not pods.overlaps(services)
    assert not pods.overlaps(ipaddress.ip_network(cluster.NETWORK_SUBNET))
    assert doc["nodes"] == [{"role": "control-plane"}]


def test_network_is_ours_without_masquerade() -> None:
    args = cluster.network_create_args()
    pairs = list(itertools.pairwise(args))
    assert ("--subnet", cluster.NETWORK_SUBNET) in pairs
    assert ("--gateway", cluster.NETWORK_GATEWAY) in pairs
    assert ("--opt", "com.docker.network.bridge.enable_ip_masquerade=false") in pairs
    assert ("--opt", "com.docker.network.bridge.name=nakind0") in pairs
    assert args[-1] == cluster.NETWORK
    subnet = ipaddress.ip_network(cluster.NETWORK_SUBNET)
    assert subnet.subnet_of(PROJECT_RANGE)  # type: ignore[arg-type]
    assert ipaddress.ip_address(cluster.NETWORK_GATEWAY) in subnet
    # Linux bridge names are at most 15 bytes; not docker0/br-*, which the host-state check refuses.
    assert len(cluster.BRIDGE) <= 15 and not cluster.BRIDGE.startswith(("br-", "docker"))


def test_kind_env_points_at_our_daemon_only(tmp_path: Path) -> None:
    env = cluster.kind_env(
        tmp_path / "docker.sock",
        tmp_path / "kubeconfig",
        tmp_path / "bin",
        {"PATH": "/usr/local/bin:/usr/bin", "DOCKER_CONTEXT": "x", "KIND_CLUSTER_NAME": "y", "HOME": "/root"},
    )
    assert env["DOCKER_HOST"] == f"unix://{tmp_path / 'docker.sock'}"
    assert env["KUBECONFIG"] == str(tmp_path / "kubeconfig")
    assert env["KIND_EXPERIMENTAL_DOCKER_NETWORK"] == cluster.NETWORK
    assert env["PATH"].split(":")[0] == str(tmp_path / "bin")
    assert "DOCKER_CONTEXT" not in env and "KIND_CLUSTER_NAME" not in env
    assert env["HOME"] == "/root"


def test_create_argv_retains_nodes_and_does_not_wait(tmp_path: Path) -> None:
    argv = cluster.create_argv(Path("/k/kind"), "img:1", tmp_path / "c.yaml")
    assert argv[:3] == ["/k/kind", "create", "cluster"]
    pairs = list(itertools.pairwise(argv))
    for pair in (
        ("--image", "img:1"),
        ("--config", str(tmp_path / "c.yaml")),
        ("--name", "nodeagent"),
        ("--wait", "0s"),
    ):
        assert pair in pairs
    assert "--retain" in argv


def test_kind_binary_is_in_the_cache(tmp_path: Path) -> None:
    assert cluster.kind_binary(tmp_path) == tmp_path / "kind" / "kind-v0.33.0" / "bin" / "kind"
