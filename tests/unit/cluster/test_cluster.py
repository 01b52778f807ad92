"""The pure parts of nodeagent/cluster/cluster.py and node.py: tokens, names, ports, state, cgroup cleanup."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.cluster.cluster import ClusterState, new_token, node_name
from nodeagent.cluster.config import NodePlan
from nodeagent.cluster.node import leftover_cgroups, remove_cgroups
from nodeagent.cluster.nodenet import Fabric


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
