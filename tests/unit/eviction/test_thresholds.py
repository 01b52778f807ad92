"""Thresholds parse as upstream's ParseThresholdConfig: values, grace periods, minimum reclaims and every rule."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal

import pytest

from eviction.signals import Signal
from eviction.thresholds import (
    DEFAULT_EVICTION_HARD,
    Threshold,
    ThresholdError,
    ThresholdValue,
    parse_percentage,
    parse_thresholds,
    threshold_quantity,
    threshold_quantity_text,
    update_containerfs_thresholds,
)
from nodeagent.config.durations import parse_go_duration
from nodeagent.config.quantity import parse_quantity

MI = 2**20


def parse(
    hard: Mapping[str, str] | None = None,
    soft: Mapping[str, str] | None = None,
    grace: Mapping[str, str] | None = None,
    reclaim: Mapping[str, str] | None = None,
    allocatable: tuple[str, ...] = (),
) -> tuple[Threshold, ...]:
    return parse_thresholds(
        hard=hard or {},
        soft=soft,
        soft_grace_period=grace,
        minimum_reclaim=reclaim,
        enforce_node_allocatable=allocatable,
        parse_quantity=parse_quantity,
        parse_duration=parse_go_duration,
    )


def q(value: int, text: str) -> ThresholdValue:
    return ThresholdValue(quantity=Decimal(value), text=text)


def pct(text: str) -> ThresholdValue:
    return ThresholdValue(percentage=parse_percentage(text))


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {"hard": {"memory.available": "100Mi"}},
            (Threshold(Signal.MEMORY_AVAILABLE, q(100 * MI, "100Mi")),),
            id="hard quantity",
        ),
        pytest.param(
            {"hard": {"nodefs.available": "10%"}},
            (Threshold(Signal.NODEFS_AVAILABLE, pct("10%")),),
            id="hard percentage",
        ),
        pytest.param(
            {"hard": {"nodefs.available": "0%", "imagefs.available": "100%"}}, (), id="0% and 100% switch off"
        ),
        pytest.param(
            {"hard": {"memory.available": "1024Mi"}},
            (Threshold(Signal.MEMORY_AVAILABLE, q(2**30, "1Gi")),),
            id="printed canonical, as Quantity.String()",
        ),
        pytest.param(
            {"hard": {"pid.available": "1000"}},
            (Threshold(Signal.PID_AVAILABLE, q(1000, "1k")),),
            id="decimal canonical",
        ),
        pytest.param(
            {"soft": {"memory.available": "300Mi"}, "grace": {"memory.available": "1m30s"}},
            (Threshold(Signal.MEMORY_AVAILABLE, q(300 * MI, "300Mi"), grace_period=timedelta(seconds=90)),),
            id="soft with grace",
        ),
        pytest.param(
            {"soft": {"memory.available": "300Mi"}, "grace": {"memory.available": "0s"}},
            (Threshold(Signal.MEMORY_AVAILABLE, q(300 * MI, "300Mi")),),
            id="soft with zero grace is hard, as upstream",
        ),
        pytest.param(
            {"hard": {"memory.available": "100Mi"}, "reclaim": {"memory.available": "50Mi"}},
            (Threshold(Signal.MEMORY_AVAILABLE, q(100 * MI, "100Mi"), min_reclaim=q(50 * MI, "50Mi")),),
            id="min reclaim quantity",
        ),
        pytest.param(
            {
                "hard": {"nodefs.available": "10%"},
                "soft": {"nodefs.available": "20%"},
                "grace": {"nodefs.available": "2m"},
                "reclaim": {"nodefs.available": "5%"},
            },
            (
                Threshold(Signal.NODEFS_AVAILABLE, pct("10%"), min_reclaim=pct("5%")),
                Threshold(Signal.NODEFS_AVAILABLE, pct("20%"), timedelta(minutes=2), min_reclaim=pct("5%")),
            ),
            id="min reclaim applies to hard and soft",
        ),
        pytest.param(
            {"hard": {"memory.available": "100Mi"}, "reclaim": {"memory.available": "0"}},
            (Threshold(Signal.MEMORY_AVAILABLE, q(100 * MI, "100Mi"), min_reclaim=q(0, "0")),),
            id="zero min reclaim quantity is allowed",
        ),
        pytest.param(
            {"hard": {"memory.available": "100Mi"}, "allocatable": ("pods",)},
            (
                Threshold(Signal.MEMORY_AVAILABLE, q(100 * MI, "100Mi")),
                Threshold(Signal.ALLOCATABLE_MEMORY_AVAILABLE, q(100 * MI, "100Mi")),
            ),
            id="enforceNodeAllocatable pods copies the hard memory threshold",
        ),
        pytest.param(
            {
                "soft": {"memory.available": "300Mi"},
                "grace": {"memory.available": "1m"},
                "allocatable": ("pods",),
            },
            (Threshold(Signal.MEMORY_AVAILABLE, q(300 * MI, "300Mi"), timedelta(minutes=1)),),
            id="soft memory threshold gets no allocatable copy",
        ),
        pytest.param(
            {"grace": {"memory.available": "1m"}},
            (),
            id="grace period without soft threshold is fine",
        ),
    ],
)
def test_parse(kwargs: dict[str, object], expected: tuple[Threshold, ...]) -> None:
    assert parse(**kwargs) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "problems"),
    [
        pytest.param(
            {"hard": {"memory.free": "1Gi"}},
            ["evictionHard: memory.free: unsupported eviction signal memory.free"],
            id="unknown signal",
        ),
        pytest.param(
            {"hard": {"memory.available": "100MB"}},
            ["evictionHard: memory.available: invalid quantity"],
            id="bad quantity names the field and signal",
        ),
        pytest.param(
            {"hard": {"memory.available": "0"}},
            ["evictionHard: memory.available: eviction threshold must be positive: 0"],
            id="zero quantity",
        ),
        pytest.param(
            {"hard": {"memory.available": "-1Mi"}},
            ["evictionHard: memory.available: eviction threshold must be positive: -1Mi"],
            id="negative quantity",
        ),
        pytest.param(
            {"hard": {"nodefs.available": "101%"}},
            ["evictionHard: nodefs.available: eviction percentage threshold must be <= 100%: 101%"],
            id="over 100%",
        ),
        pytest.param(
            {"hard": {"nodefs.available": "-1%"}},
            ["evictionHard: nodefs.available: eviction percentage threshold must be >= 0%: -1%"],
            id="negative percentage",
        ),
        pytest.param(
            {"soft": {"nodefs.available": "ten%"}, "grace": {"nodefs.available": "1m"}},
            ['evictionSoft: nodefs.available: invalid percentage "ten%"'],
            id="bad percentage",
        ),
        pytest.param(
            {"soft": {"memory.available": "300Mi"}},
            [
                "evictionSoftGracePeriod: memory.available: grace period must be specified for the soft eviction "
                "threshold memory.available"
            ],
            id="soft threshold without grace period",
        ),
        pytest.param(
            {"soft": {"memory.available": "300Mi"}, "grace": {"memory.available": "-1s"}},
            ["evictionSoftGracePeriod: memory.available: invalid eviction grace period specified: -1s, must be a"],
            id="negative grace period, reported once",
        ),
        pytest.param(
            {"grace": {"memory.available": "soon"}},
            ["evictionSoftGracePeriod: memory.available: "],
            id="bad duration",
        ),
        pytest.param(
            {"reclaim": {"memory.available": "-1Mi"}},
            ["evictionMinimumReclaim: memory.available: negative eviction minimum reclaim specified"],
            id="negative min reclaim",
        ),
        pytest.param(
            {"reclaim": {"nodefs.available": "0%"}},
            ["evictionMinimumReclaim: nodefs.available: eviction percentage minimum reclaim must be positive: 0%"],
            id="zero percentage min reclaim",
        ),
        pytest.param(
            {"hard": {"memory.available": "0", "bogus": "1"}, "reclaim": {"bogus": "1"}},
            [
                "evictionHard: memory.available: eviction threshold must be positive: 0",
                "evictionHard: bogus: unsupported eviction signal bogus",
                "evictionMinimumReclaim: bogus: unsupported eviction signal bogus",
            ],
            id="every problem reported",
        ),
    ],
)
def test_parse_errors(kwargs: dict[str, object], problems: list[str]) -> None:
    with pytest.raises(ThresholdError) as caught:
        parse(**kwargs)  # type: ignore[arg-type]
    assert len(caught.value.problems) == len(problems)
    for found, expected in zip(caught.value.problems, problems, strict=True):
        assert found.startswith(expected), found
    assert str(caught.value).splitlines() == list(caught.value.problems)


def test_defaults_are_upstreams_linux_ones() -> None:
    thresholds = parse(DEFAULT_EVICTION_HARD)
    assert {t.signal: str(t.value) for t in thresholds} == {
        Signal.MEMORY_AVAILABLE: "100Mi",
        Signal.NODEFS_AVAILABLE: "10%",
        Signal.NODEFS_INODES_FREE: "5%",
        Signal.IMAGEFS_AVAILABLE: "15%",
        Signal.IMAGEFS_INODES_FREE: "5%",
    }
    assert all(t.hard for t in thresholds)


@pytest.mark.parametrize(
    ("value", "capacity", "quantity", "text"),
    [
        (q(100 * MI, "100Mi"), 8 * 2**30, 100 * MI, "100Mi"),
        # float32 0.1 is 0.100000001490116..., so 10% of 10Gi is 16 bytes more than exact, as upstream prints it.
        (pct("10%"), 10 * 2**30, 1073741840, "1073741840"),
        (pct("50%"), 2 * 2**30, 2**30, "1Gi"),
        (pct("5%"), 1_000_000, 50000, "50000"),  # inodes from a percentage print BinarySI, as upstream
        (pct("5%"), 3, 0, "0"),  # truncated, not rounded
    ],
)
def test_threshold_quantity(value: ThresholdValue, capacity: int, quantity: int, text: str) -> None:
    assert threshold_quantity(value, capacity) == quantity
    assert threshold_quantity_text(value, capacity) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10%", 0.10000000149011612), ("0.5%", 0.004999999888241291), ("1e1%", 0.10000000149011612), ("100%", 1.0)],
)
def test_parse_percentage_is_float32(text: str, expected: float) -> None:
    assert parse_percentage(text) == expected


@pytest.mark.parametrize("text", ["%", "abc%", "1.2.3%", "0x10%", "inf%", "nan%"])
def test_parse_percentage_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid percentage"):
        parse_percentage(text)


HARD_NODEFS = Threshold(Signal.NODEFS_AVAILABLE, pct("10%"))
SOFT_NODEFS = Threshold(Signal.NODEFS_AVAILABLE, pct("20%"), timedelta(minutes=1))
HARD_NODEFS_INODES = Threshold(Signal.NODEFS_INODES_FREE, pct("5%"))
HARD_IMAGEFS = Threshold(Signal.IMAGEFS_AVAILABLE, pct("15%"))
USER_CONTAINERFS = Threshold(Signal.CONTAINERFS_AVAILABLE, pct("50%"))


@pytest.mark.parametrize(
    ("dedicated", "split", "expected_added"),
    [
        pytest.param(
            False,
            False,
            {
                Threshold(Signal.CONTAINERFS_AVAILABLE, pct("10%")),
                Threshold(Signal.CONTAINERFS_AVAILABLE, pct("20%"), timedelta(minutes=1)),
                Threshold(Signal.CONTAINERFS_INODES_FREE, pct("5%")),
            },
            id="one filesystem: nodefs",
        ),
        pytest.param(
            True, False, {Threshold(Signal.CONTAINERFS_AVAILABLE, pct("15%"))}, id="imagefs holds containers: imagefs"
        ),
        pytest.param(
            True,
            True,
            {
                Threshold(Signal.CONTAINERFS_AVAILABLE, pct("10%")),
                Threshold(Signal.CONTAINERFS_AVAILABLE, pct("20%"), timedelta(minutes=1)),
                Threshold(Signal.CONTAINERFS_INODES_FREE, pct("5%")),
            },
            id="split: containerfs is nodefs",
        ),
    ],
)
def test_update_containerfs_thresholds(dedicated: bool, split: bool, expected_added: set[Threshold]) -> None:
    given = (HARD_NODEFS, SOFT_NODEFS, HARD_NODEFS_INODES, HARD_IMAGEFS, USER_CONTAINERFS)
    result, warnings = update_containerfs_thresholds(
        given, dedicated_image_fs=dedicated, split_container_image_fs=split
    )
    assert USER_CONTAINERFS not in result  # the user's containerfs threshold is replaced
    assert set(result) - set(given) == expected_added
    assert warnings == ("found containerfs.available for hard eviction. ignoring",)
