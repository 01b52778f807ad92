"""systemd's manager over D-Bus, the calls libcontainer's systemd cgroup driver makes (through go-systemd), and no more.

`SystemdBus` is the seam: StartTransientUnit, SetUnitProperties, StopUnit, ResetFailedUnit and the manager's Version.
`DBusSystemd` is the real one, on the system bus (/run/dbus/system_bus_socket) through jeepney, a pure-Python D-Bus
client; systemd also answers on its private socket, but the bus is what go-systemd's NewWithContext uses.

As go-systemd's job-waiting calls: the client subscribes (Manager.Subscribe: systemd only emits JobRemoved to
subscribers), matches JobRemoved before it sends the call (a fast job would otherwise finish unseen), and waits for
the signal that names the job the call returned; its result ("done", "failed", "canceled", ...) is the call's. One
connection per call: the agent makes a handful of units per pod, and a connection kept open would queue every
JobRemoved of the host between calls. Blocking; callers run it in a thread (asyncio.to_thread), as every cgroup
write here.

`bus_connection`, `bus_call` and `bus_property` are the connection code, shared with the node shutdown manager's
logind bus (nodeagent/nodeshutdown/logind.py).

A property is (name, (D-Bus signature, value)): jeepney's variant form, and go-systemd's Property{Name, Variant}.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from jeepney import DBusAddress, DBusErrorResponse, MatchRule, message_bus, new_method_call
from jeepney.io.blocking import DBusConnection, open_dbus_connection
from jeepney.wrappers import Properties, unwrap_msg

Property = tuple[str, tuple[str, object]]
SYSTEMD = DBusAddress(
    "/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1", interface="org.freedesktop.systemd1.Manager"
)
JOB_TIMEOUT = 30.0  # seconds for a unit job; a slice starts in milliseconds, the VM under emulation in ~1 s
UNIT_EXISTS = "org.freedesktop.systemd1.UnitExists"
NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"
SIGNAL_BUFFER = 256
NOT_LOADED = "org.freedesktop.DBus.Error.UnknownObject"


class SystemdError(Exception):
    """A call to systemd failed: `name` is the D-Bus error name ("" when the bus itself failed)."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name


class SystemdBus(Protocol):
    """The systemd manager calls the cgroup driver makes."""

    def start_transient_unit(self, name: str, properties: Sequence[Property]) -> None:
        """StartTransientUnit(name, "replace", properties, []) and wait for its job. SystemdError(UNIT_EXISTS) when
        a unit of that name is loaded already."""

    def set_unit_properties(self, name: str, properties: Sequence[Property]) -> None:
        """SetUnitProperties(name, runtime=true, properties)."""

    def stop_unit(self, name: str) -> None:
        """StopUnit(name, "replace") and wait for its job. SystemdError(NO_SUCH_UNIT) when none is loaded."""

    def reset_failed_unit(self, name: str) -> None:
        """ResetFailedUnit(name)."""

    def version(self) -> str:
        """The manager's Version property, e.g. "252.39-1~deb12u1"."""


def version_number(version: str) -> int:
    """The leading number of systemd's version string, as libcontainer's systemdVersion parses it ("252.39-1" ->
    252); 0 when there is none."""
    found = re.match(r"v?(\d+)", version.strip().strip('"'))
    return int(found.group(1)) if found else 0


def _error(call: str, unit: str, exc: DBusErrorResponse, service: str = "systemd") -> SystemdError:
    detail = exc.data[0] if exc.data and isinstance(exc.data[0], str) else str(exc.data)
    return SystemdError(f"{service} {call} {unit}: {exc.name}: {detail}", str(exc.name))


def _service(address: DBusAddress) -> str:
    """The short name errors give a peer: "systemd", "logind"."""
    return {SYSTEMD.bus_name: "systemd", "org.freedesktop.login1": "logind"}.get(address.bus_name or "", "D-Bus")


@contextlib.contextmanager
def bus_connection(bus: str = "SYSTEM", *, enable_fds: bool = False) -> Iterator[DBusConnection]:
    """A connection to `bus` (jeepney's "SYSTEM" or a unix:path= address), closed on leaving; SystemdError when
    there is no bus to connect to. `enable_fds` for calls that return file descriptors (logind's Inhibit)."""
    try:
        conn = open_dbus_connection(bus=bus, enable_fds=enable_fds)
    except (OSError, ValueError, KeyError) as exc:
        raise SystemdError(f"cannot connect to systemd over D-Bus ({bus} bus): {exc}") from exc
    try:
        yield conn
    finally:
        conn.close()


