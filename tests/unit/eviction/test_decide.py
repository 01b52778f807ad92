"""One cycle at a time, as upstream's synchronize: conditions, grace periods, transition period, min reclaim, stale
stats, node-level reclaim first, one victim, and local storage limits. Time is passed in; nothing sleeps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from eviction.decide import Decision, EvictionConfig, History, decide, reclaim_relieved
from eviction.disks import DiskLayout, NodeReclaim
from eviction.evaluate import (
    node_conditions_observed_since,
    thresholds_met,
    thresholds_met_grace_period,
    thresholds_updated_stats,
)
from eviction.pods import ContainerInfo, ContainerUsage, FsUsage, PodInfo, PodUsage, QOSClass
from eviction.quantity import Quantity
from eviction.signals import NodeCondition, Observation, Resource, Signal
from eviction.thresholds import Threshold, ThresholdValue, parse_percentage

MI = 2**20
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CAPACITY = 4096 * MI


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def quantity(mi: int) -> ThresholdValue:
    return ThresholdValue(quantity=Decimal(mi * MI), text=f"{mi}Mi")


HARD = Threshold(Signal.MEMORY_AVAILABLE, quantity(100))
SOFT = Threshold(Signal.MEMORY_AVAILABLE, quantity(500), grace_period=timedelta(seconds=30))
HARD_WITH_RECLAIM = Threshold(Signal.MEMORY_AVAILABLE, quantity(100), min_reclaim=quantity(200))
NODEFS = Threshold(Signal.NODEFS_AVAILABLE, ThresholdValue(percentage=parse_percentage("10%")))
PID = Threshold(Signal.PID_AVAILABLE, ThresholdValue(quantity=Decimal(1000), text="1k"))


def memory(available_mi: int, seconds: float) -> dict[Signal, Observation]:
    return {Signal.MEMORY_AVAILABLE: Observation(available_mi * MI, CAPACITY, at(seconds))}


HOG = PodInfo(uid="hog", namespace="default", name="hog", qos=QOSClass.BEST_EFFORT, containers=(ContainerInfo("hog"),))
SLEEPER = PodInfo(uid="sleeper", namespace="default", name="sleeper", qos=QOSClass.BEST_EFFORT)
GUARANTEED = PodInfo(
    uid="g",
    namespace="default",
    name="g",
    qos=QOSClass.GUARANTEED,
    memory_request=512 * MI,
    termination_grace_period_seconds=30,
)
STATIC = PodInfo(uid="static", namespace="kube-system", name="etcd", static=True)
PODS = (SLEEPER, GUARANTEED, HOG)
USAGE: Mapping[str, PodUsage] = {
    "hog": PodUsage(memory_working_set=2048 * MI, containers=(ContainerUsage("hog", memory_working_set=2048 * MI),)),
    "sleeper": PodUsage(memory_working_set=MI),
    "g": PodUsage(memory_working_set=300 * MI),
    "static": PodUsage(memory_working_set=4000 * MI),
}


class Run:
    """Cycles in a row, carrying the history as the manager would."""

    def __init__(self, config: EvictionConfig, pods: Sequence[PodInfo] = PODS) -> None:
        self.config = config
        self.pods = pods
        self.history = History()

    def cycle(self, observations: Mapping[Signal, Observation], seconds: float) -> Decision:
        decision = decide(
            config=self.config,
            observations=observations,
            history=self.history,
            pods=self.pods,
            usage=USAGE,
            now=at(seconds),
        )
        self.history = decision.history
        return decision


def test_hard_threshold_evicts_the_hog_at_once_with_upstreams_message() -> None:
    run = Run(EvictionConfig(thresholds=(HARD,)))
    calm = run.cycle(memory(1000, 0), 0)
    assert calm.node_conditions == () and calm.victim is None
    decision = run.cycle(memory(42, 10), 10)
    assert decision.node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    assert decision.resource_to_reclaim == Resource.MEMORY
    assert decision.node_reclaim == ()  # memory has nothing of the node's to free
    assert [p.name for p in decision.ranked] == ["hog", "sleeper", "g"]
    victim = decision.victim
    assert victim is not None
    assert victim.pod == HOG and victim.rank == 0
    assert victim.grace_period_seconds == 1  # upstream's immediateEvictionGracePeriodSeconds
    assert victim.signal == "memory.available"
    assert victim.disruption_target
    assert victim.message == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "
        "Container hog was using 2Gi, request is 0, has larger consumption of memory. "
    )


def test_condition_held_for_the_transition_period() -> None:
    run = Run(EvictionConfig(thresholds=(HARD,), pressure_transition_period=timedelta(minutes=5)))
    run.cycle(memory(42, 0), 0)
    assert run.cycle(memory(1000, 10), 10).node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    assert run.cycle(memory(1000, 299), 299).node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    assert run.cycle(memory(1000, 300), 300).node_conditions == ()


def test_soft_threshold_waits_for_its_grace_period_and_caps_the_pods_grace() -> None:
    config = EvictionConfig(thresholds=(SOFT,), max_pod_grace_period_seconds=20)
    run = Run(config, pods=(GUARANTEED,))
    first = run.cycle(memory(400, 0), 0)
    # The condition rises at once; the eviction waits for the grace period.
    assert first.node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    assert first.victim is None and first.threshold_to_reclaim is None
    assert run.cycle(memory(400, 29), 29).victim is None
    decision = run.cycle(memory(400, 30), 30)
    assert decision.victim is not None
    assert decision.victim.grace_period_seconds == 20  # min(evictionMaxPodGracePeriod 20, the pod's 30)


def test_soft_grace_restarts_when_the_signal_recovers() -> None:
    run = Run(EvictionConfig(thresholds=(SOFT,)))
    run.cycle(memory(400, 0), 0)
    run.cycle(memory(600, 20), 20)  # recovered: the first-observed time is forgotten
    assert run.cycle(memory(400, 40), 40).victim is None
    assert run.cycle(memory(400, 70), 70).victim is not None


def test_min_reclaim_keeps_the_threshold_met_until_reclaimed() -> None:
    run = Run(EvictionConfig(thresholds=(HARD_WITH_RECLAIM,)))
    assert run.cycle(memory(50, 0), 0).victim is not None
    # 150Mi is above the threshold but below threshold + min reclaim (300Mi): still starved.
    still = run.cycle(memory(150, 10), 10)
    assert still.starved == (HARD_WITH_RECLAIM,) and still.victim is not None
    assert run.cycle(memory(301, 20), 20).starved == ()


def test_min_reclaim_does_not_make_a_threshold_met_in_the_first_place() -> None:
    run = Run(EvictionConfig(thresholds=(HARD_WITH_RECLAIM,)))
    assert run.cycle(memory(150, 0), 0).node_conditions == ()


def test_stale_stats_do_not_evict_twice() -> None:
    run = Run(EvictionConfig(thresholds=(HARD,)))
    assert run.cycle(memory(42, 5), 10).victim is not None
    same_reading = run.cycle(memory(42, 5), 11)
    assert same_reading.victim is None
    assert same_reading.node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    assert run.cycle(memory(42, 12), 12).victim is not None


def test_critical_pods_are_skipped_and_alone_mean_no_victim() -> None:
    run = Run(EvictionConfig(thresholds=(HARD,)), pods=(STATIC, SLEEPER))
    decision = run.cycle(memory(42, 0), 0)
    assert [p.name for p in decision.ranked] == ["etcd", "sleeper"]
    assert decision.victim is not None and decision.victim.pod == SLEEPER and decision.victim.rank == 1
    alone = Run(EvictionConfig(thresholds=(HARD,)), pods=(STATIC,)).cycle(memory(42, 0), 0)
    assert alone.victim is None and alone.threshold_to_reclaim == HARD


def test_memory_goes_before_disk_and_disk_reclaims_the_node_first() -> None:
    config = EvictionConfig(thresholds=(NODEFS, HARD))
    disk_low = {Signal.NODEFS_AVAILABLE: Observation(500 * MI, 10 * 1024 * MI, at(0))}
    decision = Run(config).cycle({**disk_low, **memory(42, 0)}, 0)
    assert decision.threshold_to_reclaim == HARD
    assert decision.node_conditions == (NodeCondition.DISK_PRESSURE, NodeCondition.MEMORY_PRESSURE)
    disk_only = Run(config).cycle(disk_low, 0)
    assert disk_only.threshold_to_reclaim == NODEFS
    assert disk_only.node_reclaim == (NodeReclaim.CONTAINERS, NodeReclaim.IMAGES)
    assert disk_only.victim is not None  # evicted only if the reclaim did not relieve
    after_gc = {Signal.NODEFS_AVAILABLE: Observation(3 * 1024 * MI, 10 * 1024 * MI, at(1))}
    assert reclaim_relieved(config, after_gc)
    assert not reclaim_relieved(config, disk_low)


def test_pid_pressure() -> None:
    run = Run(EvictionConfig(thresholds=(PID,)))
    decision = run.cycle({Signal.PID_AVAILABLE: Observation(500, 32768, at(0))}, 0)
    assert decision.node_conditions == (NodeCondition.PID_PRESSURE,)
    assert decision.resource_to_reclaim == Resource.PIDS
    assert decision.victim is not None
    assert decision.victim.message == "The node was low on resource: pids. Threshold quantity: 1k, available: 500. "


def test_local_storage_limits_go_first_and_all_at_once() -> None:
    volume = PodInfo(
        uid="v",
        namespace="ns",
        name="v",
        empty_dir_size_limits={"cache": Quantity(10 * MI, "10Mi")},
        local_volumes=("cache",),
    )
    total = PodInfo(uid="t", namespace="ns", name="t", ephemeral_storage_limit=Quantity(MI, "1Mi"))
    container = PodInfo(
        uid="c",
        namespace="ns",
        name="c",
        containers=(ContainerInfo("app", ephemeral_storage_limit=Quantity(5 * MI, "5Mi")),),
    )
    usage = {
        "v": PodUsage(volumes={"cache": FsUsage(11 * MI)}),
        "t": PodUsage(ephemeral_storage_used=2 * MI),
        "c": PodUsage(containers=(ContainerUsage("app", rootfs=FsUsage(4 * MI), logs=FsUsage(2 * MI)),)),
    }
    decision = decide(
        config=EvictionConfig(thresholds=(HARD,)),
        observations=memory(42, 0),
        history=History(),
        pods=(volume, total, container),
        usage=usage,
        now=T0,
    )
    assert [(e.pod.name, e.signal, e.message, e.grace_period_seconds) for e in decision.local_storage_evictions] == [
        ("v", "emptydirfs.limit", 'Usage of EmptyDir volume "cache" exceeds the limit "10Mi". ', 1),
        (
            "t",
            "ephemeralpodfs.limit",
            "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ",
            1,
        ),
        ("c", "ephemeralcontainerfs.limit", 'Container app exceeded its local ephemeral storage limit "5Mi". ', 1),
    ]
    assert decision.victim is None  # nothing else this cycle, as upstream
    assert decision.node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    # With an imagefs only the logs count against a container's limit.
    with_imagefs = decide(
        config=EvictionConfig(layout=DiskLayout(dedicated_image_fs=True)),
        observations={},
        history=History(),
        pods=(container,),
        usage=usage,
        now=T0,
    )
    assert with_imagefs.local_storage_evictions == ()


def test_nothing_configured_does_nothing() -> None:
    history = History()
    decision = decide(
        config=EvictionConfig(local_storage_capacity_isolation=False),
        observations=memory(1, 0),
        history=history,
        pods=PODS,
        usage=USAGE,
        now=T0,
    )
    assert decision == Decision(history=history, node_conditions=())


def test_evaluate_helpers_edges() -> None:
    # No observation: not met.
    assert thresholds_met([HARD], {}) == []
    # Exactly at the threshold is not below it.
    assert thresholds_met([HARD], memory(100, 0)) == []
    assert thresholds_met([HARD], {Signal.MEMORY_AVAILABLE: Observation(100 * MI - 1, CAPACITY)}) == [HARD]
    assert thresholds_met_grace_period({SOFT: at(0)}, at(29.9)) == []
    assert node_conditions_observed_since({NodeCondition.DISK_PRESSURE: at(0)}, timedelta(0), at(0)) == []
    # A reading without a time always counts as new.
    untimed = {Signal.MEMORY_AVAILABLE: Observation(1, CAPACITY)}
    assert thresholds_updated_stats([HARD], untimed, untimed) == [HARD]
