"""Memory threshold notifiers (nodeagent.memorynotifier) and the eviction manager's loop around them.

- the basis of the usage threshold read from a summary (node memory; the pods container against allocatable);
- v1: the registration written to cgroup.event_control, the re-arm on each update, upstream's message on a crossing;
- v2: PSI triggers tried in order (a refused window falls back), the POLLPRI wake-up through the waiter;
- which notifiers a tree gets (recorded v1 and v2 layouts);
- the manager: a notification runs a cycle at once, the notifiers are re-armed at most every 10 s, stopped at the end;
- contract tests of the fake `Kernel` against the real one: a real v1 memcg threshold crossed by a real child
  process in a cgroup made for the test (this machine is v1), and a real PSI trigger armed on /proc/pressure/memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import errno
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from eviction.signals import Signal
from eviction.thresholds import Threshold, ThresholdValue
from nodeagent.config import KubeletConfiguration
from nodeagent.evictionmanager import EvictionInputs, EvictionManager, configured_notifiers, eviction_config
from nodeagent.memorynotifier import (
    LinuxKernel,
    MemcgThresholdNotifier,
    MemoryBasis,
    MemoryThresholdNotifier,
    NotifierError,
    PressureNotifier,
    PressureThresholdNotifier,
    PriorityWaiter,
    memory_basis,
    memory_notifiers,
)
from nodeagent.stats.types import ContainerStats, MemoryStats, NodeStats, Summary
from tests.unit.fakeclock import FakeClock

MI = 1 << 20
GI = 1 << 30
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

HARD = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Decimal(100 * MI), text="100Mi"))
SOFT = Threshold(
    Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Decimal(GI), text="1Gi"), grace_period=timedelta(seconds=30)
)
ALLOCATABLE = Threshold(Signal.ALLOCATABLE_MEMORY_AVAILABLE, ThresholdValue(quantity=Decimal(100 * MI), text="100Mi"))
NODEFS = Threshold(Signal.NODEFS_AVAILABLE, ThresholdValue(percentage=0.1))


def summary(
    *, usage: int | None = 3 * GI, working_set: int | None = 2 * GI, available: int | None = 2 * GI, pods: int = GI
) -> Summary:
    return Summary(
        node=NodeStats(
            node_name="n",
            start_time=T0,
            memory=MemoryStats(time=T0, usage_bytes=usage, working_set_bytes=working_set, available_bytes=available),
            system_containers=(
                ContainerStats(
                    name="pods",
                    start_time=T0,
                    memory=MemoryStats(time=T0, usage_bytes=pods + 256 * MI, working_set_bytes=pods),
                ),
            ),
        )
    )


# --- the fd layer, faked --------------------------------------------------------------------------------------


class EventfdWaiter:
    """A waiter the test makes ready by writing its eventfd (the kernel would, on POLLPRI)."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.closed = False
        self.drained = 0

    def fileno(self) -> int:
        return self.fd

    def drain(self) -> None:
        # As the kernel's PSI event, one-shot: the loop's readiness check consumed it; nothing is left to read
        # back as "ready" (the VM showed that: a re-poll after the wake-up found no event, 0 of 11 times).
        self.drained += 1
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.fd)

    def fire(self) -> None:
        os.eventfd_write(self.fd, 1)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
            self.closed = True


