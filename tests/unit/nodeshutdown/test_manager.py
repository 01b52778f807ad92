"""The node shutdown manager against a fake logind bus (`FakeLogind`, behind `LogindBus`): the periods and groups
as upstream computes them, the start (inhibit delay raised or not, the lock), a shutdown (admission, Ready, the
pods killed by group with their grace periods, the lock released after), a cancelled shutdown, and a bus that
goes away. The real bus is checked in the VM (tests/integration/test_vm_systemd_cgroups.py)."""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from nodeagent.config import ShutdownGracePeriodByPodPriority as P
from nodeagent.config.kubelet_config import KubeletConfiguration
from nodeagent.kuberuntime.systemd_dbus import SystemdError
from nodeagent.nodeshutdown.logind import InhibitLock, logind_drop_in
from nodeagent.nodeshutdown.manager import (
    NODE_SHUTTING_DOWN,
    STATE_FILE,
    NodeShutdownManager,
    ShutdownInputs,
    grace_period_for,
    group_by_priority,
    migrate_config,
    period_requested,
    shutdown_periods,
)
from nodeagent.nodeshutdown.metrics import ShutdownMetrics
from tests.unit.fakeclock import FakeClock

CRITICAL = 2_000_000_000


@dataclass
class FakeLogind:
    """logind as the manager sees it: the delay (and what a reload makes of it), locks as numbers, and a queue of
    PrepareForShutdown values (an exception in it: the bus went away)."""

    delay: float = 0.0
    delay_after_reload: float | None = None
    calls: list[Any] = field(default_factory=list)
    held: set[int] = field(default_factory=set)
    events: queue.Queue[bool | Exception] = field(default_factory=queue.Queue)
    next_lock: int = 100
    closed: bool = False

    def current_inhibit_delay(self) -> float:
        self.calls.append("current")
        return self.delay

    def override_inhibit_delay(self, seconds: float) -> None:
        self.calls.append(("override", seconds))

    def reload_logind_conf(self) -> None:
        self.calls.append("reload")
        if self.delay_after_reload is not None:
            self.delay = self.delay_after_reload

    def inhibit_shutdown(self) -> InhibitLock:
        self.next_lock += 1
        self.held.add(self.next_lock)
        self.calls.append(("inhibit", self.next_lock))
        return InhibitLock(self.next_lock)

    def release_inhibit_lock(self, lock: InhibitLock) -> None:
        self.calls.append(("release", lock))
        self.held.discard(lock)

    def monitor_shutdown(self) -> None:
        self.calls.append("monitor")

    def next_shutdown_event(self, timeout: float) -> bool | None:
        try:
            event = self.events.get(timeout=0.01)  # the real one waits `timeout`; tests need not
        except queue.Empty:
            return None
        if isinstance(event, Exception):
            raise event
        return event

    def close(self) -> None:
        self.closed = True


def pod(uid: str, priority: int | None = None, grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"uid": uid, "namespace": "default", "name": uid}, "spec": spec}


@dataclass
class Kubelet:
    """The kubelet's side: active pods, the kills it was asked for, which pods are down."""

    pods: list[dict[str, Any]]
    kills: list[tuple[str, int]] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    kill_downs: bool = True  # a killed pod is down at once
    status_syncs: int = 0

    def inputs(self) -> ShutdownInputs:
        return ShutdownInputs(
            active_pods=lambda: [p for p in self.pods if p["metadata"]["uid"] not in {u for u, _ in self.kills}],
            kill_pod=self.kill,
            pod_killed=lambda p: p["metadata"]["uid"] in self.down,
            sync_node_status=self.sync,
        )

    def kill(self, p: dict[str, Any], grace: int) -> None:
        self.kills.append((p["metadata"]["uid"], grace))
        if self.kill_downs:
            self.down.add(p["metadata"]["uid"])

    async def sync(self) -> None:
        self.status_syncs += 1


