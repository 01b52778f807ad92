"""Memory threshold notifiers: the kernel wakes the eviction manager when a memory threshold is crossed, instead of
the manager finding out at its next 10 s tick (upstream's memory_threshold_notifier.go and
threshold_notifier_linux.go, kernelMemcgNotification).

- cgroup v1 (`MemcgThresholdNotifier`, upstream's linuxCgroupNotifier): an eventfd registered through the cgroup's
  `cgroup.event_control` as "<eventfd> <fd of memory.usage_in_bytes> <usage threshold>"; the kernel signals the
  eventfd whenever usage crosses the threshold, either way. One per memory.available threshold (the root memory
  cgroup) and per allocatableMemory.available threshold (the kubepods cgroup). `MemoryThresholdNotifier.update`
  re-arms it from each summary (the threshold moves with the inactive file cache: eviction.notify). The kernel
  signals crossings only, so usage already above the threshold when armed (it grew since the summary was read) is
  reported at once by us.
- cgroup v2 (`PressureNotifier`): the kernel has no usage threshold there (upstream disables its notifier). A PSI
  trigger on memory.pressure (/proc/pressure/memory for the root, <kubepods>/memory.pressure for allocatable) wakes
  the manager when tasks stall on memory; the cycle then compares the thresholds. PSI signals POLLPRI, which the
  event loop's selector does not watch, so an epoll of our own watches it and the loop watches the epoll. Beside
  them, beyond upstream, the pods cgroup's memory.events wakes the manager when its high/max/oom/oom_kill counters
  grow (nodeagent.memoryevents; evictionmanager.configured_notifiers adds it).

Each notifier's fd is watched by the running event loop (`add_reader`), so a notification costs no thread and no
polling. The kernel calls go through `Kernel` (the fd layer): `LinuxKernel` makes them, tests may pass a fake.

What was run for real: v1 on this project's machines (cgroup v1 hybrid; the root memory cgroup and the kubepods
cgroup; unit tests arm a real threshold and see a real crossing, the integration test and benchmarks/eviction.py see
a real hog evicted), and v2 in the Vagrant VM (tests/integration/test_vm_systemd_cgroups.py: both PSI triggers
armed, /proc/pressure/memory and kubepods.slice/memory.pressure, a real hog evicted, and a pod thrashing its page
cache under a 24Mi limit making the triggers fire). The VM found that the first version dropped every real
notification: after the loop's wake-up it polled the epoll again to confirm, but a PSI event is one-shot, consumed by
the loop's own readiness check of the nested epoll, so the confirmation never saw it (0 of 11 wake-ups in a probe);
now the wake-up is the event (`PriorityWaiter.drain`).

Switch: the KubeletConfiguration's `kernelMemcgNotification` (read by agent.py), off by default as upstream: the
manager then polls only; benchmarks/eviction.py compares the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eviction.notify import (
    MEMORY_USAGE_ATTRIBUTE,
    PSI_TRIGGERS,
    PsiTrigger,
    description,
    is_allocatable,
    notified_thresholds,
    usage_threshold,
)
from eviction.thresholds import Threshold
from nodeagent.stats.cgroups import CGROUP_ROOT
from nodeagent.stats.provider import kubepods_cgroup
from nodeagent.stats.types import SYSTEM_CONTAINER_PODS, MemoryStats, Summary

log = logging.getLogger(__name__)

PROC_PRESSURE_MEMORY = "/proc/pressure/memory"


class NotifierError(Exception):
    """A notifier could not be armed (a missing file, a refused registration) or the summary lacks what it needs."""


# --- the fd layer ----------------------------------------------------------------------------------------------


class PriorityWaiter(Protocol):
    """An fd the event loop can watch for reading that becomes readable when another fd has POLLPRI."""

    def fileno(self) -> int: ...

    def drain(self) -> None:
        """Clears the waiter's readiness once the loop has seen it readable. The wake-up itself is the event: a
        PSI trigger's event is one-shot (the kernel clears it on the poll that reports it), and the loop's readiness
        check of the nested epoll is that poll, so asking the fd again finds nothing."""
        ...

    def close(self) -> None: ...


class Kernel(Protocol):
    def open(self, path: str, flags: int) -> int: ...

    def write(self, fd: int, data: bytes) -> None: ...

    def close(self, fd: int) -> None: ...

    def eventfd(self) -> int: ...

    def drain(self, fd: int) -> None:
        """Read an eventfd's counter (nothing when it is zero)."""
        ...

    def read_value(self, fd: int) -> int:
        """The number a cgroup file open at `fd` holds now."""
        ...

    def priority_waiter(self, fd: int) -> PriorityWaiter: ...


