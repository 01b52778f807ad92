"""RemoveContainer refused for a task containerd keeps (a StartContainer cut off by a killed agent): the runtime
manager ends that task through containerd's own task API when it has one, and then removes the container; without
one, the container is recorded as unremovable and never tried again. A scripted CRI runtime on a real socket."""

from __future__ import annotations

import grpc
import pytest

from cri.client import CRIClient
from cri.errors import UnknownCRIError
from cri.v1 import api_pb2
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager, TaskDeleter, UnremovableContainer
from tests.unit.cri.scripted import Fail, ScriptedRuntime

REFUSED = Fail(
    grpc.StatusCode.FAILED_PRECONDITION,
    'failed to delete containerd container "c1": cannot delete running task c1: failed precondition',
)


def _manager(client: CRIClient, deleter: TaskDeleter | None) -> RuntimeManager:
    node = NodeContext(node_name="n1", host_ip="198.18.0.1", cgroup_root="/nodeagent-unit-no-such-root")
    return RuntimeManager(client.runtime, client.image, node, task_deleter=deleter)


async def test_a_kept_task_is_ended_through_containerd_then_the_container_removed(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    runtime.script["RemoveContainer"] = REFUSED
    ended: list[str] = []

    async def deleter(container_id: str) -> None:
        ended.append(container_id)
        runtime.script["RemoveContainer"] = api_pb2.RemoveContainerResponse()

    manager = _manager(client, deleter)
    await manager._remove_container("u-1", "c1")
    assert ended == ["c1"]
    assert manager.unremovable == set()
    # Tried once, 20 times more after the cgroup's processes were killed, then once after the task was deleted.
    assert len(runtime.calls_of("RemoveContainer")) == 22


async def test_without_containerds_task_api_the_container_is_left_for_good(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    runtime.script["RemoveContainer"] = REFUSED
    manager = _manager(client, None)
    with pytest.raises(UnremovableContainer):
        await manager._remove_container("u-1", "c1")
    assert manager.unremovable == {"c1"}
    calls = len(runtime.calls_of("RemoveContainer"))
    with pytest.raises(UnremovableContainer):
        await manager._remove_container("u-1", "c1")
    assert len(runtime.calls_of("RemoveContainer")) == calls  # never tried again


async def test_a_task_that_cannot_be_ended_leaves_the_container_unremovable(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    runtime.script["RemoveContainer"] = REFUSED

    async def deleter(container_id: str) -> None:
        raise UnknownCRIError("/containerd.services.tasks.v1.Tasks/Delete", grpc.StatusCode.FAILED_PRECONDITION, "no")

    manager = _manager(client, deleter)
    with pytest.raises(UnremovableContainer):
        await manager._remove_container("u-1", "c1")
    assert manager.unremovable == {"c1"}


ALIVE = api_pb2.ContainerStatus(
    id="c1",
    metadata=api_pb2.ContainerMetadata(name="main"),
    created_at=1,
    image=api_pb2.ImageSpec(image="busybox"),
    image_ref="sha256:abc",
)
BEING_REMOVED = Fail(
    grpc.StatusCode.UNKNOWN,
    'failed to set removing state for container "c1": container is already in removing state',
)


async def test_a_removal_already_under_way_elsewhere_is_waited_for(runtime: ScriptedRuntime, client: CRIClient) -> None:
    # The container GC removes the container while a terminated pod's sync does too (14 tracebacks in the churn soak).
    runtime.script["RemoveContainer"] = BEING_REMOVED
    statuses = 0

    async def status(request: api_pb2.ContainerStatusRequest) -> api_pb2.ContainerStatusResponse:
        nonlocal statuses
        statuses += 1
        if statuses >= 3:  # the other removal ends
            runtime.script["ContainerStatus"] = Fail(grpc.StatusCode.NOT_FOUND, "not found")
        return api_pb2.ContainerStatusResponse(status=ALIVE)

    runtime.script["ContainerStatus"] = status
    manager = _manager(client, None)
    await manager._remove_container("u-1", "c1")
    assert len(runtime.calls_of("RemoveContainer")) == 1
    assert len(runtime.calls_of("ContainerStatus")) == 4
    assert manager.unremovable == set()


async def test_a_removal_under_way_that_never_ends_is_an_error(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["RemoveContainer"] = BEING_REMOVED
    runtime.script["ContainerStatus"] = api_pb2.ContainerStatusResponse(status=ALIVE)
    manager = _manager(client, None)
    with pytest.raises(UnknownCRIError, match="already in removing state"):
        await manager._remove_container("u-1", "c1")
    assert manager.unremovable == set()