def manager(
    bus: FakeLogind | None, periods: Sequence[P], clock: FakeClock | None = None, state_dir: Path | None = None
) -> tuple[NodeShutdownManager, list[tuple[str, str, str]]]:
    events: list[tuple[str, str, str]] = []

    def connect() -> FakeLogind:
        if bus is None:
            raise SystemdError("cannot connect to systemd over D-Bus (SYSTEM bus): [Errno 2] No such file or directory")
        return bus

    m = NodeShutdownManager(
        tuple(periods),
        connect,
        clock or FakeClock(),
        record_node_event=lambda *e: events.append(e),
        state_dir=state_dir,
    )
    return m, events


TWO_GROUPS = (P(priority=0, shutdown_grace_period_seconds=20), P(priority=CRITICAL, shutdown_grace_period_seconds=10))


# The periods and the groups.


@pytest.mark.parametrize(
    ("grace", "critical", "expected"),
    [
        (30, 10, TWO_GROUPS),
        (30, 0, (P(priority=0, shutdown_grace_period_seconds=30), P(priority=CRITICAL))),
        (10, 10, (P(priority=0), P(priority=CRITICAL, shutdown_grace_period_seconds=10))),
        (0, 0, ()),
        (0, 5, ()),  # upstream: nothing without shutdownGracePeriod
        (5, 10, ()),  # more for critical pods than in all: nothing (validation refuses it first)
    ],
)
def test_migrate_config(grace: int, critical: int, expected: tuple[P, ...]) -> None:
    assert migrate_config(timedelta(seconds=grace), timedelta(seconds=critical)) == expected


def test_the_default_config_has_no_periods_so_no_manager() -> None:
    assert shutdown_periods(KubeletConfiguration()) == ()


def test_the_by_priority_list_wins_sorted_low_to_high() -> None:
    listed = (P(priority=CRITICAL, shutdown_grace_period_seconds=5), P(priority=-10, shutdown_grace_period_seconds=7))
    config = KubeletConfiguration(shutdown_grace_period_by_pod_priority=listed)
    assert shutdown_periods(config) == (listed[1], listed[0])
    assert period_requested(shutdown_periods(config)) == 12
    two = KubeletConfiguration(
        shutdown_grace_period=timedelta(seconds=30), shutdown_grace_period_critical_pods=timedelta(seconds=10)
    )
    assert shutdown_periods(two) == TWO_GROUPS


GROUPS = tuple(P(priority=p, shutdown_grace_period_seconds=p) for p in (1, 10, 100, 1000))


@pytest.mark.parametrize(
    ("priority", "group"),
    [
        (None, 1),  # no priority is 0: below the lowest goes to the lowest
        (-5, 1),
        (1, 1),
        (9, 1),  # between two: the lower
        (10, 10),
        (150, 100),
        (1000, 1000),
        (5000, 1000),  # above the highest: the highest
    ],
)
def test_group_by_priority(priority: int | None, group: int) -> None:
    groups = group_by_priority(GROUPS, [pod("p", priority)])
    assert [g.priority for g, pods in groups if pods] == [group]
    assert [g.priority for g, _ in groups] == [1, 10, 100, 1000]  # every group, even empty


@pytest.mark.parametrize(
    ("own", "group", "expected"), [(None, 20, 20), (5, 20, 5), (20, 20, 20), (30, 20, 20), (0, 20, 0)]
)
def test_a_pods_own_shorter_grace_period_wins(own: int | None, group: int, expected: int) -> None:
    assert grace_period_for(pod("p", grace=own), group) == expected


def test_the_logind_drop_in() -> None:
    assert logind_drop_in(30.0).endswith("[Login]\nInhibitDelayMaxSec=30\n")


# Start.


async def test_start_with_a_long_enough_delay_takes_the_lock_and_changes_nothing() -> None:
    bus = FakeLogind(delay=30.0)
    m, _ = manager(bus, TWO_GROUPS)
    assert await m.start(Kubelet([]).inputs())
    assert bus.calls == ["current", "monitor", ("inhibit", 101)]
    assert bus.held == {101}
    assert m.shutdown_status() is None
    assert m.admit(pod("p")) is None