class EpollPriorityWaiter:
    """An epoll watching one fd for EPOLLPRI; the epoll's own fd is readable while that fd has an event."""

    def __init__(self, fd: int) -> None:
        self._epoll = select.epoll()
        self._epoll.register(fd, select.EPOLLPRI)

    def fileno(self) -> int:
        return self._epoll.fileno()

    def drain(self) -> None:
        self._epoll.poll(0)  # the PSI fd answers 0 now: the epoll drops it from its ready list

    def close(self) -> None:
        self._epoll.close()


class LinuxKernel:
    def open(self, path: str, flags: int) -> int:
        return os.open(path, flags | os.O_CLOEXEC)

    def write(self, fd: int, data: bytes) -> None:
        os.write(fd, data)

    def close(self, fd: int) -> None:
        os.close(fd)

    def eventfd(self) -> int:
        return os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def read_value(self, fd: int) -> int:
        return int(os.pread(fd, 64, 0))

    def drain(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError):  # nothing to read: a spurious wake-up
            os.eventfd_read(fd)

    def priority_waiter(self, fd: int) -> PriorityWaiter:
        return EpollPriorityWaiter(fd)


# --- one armed notification --------------------------------------------------------------------------------------


class CgroupNotifier(Protocol):
    """One armed kernel notification (upstream's CgroupNotifier): `start` watches it, `stop` disarms it."""

    def start(self, on_event: Callable[[], None]) -> None: ...

    def stop(self) -> None: ...


class MemcgThresholdNotifier:
    """cgroup v1: the kernel signals an eventfd when `attribute` of the cgroup at `directory` crosses `threshold`."""

    def __init__(self, kernel: Kernel, directory: str, attribute: str, threshold: int) -> None:
        self._kernel = kernel
        self._eventfd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The kernel signals crossings only: armed while usage is already above (it grew between the summary the
        # threshold came from and now), it would stay silent; `start` then reports a crossing at once.
        self.above_at_arm = False
        try:
            watch = kernel.open(os.path.join(directory, attribute), os.O_RDONLY)
        except OSError as e:
            raise NotifierError(f"open {attribute} of {directory}: {e.strerror}") from e
        try:
            control = kernel.open(os.path.join(directory, "cgroup.event_control"), os.O_WRONLY)
        except OSError as e:
            kernel.close(watch)
            raise NotifierError(f"open cgroup.event_control of {directory}: {e.strerror}") from e
        eventfd = kernel.eventfd()
        try:
            # The registration lives as long as the eventfd: closing it (stop) makes the kernel drop it.
            kernel.write(control, f"{eventfd} {watch} {threshold}".encode())
            with contextlib.suppress(OSError, ValueError):
                self.above_at_arm = kernel.read_value(watch) >= threshold
        except OSError as e:
            kernel.close(eventfd)
            raise NotifierError(f"register a {attribute} threshold in {directory}: {e.strerror}") from e
        finally:
            kernel.close(control)
            kernel.close(watch)
        self._eventfd = eventfd

    def start(self, on_event: Callable[[], None]) -> None:
        if self._eventfd is None:
            return
        eventfd = self._eventfd

        def readable() -> None:
            self._kernel.drain(eventfd)
            on_event()

        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(eventfd, readable)
        if self.above_at_arm:
            self._loop.call_soon(on_event)

    def stop(self) -> None:
        if self._eventfd is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._eventfd)
        self._kernel.close(self._eventfd)
        self._eventfd = None


