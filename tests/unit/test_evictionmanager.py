"""The eviction manager's wiring: observations from the stats summary, pods from pod objects, one cycle end to end
(conditions, the node event, one victim with its grace period and message), admission under pressure, a bad
threshold at start-up, and the Kubelet's eviction status."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from dataclasses import replace
from typing import Any

import httpx
import pytest

from cri.v1 import api_pb2
from eviction.disks import DiskLayout
from eviction.pods import QOSClass
from eviction.result import Eviction
from eviction.signals import Observation, Signal
from eviction.thresholds import ThresholdError
from nodeagent.config import KubeletConfiguration
from nodeagent.evictionmanager import (
    EvictionInputs,
    EvictionManager,
    disk_layout,
    eviction_config,
    observations_from_summary,
    pod_info,
    usage_from_summary,
)
from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.kubelet import PodEviction
from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.stats.types import (
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    RlimitStats,
    RuntimeStats,
    Summary,
)
from tests.unit.fakeclock import FakeClock
from tests.unit.nodestatus.test_manager import FACTS

MI = 1 << 20
GI = 1 << 30
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def node(available: int, working_set: int) -> NodeStats:
    return NodeStats(
        node_name="n",
        start_time=T0,
        memory=MemoryStats(time=T0, available_bytes=available, working_set_bytes=working_set),
        fs=FsStats(time=T0, available_bytes=50 * GI, capacity_bytes=100 * GI, inodes_free=900, inodes=1000),
        runtime=RuntimeStats(
            image_fs=FsStats(time=T0, available_bytes=40 * GI, capacity_bytes=100 * GI),
            container_fs=FsStats(time=T0, available_bytes=40 * GI, capacity_bytes=100 * GI),
        ),
        rlimit=RlimitStats(time=T0, max_pid=4_194_304, num_of_running_processes=300),
    )


def pod_stats(uid: str, name: str, working_set: int) -> PodStats:
    return PodStats(
        pod_ref=PodReference(name=name, namespace="default", uid=uid),
        start_time=T0,
        memory=MemoryStats(time=T0, working_set_bytes=working_set),
        containers=(
            ContainerStats(name="main", start_time=T0, memory=MemoryStats(time=T0, working_set_bytes=working_set)),
        ),
    )


def pod(uid: str, name: str, *, memory_request: str | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if memory_request is not None:
        container["resources"] = {"requests": {"memory": memory_request}}
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "default"},
        "spec": {"containers": [container], **spec},
        "status": {"phase": "Running"},
    }


def test_observations_from_summary() -> None:
    observed = observations_from_summary(Summary(node=node(available=3 * GI, working_set=1 * GI)))
    assert observed[Signal.MEMORY_AVAILABLE] == Observation(3 * GI, 4 * GI, T0)
    assert observed[Signal.NODEFS_AVAILABLE] == Observation(50 * GI, 100 * GI, T0)
    assert observed[Signal.NODEFS_INODES_FREE] == Observation(900, 1000, T0)
    assert observed[Signal.IMAGEFS_AVAILABLE] == Observation(40 * GI, 100 * GI, T0)
    assert Signal.IMAGEFS_INODES_FREE not in observed  # ImageFsInfo gave no inode capacity
    assert observed[Signal.PID_AVAILABLE] == Observation(4_194_304 - 300, 4_194_304, T0)
    assert Signal.ALLOCATABLE_MEMORY_AVAILABLE not in observed  # no allocatable given, no kubepods container


def test_usage_from_summary() -> None:
    usage = usage_from_summary(Summary(node=node(1, 1), pods=(pod_stats("u1", "hog", 512 * MI),)))
    assert usage["u1"].memory_working_set == 512 * MI
    assert [(c.name, c.memory_working_set) for c in usage["u1"].containers] == [("main", 512 * MI)]


@pytest.mark.parametrize(
    ("spec", "memory", "expected_qos", "critical"),
    [
        ({}, None, QOSClass.BEST_EFFORT, False),
        ({}, "64Mi", QOSClass.BURSTABLE, False),
        ({"priority": 2_000_001_000}, None, QOSClass.BEST_EFFORT, True),
    ],
)
def test_pod_info(spec: dict[str, Any], memory: str | None, expected_qos: QOSClass, critical: bool) -> None:
    info = pod_info(pod("u1", "p1", memory_request=memory, **spec))
    assert (info.uid, info.ref, info.qos, info.critical) == ("u1", "default/p1", expected_qos, critical)
    assert info.memory_request == (64 * MI if memory else 0)
    assert str(info.containers[0].memory_request) == (memory or "0")


def test_pod_info_reads_tolerations_and_local_volumes() -> None:
    info = pod_info(
        pod(
            "u1",
            "p1",
            tolerations=[{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}],
            volumes=[
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "ram", "emptyDir": {"medium": "Memory"}},
            ],
        )
    )
    assert info.tolerations[0].tolerates("node.kubernetes.io/memory-pressure", "NoSchedule")
    assert info.local_volumes == ("scratch",)
    assert info.empty_dir_size_limits["scratch"].value == GI


def _with_limit(name: str, limit: str | None, **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "busybox", **extra}
    if limit is not None:
        container["resources"] = {"limits": {"ephemeral-storage": limit}}
    return container


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # No container sets one: no pod limit, so the pod-level check never applies (upstream: not found).
        ({"containers": [_with_limit("a", None)]}, None),
        # One container: its own text, as upstream's deep copy keeps it (the differential corpus's
        # evict-storage-limit-* scenarios: "... exceeds the total limit of containers 20Mi.").
        ({"containers": [_with_limit("a", "20Mi"), _with_limit("b", None)]}, (20 * MI, "20Mi")),
        # A sum prints canonically in the first one's format.
        ({"containers": [_with_limit("a", "10Mi"), _with_limit("b", "1536Ki")]}, (11.5 * MI, "11776Ki")),
        ({"containers": [_with_limit("a", "1G"), _with_limit("b", "1Mi")]}, (10**9 + MI, "1001048576")),
        # An init container's own limit is a floor; a sidecar adds to the sum and to later init containers.
        ({"containers": [_with_limit("a", "10Mi")], "initContainers": [_with_limit("i", "30Mi")]}, (30 * MI, "30Mi")),
        (
            {
                "containers": [_with_limit("a", "10Mi")],
                "initContainers": [
                    _with_limit("s", "5Mi", restartPolicy="Always"),
                    _with_limit("i", "12Mi"),
                ],
            },
            (17 * MI, "17Mi"),
        ),
        # Overhead is added to a non-zero sum only.
        ({"containers": [_with_limit("a", "10Mi")], "overhead": {"ephemeral-storage": "1Mi"}}, (11 * MI, "11Mi")),
        ({"containers": [_with_limit("a", None)], "overhead": {"ephemeral-storage": "1Mi"}}, None),
    ],
)
def test_pod_info_ephemeral_storage_limit(spec: dict[str, Any], expected: tuple[float, str] | None) -> None:
    info = pod_info({"metadata": {"uid": "u", "name": "p", "namespace": "default"}, "spec": spec})
    limit = info.ephemeral_storage_limit
    assert (None if limit is None else (limit.value, str(limit))) == expected


def config(**hard: str) -> KubeletConfiguration:
    return replace(KubeletConfiguration(), eviction_hard=hard)


def test_a_bad_threshold_is_refused_with_its_signal() -> None:
    with pytest.raises(ThresholdError) as found:
        eviction_config(config(**{"memory.available": "-1Mi"}))
    assert str(found.value).startswith("evictionHard: memory.available: ")


class Harness:
    def __init__(self, summary: Summary, pods: list[dict[str, Any]]) -> None:
        self.summary = summary
        self.pods = pods
        self.evicted: list[tuple[str, Eviction]] = []
        self.node_events: list[tuple[str, str, str]] = []
        self.pod_events: list[tuple[str, str, str, str]] = []
        self.annotations: list[dict[str, str]] = []

    async def read(self) -> Summary:
        return self.summary

    def inputs(self) -> EvictionInputs:
        return EvictionInputs(
            summary=self.read,
            active_pods=lambda: self.pods,
            evict=lambda p, e: self.evicted.append((p["metadata"]["name"], e)),
            record_node_event=lambda t, r, m: self.node_events.append((t, r, m)),
            record_pod_event=self.pod_event,
        )

    def pod_event(self, pod: dict[str, Any], type_: str, reason: str, message: str, annotations: Any) -> None:
        self.pod_events.append((pod["metadata"]["name"], type_, reason, message))
        self.annotations.append(dict(annotations))


async def test_one_cycle_under_memory_pressure_evicts_one_pod() -> None:
    summary = Summary(
        node=node(available=42 * MI, working_set=4 * GI),
        pods=(pod_stats("u1", "hog", 512 * MI), pod_stats("u2", "calm", 16 * MI), pod_stats("u3", "req", 8 * MI)),
    )
    pods = [pod("u1", "hog"), pod("u2", "calm"), pod("u3", "req", memory_request="64Mi")]
    harness = Harness(summary, pods)
    manager = EvictionManager(eviction_config(config(**{"memory.available": "100Mi"})), clock=FakeClock())
    assert manager.admit(pod("u9", "new")) is None  # nothing observed yet
    await manager.synchronize(harness.inputs())
    assert manager.pressure_conditions() == frozenset({"MemoryPressure"})
    assert harness.node_events == [("Warning", "EvictionThresholdMet", "Attempting to reclaim memory")]
    [(name, eviction)] = harness.evicted
    message = (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "
        "Container main was using 512Mi, request is 0, has larger consumption of memory. "
    )
    assert (name, eviction.message, eviction.grace_period_seconds, eviction.disruption_target) == (
        "hog",
        message,
        1,
        True,
    )
    assert harness.pod_events == [("hog", "Warning", "Evicted", message)]
    # Upstream's AnnotatedEventf: the offending containers, their usage and the starved resource.
    assert harness.annotations == [
        {"offending_containers": "main", "offending_containers_usage": "512Mi", "starved_resource": "memory"}
    ]
    # kubelet_evictions counts it, and the age of the memory stats it acted on is observed once.
    registry = manager.metrics.registry
    assert registry.get_sample_value("kubelet_evictions_total", {"eviction_signal": "memory.available"}) == 1
    labels = {"eviction_signal": "memory.available"}
    assert registry.get_sample_value("kubelet_eviction_stats_age_seconds_count", labels) == 1
    # Admission under MemoryPressure: BestEffort refused unless it tolerates the taint; Burstable admitted.
    refused = manager.admit(pod("u9", "new"))
    assert refused is not None
    assert (refused.reason, refused.message) == ("Evicted", "The node had condition: [MemoryPressure]. ")
    assert manager.admit(pod("u9", "new", memory_request="1Mi")) is None
    tolerating = pod(
        "u9",
        "new",
        tolerations=[{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}],
    )
    assert manager.admit(tolerating) is None


async def test_no_pressure_no_eviction_and_the_condition_is_held_for_the_transition_period() -> None:
    clock = FakeClock()
    harness = Harness(Summary(node=node(available=42 * MI, working_set=4 * GI)), [])
    manager = EvictionManager(eviction_config(config(**{"memory.available": "100Mi"})), clock=clock)
    await manager.synchronize(harness.inputs())
    assert manager.pressure_conditions() == frozenset({"MemoryPressure"})
    assert harness.evicted == []  # nobody to evict
    harness.summary = Summary(node=node(available=3 * GI, working_set=1 * GI))
    await clock.advance(10)
    await manager.synchronize(harness.inputs())
    assert manager.pressure_conditions() == frozenset({"MemoryPressure"})  # held (5m transition period)
    await clock.advance(301)
    await manager.synchronize(harness.inputs())
    assert manager.pressure_conditions() == frozenset()
    assert len(harness.node_events) == 1


async def test_run_observes_every_ten_seconds() -> None:
    clock = FakeClock()
    harness = Harness(Summary(node=node(available=3 * GI, working_set=1 * GI)), [])
    reads = 0

    async def read() -> Summary:
        nonlocal reads
        reads += 1
        return harness.summary

    manager = EvictionManager(eviction_config(config(**{"memory.available": "100Mi"})), clock=clock)
    task = asyncio.create_task(manager.run(replace(harness.inputs(), summary=read)))
    try:
        await clock.advance(0)
        assert reads == 1
        await clock.advance(9)
        assert reads == 1
        await clock.advance(1)
        assert reads == 2
        # without a notifier nothing can wake the loop early: between cycles it is one sleep, no helper tasks
        assert asyncio.all_tasks() == {task, asyncio.current_task()}
    finally:
        task.cancel()


def test_pod_eviction_status() -> None:
    now = datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.UTC)
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    out = PodEviction("Evicted", "The node was low on resource: memory. ", disruption_target=True).apply(status, now)
    assert (out["phase"], out["reason"], out["message"]) == (
        "Failed",
        "Evicted",
        "The node was low on resource: memory. ",
    )
    target = [c for c in out["conditions"] if c["type"] == "DisruptionTarget"]
    assert target == [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": "2026-01-01T12:00:00Z",
            "reason": "TerminationByKubelet",
            "message": "The node was low on resource: memory. ",
        }
    ]
    assert status["phase"] == "Running"  # the input is not changed
    plain = PodEviction("Evicted", "m").apply(status, now)
    assert [c["type"] for c in plain["conditions"]] == ["Ready"]


async def _healthy() -> tuple[bool, str]:
    return True, ""


@pytest.mark.parametrize(
    ("pressure", "expected"),
    [
        (frozenset(), {"MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}),
        (
            frozenset({"MemoryPressure", "PIDPressure"}),
            {"MemoryPressure": "True", "DiskPressure": "False", "PIDPressure": "True"},
        ),
    ],
)
async def test_the_node_status_shows_the_managers_conditions(
    pressure: frozenset[str], expected: dict[str, str]
) -> None:
    client = KubeClient(ClusterCredentials(server="https://198.18.0.1"), transport=httpx.MockTransport(_refuse))
    manager = NodeStatusManager(
        client,
        node_name="n",
        config=KubeletConfiguration(),
        facts=FACTS,
        runtime_health=_healthy,
        clock=FakeClock(),
        pressure=lambda: pressure,
    )
    conditions = await manager._compute_conditions([])
    assert {c["type"]: c["status"] for c in conditions if c["type"] in expected} == expected
    memory = next(c for c in conditions if c["type"] == "MemoryPressure")
    assert memory["reason"] == (
        "KubeletHasInsufficientMemory" if "MemoryPressure" in pressure else "KubeletHasSufficientMemory"
    )
    await client.aclose()


def _refuse(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"no API call expected: {request.method} {request.url}")


async def test_a_restart_under_pressure_keeps_the_nodes_condition_for_the_transition_period() -> None:
    clock = FakeClock()
    manager = EvictionManager(eviction_config(config(**{"memory.available": "100Mi"})), clock=clock)
    node_obj = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "MemoryPressure", "status": "True"},
                {"type": "DiskPressure", "status": "False"},
                {"type": "PIDPressure", "status": "True"},
            ]
        }
    }
    assert manager.restore_conditions(node_obj, clock.wall()) == {"MemoryPressure", "PIDPressure"}
    assert manager.pressure_conditions() == {"MemoryPressure", "PIDPressure"}
    # The first cycle sees no pressure: the restored conditions are held for the transition period (5m), then go.
    harness = Harness(Summary(node=node(available=3 * GI, working_set=1 * GI)), [])
    await manager.synchronize(harness.inputs())
    assert manager.pressure_conditions() == {"MemoryPressure", "PIDPressure"}
    await clock.advance(301)
    await manager.synchronize(harness.inputs())
    assert manager.pressure_conditions() == frozenset()
    assert manager.restore_conditions(None, clock.wall()) == frozenset()  # standalone: no Node


async def test_the_disk_layout_comes_from_the_image_filesystems_device(tmp_path: Any) -> None:
    def info(image: str, container: str = "") -> Any:
        async def call() -> api_pb2.ImageFsInfoResponse:
            response = api_pb2.ImageFsInfoResponse()
            response.image_filesystems.add().fs_id.mountpoint = image
            if container:
                response.container_filesystems.add().fs_id.mountpoint = container
            return response

        return call

    (tmp_path / "images").mkdir()
    assert await disk_layout(info(str(tmp_path / "images")), str(tmp_path)) == DiskLayout()
    # /proc is another filesystem than the root dir's: a dedicated imagefs; containers back on the root's: split.
    assert await disk_layout(info("/proc"), str(tmp_path)) == DiskLayout(dedicated_image_fs=True)
    split = DiskLayout(dedicated_image_fs=True, split_container_image_fs=True)
    assert await disk_layout(info("/proc", str(tmp_path)), str(tmp_path)) == split

    async def broken() -> api_pb2.ImageFsInfoResponse:
        raise RuntimeError("runtime down")

    assert await disk_layout(broken, str(tmp_path)) == DiskLayout()


async def test_after_an_eviction_the_next_cycle_waits_for_the_pod_to_be_cleaned_up() -> None:
    clock = FakeClock()
    summary = Summary(node=node(available=42 * MI, working_set=4 * GI), pods=(pod_stats("u1", "hog", 512 * MI),))
    harness = Harness(summary, [pod("u1", "hog")])
    reads = 0
    cleaned = False

    async def read() -> Summary:
        nonlocal reads
        reads += 1
        return harness.summary

    def evict(p: dict[str, Any], e: Eviction) -> None:
        harness.evicted.append((p["metadata"]["name"], e))
        harness.pods = []  # no longer active

    inputs = replace(harness.inputs(), summary=read, evict=evict, pod_cleaned_up=lambda p: cleaned)
    manager = EvictionManager(eviction_config(config(**{"memory.available": "100Mi"})), clock=clock)
    task = asyncio.create_task(manager.run(inputs))
    try:
        await clock.advance(0)
        assert (reads, len(harness.evicted)) == (1, 1)
        await clock.advance(3)  # polled every second; not cleaned up yet: no cycle
        assert reads == 1
        cleaned = True
        await clock.advance(1)  # cleaned up at t=4: the next cycle follows at once, as upstream's loop
        assert reads == 2
        assert len(harness.evicted) == 1  # the pod is gone: nothing more to evict
        await clock.advance(9)
        assert reads == 2  # no eviction in that cycle: the period is waited again
        await clock.advance(1)
        assert reads == 3
    finally:
        task.cancel()


async def test_the_cleanup_wait_ends_after_thirty_seconds() -> None:
    clock = FakeClock()
    summary = Summary(node=node(available=42 * MI, working_set=4 * GI), pods=(pod_stats("u1", "hog", 512 * MI),))
    harness = Harness(summary, [pod("u1", "hog")])
    reads = 0

    async def read() -> Summary:
        nonlocal reads
        reads += 1
        return harness.summary

    inputs = replace(harness.inputs(), summary=read, pod_cleaned_up=lambda p: False)
    manager = EvictionManager(eviction_config(config(**{"memory.available": "100Mi"})), clock=clock)
    task = asyncio.create_task(manager.run(inputs))
    try:
        await clock.advance(0)
        assert reads == 1
        for _ in range(29):
            await clock.advance(1)
        assert reads == 1
        await clock.advance(1)
        assert reads == 2  # timed out at t=30: the next cycle at once, as upstream
    finally:
        task.cancel()


class _Notifier:
    """A memory threshold notifier the test fires by hand (the protocol run() drives)."""

    description = "hard memory eviction threshold"

    def __init__(self) -> None:
        self.handler: Any = None

    def start(self, handler: Any) -> None:
        self.handler = handler

    def update(self, summary: Summary, allocatable_memory: int | None) -> None:
        pass

    def stop(self) -> None:
        pass


async def test_under_a_lasting_pressure_one_pod_goes_per_cleanup_and_a_notification_does_not_hurry_it() -> None:
    """Upstream's pacing: each synchronize evicts at most one pod and the next waits for its cleanup, then follows
    at once; a notification meanwhile (the kernel signals when the victim frees its memory) starts no cycle."""
    clock = FakeClock()
    names = ("a", "b", "c")
    summary = Summary(
        node=node(available=42 * MI, working_set=4 * GI),
        pods=tuple(pod_stats(f"u-{n}", n, (300 - 100 * i) * MI) for i, n in enumerate(names)),
    )
    harness = Harness(summary, [pod(f"u-{n}", n) for n in names])
    reads: list[float] = []
    gone_at: dict[str, float] = {}

    async def read() -> Summary:
        reads.append(clock.monotonic())
        # fresh stats each read (upstream acts only on a threshold whose stats were updated since the last cycle)
        at = T0 + datetime.timedelta(seconds=clock.monotonic())
        memory = harness.summary.node.memory
        assert memory is not None
        fresh = replace(harness.summary.node, memory=replace(memory, time=at))
        return replace(harness.summary, node=fresh)

    def evict(p: dict[str, Any], e: Eviction) -> None:
        harness.evicted.append((p["metadata"]["name"], e))
        gone_at[p["metadata"]["uid"]] = clock.monotonic() + 2  # its containers stop 2 s later
        harness.pods = [q for q in harness.pods if q["metadata"]["uid"] != p["metadata"]["uid"]]

    def cleaned_up(p: dict[str, Any]) -> bool:
        return clock.monotonic() >= gone_at[p["metadata"]["uid"]]

    notifier = _Notifier()
    inputs = replace(harness.inputs(), summary=read, evict=evict, pod_cleaned_up=cleaned_up)
    manager = EvictionManager(eviction_config(config(**{"memory.available": "100Mi"})), clock=clock)
    task = asyncio.create_task(manager.run(inputs, [notifier]))
    try:
        await clock.advance(0)
        assert [n for n, _ in harness.evicted] == ["a"]  # one victim per synchronize, the largest user first
        await clock.advance(0.5)
        notifier.handler("eviction manager: hard memory eviction threshold crossed")
        await clock.advance(0.5)
        assert (len(reads), len(harness.evicted)) == (1, 1)  # cleaning up: the notification waits
        await clock.advance(1)  # t=2: a is cleaned up; the next cycle at once
        assert [n for n, _ in harness.evicted] == ["a", "b"]
        assert len(reads) == 2
        await clock.advance(2)  # t=4
        assert [n for n, _ in harness.evicted] == ["a", "b", "c"]
        assert reads == [0.0, 2.0, 4.0]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