async def test_a_short_delay_is_raised_through_the_drop_in_and_a_reload() -> None:
    bus = FakeLogind(delay=5.0, delay_after_reload=30.0)
    m, _ = manager(bus, TWO_GROUPS)
    assert await m.start(Kubelet([]).inputs())
    assert bus.calls == ["current", ("override", 30.0), "reload", "current", "monitor", ("inhibit", 101)]


async def test_a_delay_logind_keeps_short_fails_the_start_after_five_reads(caplog: pytest.LogCaptureFixture) -> None:
    bus = FakeLogind(delay=5.0)
    clock = FakeClock()
    m, _ = manager(bus, TWO_GROUPS, clock)

    async def advance() -> None:
        while True:
            await asyncio.sleep(0.001)
            await clock.advance(1.0)

    ticking = asyncio.ensure_future(advance())
    try:
        assert not await m.start(Kubelet([]).inputs())
    finally:
        ticking.cancel()
    assert bus.calls == ["current", ("override", 30.0), "reload", *["current"] * 5]
    assert bus.held == set() and bus.closed
    assert (
        "failed to start node shutdown manager error=node shutdown manager was timed out after 5 attempts waiting "
        "for logind InhibitDelayMaxSec to update to 30s (ShutdownGracePeriod), current value is 5s"
    ) in caplog.text


async def test_no_system_bus_logs_and_the_agent_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    m, _ = manager(None, TWO_GROUPS)
    assert not await m.start(Kubelet([]).inputs())
    assert "failed to start node shutdown manager error=cannot connect to systemd over D-Bus" in caplog.text
    assert m.admit(pod("p")) is None and m.shutdown_status() is None


# A shutdown.


async def test_a_shutdown_kills_pods_by_group_then_releases_the_lock(tmp_path: Path) -> None:
    bus = FakeLogind(delay=30.0)
    m, events = manager(bus, TWO_GROUPS, state_dir=tmp_path)
    kubelet = Kubelet(
        [
            pod("critical", CRITICAL),
            pod("web"),
            pod("quick", 100, grace=3),
            pod("slow", grace=60),
            pod("node", CRITICAL + 1000),
        ]
    )
    seen_during: list[Any] = []
    kill = kubelet.kill

    def kill_and_look(p: dict[str, Any], grace: int) -> None:
        seen_during.append((m.admit(pod("new")), m.shutdown_status(), tuple(sorted(bus.held))))
        kill(p, grace)

    kubelet.kill = kill_and_look  # type: ignore[method-assign]
    assert await m.start(kubelet.inputs())
    await m.handle_event(bus, True)
    # Non-critical first, each with the group's 20 s or its own shorter period; then the critical ones with 10 s.
    assert kubelet.kills == [("web", 20), ("quick", 3), ("slow", 20), ("critical", 10), ("node", 10)]
    assert set(seen_during) == {
        (("NodeShutdown", "Pod was rejected as the node is shutting down."), NODE_SHUTTING_DOWN, (101,))
    }
    assert bus.held == set() and bus.calls[-1] == ("release", 101)
    assert events == [("Normal", "NodeShutdown", "Shutdown manager detected shutdown event")]
    await asyncio.sleep(0)
    assert kubelet.status_syncs == 1
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["startTime"] != "0001-01-01T00:00:00Z" and state["endTime"] != "0001-01-01T00:00:00Z"


