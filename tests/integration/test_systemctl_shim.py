"""The node e2e suite's systemctl shim stops and starts a real agent on the testbed, as the suite calls it.

The calls are the suite's (test/e2e_node/util.go v1.34.4: `sudo systemctl list-units '*kubelet*' --state=running`,
`reset-failed`, `kill`, `restart`), through the `sudo` and `systemctl` scripts `nodeadapter.prepare` writes. The agent
runs with the testbed's own config (its own healthz port), so this test can run beside a node e2e run, which holds
the fixed 10248. After `kill` the agent's process is gone and its healthz refuses; after `restart` a new process
serves healthz and the node is Ready.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

from nodeagent.conformance import nodeadapter
from nodeagent.conformance.systemctl_shim import Kubelet, ShimState
from nodeagent.testbed import processes
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import AGENT, Testbed

SUITE_UNIT_REGEX = re.compile(r"(kubelet-\w+)")


def _healthz_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _healthz_comes_up(port: int, timeout: float = 30.0) -> bool:
    """The restart returns once the Node is Ready, which it may still be from before the kill (the node's lease
    has not run out): the new process's healthz comes a moment later, as the suite's own wait allows for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _healthz_answers(port):
            return True
        time.sleep(0.2)
    return False


def test_the_shim_kills_and_restarts_the_agent(testbed: Testbed, settings: Settings, tmp_path: Path) -> None:
    d = nodeadapter.prepare(tmp_path / "node-e2e", testbed_root=testbed.layout.root,
                            agent_config=testbed.layout.agent_config, kubelet=Kubelet.NODEAGENT)  # fmt: skip
    # The testbed's own config, not the suite's fixed ports.
    ShimState(testbed=testbed.layout.root, config=testbed.layout.agent_config, log=d.log).save(d.state)
    env = {**os.environ, "PATH": nodeadapter.suite_path(d)}

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sudo", "systemctl", *args], env=env, capture_output=True, text=True, check=False)

    try:
        listed = call("list-units", "*kubelet*", "--state=running")
        assert listed.returncode == 0 and SUITE_UNIT_REGEX.search(listed.stdout) is None, listed.stdout
        started = call("restart", "kubelet-nodeagent")  # restart of a stopped unit starts it, as systemd's
        assert started.returncode == 0, started.stdout + d.log.read_text()
        first = processes.load(testbed.layout.pids, AGENT)
        assert first is not None and first.alive()
        assert _healthz_answers(settings.healthz_port)

        listed = call("list-units", "*kubelet*", "--state=running")
        match = SUITE_UNIT_REGEX.search(listed.stdout)
        assert match is not None and match.group(0) == "kubelet-nodeagent", listed.stdout
        assert call("reset-failed", "kubelet-nodeagent").returncode == 0
        assert call("kill", "kubelet-nodeagent").returncode == 0
        assert not first.alive()
        assert not _healthz_answers(settings.healthz_port)
        assert call("is-active", "kubelet-nodeagent").stdout == "inactive\n"

        assert call("restart", "kubelet-nodeagent").returncode == 0  # returns once the node is Ready
        second = processes.load(testbed.layout.pids, AGENT)
        assert second is not None and second.alive() and second.pid != first.pid
        assert _healthz_comes_up(settings.healthz_port)
        assert call("is-active", "kubelet-nodeagent").stdout == "active\n"
        calls = re.findall(r"systemctl call args='([^']*)' exit=(\d+)", d.log.read_text())
        assert [c.split()[0] for c, _ in calls][-4:] == ["kill", "is-active", "restart", "is-active"]
    finally:
        stopped = call("stop", "kubelet-nodeagent")
    assert stopped.returncode == 0 and call("is-active", "kubelet-nodeagent").returncode == 3
