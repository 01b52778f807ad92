"""PLEG health: Go duration strings and the relist / channel checks (pure)."""

from __future__ import annotations

import pytest

from pleg.health import channel_health, go_duration, relist_health


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0s"),
        (180, "3m0s"),
        (600, "10m0s"),
        (10, "10s"),
        (10.5, "10.5s"),
        (181.25, "3m1.25s"),
        (3600, "1h0m0s"),
        (3723.5, "1h2m3.5s"),
        (0.25, "250ms"),
        (0.0015, "1.5ms"),
        (0.000002, "2µs"),
        (12.345678901, "12.345678901s"),
        (-2, "-2s"),
    ],
)
def test_go_duration(seconds: float, expected: str) -> None:
    assert go_duration(seconds) == expected


@pytest.mark.parametrize(
    ("last", "now", "threshold", "expected"),
    [
        (None, 5.0, 180.0, (False, "pleg has yet to be successful")),
        (100.0, 101.0, 180.0, (True, "")),
        (100.0, 280.0, 180.0, (True, "")),  # exactly at the threshold is still healthy, as upstream
        (100.0, 280.5, 180.0, (False, "pleg was last seen active 3m0.5s ago; threshold is 3m0s")),
        (0.0, 12.0, 10.0, (False, "pleg was last seen active 12s ago; threshold is 10s")),
        (0.0, 700.0, 600.0, (False, "pleg was last seen active 11m40s ago; threshold is 10m0s")),
    ],
)
def test_relist_health(last: float | None, now: float, threshold: float, expected: tuple[bool, str]) -> None:
    assert relist_health(last, now, threshold) == expected


@pytest.mark.parametrize(
    ("queued", "capacity", "expected"),
    [
        (0, 1000, (True, "")),
        (999, 1000, (True, "")),
        (1000, 1000, (False, "pleg event channel capacity is full with 1000 events")),
        (5, 0, (True, "")),  # an unbounded channel is never full
    ],
)
def test_channel_health(queued: int, capacity: int, expected: tuple[bool, str]) -> None:
    assert channel_health(queued, capacity) == expected
