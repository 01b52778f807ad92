"""systemd-logind over D-Bus, the calls upstream's node shutdown manager makes (pkg/kubelet/nodeshutdown/systemd),
and no more.

`LogindBus` is the seam the manager talks to; `DBusLogind` is the real one, one connection to the system bus
(jeepney, through the connection code of kuberuntime/systemd_dbus.py) with file descriptor passing on, since
logind's Inhibit answers with the lock as a descriptor. As upstream's DBusCon:

- the current delay is logind's InhibitDelayMaxUSec property (microseconds);
- a longer one is asked for by writing /etc/systemd/logind.conf.d/99-kubelet.conf (`InhibitDelayMaxSec=<seconds>`)
  and reloading logind with SIGHUP through systemd (KillUnit systemd-logind.service, all, 1);
- the lock is Inhibit("shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay"), the same
  who/why/mode as upstream, so `systemd-inhibit --list` shows what an operator of a kubelet node expects; it is held
  by keeping the descriptor open and released by closing it;
- shutdown is seen in logind's PrepareForShutdown(bool) signal: true when a shutdown starts, false when it was
  cancelled.

Blocking, as the rest of the D-Bus code; the manager runs each call in a thread. One caller at a time: the signal
filter and the calls share the connection (a signal that arrives during a call waits in the filter's queue).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from pathlib import Path
from typing import Any, NewType, Protocol

from jeepney import DBusAddress, MatchRule, message_bus
from jeepney.io.blocking import DBusConnection

from nodeagent.kuberuntime.systemd_dbus import SYSTEMD, SystemdError, bus_call, bus_connection, bus_property

log = logging.getLogger(__name__)

InhibitLock = NewType("InhibitLock", int)  # the lock's file descriptor

LOGIND = DBusAddress(
    "/org/freedesktop/login1", bus_name="org.freedesktop.login1", interface="org.freedesktop.login1.Manager"
)
LOGIND_CONF_DIR = Path("/etc/systemd/logind.conf.d")
KUBELET_LOGIND_CONF = "99-kubelet.conf"  # upstream's name: a host that ran the kubelet keeps one drop-in
LOGIND_UNIT = "systemd-logind.service"
SIGHUP = 1
INHIBIT_WHAT, INHIBIT_WHO, INHIBIT_MODE = "shutdown", "kubelet", "delay"
INHIBIT_WHY = "Kubelet needs time to handle node shutdown"
CALL_TIMEOUT = 30.0
SIGNAL_BUFFER = 16


class LogindBus(Protocol):
    """The logind calls the node shutdown manager makes; SystemdError when one fails."""

    def current_inhibit_delay(self) -> float:
        """logind's InhibitDelayMaxUSec, in seconds."""

    def override_inhibit_delay(self, seconds: float) -> None:
        """Write the drop-in that sets InhibitDelayMaxSec (logind reads it on its next reload)."""

    def reload_logind_conf(self) -> None:
        """Make logind read its configuration again (SIGHUP)."""

    def inhibit_shutdown(self) -> InhibitLock:
        """Take a delay inhibitor lock for shutdown."""

    def release_inhibit_lock(self, lock: InhibitLock) -> None:
        """Let the shutdown go on (close the lock's descriptor)."""

    def monitor_shutdown(self) -> None:
        """Subscribe to PrepareForShutdown; `next_shutdown_event` reads what comes after."""

    def next_shutdown_event(self, timeout: float) -> bool | None:
        """The next PrepareForShutdown's argument, or None when none came within `timeout` seconds. SystemdError
        when the bus went away (the manager connects again)."""

    def close(self) -> None:
        """Close the connection (a lock taken stays held: its descriptor is ours)."""


def logind_drop_in(seconds: float) -> str:
    """The drop-in's text: whole seconds, as upstream's %.0f."""
    return (
        f"# nodeagent (as the kubelet): time for the node shutdown manager\n[Login]\nInhibitDelayMaxSec={seconds:.0f}\n"
    )


