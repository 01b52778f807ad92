"""Memory threshold notification, the arithmetic (upstream pkg/kubelet/eviction/memory_threshold_notifier.go).

Polling every 10 s leaves a node up to 10 s under a crossed memory threshold; upstream asks the kernel to say when
the threshold is crossed instead, and synchronizes at once. The kernel watches usage, not the working set the
signals compare, so the usage threshold given to it is the capacity minus the eviction threshold plus the inactive
file cache (usage = working set + inactive_file): it is crossed when the working set reaches capacity - threshold,
that is when available falls to the threshold. The inactive cache moves, so the threshold is recomputed from each
summary (at most every `NOTIFIER_REFRESH_INTERVAL`, as upstream) and the kernel re-armed.

cgroup v2 has no usage threshold in the kernel (upstream then disables the notifier, kubernetes#106331); there a
PSI trigger on memory.pressure ("some <stall us> <window us>") wakes the manager when tasks stall on memory, and
the manager's cycle compares the thresholds itself. `PSI_TRIGGERS` lists the triggers to try in order.

Pure: numbers in, numbers and text out. The wiring (files, eventfds, the event loop) is nodeagent.memorynotifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eviction.signals import Signal
from eviction.thresholds import Threshold, ThresholdValue, threshold_quantity

# As upstream: the v1 file whose value the kernel compares with the threshold.
MEMORY_USAGE_ATTRIBUTE = "memory.usage_in_bytes"
# As upstream's notifierRefreshInterval: re-arm at most this often, however often synchronize runs.
NOTIFIER_REFRESH_INTERVAL_SECONDS = 10.0

NOTIFIED_SIGNALS = frozenset({Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE})


def notified_thresholds(thresholds: Sequence[Threshold]) -> tuple[Threshold, ...]:
    """The thresholds that get a notifier: every memory.available and allocatableMemory.available one, hard or soft
    (upstream's Start)."""
    return tuple(t for t in thresholds if t.signal in NOTIFIED_SIGNALS)


def is_allocatable(threshold: Threshold) -> bool:
    return threshold.signal == Signal.ALLOCATABLE_MEMORY_AVAILABLE


def description(threshold: Threshold) -> str:
    """Upstream's Description(): "hard memory eviction threshold", "soft allocatable memory eviction threshold"."""
    hard = "hard " if threshold.hard else "soft "
    allocatable = "allocatable " if is_allocatable(threshold) else ""
    return f"{hard}{allocatable}memory eviction threshold"


def usage_threshold(value: ThresholdValue, *, capacity: int, usage: int, working_set: int) -> int:
    """The usage at which the kernel should notify: capacity - the threshold's amount + inactive_file (usage minus
    the working set), as upstream's UpdateThreshold. Never below 0: the kernel takes an unsigned number (upstream's
    Quantity.Value() would hand it a negative one, which the kernel refuses)."""
    inactive_file = max(0, usage - working_set)
    amount = int(threshold_quantity(value, capacity))
    return max(0, capacity - amount + inactive_file)


def refresh_due(last_update: float | None, now: float) -> bool:
    """Whether to re-arm now (monotonic seconds): the first time, then once more than the interval has passed."""
    return last_update is None or now - last_update > NOTIFIER_REFRESH_INTERVAL_SECONDS


@dataclass(frozen=True)
class PsiTrigger:
    """A PSI trigger as the kernel reads it from memory.pressure: notify when tasks stall `stall_us` within any
    `window_us` ("some": at least one task stalled; "full": all of them)."""

    kind: str
    stall_us: int
    window_us: int

    def text(self) -> str:
        return f"{self.kind} {self.stall_us} {self.window_us}"


# Tried in order. The kernel takes a window from 500 ms to 10 s from a process with CAP_SYS_RESOURCE, and only
# multiples of 2 s from one without (EINVAL otherwise; measured on this project's machines, which run the agent
# without CAP_SYS_RESOURCE). 10% of the window stalled is the figure the kernel's PSI documentation uses.
PSI_TRIGGERS: tuple[PsiTrigger, ...] = (
    PsiTrigger("some", 100_000, 1_000_000),
    PsiTrigger("some", 200_000, 2_000_000),
)


__all__ = [
    "MEMORY_USAGE_ATTRIBUTE",
    "NOTIFIED_SIGNALS",
    "NOTIFIER_REFRESH_INTERVAL_SECONDS",
    "PSI_TRIGGERS",
    "PsiTrigger",
    "description",
    "is_allocatable",
    "notified_thresholds",
    "refresh_due",
    "usage_threshold",
]
