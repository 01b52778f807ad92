"""The instrumented wrappers count calls, errors and durations under upstream's names, and change nothing else.

The wrapped service is the real remote client talking to a scripted runtime over a unix socket.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from cri.client import CRIClient
from cri.errors import NotFoundError
from cri.instrumented import InstrumentedImageService, InstrumentedRuntimeService, instrument
from cri.service import ImageService, RuntimeService
from cri.v1 import api_pb2
from tests.unit.cri.scripted import HANG, Fail, ScriptedRuntime


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Services = tuple[InstrumentedRuntimeService, InstrumentedImageService]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def services(client: CRIClient, registry: CollectorRegistry, clock: FakeClock) -> Services:
    return instrument(client.runtime, client.image, registry, clock=clock)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def _drain(stream: Any) -> list[Any]:
    return [item async for item in stream]


SANDBOX = api_pb2.PodSandboxConfig(metadata=api_pb2.PodSandboxMetadata(name="web", uid="u", namespace="ns"))
IMAGE = api_pb2.ImageSpec(image="registry/app:1")
Invoke = Callable[[Services], Awaitable[Any]]

# Every method of both protocols, with the operation_type upstream's kubelet records it under.
OPERATIONS: list[tuple[str, str, Invoke]] = [
    ("version", "version", lambda s: s[0].version("v1")),
    ("status", "status", lambda s: s[0].status()),
    ("create_container", "create_container", lambda s: s[0].create_container("s", api_pb2.ContainerConfig(), SANDBOX)),
    ("start_container", "start_container", lambda s: s[0].start_container("c")),
    ("stop_container", "stop_container", lambda s: s[0].stop_container("c", 0)),
    ("remove_container", "remove_container", lambda s: s[0].remove_container("c")),
    ("list_containers", "list_containers", lambda s: s[0].list_containers()),
    ("container_status", "container_status", lambda s: s[0].container_status("c")),
    (
        "update_container_resources",
        "update_container",
        lambda s: s[0].update_container_resources("c", api_pb2.ContainerResources()),
    ),
    ("reopen_container_log", "reopen_container_log", lambda s: s[0].reopen_container_log("c")),
    ("exec_sync", "exec_sync", lambda s: s[0].exec_sync("c", ["true"], 1)),
    ("exec", "exec", lambda s: s[0].exec(api_pb2.ExecRequest())),
    ("attach", "attach", lambda s: s[0].attach(api_pb2.AttachRequest())),
    ("run_pod_sandbox", "run_podsandbox", lambda s: s[0].run_pod_sandbox(SANDBOX)),
    ("stop_pod_sandbox", "stop_podsandbox", lambda s: s[0].stop_pod_sandbox("s")),
    ("remove_pod_sandbox", "remove_podsandbox", lambda s: s[0].remove_pod_sandbox("s")),
    ("pod_sandbox_status", "podsandbox_status", lambda s: s[0].pod_sandbox_status("s")),
    ("list_pod_sandbox", "list_podsandbox", lambda s: s[0].list_pod_sandbox()),
    ("container_stats", "container_stats", lambda s: s[0].container_stats("c")),
    ("list_container_stats", "list_container_stats", lambda s: s[0].list_container_stats()),
    ("pod_sandbox_stats", "podsandbox_stats", lambda s: s[0].pod_sandbox_stats("s")),
    ("list_pod_sandbox_stats", "list_podsandbox_stats", lambda s: s[0].list_pod_sandbox_stats()),
    ("port_forward", "port_forward", lambda s: s[0].port_forward(api_pb2.PortForwardRequest())),
    (
        "update_pod_sandbox_resources",
        "update_podsandbox_resources",
        lambda s: s[0].update_pod_sandbox_resources(api_pb2.UpdatePodSandboxResourcesRequest()),
    ),
    ("update_runtime_config", "update_runtime_config", lambda s: s[0].update_runtime_config(api_pb2.RuntimeConfig())),
    (
        "checkpoint_container",
        "checkpoint_container",
        lambda s: s[0].checkpoint_container(api_pb2.CheckpointContainerRequest()),
    ),
    ("get_container_events", "get_container_events", lambda s: _drain(s[0].get_container_events())),
    ("list_metric_descriptors", "list_metric_descriptors", lambda s: s[0].list_metric_descriptors()),
    ("list_pod_sandbox_metrics", "list_podsandbox_metrics", lambda s: s[0].list_pod_sandbox_metrics()),
    ("runtime_config", "runtime_config", lambda s: s[0].runtime_config()),
    ("list_images", "list_images", lambda s: s[1].list_images()),
    ("image_status", "image_status", lambda s: s[1].image_status(IMAGE)),
    ("pull_image", "pull_image", lambda s: s[1].pull_image(IMAGE)),
    ("remove_image", "remove_image", lambda s: s[1].remove_image(IMAGE)),
    ("image_fs_info", "image_fs_info", lambda s: s[1].image_fs_info()),
]


def _protocol_methods(protocol: type) -> set[str]:
    return {name for name, member in vars(protocol).items() if inspect.isfunction(member) and not name.startswith("_")}


def test_every_protocol_method_is_instrumented() -> None:
    assert {method for method, _, _ in OPERATIONS} == _protocol_methods(RuntimeService) | _protocol_methods(
        ImageService
    )
    for wrapper, protocol in ((InstrumentedRuntimeService, RuntimeService), (InstrumentedImageService, ImageService)):
        for name in _protocol_methods(protocol):
            assert inspect.signature(getattr(wrapper, name)) == inspect.signature(getattr(protocol, name)), name


@pytest.mark.parametrize("case", OPERATIONS, ids=[method for method, _, _ in OPERATIONS])
async def test_each_call_is_counted_under_upstreams_operation_name(
    case: tuple[str, str, Invoke], runtime: ScriptedRuntime, services: Services, registry: CollectorRegistry
) -> None:
    _, operation, invoke = case
    # Fail every call the same way, so no answer has to satisfy the client's checks.
    for service in api_pb2.DESCRIPTOR.services_by_name.values():
        for rpc in service.methods:
            fail = Fail(grpc.StatusCode.NOT_FOUND, "gone")
            runtime.script[rpc.name] = [fail] if rpc.server_streaming else fail
    with pytest.raises(NotFoundError):
        await invoke(services)
    assert sample(registry, "kubelet_runtime_operations_total", operation_type=operation) == 1
    assert sample(registry, "kubelet_runtime_operations_errors_total", operation_type=operation) == 1
    assert sample(registry, "kubelet_runtime_operations_duration_seconds_count", operation_type=operation) == 1
    assert len(runtime.calls) == 1


async def test_successes_are_counted_and_timed(
    runtime: ScriptedRuntime, services: Services, registry: CollectorRegistry, clock: FakeClock
) -> None:
    stats = api_pb2.ContainerStats(attributes=api_pb2.ContainerAttributes(id="c1"))

    async def slow_list(request: Any) -> api_pb2.ListContainerStatsResponse:
        clock.now += 0.75
        return api_pb2.ListContainerStatsResponse(stats=[stats])

    runtime.script["ListContainerStats"] = slow_list
    runtime_service, _ = services
    assert await runtime_service.list_container_stats() == [stats]
    assert await runtime_service.list_container_stats() == [stats]
    labels = {"operation_type": "list_container_stats"}
    assert sample(registry, "kubelet_runtime_operations_total", **labels) == 2
    assert sample(registry, "kubelet_runtime_operations_errors_total", **labels) == 0
    assert sample(registry, "kubelet_runtime_operations_duration_seconds_sum", **labels) == 1.5
    # 0.75 s falls in the (0.488, 1.22] bucket of upstream's exponential buckets.
    assert sample(registry, "kubelet_runtime_operations_duration_seconds_bucket", le="0.48828125", **labels) == 0
    assert sample(registry, "kubelet_runtime_operations_duration_seconds_bucket", le="1.220703125", **labels) == 2


async def test_errors_are_counted_by_class_and_passed_on_unchanged(
    runtime: ScriptedRuntime, services: Services, registry: CollectorRegistry
) -> None:
    runtime.script["ImageStatus"] = Fail(grpc.StatusCode.NOT_FOUND, "no such image")
    runtime.script["PullImage"] = Fail(grpc.StatusCode.RESOURCE_EXHAUSTED, "disk full")
    _, image_service = services
    with pytest.raises(NotFoundError) as caught:
        await image_service.image_status(IMAGE)
    assert caught.value.message == "no such image"
    with pytest.raises(Exception, match="disk full"):
        await image_service.pull_image(IMAGE)
    by_type = "nodeagent_runtime_operations_errors_by_type_total"
    assert sample(registry, by_type, operation_type="image_status", error_type="NotFoundError") == 1
    assert sample(registry, by_type, operation_type="pull_image", error_type="UnknownCRIError") == 1
    assert sample(registry, "kubelet_runtime_operations_errors_total", operation_type="pull_image") == 1


async def test_event_stream_is_one_operation_for_its_whole_life(
    runtime: ScriptedRuntime, services: Services, registry: CollectorRegistry, clock: FakeClock
) -> None:
    events = [api_pb2.ContainerEventResponse(container_id=f"c{i}") for i in range(3)]
    runtime.script["GetContainerEvents"] = events
    runtime_service, _ = services
    received = []
    async for event in runtime_service.get_container_events():
        received.append(event)
        clock.now += 1.0
        assert sample(registry, "kubelet_runtime_operations_total", operation_type="get_container_events") == 0
    assert received == events
    labels = {"operation_type": "get_container_events"}
    assert sample(registry, "kubelet_runtime_operations_total", **labels) == 1
    assert sample(registry, "kubelet_runtime_operations_duration_seconds_sum", **labels) == 3
    assert sample(registry, "kubelet_runtime_operations_errors_total", **labels) == 0


async def test_event_stream_failure_is_an_error(
    runtime: ScriptedRuntime, services: Services, registry: CollectorRegistry
) -> None:
    runtime.script["GetContainerEvents"] = [api_pb2.ContainerEventResponse(), Fail(grpc.StatusCode.UNAVAILABLE, "")]
    runtime_service, _ = services
    with pytest.raises(Exception, match="UNAVAILABLE"):
        await _drain(runtime_service.get_container_events())
    by_type = "nodeagent_runtime_operations_errors_by_type_total"
    assert sample(registry, by_type, operation_type="get_container_events", error_type="UnavailableError") == 1


async def test_cancelled_call_is_an_operation_but_not_an_error(
    runtime: ScriptedRuntime, services: Services, registry: CollectorRegistry
) -> None:
    arrived = asyncio.Event()

    async def hang(request: Any) -> api_pb2.StopPodSandboxResponse:
        arrived.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    runtime.script["StopPodSandbox"] = hang
    runtime_service, _ = services
    task = asyncio.create_task(runtime_service.stop_pod_sandbox("s1"))
    await arrived.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sample(registry, "kubelet_runtime_operations_total", operation_type="stop_podsandbox") == 1
    assert sample(registry, "kubelet_runtime_operations_errors_total", operation_type="stop_podsandbox") == 0


async def test_timeouts_reach_the_wrapped_service(runtime: ScriptedRuntime, services: Services) -> None:
    runtime.script["ListImages"] = HANG
    _, image_service = services
    with pytest.raises(Exception, match="DEADLINE_EXCEEDED"):
        await image_service.list_images(timeout=0.2)
    (call,) = runtime.calls
    assert call.time_remaining == pytest.approx(0.2, abs=0.2)


def test_metrics_register_once_per_registry(client: CRIClient) -> None:
    registry = CollectorRegistry()
    instrument(client.runtime, client.image, registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        instrument(client.runtime, client.image, registry)