@dataclass
class FakeKernel:
    """Files by path (present or not), writes recorded by path, refusals by path; eventfds are real, so the event
    loop can watch them."""

    files: set[str]
    refuse: dict[str, list[int]] = field(default_factory=dict)  # path -> errno per write, in order (0: accept)
    values: dict[str, int] = field(default_factory=dict)  # path -> the number the file holds
    writes: list[tuple[str, bytes]] = field(default_factory=list)
    opened: dict[int, str] = field(default_factory=dict)
    closed: list[int] = field(default_factory=list)
    eventfds: list[int] = field(default_factory=list)
    waiters: list[EventfdWaiter] = field(default_factory=list)
    _next: int = 1000

    def open(self, path: str, flags: int) -> int:
        del flags
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        self._next += 1
        self.opened[self._next] = path
        return self._next

    def write(self, fd: int, data: bytes) -> None:
        path = self.opened[fd]
        codes = self.refuse.get(path) or [0]
        code = codes.pop(0) if len(codes) > 1 else codes[0]
        if code:
            raise OSError(code, os.strerror(code))
        self.writes.append((path, data))

    def close(self, fd: int) -> None:
        self.closed.append(fd)
        if fd in self.eventfds:
            os.close(fd)

    def eventfd(self) -> int:
        fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.eventfds.append(fd)
        return fd

    def drain(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(fd)

    def read_value(self, fd: int) -> int:
        return self.values.get(self.opened[fd], 0)

    def priority_waiter(self, fd: int) -> PriorityWaiter:
        del fd
        waiter = EventfdWaiter()
        self.waiters.append(waiter)
        return waiter


async def turns(n: int = 50) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


# --- the basis -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("threshold", "read", "allocatable", "expected"),
    [
        (HARD, summary(), None, MemoryBasis(capacity=4 * GI, usage=3 * GI, working_set=2 * GI)),
        (ALLOCATABLE, summary(pods=GI), 3 * GI, MemoryBasis(capacity=3 * GI, usage=GI + 256 * MI, working_set=GI)),
    ],
)
def test_memory_basis(threshold: Threshold, read: Summary, allocatable: int | None, expected: MemoryBasis) -> None:
    assert memory_basis(threshold, read, allocatable) == expected


@pytest.mark.parametrize(
    ("threshold", "read", "allocatable"),
    [
        (HARD, summary(usage=None), None),  # as upstream: every figure is needed
        (HARD, summary(available=None), None),
        (HARD, Summary(node=NodeStats(node_name="n", start_time=T0)), None),
        (ALLOCATABLE, summary(), None),  # no allocatable known
        (ALLOCATABLE, Summary(node=NodeStats(node_name="n", start_time=T0)), 3 * GI),  # no pods container
    ],
)
def test_memory_basis_incomplete(threshold: Threshold, read: Summary, allocatable: int | None) -> None:
    with pytest.raises(NotifierError, match="summary was incomplete"):
        memory_basis(threshold, read, allocatable)


# --- v1 --------------------------------------------------------------------------------------------------------

ROOT = "/sys/fs/cgroup/memory"
V1_FILES = {f"{ROOT}/memory.usage_in_bytes", f"{ROOT}/cgroup.event_control"}


async def test_v1_registration_and_crossing() -> None:
    kernel = FakeKernel(set(V1_FILES))
    armed = MemcgThresholdNotifier(kernel, ROOT, "memory.usage_in_bytes", 12345)
    [(path, data)] = kernel.writes
    [eventfd] = kernel.eventfds
    watch = next(fd for fd, p in kernel.opened.items() if p.endswith("memory.usage_in_bytes"))
    assert (path, data) == (f"{ROOT}/cgroup.event_control", f"{eventfd} {watch} 12345".encode())
    assert sorted(kernel.closed) == sorted(kernel.opened)  # the control and watched files are closed at once
    seen: list[str] = []
    armed.start(lambda: seen.append("crossed"))
    os.eventfd_write(eventfd, 1)  # the kernel's crossing
    await turns()
    assert seen == ["crossed"]
    await turns()
    assert seen == ["crossed"]  # drained: one crossing, one call
    armed.stop()
    armed.stop()  # idempotent
    assert kernel.closed.count(eventfd) == 1  # closing the eventfd is what unregisters it in the kernel


@pytest.mark.parametrize(("usage", "reported"), [(12344, []), (12345, ["crossed"]), (99999, ["crossed"])])
async def test_v1_armed_above_the_threshold_reports_at_once(usage: int, reported: list[str]) -> None:
    """The kernel signals crossings only; usage already at or above the threshold when armed is reported by us."""
    kernel = FakeKernel(set(V1_FILES), values={f"{ROOT}/memory.usage_in_bytes": usage})
    armed = MemcgThresholdNotifier(kernel, ROOT, "memory.usage_in_bytes", 12345)
    seen: list[str] = []
    armed.start(lambda: seen.append("crossed"))
    await turns()
    assert seen == reported
    armed.stop()