async def test_a_group_waits_for_its_pods_at_most_its_seconds() -> None:
    bus = FakeLogind(delay=30.0)
    clock = FakeClock()
    m, _ = manager(bus, TWO_GROUPS, clock)
    kubelet = Kubelet([pod("web"), pod("critical", CRITICAL)], kill_downs=False)
    assert await m.start(kubelet.inputs())
    handling = asyncio.ensure_future(m.handle_event(bus, True))
    await asyncio.sleep(0.01)
    assert kubelet.kills == [("web", 20)]  # the critical pod waits for the first group
    await clock.advance(19.9)
    assert kubelet.kills == [("web", 20)]
    kubelet.down.add("web")  # down before the 20 s: the next group starts at once
    await clock.advance(0.1)
    await asyncio.sleep(0.01)
    assert kubelet.kills == [("web", 20), ("critical", 10)]
    assert bus.held == {101}
    for _ in range(101):  # the critical pod never goes down: 10 s, then the lock goes anyway
        await clock.advance(0.1)
    await asyncio.wait_for(handling, 1)
    assert bus.held == set()


async def test_a_cancelled_shutdown_admits_again_and_takes_a_new_lock_first() -> None:
    bus = FakeLogind(delay=30.0)
    m, events = manager(bus, TWO_GROUPS)
    assert await m.start(Kubelet([]).inputs())
    m._shutting_down = True  # as after PrepareForShutdown(true) with the lock still held (logind cancels it then)
    await m.handle_event(bus, False)
    assert m.admit(pod("new")) is None and m.shutdown_status() is None
    assert bus.calls[-2:] == [("inhibit", 102), ("release", 101)]
    assert bus.held == {102}
    assert events == [("Normal", "NodeShutdown", "Shutdown manager detected shutdown cancellation")]


async def test_events_come_from_the_bus_and_a_lost_bus_is_watched_again() -> None:
    bus = FakeLogind(delay=30.0)
    clock = FakeClock()
    m, _ = manager(bus, TWO_GROUPS, clock)
    kubelet = Kubelet([pod("web")])
    assert await m.start(kubelet.inputs())
    running = asyncio.ensure_future(m.run())
    try:
        bus.events.put(True)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if bus.held == set():
                break
        assert kubelet.kills == [("web", 20)] and bus.held == set()
        bus.events.put(False)  # cancelled: the lock again
        for _ in range(200):
            await asyncio.sleep(0.01)
            if bus.held:
                break
        assert bus.held == {102}
        bus.events.put(SystemdError("the system bus went away"))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if bus.closed:
                break
        assert bus.closed and bus.held == {102}  # the lock outlives the connection, as upstream's
        bus.closed = False
        await clock.advance(1.0)  # reconnected after 1 s: delay read, watched, a new lock, then the old one let go
        for _ in range(200):
            await asyncio.sleep(0.01)
            if 103 in bus.held:
                break
        assert bus.held == {103}
        assert bus.calls[-4:] == ["current", "monitor", ("inhibit", 103), ("release", 102)]
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert bus.held == set() and bus.closed


def _gauges(metrics: ShutdownMetrics) -> tuple[float | None, float | None]:
    return (
        metrics.registry.get_sample_value("kubelet_graceful_shutdown_start_time_seconds"),
        metrics.registry.get_sample_value("kubelet_graceful_shutdown_end_time_seconds"),
    )


async def test_the_gauges_follow_the_state_file_as_upstream_sets_them(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text('{"startTime": "2026-11-28T10:00:00Z", "endTime": "2026-11-28T10:00:20Z"}')
    bus = FakeLogind(delay=30.0)
    clock = FakeClock(100.0)
    m, _ = manager(bus, TWO_GROUPS, clock, state_dir=tmp_path)
    m.metrics = ShutdownMetrics()
    assert await m.start(Kubelet([]).inputs())
    assert _gauges(m.metrics) == (1795860000.0, 1795860020.0)  # read back at start (upstream's setMetrics)
    await m.handle_event(bus, True)
    assert _gauges(m.metrics) == (clock.wall().timestamp(), clock.wall().timestamp())  # no fake time passed
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state == {"startTime": "2026-01-01T00:01:40Z", "endTime": "2026-01-01T00:01:40Z"}
