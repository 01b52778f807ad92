"""One eviction cycle as a pure function: upstream's managerImpl.synchronize without the I/O.

`decide` takes the observations, the thresholds, the history of earlier cycles, the pods with their stats and the
time, and returns the node conditions, the new history, and what to do: pods over their local storage limits, or
else the resource to reclaim, what the node can free first (dead containers, unused images) and at most one pod to
evict (upstream evicts one per cycle, then waits for it to be cleaned up).

When `node_reclaim` is not empty the caller runs it, observes again, and evicts the victim only if
`reclaim_relieved` says the thresholds (with their minimum reclaim) are still met, as upstream does. The victim is
chosen on the stats of this cycle, as upstream's ranking and message are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from eviction.disks import DiskLayout, NodeReclaim, node_reclaim_for
from eviction.evaluate import (
    by_eviction_priority,
    merge_thresholds,
    node_conditions,
    node_conditions_last_observed_at,
    node_conditions_observed_since,
    reclaimable_threshold,
    thresholds_first_observed_at,
    thresholds_met,
    thresholds_met_grace_period,
    thresholds_updated_stats,
)
from eviction.localstorage import local_storage_evictions
from eviction.messages import eviction_message
from eviction.pods import PodInfo, UsageByPod
from eviction.rank import rank_for_signal
from eviction.result import IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS, Eviction
from eviction.signals import NodeCondition, Observation, Observations, Resource, Signal
from eviction.thresholds import Threshold

# Upstream's defaults: evictionPressureTransitionPeriod 5m, evictionMaxPodGracePeriod 0.
DEFAULT_PRESSURE_TRANSITION_PERIOD = timedelta(minutes=5)


@dataclass(frozen=True)
class EvictionConfig:
    thresholds: tuple[Threshold, ...] = ()
    pressure_transition_period: timedelta = DEFAULT_PRESSURE_TRANSITION_PERIOD
    max_pod_grace_period_seconds: int = 0
    layout: DiskLayout = field(default_factory=DiskLayout)
    local_storage_capacity_isolation: bool = True


@dataclass(frozen=True)
class History:
    """What one cycle remembers for the next (upstream keeps these on the manager)."""

    node_conditions: tuple[NodeCondition, ...] = ()
    node_conditions_last_observed_at: Mapping[NodeCondition, datetime] = field(default_factory=dict)
    thresholds_first_observed_at: Mapping[Threshold, datetime] = field(default_factory=dict)
    thresholds_met: tuple[Threshold, ...] = ()  # met and past their grace period
    last_observations: Mapping[Signal, Observation] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    history: History
    node_conditions: tuple[NodeCondition, ...]
    # Pods over a local storage limit, all evicted this cycle; when there are any, nothing else happens.
    local_storage_evictions: tuple[Eviction, ...] = ()
    # The thresholds to act on now: met, past their grace period, on fresh stats; memory first.
    starved: tuple[Threshold, ...] = ()
    threshold_to_reclaim: Threshold | None = None
    resource_to_reclaim: Resource | None = None
    node_reclaim: tuple[NodeReclaim, ...] = ()
    ranked: tuple[PodInfo, ...] = ()
    victim: Eviction | None = None


def grace_period_seconds(threshold: Threshold, pod: PodInfo, max_pod_grace_period_seconds: int) -> int:
    """How long the victim gets to stop. Hard threshold: upstream's immediate 1 s. Soft: evictionMaxPodGracePeriod,
    or the pod's own terminationGracePeriodSeconds when shorter (AllowOverwriteTerminationGracePeriodSeconds is off
    by default since 1.32)."""
    if threshold.hard:
        return IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS
    if pod.termination_grace_period_seconds is None:
        return max_pod_grace_period_seconds
    return min(max_pod_grace_period_seconds, pod.termination_grace_period_seconds)


def decide(
    *,
    config: EvictionConfig,
    observations: Observations,
    history: History,
    pods: Sequence[PodInfo],
    usage: UsageByPod,
    now: datetime,
) -> Decision:
    """One cycle; `pods` are the active pods, `usage` their stats by UID."""
    if not config.thresholds and not config.local_storage_capacity_isolation:
        return Decision(history=history, node_conditions=history.node_conditions)
    met = thresholds_met(config.thresholds, observations)
    if history.thresholds_met:
        # A threshold met before stays met until its minimum reclaim is reclaimed too.
        met = merge_thresholds(met, thresholds_met(history.thresholds_met, observations, enforce_min_reclaim=True))
    first_observed_at = thresholds_first_observed_at(met, history.thresholds_first_observed_at, now)
    last_observed_at = node_conditions_last_observed_at(
        node_conditions(met), history.node_conditions_last_observed_at, now
    )
    conditions = tuple(node_conditions_observed_since(last_observed_at, config.pressure_transition_period, now))
    past_grace = thresholds_met_grace_period(first_observed_at, now)
    new_history = History(
        node_conditions=conditions,
        node_conditions_last_observed_at=last_observed_at,
        thresholds_first_observed_at=first_observed_at,
        thresholds_met=tuple(past_grace),
        last_observations=dict(observations),
    )
    starved = tuple(by_eviction_priority(thresholds_updated_stats(past_grace, observations, history.last_observations)))
    decision = Decision(history=new_history, node_conditions=conditions)
    if config.local_storage_capacity_isolation:
        over_limit = local_storage_evictions(pods, usage, dedicated_image_fs=config.layout.dedicated_image_fs)
        if over_limit:
            return Decision(history=new_history, node_conditions=conditions, local_storage_evictions=tuple(over_limit))
    found = reclaimable_threshold(starved)
    if found is None:
        return decision
    threshold, resource = found
    ranked = tuple(rank_for_signal(threshold.signal, pods, usage, config.layout))
    victim = None
    for place, pod in enumerate(ranked):
        if pod.critical:  # as upstream's evictPod: never for node pressure
            continue
        message, annotations = eviction_message(resource, pod, usage.get(pod.uid), starved, observations)
        victim = Eviction(
            pod=pod,
            signal=str(threshold.signal),
            message=message,
            grace_period_seconds=grace_period_seconds(threshold, pod, config.max_pod_grace_period_seconds),
            annotations=annotations,
            disruption_target=True,
            rank=place,
        )
        break
    return Decision(
        history=new_history,
        node_conditions=conditions,
        starved=starved,
        threshold_to_reclaim=threshold,
        resource_to_reclaim=resource,
        node_reclaim=node_reclaim_for(threshold.signal, config.layout),
        ranked=ranked,
        victim=victim,
    )


def reclaim_relieved(config: EvictionConfig, observations: Observations) -> bool:
    """After node-level reclaim: whether no threshold (with its minimum reclaim) is met any more, so no pod goes."""
    return not thresholds_met(config.thresholds, observations, enforce_min_reclaim=True)
