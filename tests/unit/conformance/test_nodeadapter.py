"""The node e2e suite's working directory and its command line (nodeadapter.py, noderun.py), without a testbed."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nodeagent.conformance import nodeadapter, noderun
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.nodesuite import NODE_EVICTION, SUITE_DESCRIPTION
from nodeagent.conformance.systemctl_shim import Kubelet, ShimState

LISTED = (Path(__file__).with_name("testdata") / "e2e_node" / "eviction-neighbourhood.txt").read_text().splitlines()


@pytest.fixture
def agent_config(tmp_path: Path) -> Path:
    path = tmp_path / "nodeagent.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "cgroupRoot": "/nodeagent-nab0",
                "healthzPort": 41234,
                "address": "198.18.0.1",
            }
        )
    )
    return path


def test_the_config_gets_the_suites_fields_over_the_testbeds(tmp_path: Path, agent_config: Path) -> None:
    d = nodeadapter.prepare(tmp_path / "node-e2e", testbed_root=tmp_path / "tb", agent_config=agent_config,
                            kubelet=Kubelet.NODEAGENT)  # fmt: skip
    config = yaml.safe_load(d.config.read_text())
    assert config["cgroupRoot"] == "/"
    assert (config["healthzBindAddress"], config["healthzPort"], config["readOnlyPort"]) == ("127.0.0.1", 10248, 10255)
    assert config["address"] == "198.18.0.1" and config["kind"] == "KubeletConfiguration"
    assert d.config == tmp_path / "node-e2e" / "kubelet-config"  # $CWD/kubelet-config, as the suite writes it


def test_the_shims_run_as_the_suite_calls_them(tmp_path: Path, agent_config: Path) -> None:
    d = nodeadapter.prepare(tmp_path / "node-e2e", testbed_root=tmp_path / "tb", agent_config=agent_config,
                            kubelet=Kubelet.UPSTREAM)  # fmt: skip
    assert ShimState.load(d.state) == ShimState(
        testbed=tmp_path / "tb", config=d.config, log=d.log, kubelet=Kubelet.UPSTREAM
    )
    env = {**os.environ, "PATH": nodeadapter.suite_path(d)}
    sudo = subprocess.run(["sudo", "sh", "-c", "echo 0 > out"], cwd=tmp_path, env=env, check=False)
    assert sudo.returncode == 0 and (tmp_path / "out").read_text() == "0\n"
    # A call that needs no agent: list-units with no testbed answers "0 loaded units" for --state=running.
    listed = subprocess.run(["sudo", "systemctl", "list-units", "*kubelet*", "--state=running"], env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"kubelet-\w+", listed.stdout) is None and "0 loaded units listed." in listed.stdout
    refused = subprocess.run(["systemctl", "daemon-reload"], env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 1 and "'daemon-reload' is not served" in refused.stdout
    assert "args='daemon-reload' exit=1" in d.log.read_text()


def test_the_suite_path_puts_the_shims_first(tmp_path: Path) -> None:
    d = nodeadapter.suite_dir(tmp_path)
    assert nodeadapter.suite_path(d, "/usr/bin:/bin") == f"{tmp_path / 'bin'}:/usr/bin:/bin"


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_held_fixed_port_is_refused_by_name(held_port: int) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        free_port = free.getsockname()[1]
    nodeadapter.check_ports((("127.0.0.1", free_port),))
    with pytest.raises(ConformanceError, match=rf"fixed ports are taken: 127\.0\.0\.1:{held_port} \("):
        nodeadapter.check_ports((("127.0.0.1", free_port), ("127.0.0.1", held_port)))


def test_the_fixed_ports_are_the_suites() -> None:
    assert nodeadapter.HEALTHZ_ADDRESS == ("127.0.0.1", 10248)  # ports.KubeletHealthzPort on loopback
    assert nodeadapter.READ_ONLY_PORT == 10255  # ports.KubeletReadOnlyPort


def test_the_suite_argv_runs_without_services_against_the_testbed(tmp_path: Path) -> None:
    target = noderun.SuiteTarget("https://198.18.0.1:6443", "tok", tmp_path / "containerd.sock", tmp_path / "report")
    argv = noderun.suite_argv(Path("/e2e_node.test"), target, focus=NODE_EVICTION.focus, timeout="4h")
    assert argv[0] == "/e2e_node.test"
    flags = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
    assert flags["--start-services"] == "false"
    assert flags["--host"] == "https://198.18.0.1:6443" and flags["--bearer-token"] == "tok"
    assert flags["--container-runtime-endpoint"] == f"unix://{tmp_path / 'containerd.sock'}"
    assert flags["--prepull-images"] == "false" and flags["--report-dir"] == str(tmp_path / "report")
    assert flags["--ginkgo.focus"] == NODE_EVICTION.focus
    # no flag e2e_node.test refuses or ignores in this mode
    assert not any(a.startswith(("--provider", "--kubeconfig", "--node-name")) for a in argv)


def test_the_default_focus_selects_the_22_specs() -> None:
    focus = re.compile(noderun.NodeRunOptions().new_plan_focus)
    assert sum(1 for name in LISTED if focus.search(f"{SUITE_DESCRIPTION} {name}")) == 22


def test_the_suite_env_has_the_shims_and_the_repo_list(tmp_path: Path) -> None:
    d = nodeadapter.suite_dir(tmp_path / "node-e2e")
    env = noderun.suite_env(d, tmp_path / "repo-list.yaml", {"PATH": "/usr/bin", "KUBECONFIG": "/x", "HOME": "/r"})
    assert env == {"PATH": f"{d.bin}:/usr/bin", "KUBE_TEST_REPO_LIST": str(tmp_path / "repo-list.yaml"), "HOME": "/r"}
