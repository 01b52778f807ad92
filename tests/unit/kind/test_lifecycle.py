"""`kind up|down` state and `kind join`'s choices (lifecycle.py, join.py), without Docker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodeagent.kind import cluster, dockerd, join, lifecycle
from nodeagent.kind.dockerd import DockerPaths, IsolatedDocker
from nodeagent.kind.errors import KindError


def test_next_pod_cidr_is_the_lowest_free_slash_24() -> None:
    assert join.next_pod_cidr("198.18.96.0/19", {"198.18.96.0/24", "198.18.97.0/24"}) == "198.18.98.0/24"
    assert join.next_pod_cidr("198.18.96.0/19", {"198.18.97.0/24"}) == "198.18.96.0/24"
    with pytest.raises(KindError, match="no free"):
        join.next_pod_cidr("198.18.96.0/24", {"198.18.96.0/24"})


def test_hosts_file_names_the_control_plane() -> None:
    text = join.hosts_file("127.0.0.1 localhost\n", "198.19.252.2")
    assert text.splitlines() == ["127.0.0.1 localhost", f"198.19.252.2 {cluster.CONTROL_PLANE}"]


def test_join_plan_is_on_kinds_network_with_the_cgroupfs_driver(tmp_path: Path) -> None:
    plan = join.plan_for("198.18.98.0/24")
    assert plan.address == cluster.JOIN_ADDRESS and plan.pod_cidr == "198.18.98.0/24"
    node = join._node(lifecycle.KindDir(tmp_path), plan)
    assert node.fabric.bridge == cluster.BRIDGE and node.fabric.gateway == cluster.NETWORK_GATEWAY
    patch = yaml.safe_load(node._patch_text())
    assert patch["cgroupDriver"] == "cgroupfs" and patch["podCIDR"] == "198.18.98.0/24"
    assert patch["address"] == cluster.JOIN_ADDRESS


def test_down_without_state_does_nothing(tmp_path: Path) -> None:
    assert lifecycle.down(tmp_path, print) == []


def test_load_state_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KindError, match=r"kind-state\.json"):
        lifecycle.load_state(lifecycle.KindDir(tmp_path))


def test_record_and_attach_stop_a_daemon_by_pid_and_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host's /docker cgroups (a real isolated Docker may run) are never looked at.
    monkeypatch.setattr(dockerd, "CGROUP_ROOT", tmp_path / "cgroup")
    daemon = IsolatedDocker(DockerPaths(tmp_path))
    daemon.plugins_dir_before = True
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = daemon.record()
        record["dockerd"] = [sleeper.pid, [sys.executable, "-c", "import time; time.sleep(60)"]]
        attached = IsolatedDocker.attach(record)
        assert attached.paths.base == tmp_path and "dockerd" in attached.recorded
        # Another command line under the same PID is not ours: left alone.
        other = IsolatedDocker.attach({**record, "dockerd": [sleeper.pid, ["sleep", "60"]]})
        other.stop()
        assert sleeper.poll() is None
        attached.stop()
        assert sleeper.wait(10) == -15
    finally:
        if sleeper.poll() is None:
            os.kill(sleeper.pid, 9)
            sleeper.wait()


def test_up_refuses_a_dir_too_long_for_containerds_socket(tmp_path: Path) -> None:
    with pytest.raises(KindError, match="too long"):
        lifecycle.up(tmp_path / ("d" * 80), print)
    assert not (tmp_path / ("d" * 80)).exists()


def test_join_yaml_gives_the_tls_bootstrap_its_own_token() -> None:
    text = yaml.safe_dump({"kind": "JoinConfiguration", "discovery": {"bootstrapToken": {"token": "good"}}})
    assert yaml.safe_load(join.join_yaml(text, tls_bootstrap_token=None)) == yaml.safe_load(text)
    doc = yaml.safe_load(join.join_yaml(text, tls_bootstrap_token="abcdef.0123456789abcdef"))
    assert doc["discovery"] == {"bootstrapToken": {"token": "good"}, "tlsBootstrapToken": "abcdef.0123456789abcdef"}


def test_detach_leaves_the_daemons_to_pid_and_command_line(tmp_path: Path) -> None:
    daemon = IsolatedDocker(DockerPaths(tmp_path))
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    sleeper = subprocess.Popen(argv)
    try:
        daemon.dockerd = sleeper
        daemon.detach()
        assert daemon.dockerd is None
        assert daemon.recorded["dockerd"] == (sleeper.pid, tuple(dockerd.dockerd_argv(daemon.paths)))
    finally:
        os.kill(sleeper.pid, 9)
        os.waitpid(sleeper.pid, 0)