@pytest.mark.parametrize(
    ("files", "refuse", "match"),
    [
        (set(), {}, "open memory.usage_in_bytes"),
        ({f"{ROOT}/memory.usage_in_bytes"}, {}, "open cgroup.event_control"),
        (V1_FILES, {f"{ROOT}/cgroup.event_control": [errno.EACCES]}, "register a memory.usage_in_bytes threshold"),
    ],
)
def test_v1_failures_map_to_notifier_error(files: set[str], refuse: dict[str, list[int]], match: str) -> None:
    kernel = FakeKernel(set(files), refuse=refuse)
    with pytest.raises(NotifierError, match=match):
        MemcgThresholdNotifier(kernel, ROOT, "memory.usage_in_bytes", 1)
    assert sorted(kernel.closed) == sorted([*kernel.opened, *kernel.eventfds])  # nothing left open


@dataclass
class FakeArmed:
    directory: str
    threshold: int
    on_event: list[object] = field(default_factory=list)
    stopped: bool = False

    def start(self, on_event: object) -> None:
        self.on_event.append(on_event)

    def stop(self) -> None:
        self.stopped = True


async def test_threshold_notifier_rearms_from_each_summary() -> None:
    armed: list[FakeArmed] = []

    def factory(directory: str, threshold: int) -> FakeArmed:
        armed.append(FakeArmed(directory, threshold))
        return armed[-1]

    notifier = MemoryThresholdNotifier(HARD, ROOT, factory)
    messages: list[str] = []
    notifier.start(messages.append)
    notifier.update(summary(usage=3 * GI, working_set=2 * GI, available=2 * GI), None)
    # capacity 4Gi - 100Mi + inactive 1Gi
    assert (armed[0].directory, armed[0].threshold) == (ROOT, 5 * GI - 100 * MI)
    notifier.update(summary(usage=3 * GI, working_set=3 * GI, available=GI), None)
    assert armed[0].stopped and not armed[1].stopped
    assert armed[1].threshold == 4 * GI - 100 * MI
    on_event = armed[1].on_event[0]
    assert callable(on_event)
    on_event()
    assert messages == ["eviction manager: hard memory eviction threshold crossed"]  # upstream's words
    notifier.stop()
    assert armed[1].stopped


# --- v2 --------------------------------------------------------------------------------------------------------

PRESSURE = "/sys/fs/cgroup/kubepods/memory.pressure"


async def test_v2_trigger_falls_back_to_the_unprivileged_window_and_wakes() -> None:
    kernel = FakeKernel({PRESSURE}, refuse={PRESSURE: [errno.EINVAL, 0]})
    armed = PressureNotifier(kernel, PRESSURE)
    assert kernel.writes == [(PRESSURE, b"some 200000 2000000\0")]  # the 1 s window was refused
    assert armed.trigger is not None and armed.trigger.window_us == 2_000_000
    assert len(kernel.closed) == 1  # the refused trigger's fd (each fd holds one trigger)
    seen: list[str] = []
    armed.start(lambda: seen.append("stall"))
    [waiter] = kernel.waiters
    waiter.fire()
    await turns()
    # the wake-up is the event, drained (nothing is polled back), and the next one wakes again
    assert seen == ["stall"] and waiter.drained == 1
    waiter.fire()
    await turns()
    assert seen == ["stall", "stall"] and waiter.drained == 2
    armed.stop()
    assert waiter.closed and len(kernel.closed) == 2


@pytest.mark.parametrize(
    ("refuse", "match"),
    [
        ([errno.EINVAL], "refused every PSI trigger: some 100000 1000000, some 200000 2000000"),
        ([errno.EACCES], "write the PSI trigger 'some 100000 1000000'"),
    ],
)
def test_v2_refusals(refuse: list[int], match: str) -> None:
    kernel = FakeKernel({PRESSURE}, refuse={PRESSURE: refuse})
    with pytest.raises(NotifierError, match=match):
        PressureNotifier(kernel, PRESSURE)
    assert sorted(kernel.closed) == sorted(kernel.opened)


