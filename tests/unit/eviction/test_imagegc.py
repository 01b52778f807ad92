"""Image GC decisions as upstream's realImageGCManager makes them: records, eviction order, thresholds, minimum and
maximum age. Time is passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from eviction.imagegc import (
    ImagePolicy,
    ImageRecord,
    InvalidCapacity,
    SeenImage,
    amount_to_free,
    detect,
    eligible_for_space,
    eviction_order,
    free_disk_space_failed_message,
    images_to_free,
    old_images,
    usage_percent,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MI = 2**20


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record(
    id_: str,
    *,
    size: int = MI,
    first: float = 0,
    used: float | None = None,
    pinned: bool = False,
    sandbox: bool = False,
) -> ImageRecord:
    return ImageRecord(
        id=id_,
        size=size,
        first_detected=at(first),
        last_used=None if used is None else at(used),
        pinned=pinned,
        sandbox=sandbox,
    )


# --- detect -------------------------------------------------------------------------------------------------------


def test_detect_records_new_images_now_and_use_and_forgets_gone_ones() -> None:
    before = {"a": record("a", first=0, used=5), "gone": record("gone")}
    seen = [SeenImage("a", 2 * MI, pinned=True), SeenImage("b", 3 * MI), SeenImage("c", MI, sandbox=True)]
    after = detect(before, seen, frozenset({"b"}), at(100))
    assert after == {
        # Known: its first detection stays, size and pinned follow the runtime, not in use: last use stays.
        "a": record("a", size=2 * MI, first=0, used=5, pinned=True),
        # New and in use: detected and used now.
        "b": record("b", size=3 * MI, first=100, used=100),
        "c": record("c", first=100, sandbox=True),
    }


# --- eviction order ----------------------------------------------------------------------------------------------

ORDER_CASES = [
    pytest.param(
        [record("new", first=50), record("old", first=10)],
        frozenset[str](),
        ["old", "new"],
        id="never used: by first detection",
    ),
    pytest.param(
        [record("recent", first=0, used=90), record("never", first=80), record("long-ago", first=0, used=20)],
        frozenset[str](),
        ["never", "long-ago", "recent"],
        id="never used before any use, then least recently used",
    ),
    pytest.param(
        [record("tie-late", first=30, used=60), record("tie-early", first=10, used=60)],
        frozenset[str](),
        ["tie-early", "tie-late"],
        id="same last use: earlier detection first",
    ),
    pytest.param(
        [record("used"), record("pinned", pinned=True), record("pause", sandbox=True), record("free")],
        frozenset({"used"}),
        ["free"],
        id="in use, pinned and the sandbox image are never candidates",
    ),
]


@pytest.mark.parametrize(("records", "in_use", "expected"), ORDER_CASES)
def test_eviction_order(records: list[ImageRecord], in_use: frozenset[str], expected: list[str]) -> None:
    assert [r.id for r in eviction_order({r.id: r for r in records}, in_use)] == expected


# --- thresholds --------------------------------------------------------------------------------------------------

CAPACITY = 1000 * MI

AMOUNT_CASES = [
    # (available, high, low, expected bytes to free)
    pytest.param(200 * MI, 85, 80, 0, id="80% used, below the high threshold"),
    pytest.param(151 * MI, 85, 80, 49 * MI, id="84.9% used counts as 85: upstream floors the available share"),
    pytest.param(160 * MI + 1, 85, 80, 0, id="just under 84% used: below"),
    pytest.param(150 * MI, 85, 80, 50 * MI, id="85% used: down to 80%"),
    pytest.param(100 * MI, 85, 80, 100 * MI, id="90% used"),
    pytest.param(0, 100, 0, CAPACITY, id="full disk, high 100: free everything to 0%"),
    pytest.param(2 * CAPACITY, 85, 80, 0, id="available above capacity is capped"),
]


@pytest.mark.parametrize(("available", "high", "low", "expected"), AMOUNT_CASES)
def test_amount_to_free(available: int, high: int, low: int, expected: int) -> None:
    policy = ImagePolicy(high_threshold_percent=high, low_threshold_percent=low)
    assert amount_to_free(CAPACITY, available, policy) == expected


def test_zero_capacity_is_invalid() -> None:
    with pytest.raises(InvalidCapacity, match="invalid capacity 0 on image filesystem"):
        amount_to_free(0, 0, ImagePolicy())
    with pytest.raises(InvalidCapacity):
        usage_percent(0, 10)


# --- minimum age (space) and maximum age -------------------------------------------------------------------------

ELIGIBLE_CASES = [
    pytest.param(record("young", first=100), 200, timedelta(minutes=2), [], id="detected 100 s ago: younger than 2m"),
    pytest.param(record("aged", first=0), 120, timedelta(minutes=2), ["aged"], id="exactly the minimum age"),
    pytest.param(record("now", first=0, used=300), 300, timedelta(0), [], id="used at the free time"),
    pytest.param(record("any", first=300), 300, timedelta(0), ["any"], id="minimum age 0: just detected is fine"),
]


@pytest.mark.parametrize(("rec", "now", "min_age", "expected"), ELIGIBLE_CASES)
def test_eligible_for_space(rec: ImageRecord, now: float, min_age: timedelta, expected: list[str]) -> None:
    eligible = eligible_for_space([rec], ImagePolicy(min_age=min_age), now=at(now))
    assert [r.id for r in eligible] == expected


def test_images_to_free_stops_once_enough_is_freed() -> None:
    order = [record("a", size=10), record("b", size=20), record("c", size=40)]
    assert [r.id for r in images_to_free(order, 25)] == ["a", "b"]
    assert [r.id for r in images_to_free(order, 30)] == ["a", "b"]
    assert [r.id for r in images_to_free(order, 31)] == ["a", "b", "c"]
    assert [r.id for r in images_to_free(order, 10**12)] == ["a", "b", "c"]  # DeleteUnusedImages: everything


MAX_AGE_CASES = [
    pytest.param(timedelta(0), 10_000, ["never", "stale", "fresh"], [], id="max age 0: off"),
    pytest.param(timedelta(minutes=10), 600, ["never", "stale", "fresh"], [], id="kubelet up for only the max age"),
    pytest.param(
        timedelta(minutes=10), 601, ["never", "stale", "fresh"], ["never", "stale"], id="unused past the max age"
    ),
]


@pytest.mark.parametrize(("max_age", "now", "ids", "expected"), MAX_AGE_CASES)
def test_old_images(max_age: timedelta, now: float, ids: list[str], expected: list[str]) -> None:
    records = {"never": record("never"), "stale": record("stale", used=0), "fresh": record("fresh", used=now - 1)}
    order = eviction_order(records, frozenset())
    assert [r.id for r in order] == ids
    assert [r.id for r in old_images(order, ImagePolicy(max_age=max_age), now=at(now), began=at(0))] == expected


def test_free_disk_space_failed_message_is_upstreams() -> None:
    assert free_disk_space_failed_message(100, 40) == (
        "Failed to garbage collect required amount of images. Attempted to free 100 bytes, "
        "but only found 40 bytes eligible to free."
    )
