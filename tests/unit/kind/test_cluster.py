"""kind's config, network and command line (cluster.py)."""

from __future__ import annotations

import ipaddress
import itertools
import json
from pathlib import Path

import pytest
import yaml

from nodeagent.kind import cluster
from nodeagent.kind.errors import KindError

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


def test_cluster_config_adds_workers() -> None:
    doc = yaml.safe_load(cluster.cluster_config(workers=2))
    assert doc["nodes"] == [{"role": "control-plane"}, {"role": "worker"}, {"role": "worker"}]


def test_parse_nodes_takes_name_cidr_and_address() -> None:
    text = "cp 198.18.96.0/24 198.19.252.2\nw1 198.18.97.0/24 198.19.252.3\n"
    assert cluster.parse_nodes(text) == [
        cluster.PodNetworkNode("cp", "198.18.96.0/24", "198.19.252.2"),
        cluster.PodNetworkNode("w1", "198.18.97.0/24", "198.19.252.3"),
    ]
    with pytest.raises(KindError, match="without a pod CIDR"):
        cluster.parse_nodes("w2  198.19.252.4\n")


def test_bridge_conflist_uses_the_nodes_cidr_without_masquerade() -> None:
    doc = json.loads(cluster.bridge_conflist("198.18.97.0/24"))
    bridge, portmap = doc["plugins"]
    assert bridge["type"] == "bridge" and bridge["isGateway"] is True and bridge["ipMasq"] is False
    assert bridge["ipam"]["type"] == "host-local"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "198.18.97.0/24"}]]
    assert portmap["type"] == "portmap"


def test_node_routes_reach_every_other_nodes_pods() -> None:
    nodes = [
        cluster.PodNetworkNode("cp", "198.18.96.0/24", "198.19.252.2"),
        cluster.PodNetworkNode("w1", "198.18.97.0/24", "198.19.252.3"),
        cluster.PodNetworkNode("w2", "198.18.98.0/24", "198.19.252.4"),
    ]
    routes = cluster.node_routes(nodes)
    assert routes["w1"] == [
        ["ip", "route", "replace", "198.18.96.0/24", "via", "198.19.252.2"],
        ["ip", "route", "replace", "198.18.98.0/24", "via", "198.19.252.4"],
    ]
    assert all(len(r) == 2 for r in routes.values())
    assert cluster.node_routes(nodes[:1]) == {"cp": []}


def test_cluster_dns_ip_is_kubeadms() -> None:
    assert cluster.cluster_dns_ip("198.19.96.0/20") == "198.19.96.10"
    assert ipaddress.ip_address(cluster.cluster_dns_ip()) in ipaddress.ip_network(cluster.SERVICE_SUBNET)
    assert cluster.service_probe_argv("198.19.96.10") == [
        "timeout",
        "5",
        "bash",
        "-c",
        "echo > /dev/tcp/198.19.96.10/53",
    ]


def test_the_joining_nodes_address_is_kept_out_of_dockers_ipam() -> None:
    pairs = list(itertools.pairwise(cluster.network_create_args()))
    assert ("--aux-address", f"nodeagent={cluster.JOIN_ADDRESS}") in pairs
    assert ipaddress.ip_address(cluster.JOIN_ADDRESS) in ipaddress.ip_network(cluster.NETWORK_SUBNET)
    assert cluster.JOIN_ADDRESS != cluster.NETWORK_GATEWAY
