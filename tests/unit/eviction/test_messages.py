"""Upstream's words: the eviction message and annotations, node condition texts, local storage messages, and the
admission refusal under pressure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from eviction.messages import (
    REASON,
    AdmitResult,
    admit,
    condition_text,
    eviction_message,
    threshold_met_event_message,
)
from eviction.pods import SYSTEM_CRITICAL_PRIORITY, ContainerInfo, ContainerUsage, FsUsage, PodInfo, PodUsage, QOSClass
from eviction.pods import Toleration as T
from eviction.quantity import Quantity
from eviction.signals import NodeCondition, Observation, Resource, Signal
from eviction.thresholds import Threshold, ThresholdValue, parse_percentage

MI = 2**20
MEMORY_100MI = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Decimal(100 * MI), text="100Mi"))
OBSERVED = {Signal.MEMORY_AVAILABLE: Observation(available=42 * MI, capacity=2048 * MI)}


def test_the_issues_example_message() -> None:
    hog = PodInfo(uid="u", namespace="default", name="hog", containers=(ContainerInfo("hog"),))
    usage = PodUsage(memory_working_set=512 * MI, containers=(ContainerUsage("hog", memory_working_set=512 * MI),))
    message, annotations = eviction_message(Resource.MEMORY, hog, usage, [MEMORY_100MI], OBSERVED)
    assert message == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "
        "Container hog was using 512Mi, request is 0, has larger consumption of memory. "
    )
    assert annotations == {
        "offending_containers": "hog",
        "offending_containers_usage": "512Mi",
        "starved_resource": "memory",
    }


def test_message_names_only_containers_over_their_request() -> None:
    pod = PodInfo(
        uid="u",
        namespace="default",
        name="web",
        containers=(
            ContainerInfo("app", memory_request=Quantity(256 * MI, "256Mi")),
            ContainerInfo("sidecar", memory_request=Quantity(64 * MI, "64Mi")),
            ContainerInfo("init", init=True),
        ),
    )
    usage = PodUsage(
        containers=(
            ContainerUsage("app", memory_working_set=100 * MI),
            ContainerUsage("sidecar", memory_working_set=80 * MI + 5),
            ContainerUsage("debugger", memory_working_set=999 * MI),  # ephemeral: not in the spec, never blamed
        )
    )
    message, annotations = eviction_message(Resource.MEMORY, pod, usage, [MEMORY_100MI], OBSERVED)
    assert message.endswith("Container sidecar was using 83886085, request is 64Mi, has larger consumption of memory. ")
    assert "app" not in message
    assert annotations["offending_containers"] == "sidecar"


def test_message_without_stats_or_observation() -> None:
    pod = PodInfo(uid="u", namespace="default", name="p")
    assert eviction_message(Resource.MEMORY, pod, None, [MEMORY_100MI], {}) == (
        "The node was low on resource: memory. ",
        {},
    )


def test_disk_message_percentage_threshold_and_rootfs_plus_logs() -> None:
    threshold = Threshold(Signal.NODEFS_AVAILABLE, ThresholdValue(percentage=parse_percentage("10%")))
    observations = {Signal.NODEFS_AVAILABLE: Observation(available=500 * MI, capacity=10 * 1024 * MI)}
    pod = PodInfo(uid="u", namespace="ns", name="filler", containers=(ContainerInfo("dd"),))
    usage = PodUsage(containers=(ContainerUsage("dd", rootfs=FsUsage(700 * MI), logs=FsUsage(324 * MI)),))
    message, _ = eviction_message(Resource.EPHEMERAL_STORAGE, pod, usage, [threshold], observations)
    assert message == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 1073741840, available: 500Mi. "
        "Container dd was using 1Gi, request is 0, has larger consumption of ephemeral-storage. "
    )


def test_inode_and_pid_messages_print_decimal() -> None:
    threshold = Threshold(Signal.PID_AVAILABLE, ThresholdValue(quantity=Decimal(1000), text="1k"))
    observations = {Signal.PID_AVAILABLE: Observation(available=12000 - 11500, capacity=12000)}
    pod = PodInfo(uid="u", namespace="ns", name="forker")
    message, annotations = eviction_message(Resource.PIDS, pod, PodUsage(process_count=9000), [threshold], observations)
    assert message == "The node was low on resource: pids. Threshold quantity: 1k, available: 500. "
    assert annotations["starved_resource"] == "pids"


def test_pod_level_request_in_message() -> None:
    pod = PodInfo(uid="u", namespace="ns", name="p", pod_level_memory_request=Quantity(128 * MI, "128Mi"))
    message, annotations = eviction_message(
        Resource.MEMORY, pod, PodUsage(memory_working_set=256 * MI), [MEMORY_100MI], OBSERVED
    )
    assert "Pod p was using 256Mi, request is 128Mi, has larger consumption of memory. " in message
    assert annotations["offending_pod"] == "p"


def test_condition_texts_are_upstreams() -> None:
    insufficient = condition_text(NodeCondition.MEMORY_PRESSURE, pressure=True)
    assert (insufficient.reason, insufficient.message) == (
        "KubeletHasInsufficientMemory",
        "kubelet has insufficient memory available",
    )
    assert condition_text(NodeCondition.DISK_PRESSURE, pressure=False).reason == "KubeletHasNoDiskPressure"
    assert condition_text(NodeCondition.PID_PRESSURE, pressure=True).event == "NodeHasInsufficientPID"
    assert threshold_met_event_message(Resource.MEMORY) == "Attempting to reclaim memory"


BEST_EFFORT = PodInfo(uid="be", namespace="ns", name="be", qos=QOSClass.BEST_EFFORT)
BURSTABLE = PodInfo(uid="bu", namespace="ns", name="bu", qos=QOSClass.BURSTABLE)
CRITICAL = PodInfo(uid="c", namespace="kube-system", name="c", priority=SYSTEM_CRITICAL_PRIORITY + 1000)
STATIC = PodInfo(uid="s", namespace="kube-system", name="s", static=True)
MEMORY = [NodeCondition.MEMORY_PRESSURE]
DISK = [NodeCondition.DISK_PRESSURE]
BOTH = [NodeCondition.MEMORY_PRESSURE, NodeCondition.DISK_PRESSURE]


def tolerating(*tolerations: T) -> PodInfo:
    return PodInfo(uid="t", namespace="ns", name="t", qos=QOSClass.BEST_EFFORT, tolerations=tolerations)


def refused(conditions: str) -> AdmitResult:
    return AdmitResult(admit=False, reason=REASON, message=f"The node had condition: {conditions}. ")


ADMITTED = AdmitResult(admit=True)


@pytest.mark.parametrize(
    ("pod", "conditions", "expected"),
    [
        (BEST_EFFORT, [], ADMITTED),
        (BEST_EFFORT, MEMORY, refused("[MemoryPressure]")),
        (BURSTABLE, MEMORY, ADMITTED),
        (CRITICAL, MEMORY, ADMITTED),
        (BURSTABLE, DISK, refused("[DiskPressure]")),
        (STATIC, DISK, ADMITTED),
        (CRITICAL, BOTH, ADMITTED),
        (BURSTABLE, BOTH, refused("[MemoryPressure DiskPressure]")),
        (BURSTABLE, [NodeCondition.PID_PRESSURE], refused("[PIDPressure]")),
        (tolerating(T("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule")), MEMORY, ADMITTED),
        (tolerating(T("node.kubernetes.io/memory-pressure", "Exists")), MEMORY, ADMITTED),
        (tolerating(T("", "Exists")), MEMORY, ADMITTED),  # tolerates everything
        (tolerating(T("node.kubernetes.io/memory-pressure", "Equal", "")), MEMORY, ADMITTED),
        (tolerating(T("node.kubernetes.io/memory-pressure", "Equal", "yes")), MEMORY, refused("[MemoryPressure]")),
        (
            tolerating(T("node.kubernetes.io/memory-pressure", "Exists", "", "NoExecute")),
            MEMORY,
            refused("[MemoryPressure]"),
        ),
        (tolerating(T("node.kubernetes.io/memory-pressure", "Exists")), BOTH, refused("[MemoryPressure DiskPressure]")),
    ],
)
def test_admit(pod: PodInfo, conditions: list[NodeCondition], expected: AdmitResult) -> None:
    assert admit(pod, conditions) == expected
