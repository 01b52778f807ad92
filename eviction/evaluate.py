"""Threshold evaluation over observations, as upstream's helpers: which thresholds are met, since when, which node
conditions they raise and for how long those are held, and which resource to reclaim first.

Every function is pure: the history (when a threshold was first met, when a condition was last seen) goes in and
comes out as plain mappings, and `now` is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from eviction.signals import (
    SIGNAL_TO_CONDITION,
    SIGNAL_TO_RESOURCE,
    NodeCondition,
    Observations,
    Resource,
    Signal,
)
from eviction.thresholds import Threshold, threshold_quantity

ThresholdsObservedAt = Mapping[Threshold, datetime]
ConditionsObservedAt = Mapping[NodeCondition, datetime]


def thresholds_met(
    thresholds: Iterable[Threshold], observations: Observations, *, enforce_min_reclaim: bool = False
) -> list[Threshold]:
    """The thresholds whose signal is below them now, grace periods aside. With `enforce_min_reclaim`, a threshold
    stays met until the signal is back above threshold + minimum reclaim (upstream's thresholdsMet). A threshold
    without an observation is not met."""
    result = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        quantity = threshold_quantity(threshold.value, observed.capacity)
        if enforce_min_reclaim and threshold.min_reclaim is not None:
            quantity += threshold_quantity(threshold.min_reclaim, observed.capacity)
        if observed.available < quantity:  # every signal's operator is LessThan
            result.append(threshold)
    return result


def merge_thresholds(a: Sequence[Threshold], b: Iterable[Threshold]) -> list[Threshold]:
    """a, then what of b is not in a already."""
    result = list(a)
    for threshold in b:
        if threshold not in result:
            result.append(threshold)
    return result


def thresholds_first_observed_at(
    thresholds: Iterable[Threshold], last: ThresholdsObservedAt, now: datetime
) -> dict[Threshold, datetime]:
    """When each threshold met now was first met: kept from before, or now. Thresholds no longer met drop out."""
    return {threshold: last.get(threshold, now) for threshold in thresholds}


def thresholds_met_grace_period(observed_at: ThresholdsObservedAt, now: datetime) -> list[Threshold]:
    """The thresholds met for at least their grace period (hard ones at once)."""
    return [threshold for threshold, at in observed_at.items() if now - at >= threshold.grace_period]


def node_conditions(thresholds: Iterable[Threshold]) -> list[NodeCondition]:
    """The node conditions the thresholds raise, each once, in the thresholds' order."""
    result: list[NodeCondition] = []
    for threshold in thresholds:
        condition = SIGNAL_TO_CONDITION.get(threshold.signal)
        if condition is not None and condition not in result:
            result.append(condition)
    return result


def node_conditions_last_observed_at(
    conditions: Iterable[NodeCondition], last: ConditionsObservedAt, now: datetime
) -> dict[NodeCondition, datetime]:
    """Conditions seen now are stamped now; the others keep the time they were last seen."""
    result = dict(last)
    result.update(dict.fromkeys(conditions, now))
    return result


def node_conditions_observed_since(
    observed_at: ConditionsObservedAt, period: timedelta, now: datetime
) -> list[NodeCondition]:
    """The conditions seen within the transition period: a condition holds until it has been clear that long."""
    return [condition for condition, at in observed_at.items() if now - at < period]


def thresholds_updated_stats(
    thresholds: Iterable[Threshold], observations: Observations, last: Observations
) -> list[Threshold]:
    """The thresholds whose signal was read anew since the last cycle: no eviction twice on the same stale stats."""
    result = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        previous = last.get(threshold.signal)
        if (
            previous is None
            or observed.time is None
            or previous.time is None  # upstream: any time is after the zero time
            or observed.time > previous.time
        ):
            result.append(threshold)
    return result


def by_eviction_priority(thresholds: Iterable[Threshold]) -> list[Threshold]:
    """Memory first, then the rest in their order; thresholds with no resource to reclaim last."""

    def key(threshold: Threshold) -> int:
        if threshold.signal in (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE):
            return 0
        return 1 if threshold.signal in SIGNAL_TO_RESOURCE else 2

    return sorted(thresholds, key=key)


def reclaimable_threshold(thresholds: Iterable[Threshold]) -> tuple[Threshold, Resource] | None:
    """The first threshold with a resource to reclaim, and that resource."""
    for threshold in thresholds:
        resource = SIGNAL_TO_RESOURCE.get(threshold.signal)
        if resource is not None:
            return threshold, resource
    return None
