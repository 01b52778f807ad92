"""A stop signal ends the agent at any start-up wait, within a few seconds and with exit code 0.

Each case starts `nodeagent run` against the testbed's containerd (or a runtime socket that is missing, or that
accepts and never answers) and an apiserver that is down (a kubeconfig pointing at a closed loopback port),
forbidding (the node's credential asked to register another node name: 403 from NodeRestriction) or silent (a
loopback TCP server that accepts and never answers). Once the agent's log (or the silent server) shows it is stuck
in that stage, SIGTERM (or SIGINT) must end it: before this, registration retried for ever and signals did nothing.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import Agent, agent_config, start_agent, stop_agent

EXIT_BUDGET = 5.0  # seconds from the signal to the exit: the agent's shutdown budget, with room for a busy machine


@dataclass
class SilentServer:
    """Accepts connections (TCP on loopback, or a unix socket) and never answers."""

    listener: socket.socket
    accepted: list[socket.socket] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _closing: bool = False

    def start(self) -> None:
        self.listener.listen(16)
        self.listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._closing = True
        if self._thread is not None:
            self._thread.join(5)
        for conn in self.accepted:
            conn.close()
        self.listener.close()


@pytest.fixture
def silent_tcp() -> Iterator[SilentServer]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    server = SilentServer(listener)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def silent_unix(tmp_path: Path) -> Iterator[tuple[SilentServer, Path]]:
    path = Path(f"/tmp/nodeagent-silent-{uuid.uuid4().hex[:8]}.sock")  # unix socket paths must stay short
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    server = SilentServer(listener)
    server.start()
    try:
        yield server, path
    finally:
        server.close()
        path.unlink(missing_ok=True)


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: a connect is refused


def kubeconfig_for(testbed: Testbed, server: str, path: Path) -> Path:
    """The node's kubeconfig, pointed at another server."""
    doc = yaml.safe_load(testbed.layout.node_kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def _log(agent: Agent) -> str:
    return agent.log.read_text(errors="replace") if agent.log.exists() else ""


def wait_until(check: Callable[[], bool], agent: Agent, what: str, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if agent.proc.poll() is not None:
            raise AssertionError(f"the agent exited ({agent.proc.returncode}) before {what}\n{agent.tail()}")
        time.sleep(0.1)
    raise AssertionError(f"{what}: not after {timeout:.0f}s\n{agent.tail()}")


def signal_and_time_exit(agent: Agent, sig: int) -> tuple[float, int]:
    assert agent.proc.poll() is None, f"the agent is not running any more\n{agent.tail()}"
    started = time.monotonic()
    agent.proc.send_signal(sig)
    try:
        code = agent.proc.wait(30)
    except Exception:
        agent.proc.kill()
        agent.proc.wait(5)
        raise AssertionError(f"the agent ignored the signal for 30 s\n{agent.tail()}") from None
    return time.monotonic() - started, code


@contextlib.contextmanager
def running_agent(testbed: Testbed, log: Path, **kwargs: object) -> Iterator[Agent]:
    agent = start_agent(testbed, log, **kwargs)  # type: ignore[arg-type]
    try:
        yield agent
    finally:
        stop_agent(agent)  # SIGTERM, then SIGKILL after 15 s: never left behind, even when the test fails


def _assert_clean_stop(agent: Agent, sig: int, stage: str) -> None:
    took, code = signal_and_time_exit(agent, sig)
    print(f"stage={stage!r} signal={sig} exit={code} in {took:.2f}s")
    assert code == 0, f"exit code {code}\n{agent.tail()}"
    assert took < EXIT_BUDGET, f"took {took:.1f}s to stop\n{agent.tail()}"
    text = _log(agent)
    assert f"agent stopped during start-up stage={stage}" in text, agent.tail()
    assert "Traceback" not in text, agent.tail()


@pytest.mark.parametrize("sig", [15, 2], ids=["SIGTERM", "SIGINT"])
def test_stop_while_the_apiserver_is_down(testbed: Testbed, tmp_path: Path, sig: int) -> None:
    kubeconfig = kubeconfig_for(testbed, f"https://127.0.0.1:{closed_port()}", tmp_path / "down.kubeconfig")
    with running_agent(
        testbed, tmp_path / "agent.log", args=("--kubeconfig", str(kubeconfig), "--node-name", "down-node")
    ) as agent:
        # Registration fails and is retried (a connection refused each time).
        wait_until(lambda: _log(agent).count("unable to register node") >= 2, agent, "registration retried")
        _assert_clean_stop(agent, sig, "registering the node")


def test_stop_while_registration_is_forbidden(testbed: Testbed, tmp_path: Path) -> None:
    other = f"not-this-node-{uuid.uuid4().hex[:5]}"
    with running_agent(testbed, tmp_path / "agent.log", args=("--kubeconfig", "<node>", "--node-name", other)) as agent:
        wait_until(
            lambda: f"unable to register node node={other} error=403" in _log(agent), agent, "a 403 at registration"
        )
        _assert_clean_stop(agent, 15, "registering the node")


def test_stop_while_the_apiserver_never_answers(testbed: Testbed, tmp_path: Path, silent_tcp: SilentServer) -> None:
    port = silent_tcp.listener.getsockname()[1]
    kubeconfig = kubeconfig_for(testbed, f"https://127.0.0.1:{port}", tmp_path / "silent.kubeconfig")
    with running_agent(
        testbed, tmp_path / "agent.log", args=("--kubeconfig", str(kubeconfig), "--node-name", "silent-node")
    ) as agent:
        wait_until(lambda: bool(silent_tcp.accepted), agent, "the agent connected to the silent apiserver")
        time.sleep(0.5)  # inside the request now, which would wait for its timeout
        _assert_clean_stop(agent, 15, "registering the node")


def test_stop_while_the_runtime_socket_does_not_exist(testbed: Testbed, tmp_path: Path) -> None:
    config = agent_config(
        testbed, tmp_path / "nosocket.yaml", containerRuntimeEndpoint=f"unix://{tmp_path}/no-such-containerd.sock"
    )
    with running_agent(testbed, tmp_path / "agent.log", config=config) as agent:
        wait_until(lambda: _log(agent).count("container runtime not ready") >= 2, agent, "runtime retried")
        _assert_clean_stop(agent, 15, "waiting for the container runtime")


def test_stop_while_the_runtime_never_answers(
    testbed: Testbed, tmp_path: Path, silent_unix: tuple[SilentServer, Path]
) -> None:
    server, path = silent_unix
    config = agent_config(testbed, tmp_path / "silent-runtime.yaml", containerRuntimeEndpoint=f"unix://{path}")
    with running_agent(testbed, tmp_path / "agent.log", config=config) as agent:
        wait_until(lambda: bool(server.accepted), agent, "the agent connected to the silent runtime")
        time.sleep(0.5)
        _assert_clean_stop(agent, 15, "waiting for the container runtime")