class PressureNotifier:
    """cgroup v2: a PSI trigger on a memory.pressure file; the first of `triggers` the kernel accepts is kept."""

    def __init__(self, kernel: Kernel, path: str, triggers: Sequence[PsiTrigger] = PSI_TRIGGERS) -> None:
        self._kernel = kernel
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd: int | None = None
        self._waiter: PriorityWaiter | None = None
        self.trigger: PsiTrigger | None = None
        refused: list[str] = []
        for trigger in triggers:
            try:
                # The trigger lives as long as this fd; each fd holds one trigger, so a refused one needs a new fd.
                fd = kernel.open(path, os.O_RDWR | os.O_NONBLOCK)
            except OSError as e:
                raise NotifierError(f"open {path}: {e.strerror}") from e
            try:
                kernel.write(fd, trigger.text().encode() + b"\0")
            except OSError as e:
                kernel.close(fd)
                if e.errno != errno.EINVAL:
                    raise NotifierError(f"write the PSI trigger {trigger.text()!r} to {path}: {e.strerror}") from e
                refused.append(trigger.text())
                continue
            self._fd, self.trigger = fd, trigger
            self._waiter = kernel.priority_waiter(fd)
            return
        raise NotifierError(f"{path} refused every PSI trigger: {', '.join(refused)}")

    def start(self, on_event: Callable[[], None]) -> None:
        waiter = self._waiter
        if waiter is None:
            return

        def readable() -> None:
            # Not `if <poll the fd again>`: the event was consumed when the loop's epoll polled ours (see drain).
            waiter.drain()
            on_event()

        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(waiter.fileno(), readable)

    def stop(self) -> None:
        if self._waiter is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._waiter.fileno())
            self._waiter.close()
            self._waiter = None
        if self._fd is not None:
            self._kernel.close(self._fd)
            self._fd = None


# --- per threshold ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryBasis:
    """What a threshold's usage threshold is computed from: the cgroup's usage and working set, and the capacity
    the signal is measured against."""

    capacity: int
    usage: int
    working_set: int


def memory_basis(threshold: Threshold, summary: Summary, allocatable_memory: int | None) -> MemoryBasis:
    """From a summary, as upstream's UpdateThreshold: memory.available from the node's memory (capacity = available
    + working set), allocatableMemory.available from the `pods` system container against allocatable (the same
    capacity evictionmanager.observations_from_summary compares with; upstream takes the kubepods cgroup's limit,
    which the kubelet sets to allocatable). Raises NotifierError when the summary lacks a figure."""
    memory: MemoryStats | None
    if is_allocatable(threshold):
        pods = next((c for c in summary.node.system_containers if c.name == SYSTEM_CONTAINER_PODS), None)
        memory = pods.memory if pods is not None else None
        capacity = allocatable_memory
        if memory is None or memory.usage_bytes is None or memory.working_set_bytes is None or capacity is None:
            raise NotifierError(f"summary was incomplete: pods memory {memory!r}, allocatable {capacity!r}")
        return MemoryBasis(capacity=capacity, usage=memory.usage_bytes, working_set=memory.working_set_bytes)
    memory = summary.node.memory
    usage, working_set, available = (
        (memory.usage_bytes, memory.working_set_bytes, memory.available_bytes) if memory is not None else (None,) * 3
    )
    if usage is None or working_set is None or available is None:
        raise NotifierError(f"summary was incomplete: node memory {memory!r}")
    return MemoryBasis(capacity=available + working_set, usage=usage, working_set=working_set)


# (directory, usage threshold) -> an armed notifier
MemcgFactory = Callable[[str, int], CgroupNotifier]
# memory.pressure path -> an armed notifier
PressureFactory = Callable[[str], CgroupNotifier]


class MemoryThresholdNotifier:
    """Upstream's memoryThresholdNotifier for one threshold on cgroup v1: `update` (re)arms the kernel at the usage
    threshold computed from the summary; a crossing calls `handler` with upstream's message."""

    def __init__(self, threshold: Threshold, directory: str, factory: MemcgFactory) -> None:
        self.threshold = threshold
        self.directory = directory
        self.description = description(threshold)
        self._factory = factory
        self._armed: CgroupNotifier | None = None
        self._handler: Callable[[str], None] = _ignore
        self.usage_threshold: int | None = None

    def start(self, handler: Callable[[str], None]) -> None:
        self._handler = handler
        log.info("eviction manager created memory threshold notifier notifier=%s", self.description)

    def update(self, summary: Summary, allocatable_memory: int | None) -> None:
        basis = memory_basis(self.threshold, summary, allocatable_memory)
        value = usage_threshold(
            self.threshold.value, capacity=basis.capacity, usage=basis.usage, working_set=basis.working_set
        )
        log.debug("eviction manager setting notifier notifier=%s usage_threshold=%d", self.description, value)
        self.stop()
        armed = self._factory(self.directory, value)
        armed.start(self._crossed)
        self._armed, self.usage_threshold = armed, value

    def _crossed(self) -> None:
        self._handler(f"eviction manager: {self.description} crossed")

    def stop(self) -> None:
        if self._armed is not None:
            self._armed.stop()
            self._armed = None


