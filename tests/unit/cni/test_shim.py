"""The installed executable, the shim's wire format and the resident helper (over the FakeNetwork).

The executable runs as containerd runs it: a subprocess with only CNI_* in its environment and `/` as its working
directory, so nothing but what `cni.install` wrote into it can lead it to the code.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cni import install, shim
from cni.helper import Helper, HelperError, bind
from cni.network import Network
from tests.unit.cni.fakenet import FakeKernel, FakeNetwork

NETNS = "/run/netns/shim-unit"


def test_request_and_reply_round_trip() -> None:
    data = shim.encode_request({b"CNI_COMMAND": b"ADD", b"CNI_ARGS": b"A=1;B=x=y"}, b'{"a": 1}')
    assert shim.decode_request(data) == ({"CNI_COMMAND": "ADD", "CNI_ARGS": "A=1;B=x=y"}, b'{"a": 1}')
    assert shim.decode_reply(shim.encode_reply(1, b"out")) == (1, b"out")
    assert shim.decode_reply(b"") is None
    assert shim.decode_reply(b"CNI") is None
    with pytest.raises(ValueError, match="not a nodeagent-bridge request"):
        shim.decode_request(b"GET / HTTP/1.1\r\n")


def test_forward_without_a_helper_is_none(tmp_path: Path) -> None:
    assert shim.forward(str(tmp_path / "nobody.sock"), b"x") is None


def test_forward_to_a_helper_that_dies_before_replying_is_none(tmp_path: Path) -> None:
    path = tmp_path / "dies.sock"
    listener = bind(path)

    def accept_and_close() -> None:
        conn, _ = listener.accept()
        conn.close()

    t = threading.Thread(target=accept_and_close)
    t.start()
    try:
        assert shim.forward(str(path), shim.encode_request({}, b"")) is None
    finally:
        t.join()
        listener.close()


def test_forward_to_a_silent_helper_times_out(tmp_path: Path) -> None:
    path = tmp_path / "silent.sock"
    listener = bind(path)
    try:
        with pytest.raises(TimeoutError):
            shim.forward(str(path), shim.encode_request({}, b""), timeout=0.2)
    finally:
        listener.close()


@pytest.fixture
def full_queue(tmp_path: Path) -> Iterator[Path]:
    """A listening socket that never accepts and whose queue is full: a helper that stopped accepting."""
    path = tmp_path / "full.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    queued: list[socket.socket] = []
    try:
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(str(path))
            except BlockingIOError:
                s.close()
                break
            queued.append(s)
            assert len(queued) < 64, "the listen queue never filled"
        yield path
    finally:
        for s in queued:
            s.close()
        listener.close()


def test_forward_to_a_helper_that_stopped_accepting_is_none_at_once(full_queue: Path) -> None:
    # A blocking connect would wait for an accept that never comes; run it in a thread so that such a bug fails
    # the test instead of hanging it.
    got: list[tuple[int, bytes] | None] = []
    t = threading.Thread(target=lambda: got.append(shim.forward(str(full_queue), b"x", timeout=60)), daemon=True)
    started = time.monotonic()
    t.start()
    t.join(10)
    assert not t.is_alive(), "forward blocked on a helper that does not accept"
    assert got == [None]
    assert time.monotonic() - started < 5


def test_the_executable_does_the_work_itself_when_the_helper_stopped_accepting(
    tmp_path: Path, full_queue: Path
) -> None:
    plugin = _plugin(tmp_path, full_queue)
    done = _exec(plugin, {"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.0.0"}')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"cniVersion": "1.0.0", "supportedVersions": ["1.0.0", "1.1.0"]}


def test_a_helper_that_took_the_call_and_went_silent_is_error_11(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "silent.sock"
    listener = bind(path)  # listening, never accepting, queue not full: the call is queued and never answered
    monkeypatch.setattr(shim, "REPLY_TIMEOUT", 0.2)
    monkeypatch.setattr(sys, "argv", ["nodeagent-bridge"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"cniVersion": "1.0.0"}')))
    try:
        with pytest.raises(SystemExit) as exited:
            shim.main(str(path), [])
    finally:
        listener.close()
    assert exited.value.code == 1
    err = json.loads(capsysbinary.readouterr().out)
    assert err["cniVersion"] == "1.0.0" and err["code"] == 11
    assert str(path) in err["msg"] and "did not answer within 0.2s" in err["msg"]
    assert "waiting for the helper's reply" in err["details"]


def test_bind_refuses_a_live_helper_and_replaces_a_stale_socket(tmp_path: Path) -> None:
    path = tmp_path / "h.sock"
    live = bind(path)
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        with pytest.raises(HelperError, match="another helper already listens"):
            bind(path)
    finally:
        live.close()
    again = bind(path)  # the file is still there, nobody listens: replaced
    again.close()
    with pytest.raises(HelperError, match="longer than"):
        bind(tmp_path / ("x" * 120))


@pytest.fixture
def kernel() -> FakeKernel:
    k = FakeKernel()
    k.add_netns(NETNS)
    return k


@pytest.fixture
def helper(tmp_path: Path, kernel: FakeKernel) -> Iterator[Helper]:
    def factory() -> Network:
        return FakeNetwork(kernel)

    h = Helper(tmp_path / "helper.sock", network_factory=factory)
    h.start()
    thread = threading.Thread(target=h.serve_forever, name="test-helper")
    thread.start()
    try:
        yield h
    finally:
        h.stop()
        thread.join(30)


def _plugin(tmp_path: Path, helper_socket: Path | None) -> Path:
    return install.install(tmp_path / "bin", helper_socket=helper_socket).path


def _exec(plugin: Path, env: dict[str, str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(plugin)], env=env, input=stdin, capture_output=True, cwd="/", timeout=60, check=False)


def _conf(tmp_path: Path) -> bytes:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "shimnet",
            "type": "nodeagent-bridge",
            "bridge": "nashim0",
            "ipam": {"ranges": [[{"subnet": "198.18.9.0/24"}]], "dataDir": str(tmp_path / "ipam")},
        }
    ).encode()


def test_the_executable_goes_through_the_helper(tmp_path: Path, helper: Helper, kernel: FakeKernel) -> None:
    plugin = _plugin(tmp_path, helper.path)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": NETNS, "CNI_IFNAME": "eth0"}
    done = _exec(plugin, env, _conf(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ips"][0]["address"] == "198.18.9.2/24"
    # The fake kernel only exists in this process: the helper did the work, not the subprocess.
    assert "eth0" in kernel.netns[NETNS].links
    failed = _exec(plugin, {"CNI_COMMAND": "ADD"}, _conf(tmp_path))
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["code"] == 4
    deleted = _exec(plugin, {**env, "CNI_COMMAND": "DEL"}, _conf(tmp_path))
    assert (deleted.returncode, deleted.stdout) == (0, b"")
    assert "eth0" not in kernel.netns[NETNS].links
    assert helper.served >= 3


def test_a_garbage_request_does_not_hurt_the_helper(tmp_path: Path, helper: Helper) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(helper.path))
        s.sendall(b"garbage")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(100) == b""
    plugin = _plugin(tmp_path, helper.path)
    done = _exec(plugin, {"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.0.0"}')
    assert json.loads(done.stdout)["supportedVersions"] == ["1.0.0", "1.1.0"]


def test_without_a_helper_the_executable_does_the_work_itself(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, tmp_path / "absent.sock")
    done = _exec(plugin, {"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.1.0"}')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"cniVersion": "1.1.0", "supportedVersions": ["1.0.0", "1.1.0"]}
    # A config error is answered in process too, with its code (no netlink needed to find it).
    failed = _exec(plugin, {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c", "CNI_IFNAME": "eth0"}, b"{}")
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["code"] == 7


def test_helper_stops_on_request_and_removes_its_socket(tmp_path: Path, kernel: FakeKernel) -> None:
    h = Helper(tmp_path / "stop.sock", network_factory=lambda: FakeNetwork(kernel))
    h.start()
    thread = threading.Thread(target=h.serve_forever)
    thread.start()
    assert (tmp_path / "stop.sock").exists()
    h.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert not (tmp_path / "stop.sock").exists()


def test_install_writes_a_self_contained_executable(tmp_path: Path) -> None:
    installed = install.install(tmp_path / "bin", helper_socket=tmp_path / "h.sock", interpreter="/usr/bin/python3")
    text = installed.path.read_text()
    assert text.startswith("#!/usr/bin/python3 -IS\n")
    assert os.access(installed.path, os.X_OK)
    root = str(Path(install.__file__).resolve().parents[1])
    assert f"sys.path[:0] = [{root!r}]" in text
    assert repr(str(tmp_path / "h.sock")) in text
    assert installed.helper_argv() == [
        "/usr/bin/python3",
        "-IS",
        str(installed.path),
        "helper",
        "--socket",
        str(tmp_path / "h.sock"),
    ]
    with pytest.raises(ValueError, match="too long"):
        install.render(interpreter="/" + "p" * 300, helper_socket=None, paths=[root])


def test_the_helper_command_line_starts_a_helper(tmp_path: Path) -> None:
    sock = tmp_path / "cli.sock"
    installed = install.install(tmp_path / "bin", helper_socket=sock)
    proc = subprocess.Popen(installed.helper_argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists()
        done = _exec(installed.path, {"CNI_COMMAND": "VERSION"}, b"")
        assert json.loads(done.stdout)["cniVersion"] == "1.1.0"
        assert Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [
            a.encode() for a in installed.helper_argv()
        ]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert b"cni helper listening" in out and b"cni request command=VERSION" in out
    assert not sock.exists()
