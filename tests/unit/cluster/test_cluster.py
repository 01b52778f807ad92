"""The pure parts of nodeagent/cluster/cluster.py and node.py: tokens, names, ports, state, cgroup cleanup."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.cluster.cluster import ClusterState, new_token, node_name, taken_ports
from nodeagent.cluster.config import NodePlan
from nodeagent.cluster.node import leftover_cgroups, remove_cgroups


def test_new_token_has_kubeadms_shape() -> None:
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", new_token())
    picks: Iterator[str] = iter("abcdefghijklmnopqrstuv")
    assert new_token(lambda _alphabet: next(picks)) == "abcdef.ghijklmnopqrstuv"


@pytest.mark.parametrize(("index", "name"), [(0, "nodeagent-control-plane"), (1, "nodeagent-worker1")])
def test_node_names(index: int, name: str) -> None:
    assert node_name(index) == name


def test_taken_ports_finds_a_listener_and_not_a_free_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        assert taken_ports((busy, free), addresses=("127.0.0.1",)) == [busy]


def test_state_round_trips(tmp_path: Path) -> None:
    plan = NodePlan("n", "198.18.3.0/24", 10250, 10248, "/nodeagent-x")
    state = ClusterState("127.0.0.1:5000", "198.18.4.0/24", (plan,))
    state.save(tmp_path / "cluster.json")
    assert ClusterState.load(tmp_path / "cluster.json") == state
    assert plan.ip == "198.18.3.1"


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