def bus_call(
    conn: DBusConnection,
    address: DBusAddress,
    member: str,
    signature: str,
    body: tuple[Any, ...],
    *,
    subject: str = "",
    timeout: float = JOB_TIMEOUT,
) -> Any:
    """One method call and its unwrapped reply; a D-Bus error or a dead connection as SystemdError."""
    try:
        reply = conn.send_and_get_reply(new_method_call(address, member, signature, body), timeout=timeout)
        return unwrap_msg(reply)
    except DBusErrorResponse as exc:
        raise _error(member, subject, exc, _service(address)) from exc
    except (OSError, TimeoutError) as exc:
        raise SystemdError(f"{_service(address)} {member} {subject}: {exc}") from exc


def bus_property(conn: DBusConnection, address: DBusAddress, name: str, *, timeout: float = JOB_TIMEOUT) -> object:
    """The value of one property of `address`'s interface (org.freedesktop.DBus.Properties.Get)."""
    try:
        reply = conn.send_and_get_reply(Properties(address).get(name), timeout=timeout)
        (variant,) = unwrap_msg(reply)
    except DBusErrorResponse as exc:
        raise _error("Get", name, exc, _service(address)) from exc
    except (OSError, TimeoutError) as exc:
        raise SystemdError(f"{_service(address)} Get {name}: {exc}") from exc
    return variant[1]


class DBusSystemd:
    """systemd on the system bus (jeepney, blocking). `bus` is jeepney's: "SYSTEM" or a unix:path= address."""

    def __init__(self, bus: str = "SYSTEM", *, job_timeout: float = JOB_TIMEOUT) -> None:
        self._bus = bus
        self._job_timeout = job_timeout

    def _connection(self) -> contextlib.AbstractContextManager[DBusConnection]:
        return bus_connection(self._bus)

    def _call(self, conn: DBusConnection, member: str, signature: str, body: tuple[Any, ...], unit: str) -> Any:
        return bus_call(conn, SYSTEMD, member, signature, body, subject=unit, timeout=self._job_timeout)

    def _job(self, member: str, signature: str, body: tuple[Any, ...], unit: str) -> None:
        with self._connection() as conn:
            rule = MatchRule(type="signal", interface=SYSTEMD.interface, member="JobRemoved", path=SYSTEMD.object_path)
            self._call(conn, "Subscribe", "", (), unit)
            try:
                unwrap_msg(conn.send_and_get_reply(message_bus.AddMatch(rule), timeout=self._job_timeout))
            except DBusErrorResponse as exc:
                raise _error("AddMatch", unit, exc) from exc
            # Every job's JobRemoved matches: keep enough of them that ours is not pushed out (jeepney keeps 1).
            with conn.filter(rule, bufsize=SIGNAL_BUFFER) as signals:
                (job,) = self._call(conn, member, signature, body, unit)
                while True:
                    try:
                        signal = conn.recv_until_filtered(signals, timeout=self._job_timeout)
                    except TimeoutError as exc:
                        raise SystemdError(
                            f"systemd {member} {unit}: no end of job {job} in {self._job_timeout} s"
                        ) from exc
                    _, removed_job, _, result = signal.body
                    if removed_job == job:
                        break
            if result != "done":
                raise SystemdError(f"systemd {member} {unit}: job {job} ended {result}", result)

    def start_transient_unit(self, name: str, properties: Sequence[Property]) -> None:
        self._job("StartTransientUnit", "ssa(sv)a(sa(sv))", (name, "replace", list(properties), []), name)

    def set_unit_properties(self, name: str, properties: Sequence[Property]) -> None:
        with self._connection() as conn:
            self._call(conn, "SetUnitProperties", "sba(sv)", (name, True, list(properties)), name)

    def stop_unit(self, name: str) -> None:
        self._job("StopUnit", "ss", (name, "replace"), name)

    def reset_failed_unit(self, name: str) -> None:
        with self._connection() as conn:
            self._call(conn, "ResetFailedUnit", "s", (name,), name)

    def version(self) -> str:
        with self._connection() as conn:
            return str(bus_property(conn, SYSTEMD, "Version", timeout=self._job_timeout))

    def kill_unit(self, name: str, who: str, signal: int) -> None:
        """KillUnit(name, who, signal): systemd sends the signal to the unit's processes ("all", "main")."""
        with self._connection() as conn:
            self._call(conn, "KillUnit", "ssi", (name, who, signal), name)
