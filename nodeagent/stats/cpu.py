"""usageNanoCores: a rate, so it needs two samples of the cumulative CPU time.

As upstream's CRI stats provider keeps a `cpuUsageCache` (and cAdvisor its sample history), the provider keeps the
last sample of every container, pod and cgroup it measured, and the rate it computed from the one before. A sample
closer than `min_window` to the kept one reports the kept rate and does not replace it, so two callers that ask at
the same moment (metrics-server and the eviction manager) do not turn the rate into noise over a window of a few
microseconds. Entries not refreshed for 10 minutes go (upstream's defaultCachePeriod).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

NANOS_PER_SECOND = 1_000_000_000
DEFAULT_MIN_WINDOW_NS = NANOS_PER_SECOND
DEFAULT_CACHE_PERIOD_NS = 10 * 60 * NANOS_PER_SECOND


@dataclass(frozen=True, slots=True)
class CpuSample:
    timestamp_ns: int
    usage_core_nano_seconds: int


@dataclass(frozen=True, slots=True)
class CpuRecord:
    sample: CpuSample
    usage_nano_cores: int | None  # None until two samples far enough apart were seen


def next_cpu_record(previous: CpuRecord | None, sample: CpuSample, *, min_window_ns: int) -> CpuRecord:
    """The record to keep after `sample`; its `usage_nano_cores` is the rate to report.

    A first sample, or a counter that went back (a container restarted under the same key), starts over without a
    rate, as upstream's getAndUpdateContainerUsageNanoCores does.
    """
    if previous is None or sample.usage_core_nano_seconds < previous.sample.usage_core_nano_seconds:
        return CpuRecord(sample, None)
    window = sample.timestamp_ns - previous.sample.timestamp_ns
    if window < max(min_window_ns, 1):
        return previous
    used = sample.usage_core_nano_seconds - previous.sample.usage_core_nano_seconds
    return CpuRecord(sample, int(used * NANOS_PER_SECOND / window))


class CpuUsageCache:
    """The kept records by key (("container", id), ("pod", sandbox id), ("cgroup", path))."""

    def __init__(
        self, *, min_window_ns: int = DEFAULT_MIN_WINDOW_NS, cache_period_ns: int = DEFAULT_CACHE_PERIOD_NS
    ) -> None:
        self._records: dict[Hashable, CpuRecord] = {}
        self._min_window_ns = min_window_ns
        self._cache_period_ns = cache_period_ns

    def update(self, key: Hashable, sample: CpuSample) -> int | None:
        record = next_cpu_record(self._records.get(key), sample, min_window_ns=self._min_window_ns)
        self._records[key] = record
        return record.usage_nano_cores

    def prune(self, now_ns: int) -> None:
        """Forget what was not sampled for the cache period (removed containers and pods)."""
        stale = [k for k, r in self._records.items() if now_ns - r.sample.timestamp_ns > self._cache_period_ns]
        for key in stale:
            del self._records[key]

    def __len__(self) -> int:
        return len(self._records)
