"""The PodResources API v1 over its real unix socket, fed by a device manager and a fake device plugin: List shows
each active pod's containers (sidecars included) with their devices, GetAllocatableResources the healthy devices,
Get one pod by name, and an unknown pod gets upstream's error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from nodeagent.devicemanager.v1beta1 import api_pb2 as dp_pb2
from nodeagent.podresources import PodResourcesServer
from nodeagent.podresources.v1 import api_pb2, api_pb2_grpc
from tests.unit.devicemanager.fakeplugin import devices
from tests.unit.devicemanager.test_manager import RESOURCE, Harness, container, pod


@pytest.fixture
async def lister(harness: Harness) -> AsyncIterator[tuple[api_pb2_grpc.PodResourcesListerAsyncStub, Harness]]:
    manager = await harness.manager()
    numa = dp_pb2.Device(ID="n", health="Healthy", topology=dp_pb2.TopologyInfo(nodes=[dp_pb2.NUMANode(ID=1)]))
    await harness.plugin(initial=[*devices("a", "b"), numa, *devices("sick", health="Unhealthy")])
    server = PodResourcesServer(
        str(harness.root), manager, active_pods=lambda: harness.active, all_pods=lambda: harness.active
    )
    await server.start()
    channel = grpc.aio.insecure_channel(f"unix://{server.socket_path}")
    try:
        yield api_pb2_grpc.PodResourcesListerStub(channel), harness
    finally:
        await channel.close(None)
        await server.stop()


def _devices(resources: Any) -> list[tuple[str, list[str], list[int]]]:
    return [(d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes]) for d in resources.devices]


async def test_list_get_and_allocatable(lister: tuple[api_pb2_grpc.PodResourcesListerAsyncStub, Harness]) -> None:
    stub, harness = lister
    p: dict[str, Any] = pod(
        "u1",
        container("app", 2),
        {"name": "plain"},
        init=(container("init", 1), {**container("sidecar", 1), "restartPolicy": "Always"}),
    )
    harness.active.append(p)
    manager = harness.managers[0]
    assert await manager.admit(p) is None

    listed = await stub.List(api_pb2.ListPodResourcesRequest())
    [resources] = listed.pod_resources
    assert (resources.name, resources.namespace) == ("u1", "default")
    assert [c.name for c in resources.containers] == ["sidecar", "app", "plain"]  # no plain init container
    held = {c.name: _devices(c) for c in resources.containers}
    assert sum(len(v) for v in held.values()) == 3  # one per device
    assert held["plain"] == []
    assert all(d[0] == RESOURCE and len(d[1]) == 1 for v in held.values() for d in v)
    assert not any(c.cpu_ids or c.memory or c.dynamic_resources for c in resources.containers)

    allocatable = await stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest())
    assert sorted(_devices(allocatable)) == [
        (RESOURCE, ["a"], []),
        (RESOURCE, ["b"], []),
        (RESOURCE, ["n"], [1]),
    ]

    got = await stub.Get(api_pb2.GetPodResourcesRequest(pod_name="u1", pod_namespace="default"))
    assert got.pod_resources == resources
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stub.Get(api_pb2.GetPodResourcesRequest(pod_name="nope", pod_namespace="default"))
    assert missing.value.details() == "pod nope in namespace default not found"


async def test_a_pod_no_longer_active_is_not_listed(
    lister: tuple[api_pb2_grpc.PodResourcesListerAsyncStub, Harness],
) -> None:
    stub, harness = lister
    p = pod("u1", container("app", 1))
    harness.active.append(p)
    assert await harness.managers[0].admit(p) is None
    harness.active.clear()
    assert list((await stub.List(api_pb2.ListPodResourcesRequest())).pod_resources) == []
