"""Memory threshold notification arithmetic (eviction.notify): the usage threshold handed to the kernel, which
thresholds get a notifier, their descriptions, the refresh interval and the PSI triggers."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from eviction.notify import (
    PSI_TRIGGERS,
    PsiTrigger,
    description,
    notified_thresholds,
    refresh_due,
    usage_threshold,
)
from eviction.signals import Signal
from eviction.thresholds import Threshold, ThresholdValue

MI = 1 << 20
GI = 1 << 30


def quantity(amount: int, text: str) -> ThresholdValue:
    return ThresholdValue(quantity=Decimal(amount), text=text)


HARD_MEMORY = Threshold(Signal.MEMORY_AVAILABLE, quantity(100 * MI, "100Mi"))
SOFT_MEMORY = Threshold(Signal.MEMORY_AVAILABLE, quantity(GI, "1Gi"), grace_period=timedelta(seconds=30))
HARD_ALLOCATABLE = Threshold(Signal.ALLOCATABLE_MEMORY_AVAILABLE, quantity(100 * MI, "100Mi"))
SOFT_ALLOCATABLE = Threshold(
    Signal.ALLOCATABLE_MEMORY_AVAILABLE, quantity(100 * MI, "100Mi"), grace_period=timedelta(seconds=1)
)
NODEFS = Threshold(Signal.NODEFS_AVAILABLE, ThresholdValue(percentage=0.1))


@pytest.mark.parametrize(
    ("value", "capacity", "usage", "working_set", "expected"),
    [
        # no inactive cache: usage reaches capacity - threshold exactly when available falls to the threshold
        (quantity(100 * MI, "100Mi"), 4 * GI, 3 * GI, 3 * GI, 4 * GI - 100 * MI),
        # the inactive file cache is in usage but not in the working set: the usage threshold moves up by it
        (quantity(100 * MI, "100Mi"), 4 * GI, 3 * GI, 2 * GI, 4 * GI - 100 * MI + GI),
        # a percentage of the capacity, truncated as upstream's GetThresholdQuantity (float32 10% of 4Gi)
        (ThresholdValue(percentage=0.1), 4 * GI, GI, GI, 4 * GI - int(float(4 * GI) * 0.1)),
        # a working set above usage (two reads apart) gives no negative inactive cache
        (quantity(100 * MI, "100Mi"), 4 * GI, GI, GI + MI, 4 * GI - 100 * MI),
        # a threshold above the capacity: the kernel takes no negative number, 0 is "always above"
        (quantity(8 * GI, "8Gi"), 4 * GI, GI, GI, 0),
    ],
)
def test_usage_threshold(value: ThresholdValue, capacity: int, usage: int, working_set: int, expected: int) -> None:
    assert usage_threshold(value, capacity=capacity, usage=usage, working_set=working_set) == expected


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        (HARD_MEMORY, "hard memory eviction threshold"),
        (SOFT_MEMORY, "soft memory eviction threshold"),
        (HARD_ALLOCATABLE, "hard allocatable memory eviction threshold"),
        (SOFT_ALLOCATABLE, "soft allocatable memory eviction threshold"),
    ],
)
def test_description_as_upstream(threshold: Threshold, expected: str) -> None:
    assert description(threshold) == expected


def test_only_memory_thresholds_get_a_notifier() -> None:
    thresholds = [NODEFS, HARD_MEMORY, SOFT_MEMORY, HARD_ALLOCATABLE]
    assert notified_thresholds(thresholds) == (HARD_MEMORY, SOFT_MEMORY, HARD_ALLOCATABLE)
    assert notified_thresholds([NODEFS]) == ()


@pytest.mark.parametrize(
    ("last", "now", "due"),
    [
        (None, 0.0, True),  # never armed
        (100.0, 105.0, False),
        (100.0, 110.0, False),  # as upstream: strictly more than the interval
        (100.0, 110.5, True),
    ],
)
def test_refresh_due(last: float | None, now: float, due: bool) -> None:
    assert refresh_due(last, now) is due


def test_psi_triggers() -> None:
    assert PsiTrigger("some", 150_000, 1_000_000).text() == "some 150000 1000000"
    # the privileged 1 s window first, then the 2 s multiple a process without CAP_SYS_RESOURCE may use
    assert [t.window_us for t in PSI_TRIGGERS] == [1_000_000, 2_000_000]
    assert all(t.stall_us < t.window_us for t in PSI_TRIGGERS)
