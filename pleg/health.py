"""PLEG health: how long since the last successful relist, against a threshold (upstream: GenericPLEG.Healthy).

A relist that cannot reach the runtime does not move its timestamp. Once the last success is older than the
threshold, the PLEG is unhealthy and the node's Ready condition says so with upstream's message ("PLEG is not
healthy: pleg was last seen active 3m0.2s ago; threshold is 3m0s"). Durations are printed as Go prints them, so the
message reads as the kubelet's.

The periods and thresholds are upstream's: the generic relist runs every second and is unhealthy after 3 minutes;
while the evented PLEG is in use, the relist is only a safety net every 5 minutes, unhealthy after 10.
"""

from __future__ import annotations

from dataclasses import dataclass

# Upstream's plegChannelCapacity: the syncLoop's PLEG channel.
CHANNEL_CAPACITY = 1000


@dataclass(frozen=True)
class RelistDuration:
    """How often to relist, and how old the last successful relist may be before the PLEG is unhealthy (seconds)."""

    period: float
    threshold: float


GENERIC_RELIST = RelistDuration(period=1.0, threshold=180.0)
EVENTED_RELIST = RelistDuration(period=300.0, threshold=600.0)

_UNITS = ((3600 * 10**9, "h"), (60 * 10**9, "m"))


def go_duration(seconds: float) -> str:
    """`time.Duration.String()`: 3m0s, 10.5s, 1h0m0s, 250ms, 1.5µs, 0s."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 10**9:
        for size, unit in ((10**6, "ms"), (10**3, "µs"), (1, "ns")):
            if ns >= size:
                return sign + _decimal(ns, size) + unit
    out = ""
    for size, unit in _UNITS:
        if ns >= size or out:
            out += f"{ns // size}{unit}"
            ns %= size
    return sign + out + _decimal(ns, 10**9) + "s"


def _decimal(value: int, size: int) -> str:
    whole, fraction = divmod(value, size)
    if not fraction:
        return str(whole)
    digits = len(str(size)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")


def relist_health(last_relist: float | None, now: float, threshold: float) -> tuple[bool, str]:
    """(healthy, why not) from the monotonic time of the last successful relist; pure."""
    if last_relist is None:
        return False, "pleg has yet to be successful"
    elapsed = now - last_relist
    if elapsed > threshold:
        return False, f"pleg was last seen active {go_duration(elapsed)} ago; threshold is {go_duration(threshold)}"
    return True, ""


def channel_health(queued: int, capacity: int) -> tuple[bool, str]:
    """Upstream's EventedPLEG.Healthy: unhealthy while the event channel is full."""
    if capacity > 0 and queued >= capacity:
        return False, f"pleg event channel capacity is full with {queued} events"
    return True, ""