class PressureThresholdNotifier:
    """cgroup v2: one PSI trigger per cgroup watched (the root, or kubepods for allocatable), armed once: the kernel
    is given no threshold, so there is nothing to re-arm when the summary moves."""

    def __init__(self, thresholds: Sequence[Threshold], path: str, factory: PressureFactory) -> None:
        self.thresholds = tuple(thresholds)
        self.path = path
        self.description = " and ".join(description(t) for t in self.thresholds)
        self._factory = factory
        self._armed: CgroupNotifier | None = None
        self._handler: Callable[[str], None] = _ignore

    def start(self, handler: Callable[[str], None]) -> None:
        self._handler = handler
        log.info("eviction manager created memory pressure notifier notifier=%s path=%s", self.description, self.path)

    def update(self, summary: Summary, allocatable_memory: int | None) -> None:
        del summary, allocatable_memory
        if self._armed is None:
            armed = self._factory(self.path)
            armed.start(self._stalled)
            self._armed = armed

    def _stalled(self) -> None:
        self._handler(f"eviction manager: memory pressure stall under the {self.description}")

    def stop(self) -> None:
        if self._armed is not None:
            self._armed.stop()
            self._armed = None


def _ignore(message: str) -> None:
    del message


class ThresholdNotifier(Protocol):
    """What the eviction manager drives (upstream's ThresholdNotifier)."""

    description: str

    def start(self, handler: Callable[[str], None]) -> None: ...

    def update(self, summary: Summary, allocatable_memory: int | None) -> None: ...

    def stop(self) -> None: ...


# --- all of them -------------------------------------------------------------------------------------------------


def _memory_directory(mount: str, unified: bool, cgroup: str) -> str:
    base = mount if unified else os.path.join(mount, "memory")
    relative = cgroup.strip("/")
    return os.path.join(base, relative) if relative else base


def memory_notifiers(
    thresholds: Sequence[Threshold],
    *,
    cgroup_root: str = "/",
    cgroup_driver: str = "cgroupfs",
    mount: Path = CGROUP_ROOT,
    kernel: Kernel | None = None,
    proc_pressure_memory: str = PROC_PRESSURE_MEMORY,
) -> list[ThresholdNotifier]:
    """The notifiers for these thresholds: v1 when `mount` has a memory hierarchy of its own, v2 when it is the
    unified hierarchy (it has cgroup.controllers, as CgroupFS decides)."""
    real = kernel or LinuxKernel()
    mount_text = str(mount)
    unified = os.path.exists(os.path.join(mount_text, "cgroup.controllers"))
    kubepods = kubepods_cgroup(cgroup_root, cgroup_driver)
    chosen = notified_thresholds(thresholds)
    if not unified:

        def armed(directory: str, threshold: int) -> CgroupNotifier:
            return MemcgThresholdNotifier(real, directory, MEMORY_USAGE_ATTRIBUTE, threshold)

        return [
            MemoryThresholdNotifier(
                t, _memory_directory(mount_text, False, kubepods if is_allocatable(t) else "/"), armed
            )
            for t in chosen
        ]

    def pressure(path: str) -> CgroupNotifier:
        return PressureNotifier(real, path)

    result: list[ThresholdNotifier] = []
    root = [t for t in chosen if not is_allocatable(t)]
    pods = [t for t in chosen if is_allocatable(t)]
    if root:
        # The root cgroup's pressure is the system's: /proc/pressure/memory has it on every kernel with PSI.
        result.append(PressureThresholdNotifier(root, proc_pressure_memory, pressure))
    if pods:
        path = os.path.join(_memory_directory(mount_text, True, kubepods), "memory.pressure")
        result.append(PressureThresholdNotifier(pods, path, pressure))
    return result


__all__ = [
    "CgroupNotifier",
    "EpollPriorityWaiter",
    "Kernel",
    "LinuxKernel",
    "MemcgThresholdNotifier",
    "MemoryBasis",
    "MemoryThresholdNotifier",
    "NotifierError",
    "PressureNotifier",
    "PressureThresholdNotifier",
    "PriorityWaiter",
    "ThresholdNotifier",
    "memory_basis",
    "memory_notifiers",
]
