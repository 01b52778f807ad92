"""The pure parts of nodeagent/cluster/cluster.py and node.py: tokens, names, ports, state, cgroup cleanup."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from nodeagent.cli import build_parser
from nodeagent.cluster.cluster import ClusterError, ClusterState, new_token, node_name
from nodeagent.cluster.command import runtime_config_for
from nodeagent.cluster.config import NodePlan
from nodeagent.cluster.node import Node, leftover_cgroups, remove_cgroups
from nodeagent.cluster.nodenet import Fabric
from nodeagent.testbed import configs


def test_new_token_has_kubeadms_shape() -> None:
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", new_token())
    picks: Iterator[str] = iter("abcdefghijklmnopqrstuv")
    assert new_token(lambda _alphabet: next(picks)) == "abcdef.ghijklmnopqrstuv"


@pytest.mark.parametrize(("index", "name"), [(0, "nodeagent-control-plane"), (1, "nodeagent-worker1")])
def test_node_names(index: int, name: str) -> None:
    assert node_name(index) == name


def test_state_round_trips(tmp_path: Path) -> None:
    plan = NodePlan("n", "198.18.3.0/24", 10250, 10248, "/nodeagent-x", "198.18.5.2")
    state = ClusterState("198.18.5.1:5000", "198.18.4.0/24", (plan,), Fabric("nafab", "198.18.5.0/24"))
    state.save(tmp_path / "cluster.json")
    assert ClusterState.load(tmp_path / "cluster.json") == state
    assert plan.ip == "198.18.5.2"
    dra = replace(state, runtime_config="resource.k8s.io/v1beta1=true")
    dra.save(tmp_path / "cluster.json")
    assert ClusterState.load(tmp_path / "cluster.json").runtime_config == "resource.k8s.io/v1beta1=true"


def test_state_of_a_cluster_from_before_runtime_config_loads(tmp_path: Path) -> None:
    plan = NodePlan("n", "198.18.3.0/24", 10250, 10248, "/nodeagent-x", "198.18.5.2")
    state = ClusterState("198.18.5.1:5000", "198.18.4.0/24", (plan,), Fabric("nafab", "198.18.5.0/24"))
    data = json.loads(json.dumps(asdict(state)))
    del data["runtime_config"]
    (tmp_path / "cluster.json").write_text(json.dumps(data))
    assert ClusterState.load(tmp_path / "cluster.json") == state


def test_each_node_has_its_own_cdi_spec_directory(tmp_path: Path) -> None:
    """A DRA driver's proxy pod writes CDI specs through the hostPath /var/run/cdi; on a `cluster up` node that path
    is the node's own directory (bind-mounted in its mount namespace), so two nodes' containerds never read each
    other's specs, and the host's /var/run/cdi is not touched."""
    fabric = Fabric("nafab", "198.18.5.0/24")
    nodes = [
        Node(tmp_path / f"node{i}", NodePlan(f"n{i}", f"198.18.{i}.0/24", 10250, 10248, f"/x{i}", f"198.18.5.{i + 2}"),
             "198.18.5.1:5000", "198.18.4.0/24", fabric)
        for i in range(2)
    ]  # fmt: skip
    mounts = [dict((point, source) for source, point in node.private_dirs()) for node in nodes]
    for node, mounted in zip(nodes, mounts, strict=True):
        assert mounted[Path("/var/run/cdi")] == node.root / "var-run-cdi"
        assert mounted[Path("/var/lib/kubelet")] == node.root / "var-lib-kubelet"
        assert mounted[Path("/etc/kubernetes")] == node.root / "etc-kubernetes"
    assert mounts[0][Path("/var/run/cdi")] != mounts[1][Path("/var/run/cdi")]
    # containerd reads that path (besides the node's own spec directory), so the specs written there reach it.
    assert '"/var/run/cdi"' in configs.containerd_config(nodes[0].layout, nodes[0].settings)


@pytest.mark.parametrize(
    ("preset", "runtime_config", "expected"),
    [
        (None, None, ""),
        (None, "a/v1=true", "a/v1=true"),
        ("devices", None, "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"),
    ],
)
def test_cluster_up_runtime_config(preset: str | None, runtime_config: str | None, expected: str) -> None:
    assert runtime_config_for(preset, runtime_config) == expected


def test_cluster_up_refuses_a_preset_and_a_runtime_config_together() -> None:
    with pytest.raises(ClusterError, match="not both"):
        runtime_config_for("devices", "a/v1=true")
    args = build_parser().parse_args(["cluster", "up", "--nodes", "3", "--preset", "devices"])
    assert (args.nodes, args.preset, args.runtime_config) == (3, "devices", None)


def test_remove_cgroups_takes_every_hierarchy_deepest_first(tmp_path: Path) -> None:
    for hierarchy in ("cpu", "memory", "unified"):
        (tmp_path / hierarchy / "nodeagent-x" / "kubepods" / "burstable" / "pod1").mkdir(parents=True)
    (tmp_path / "cpu" / "nodeagent-other").mkdir()
    assert len(leftover_cgroups("/nodeagent-x", base=tmp_path)) == 3
    removed = remove_cgroups("/nodeagent-x", base=tmp_path)
    assert len(removed) == 12
    assert removed[0].endswith("pod1")
    assert leftover_cgroups("/nodeagent-x", base=tmp_path) == []
    assert (tmp_path / "cpu" / "nodeagent-other").is_dir()
