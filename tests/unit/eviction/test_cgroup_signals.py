"""Working sets from recorded cgroup files (v1 from this machine's root cgroup, v2 as kernel 6.x writes them), and
the signal observations built from the numbers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from eviction.cgroup import (
    CgroupParseError,
    limit_or_unlimited,
    memory_limit,
    parse_flat_keyed,
    usage_v2,
    working_set,
    working_set_v1,
    working_set_v2,
)
from eviction.quantity import Quantity, format_binary, format_decimal
from eviction.signals import (
    Observation,
    Signal,
    fs_observations,
    memory_observation,
    parse_signal,
    pid_observation,
)

DATA = Path(__file__).parent / "data"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_v1_root_working_set_is_usage_minus_total_inactive_file() -> None:
    # Recorded on this machine (cgroup v1 hybrid): usage 3877568512, total_inactive_file 841568256. The non-total
    # inactive_file (20480, the root's own pages only) must not be the one used.
    assert working_set_v1(read("v1_root_memory.usage_in_bytes"), read("v1_root_memory.stat")) == 3036000256


def test_v2_child_working_set_is_current_minus_inactive_file() -> None:
    assert working_set_v2(read("v2_kubepods_memory.stat"), read("v2_kubepods_memory.current")) == (
        830472192 - 201326592
    )


def test_v2_root_has_no_memory_current_usage_is_anon_plus_file() -> None:
    assert working_set_v2(read("v2_root_memory.stat"), None) == 1610612736 + 2147483648 - 1073741824


@pytest.mark.parametrize(
    ("usage", "stat", "expected"),
    [
        ("100\n", "total_inactive_file 30\n", 70),
        ("100\n", "total_inactive_file 300\n", 0),  # never below zero, as cAdvisor
        ("100\n", "cache 5\n", 100),  # without the figure the whole usage counts
    ],
)
def test_v1_working_set_table(usage: str, stat: str, expected: int) -> None:
    assert working_set_v1(usage, stat) == expected


@pytest.mark.parametrize(
    ("usage", "inactive_file", "expected"),
    [(100, 30, 70), (100, 300, 0), (100, None, 100), (0, 0, 0)],
)
def test_working_set_table(usage: int, inactive_file: int | None, expected: int) -> None:
    # The numbers' rule the stats provider shares: never below zero, the whole usage without the figure.
    assert working_set(usage, inactive_file) == expected


@pytest.mark.parametrize(
    ("current", "stat", "expected"),
    [
        (500, {"anon": 600, "file": 400}, 500),  # a child: memory.current
        (None, {"anon": 600, "file": 400}, 1000),  # the root: anon + file
        (None, {"anon": 600}, 600),
        (None, {}, 0),
    ],
)
def test_usage_v2_table(current: int | None, stat: dict[str, int], expected: int) -> None:
    assert usage_v2(current, stat) == expected


@pytest.mark.parametrize(
    ("limit", "expected"),
    [((1 << 62) + 1, None), (1 << 62, 1 << 62), (9223372036854771712, None), (2147483648, 2147483648)],
)
def test_limit_or_unlimited_table(limit: int, expected: int | None) -> None:
    assert limit_or_unlimited(limit) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max\n", None),
        ("9223372036854771712\n", None),
        ("2147483648\n", 2147483648),
        (read("v2_kubepods_memory.max"), None),
    ],
)
def test_memory_limit(text: str, expected: int | None) -> None:
    assert memory_limit(text) == expected


@pytest.mark.parametrize(("usage", "stat"), [("", "a 1"), ("12x", "a 1"), ("1", "a b"), ("1", "a 1 2")])
def test_bad_content_raises(usage: str, stat: str) -> None:
    with pytest.raises(CgroupParseError):
        working_set_v1(usage, stat)


def test_flat_keyed_skips_blank_lines() -> None:
    assert parse_flat_keyed("low 0\n\nhigh 3\n") == {"low": 0, "high": 3}


def test_memory_observation() -> None:
    # As upstream's summary: available = limit - working set; capacity = available + working set.
    assert memory_observation(8 * 2**30, 3 * 2**30, NOW) == Observation(5 * 2**30, 8 * 2**30, NOW)
    assert memory_observation(2**30, 2 * 2**30).available == 0


def test_fs_observations_need_both_numbers() -> None:
    both = fs_observations(
        Signal.NODEFS_AVAILABLE,
        Signal.NODEFS_INODES_FREE,
        available_bytes=10,
        capacity_bytes=100,
        inodes_free=5,
        inodes=50,
        time=NOW,
    )
    assert both == {
        Signal.NODEFS_AVAILABLE: Observation(10, 100, NOW),
        Signal.NODEFS_INODES_FREE: Observation(5, 50, NOW),
    }
    no_inodes = fs_observations(
        Signal.IMAGEFS_AVAILABLE,
        Signal.IMAGEFS_INODES_FREE,
        available_bytes=10,
        capacity_bytes=100,
        inodes_free=None,
        inodes=None,
    )
    assert list(no_inodes) == [Signal.IMAGEFS_AVAILABLE]


def test_pid_observation() -> None:
    assert pid_observation(4194304, 1234, NOW) == Observation(4194304 - 1234, 4194304, NOW)


def test_parse_signal() -> None:
    assert parse_signal("allocatableMemory.available") is Signal.ALLOCATABLE_MEMORY_AVAILABLE
    assert parse_signal("memory.free") is None


@pytest.mark.parametrize(
    ("value", "binary", "decimal"),
    [
        (0, "0", "0"),
        (512, "512", "512"),
        (1024, "1Ki", "1024"),
        (1500, "1500", "1500"),
        (44040192, "42Mi", "44040192"),
        (2**30, "1Gi", "1073741824"),
        (12000, "12000", "12k"),
        (10**9, "1000000000", "1G"),
    ],
)
def test_quantity_printing(value: int, binary: str, decimal: str) -> None:
    assert format_binary(value) == binary
    assert format_decimal(value) == decimal
    assert str(Quantity.of_bytes(value)) == binary
    assert str(Quantity.of_count(value)) == decimal
