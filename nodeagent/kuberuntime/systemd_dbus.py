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


def _error(call: str, unit: str, exc: DBusErrorResponse) -> SystemdError:
    detail = exc.data[0] if exc.data and isinstance(exc.data[0], str) else str(exc.data)
    return SystemdError(f"systemd {call} {unit}: {exc.name}: {detail}", str(exc.name))


class DBusSystemd:
    """systemd on the system bus (jeepney, blocking). `bus` is jeepney's: "SYSTEM" or a unix:path= address."""

    def __init__(self, bus: str = "SYSTEM", *, job_timeout: float = JOB_TIMEOUT) -> None:
        self._bus = bus
        self._job_timeout = job_timeout

    @contextlib.contextmanager
    def _connection(self) -> Iterator[DBusConnection]:
        try:
            conn = open_dbus_connection(bus=self._bus)
        except (OSError, ValueError, KeyError) as exc:
            raise SystemdError(f"cannot connect to systemd over D-Bus ({self._bus} bus): {exc}") from exc
        try:
            yield conn
        finally:
            conn.close()

    def _call(self, conn: DBusConnection, member: str, signature: str, body: tuple[Any, ...], unit: str) -> Any:
        try:
            reply = conn.send_and_get_reply(
                new_method_call(SYSTEMD, member, signature, body), timeout=self._job_timeout
            )
            return unwrap_msg(reply)
        except DBusErrorResponse as exc:
            raise _error(member, unit, exc) from exc
        except (OSError, TimeoutError) as exc:
            raise SystemdError(f"systemd {member} {unit}: {exc}") from exc

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
            try:
                reply = conn.send_and_get_reply(Properties(SYSTEMD).get("Version"), timeout=self._job_timeout)
                (variant,) = unwrap_msg(reply)
            except DBusErrorResponse as exc:
                raise _error("Get", "Version", exc) from exc
            except (OSError, TimeoutError) as exc:
                raise SystemdError(f"systemd Get Version: {exc}") from exc
        return str(variant[1])