class DBusLogind:
    """logind on the system bus. Connects when made (SystemdError when there is no bus): a manager makes one per
    watch, as upstream makes a DBusCon per start."""

    def __init__(self, bus: str = "SYSTEM", *, conf_dir: Path = LOGIND_CONF_DIR, timeout: float = CALL_TIMEOUT) -> None:
        self._stack = contextlib.ExitStack()
        self._conn: DBusConnection = self._stack.enter_context(bus_connection(bus, enable_fds=True))
        self._conf_dir = conf_dir
        self._timeout = timeout
        self._signals: collections.deque[Any] | None = None
        self._rule = MatchRule(
            type="signal", interface=LOGIND.interface, member="PrepareForShutdown", path=LOGIND.object_path
        )

    def current_inhibit_delay(self) -> float:
        value = bus_property(self._conn, LOGIND, "InhibitDelayMaxUSec", timeout=self._timeout)
        if not isinstance(value, int):
            raise SystemdError(f"InhibitDelayMaxUSec from logind is not a uint64 as expected: {value!r}")
        return value / 1e6

    def override_inhibit_delay(self, seconds: float) -> None:
        path = self._conf_dir / KUBELET_LOGIND_CONF
        try:
            self._conf_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.write_text(logind_drop_in(seconds))
            path.chmod(0o644)
        except OSError as exc:
            raise SystemdError(f"failed writing logind shutdown inhibit override file {path}: {exc}") from exc

    def reload_logind_conf(self) -> None:
        bus_call(
            self._conn,
            SYSTEMD,
            "KillUnit",
            "ssi",
            (LOGIND_UNIT, "all", SIGHUP),
            subject=LOGIND_UNIT,
            timeout=self._timeout,
        )

    def inhibit_shutdown(self) -> InhibitLock:
        body = (INHIBIT_WHAT, INHIBIT_WHO, INHIBIT_WHY, INHIBIT_MODE)
        (fd,) = bus_call(self._conn, LOGIND, "Inhibit", "ssss", body, subject=INHIBIT_WHAT, timeout=self._timeout)
        return InhibitLock(fd.to_raw_fd())

    def release_inhibit_lock(self, lock: InhibitLock) -> None:
        try:
            os.close(lock)
        except OSError as exc:
            raise SystemdError(f"unable to close systemd inhibitor lock: {exc}") from exc

    def monitor_shutdown(self) -> None:
        try:
            self._conn.send_and_get_reply(message_bus.AddMatch(self._rule), timeout=self._timeout)
        except Exception as exc:  # a D-Bus error or a dead connection alike: the watch cannot start
            raise SystemdError(f"logind AddMatch PrepareForShutdown: {exc}") from exc
        self._signals = self._stack.enter_context(self._conn.filter(self._rule, bufsize=SIGNAL_BUFFER))

    def _add_match(self) -> None:
        try:
            self._conn.send_and_get_reply(message_bus.AddMatch(self._rule), timeout=self._timeout)
        except Exception as exc:  # a D-Bus error or a dead connection alike: the watch cannot start
            raise SystemdError(f"logind AddMatch PrepareForShutdown: {exc}") from exc

    def next_shutdown_event(self, timeout: float) -> bool | None:
        if self._signals is None:
            raise SystemdError("PrepareForShutdown is not monitored")
        try:
            signal = self._conn.recv_until_filtered(self._signals, timeout=timeout)
        except TimeoutError:
            return None
        except OSError as exc:
            raise SystemdError(f"the system bus went away: {exc}") from exc
        if not signal.body or not isinstance(signal.body[0], bool):
            # As upstream: logged and skipped, the watch goes on.
            log.error("failed obtaining shutdown event, PrepareForShutdown was not a bool body=%r", signal.body)
            return None
        return signal.body[0]

    def close(self) -> None:
        self._stack.close()