def test_v2_missing_file() -> None:
    with pytest.raises(NotifierError, match=r"open /sys/fs/cgroup/kubepods/memory\.pressure"):
        PressureNotifier(FakeKernel(set()), PRESSURE)


async def test_v2_notifier_arms_once_per_cgroup() -> None:
    armed: list[FakeArmed] = []

    def factory(path: str) -> FakeArmed:
        armed.append(FakeArmed(path, 0))
        return armed[-1]

    notifier = PressureThresholdNotifier([HARD, SOFT], "/proc/pressure/memory", factory)
    assert notifier.description == "hard memory eviction threshold and soft memory eviction threshold"
    messages: list[str] = []
    notifier.start(messages.append)
    notifier.update(summary(), None)
    notifier.update(summary(usage=GI), None)  # no threshold in the kernel: nothing to re-arm
    assert [a.directory for a in armed] == ["/proc/pressure/memory"]
    on_event = armed[0].on_event[0]
    assert callable(on_event)
    on_event()
    assert messages == [
        "eviction manager: memory pressure stall under the hard memory eviction threshold and soft memory eviction "
        "threshold"
    ]
    notifier.stop()
    assert armed[0].stopped


# --- which notifiers, on recorded trees ----------------------------------------------------------------------


def test_v1_tree(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    found = memory_notifiers([NODEFS, HARD, SOFT, ALLOCATABLE], cgroup_root="/nodeagent-x", mount=tmp_path)
    assert [(type(n).__name__, n.description, getattr(n, "directory", "")) for n in found] == [
        ("MemoryThresholdNotifier", "hard memory eviction threshold", f"{tmp_path}/memory"),
        ("MemoryThresholdNotifier", "soft memory eviction threshold", f"{tmp_path}/memory"),
        ("MemoryThresholdNotifier", "hard allocatable memory eviction threshold",
         f"{tmp_path}/memory/nodeagent-x/kubepods"),
    ]  # fmt: skip


def test_v2_tree(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")  # the unified hierarchy's mark
    found = memory_notifiers(
        [HARD, SOFT, ALLOCATABLE], cgroup_root="/", mount=tmp_path, proc_pressure_memory="/proc/pressure/memory"
    )
    assert [(type(n).__name__, getattr(n, "path", "")) for n in found] == [
        ("PressureThresholdNotifier", "/proc/pressure/memory"),
        ("PressureThresholdNotifier", f"{tmp_path}/kubepods/memory.pressure"),
    ]


def test_no_memory_threshold_no_notifier(tmp_path: Path) -> None:
    assert memory_notifiers([NODEFS], mount=tmp_path) == []


# --- the manager's loop ----------------------------------------------------------------------------------------


@dataclass
class FakeNotifier:
    description: str = "hard memory eviction threshold"
    handler: object = None
    updates: list[tuple[Summary, int | None]] = field(default_factory=list)
    fail: bool = False
    stopped: bool = False

    def start(self, handler: object) -> None:
        self.handler = handler

    def update(self, summary: Summary, allocatable_memory: int | None) -> None:
        self.updates.append((summary, allocatable_memory))
        if self.fail:
            raise NotifierError("summary was incomplete")

    def stop(self) -> None:
        self.stopped = True

    def fire(self) -> None:
        assert callable(self.handler)
        self.handler("eviction manager: hard memory eviction threshold crossed")


async def test_a_notification_runs_a_cycle_at_once_and_notifiers_refresh_every_ten_seconds() -> None:
    clock = FakeClock()
    reads = 0
    read = summary()

    async def observe() -> Summary:
        nonlocal reads
        reads += 1
        return read

    inputs = EvictionInputs(
        summary=observe, active_pods=lambda: [], evict=lambda p, e: None, allocatable_memory=lambda: 3 * GI
    )
    manager = EvictionManager(eviction_config(KubeletConfiguration()), clock=clock)
    notifier, failing = FakeNotifier(), FakeNotifier(fail=True)
    task = asyncio.create_task(manager.run(inputs, [notifier, failing]))
    try:
        await clock.advance(0)
        await turns()
        assert reads == 1
        assert notifier.updates == [(read, 3 * GI)]  # armed from the first cycle's summary
        assert len(failing.updates) == 1  # its failure is logged; the loop goes on
        await clock.advance(1)
        assert reads == 1
        notifier.fire()
        await turns()
        assert reads == 2  # at once: no time passed
        assert len(notifier.updates) == 2  # a notified cycle re-arms (the kernel may have fired on the cache moving)
        notifier.fire()
        await turns()
        assert reads == 2  # notified cycles start at least 0.25 s apart
        await clock.advance(0.25)
        await turns()
        assert reads == 3
        await clock.advance(9)
        assert reads == 3  # the period restarted with the notified cycle
        await clock.advance(1)
        await turns()
        assert reads == 4
        assert len(notifier.updates) == 3  # periodic: 10 s since the last arming is not more than the interval
        await clock.advance(10)
        await turns()
        assert reads == 5
        assert len(notifier.updates) == 4
        assert len(failing.updates) == 4
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert notifier.stopped and failing.stopped


async def test_without_notifiers_the_loop_polls() -> None:
    clock = FakeClock()
    reads = 0

    async def observe() -> Summary:
        nonlocal reads
        reads += 1
        return summary()

    inputs = EvictionInputs(summary=observe, active_pods=lambda: [], evict=lambda p, e: None)
    manager = EvictionManager(eviction_config(KubeletConfiguration()), clock=clock)
    task = asyncio.create_task(manager.run(replace(inputs)))
    try:
        await clock.advance(0)
        await turns()
        assert reads == 1
        await clock.advance(10)
        await turns()
        assert reads == 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --- contract: the real kernel on this machine (cgroup v1 hybrid, PSI on) -------------------------------------

V1_MOUNT = Path("/sys/fs/cgroup/memory")


@pytest.fixture
def child_cgroup() -> Iterator[Path]:
    path = V1_MOUNT / f"nodeagent-unit-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        yield path
    finally:
        path.rmdir()


HOG = """
import sys
open(sys.argv[1], "w").write("0")  # this process into the cgroup: what it allocates from now on is charged there
block = b"\\1" * (64 << 20)  # every page written
print("allocated", flush=True)
sys.stdin.read()
"""


async def test_real_memcg_threshold_crossed_by_a_real_process(child_cgroup: Path) -> None:
    kernel = LinuxKernel()
    usage = int((child_cgroup / "memory.usage_in_bytes").read_text())
    armed = MemcgThresholdNotifier(kernel, str(child_cgroup), "memory.usage_in_bytes", usage + 32 * MI)
    crossed = asyncio.get_running_loop().create_future()
    armed.start(lambda: None if crossed.done() else crossed.set_result(True))
    hog = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOG, str(child_cgroup / "cgroup.procs"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert hog.stdout is not None
        line = await asyncio.wait_for(hog.stdout.readline(), timeout=30)
        assert line == b"allocated\n"
        assert int((child_cgroup / "memory.usage_in_bytes").read_text()) > usage + 32 * MI
        assert await asyncio.wait_for(crossed, timeout=10) is True
    finally:
        armed.stop()
        with contextlib.suppress(ProcessLookupError):
            hog.kill()
        await hog.wait()


async def test_real_psi_trigger_is_armed() -> None:
    armed = PressureNotifier(LinuxKernel(), "/proc/pressure/memory")
    try:
        assert armed.trigger is not None  # one of the windows (2 s here: the agent lacks CAP_SYS_RESOURCE)
        armed.start(lambda: None)
    finally:
        armed.stop()


@pytest.mark.parametrize(("on", "count"), [(None, 0), (False, 0), (True, 1)])
def test_the_agent_arms_notifiers_only_with_kernel_memcg_notification(
    tmp_path: Path, on: bool | None, count: int
) -> None:
    (tmp_path / "memory").mkdir()  # a v1 tree: one notifier for the default memory.available threshold
    config = KubeletConfiguration(enforce_node_allocatable=())
    if on is not None:
        config = dataclasses.replace(config, kernel_memcg_notification=on)
    assert len(configured_notifiers(config, mount=tmp_path)) == count
