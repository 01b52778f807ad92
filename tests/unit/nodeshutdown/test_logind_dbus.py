"""DBusLogind's wire side against a real dbus-daemon (a private bus of the test's own) and a stand-in for logind
and systemd on it: the property read, the drop-in and the reload call, Inhibit's lock passed as a descriptor and
let go by closing it, and PrepareForShutdown through the match rule. The stand-in answers as logind's D-Bus API
documents; the real logind is checked in the VM (tests/integration/test_vm_systemd_cgroups.py)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jeepney import MessageType, message_bus, new_error, new_method_return, new_signal
from jeepney.io.blocking import DBusConnection, open_dbus_connection

from nodeagent.kuberuntime.systemd_dbus import SystemdError
from nodeagent.nodeshutdown.logind import KUBELET_LOGIND_CONF, LOGIND, DBusLogind


@dataclass
class StandIn:
    """logind and systemd's manager on one connection: InhibitDelayMaxUSec (what the drop-in says once
    systemd-logind.service got SIGHUP), Inhibit with a pipe's write end as the lock, KillUnit recorded."""

    conn: DBusConnection
    conf_dir: Path
    delay_usec: int = 5_000_000
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    locks: list[int] = field(default_factory=list)  # the read ends: EOF once the client closed its lock
    stop: threading.Event = field(default_factory=threading.Event)

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.conn.receive(timeout=0.05)
            except TimeoutError:
                continue
            except OSError:
                return
            if msg.header.message_type != MessageType.method_call:
                continue
            member = msg.header.fields.get(3)  # HeaderFields.member
            self.calls.append((str(member), tuple(msg.body)))
            if member == "Get" and msg.body[1] == "InhibitDelayMaxUSec":
                self.conn.send(new_method_return(msg, "v", (("t", self.delay_usec),)))
            elif member == "Inhibit":
                read, write = os.pipe()
                self.locks.append(read)
                self.conn.send(new_method_return(msg, "h", (write,)))
                os.close(write)
            elif member == "KillUnit":
                text = (self.conf_dir / KUBELET_LOGIND_CONF).read_text()
                seconds = int(text.split("InhibitDelayMaxSec=")[1].split()[0])
                self.delay_usec = seconds * 1_000_000
                self.conn.send(new_method_return(msg))
            else:
                self.conn.send(new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod"))

    def prepare_for_shutdown(self, active: bool) -> None:
        self.conn.send(new_signal(LOGIND, "PrepareForShutdown", "b", (active,)))


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[str]:
    socket = tmp_path / "bus"
    daemon = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address=unix:path={socket}", "--print-address"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # "Failed to set fd limit" when not allowed to raise it: harmless
        text=True,
    )
    try:
        assert daemon.stdout is not None
        address = daemon.stdout.readline().strip()
        assert address.startswith("unix:path="), address
        yield address
    finally:
        daemon.terminate()
        daemon.wait(10)
        if daemon.stdout is not None:
            daemon.stdout.close()


@pytest.fixture
def stand_in(bus: str, tmp_path: Path) -> Iterator[StandIn]:
    conn = open_dbus_connection(bus=bus, enable_fds=True)
    for name in ("org.freedesktop.login1", "org.freedesktop.systemd1"):
        conn.send_and_get_reply(message_bus.RequestName(name), timeout=5)
    served = StandIn(conn, tmp_path / "logind.conf.d")
    thread = threading.Thread(target=served.serve, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.stop.set()
        thread.join(5)
        conn.close()
        for fd in served.locks:
            os.close(fd)


def test_delay_drop_in_reload_lock_and_signals(bus: str, stand_in: StandIn) -> None:
    logind = DBusLogind(bus, conf_dir=stand_in.conf_dir, timeout=5)
    try:
        assert logind.current_inhibit_delay() == 5.0
        logind.override_inhibit_delay(30.0)
        assert (stand_in.conf_dir / KUBELET_LOGIND_CONF).read_text().endswith("[Login]\nInhibitDelayMaxSec=30\n")
        logind.reload_logind_conf()
        assert ("KillUnit", ("systemd-logind.service", "all", 1)) in stand_in.calls
        assert logind.current_inhibit_delay() == 30.0

        logind.monitor_shutdown()
        lock = logind.inhibit_shutdown()
        assert (
            "Inhibit",
            ("shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay"),
        ) in stand_in.calls
        [held] = stand_in.locks
        os.set_blocking(held, False)
        with pytest.raises(BlockingIOError):  # the lock is open: nothing to read, no EOF
            os.read(held, 1)

        assert logind.next_shutdown_event(0.05) is None
        stand_in.prepare_for_shutdown(True)
        assert logind.next_shutdown_event(5) is True
        logind.release_inhibit_lock(lock)
        assert os.read(held, 1) == b""  # closed on our side: logind sees the lock go
        stand_in.prepare_for_shutdown(False)
        assert logind.next_shutdown_event(5) is False
    finally:
        logind.close()


def test_no_bus_is_a_systemd_error(tmp_path: Path) -> None:
    with pytest.raises(SystemdError, match="cannot connect to systemd over D-Bus"):
        DBusLogind(f"unix:path={tmp_path / 'none'}")


def test_a_bus_that_goes_away_ends_the_watch(bus: str, stand_in: StandIn) -> None:
    logind = DBusLogind(bus, conf_dir=stand_in.conf_dir, timeout=5)
    try:
        logind.monitor_shutdown()
        logind._conn.sock.shutdown(2)  # as a dbus-daemon that stopped: the socket reads EOF
        with pytest.raises(SystemdError):
            logind.next_shutdown_event(5)
    finally:
        logind.close()
