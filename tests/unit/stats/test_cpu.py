"""usageNanoCores from two samples: the rate, the first sample, counter resets, windows too short to trust."""

from __future__ import annotations

import pytest

from nodeagent.stats.cpu import CpuRecord, CpuSample, CpuUsageCache, next_cpu_record

S = 1_000_000_000
MIN = S  # the default minimum window


@pytest.mark.parametrize(
    ("previous", "sample", "expected"),
    [
        pytest.param(None, CpuSample(10 * S, 5 * S), CpuRecord(CpuSample(10 * S, 5 * S), None), id="first-no-rate"),
        pytest.param(
            CpuRecord(CpuSample(10 * S, 5 * S), None),
            CpuSample(12 * S, 6 * S),
            CpuRecord(CpuSample(12 * S, 6 * S), S // 2),
            id="half-a-core",
        ),
        pytest.param(
            CpuRecord(CpuSample(10 * S, 5 * S), 7),
            CpuSample(11 * S, 7 * S),
            CpuRecord(CpuSample(11 * S, 7 * S), 2 * S),
            id="two-cores",
        ),
        pytest.param(
            CpuRecord(CpuSample(10 * S, 5 * S), 123),
            CpuSample(10 * S + S // 2, 5 * S + 1),
            CpuRecord(CpuSample(10 * S, 5 * S), 123),
            id="too-close-keeps-old-sample-and-rate",
        ),
        pytest.param(
            CpuRecord(CpuSample(10 * S, 5 * S), 123),
            CpuSample(10 * S, 5 * S),
            CpuRecord(CpuSample(10 * S, 5 * S), 123),
            id="same-time",
        ),
        pytest.param(
            CpuRecord(CpuSample(10 * S, 5 * S), 123),
            CpuSample(20 * S, S),
            CpuRecord(CpuSample(20 * S, S), None),
            id="counter-went-back-starts-over",
        ),
        pytest.param(
            CpuRecord(CpuSample(10 * S, 5 * S), 9),
            CpuSample(13 * S, 5 * S),
            CpuRecord(CpuSample(13 * S, 5 * S), 0),
            id="idle",
        ),
    ],
)
def test_next_cpu_record(previous: CpuRecord | None, sample: CpuSample, expected: CpuRecord) -> None:
    assert next_cpu_record(previous, sample, min_window_ns=MIN) == expected


def test_cache_keys_are_independent_and_stale_entries_go() -> None:
    cache = CpuUsageCache(min_window_ns=MIN, cache_period_ns=60 * S)
    assert cache.update(("container", "a"), CpuSample(0, 0)) is None
    assert cache.update(("pod", "a"), CpuSample(0, 10 * S)) is None
    assert cache.update(("container", "a"), CpuSample(2 * S, S)) == S // 2
    assert cache.update(("pod", "a"), CpuSample(4 * S, 14 * S)) == S
    assert len(cache) == 2
    cache.update(("container", "a"), CpuSample(70 * S, 2 * S))
    cache.prune(70 * S)  # the pod's sample is 66 s old, the container's fresh
    assert len(cache) == 1
    assert cache.update(("pod", "a"), CpuSample(72 * S, 20 * S)) is None  # forgotten: starts over
