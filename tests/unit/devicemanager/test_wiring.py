"""The device manager where the agent uses it: the Kubelet's admission (a pod that does not fit ends Failed with
upstream's reason and message), the Node's capacity and allocatable, and the runtime manager's container hook."""

from __future__ import annotations

from typing import Any

import pytest

from cri.v1 import api_pb2 as cri_pb2
from nodeagent.config import defaults
from nodeagent.devicemanager import container_resources, running_containers
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.nodestatus import build_node_status, node_conditions
from nodeagent.podworkers import UpdatePodOptions, UpdateType
from pleg.status import ContainerRecord, make_pod_status
from tests.unit.devicemanager.fakeplugin import devices
from tests.unit.devicemanager.test_manager import RESOURCE, Harness, container, pod
from tests.unit.nodestatus.test_node import FACTS, T0
from tests.unit.status.test_kubelet_status import Statuses, kubelet
from tests.unit.test_kubelet_eviction import with_workers


def test_the_node_status_carries_the_device_plugins_resources() -> None:
    conditions = node_conditions([], now=T0, runtime_ready=True)
    status = build_node_status(FACTS, defaults(), conditions, device_capacity=({RESOURCE: 3}, {RESOURCE: 2}))
    assert status["capacity"][RESOURCE] == "3"
    assert status["allocatable"][RESOURCE] == "2"
    assert status["capacity"]["cpu"] == "2"
    assert list(status["capacity"]) == sorted(status["capacity"])


async def test_the_kubelet_refuses_a_pod_the_devices_cannot_serve(harness: Harness) -> None:
    manager = await harness.manager()
    await harness.plugin(initial=devices("a"))
    statuses = Statuses()
    k = kubelet(statuses)
    workers = with_workers(k)

    # Pods handed to a worker are active (Kubelet.active_pods), as the device manager sees them.
    def admitted(options: UpdatePodOptions) -> None:
        workers.updates.append(options)
        harness.active.append(dict(options.pod))

    workers.update_pod = admitted  # type: ignore[method-assign]
    k.device_admit = manager.admit
    first: dict[str, Any] = pod("u1", container("c", 1))
    first["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    second: dict[str, Any] = pod("u2", container("c", 1))
    second["metadata"]["creationTimestamp"] = "2024-01-01T00:00:01Z"
    await k.handle_pod_additions([first, second])
    assert [(u.update_type, u.pod["metadata"]["uid"]) for u in workers.updates] == [(UpdateType.CREATE, "u1")]
    published = statuses.published["u2"]
    assert (published["phase"], published["reason"]) == ("Failed", "UnexpectedAdmissionError")
    assert published["message"] == (
        "Allocate failed due to requested number of devices unavailable for example.com/dev. "
        "Requested: 1, Available: 0, which is unexpected"
    )


async def test_the_container_hook_fills_the_config_and_maps_failures(harness: Harness) -> None:
    manager = await harness.manager()
    plugin = await harness.plugin(initial=devices("a"), pre_start_required=True)
    p = pod("p", container("c", 1))
    harness.active.append(p)
    assert await manager.admit(p) is None
    hook = container_resources(manager)
    config = cri_pb2.ContainerConfig()
    await hook(p, p["spec"]["containers"][0], config)
    assert [d.container_path for d in config.devices] == ["/dev/fake-a"]
    assert [d.name for d in config.CDI_devices] == ["example.com/dev=a"]
    assert plugin.pre_start_calls == [["a"]]
    # A container the manager has no devices for while its plugin wants PreStartContainer: upstream's error.
    other = container("d", 1)
    with pytest.raises(CreateContainerConfigError, match="no devices found allocated in local cache for pod p"):
        await hook(p, other, cri_pb2.ContainerConfig())


def test_running_containers_come_from_the_pod_cache() -> None:
    def record(name: str, state: cri_pb2.ContainerState.ValueType) -> ContainerRecord:
        return ContainerRecord(
            "s", cri_pb2.ContainerStatus(id=name, metadata=cri_pb2.ContainerMetadata(name=name), state=state)
        )

    status = make_pod_status(
        "u1", containers=[record("run", cri_pb2.CONTAINER_RUNNING), record("done", cri_pb2.CONTAINER_EXITED)]
    )
    assert running_containers([status]) == {("u1", "run")}
