"""The remote client: which RPC each method calls, its deadline, how it unwraps and checks answers.

All against a scripted runtime behind a real unix socket (tests/unit/cri/scripted.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import grpc
import pytest

from cri.client import DEFAULT_TIMEOUT, CRIClient, connect
from cri.errors import InvalidResponseError, NotFoundError
from cri.v1 import api_pb2
from tests.unit.cri.scripted import Fail, ScriptedRuntime

TIMEOUT = 5.0  # the client fixture's default deadline

SANDBOX_CONFIG = api_pb2.PodSandboxConfig(metadata=api_pb2.PodSandboxMetadata(name="web", uid="u1", namespace="ns"))
CONTAINER_CONFIG = api_pb2.ContainerConfig(metadata=api_pb2.ContainerMetadata(name="app"))
IMAGE = api_pb2.ImageSpec(image="registry/app:1")

Invoke = Callable[[CRIClient], Awaitable[Any]]


async def _drain_events(cri: CRIClient) -> list[api_pb2.ContainerEventResponse]:
    return [event async for event in cri.runtime.get_container_events()]


# Every client method, with the RPC it must call.
CALLS: list[tuple[str, str, Invoke]] = [
    ("RuntimeService", "Version", lambda c: c.runtime.version("v1")),
    ("RuntimeService", "RunPodSandbox", lambda c: c.runtime.run_pod_sandbox(SANDBOX_CONFIG)),
    ("RuntimeService", "StopPodSandbox", lambda c: c.runtime.stop_pod_sandbox("s1")),
    ("RuntimeService", "RemovePodSandbox", lambda c: c.runtime.remove_pod_sandbox("s1")),
    ("RuntimeService", "PodSandboxStatus", lambda c: c.runtime.pod_sandbox_status("s1")),
    ("RuntimeService", "ListPodSandbox", lambda c: c.runtime.list_pod_sandbox()),
    ("RuntimeService", "CreateContainer", lambda c: c.runtime.create_container("s1", CONTAINER_CONFIG, SANDBOX_CONFIG)),
    ("RuntimeService", "StartContainer", lambda c: c.runtime.start_container("c1")),
    ("RuntimeService", "StopContainer", lambda c: c.runtime.stop_container("c1", 10)),
    ("RuntimeService", "RemoveContainer", lambda c: c.runtime.remove_container("c1")),
    ("RuntimeService", "ListContainers", lambda c: c.runtime.list_containers()),
    ("RuntimeService", "ContainerStatus", lambda c: c.runtime.container_status("c1")),
    (
        "RuntimeService",
        "UpdateContainerResources",
        lambda c: c.runtime.update_container_resources("c1", api_pb2.ContainerResources()),
    ),
    ("RuntimeService", "ReopenContainerLog", lambda c: c.runtime.reopen_container_log("c1")),
    ("RuntimeService", "ExecSync", lambda c: c.runtime.exec_sync("c1", ["true"], 1)),
    ("RuntimeService", "Exec", lambda c: c.runtime.exec(api_pb2.ExecRequest(container_id="c1"))),
    ("RuntimeService", "Attach", lambda c: c.runtime.attach(api_pb2.AttachRequest(container_id="c1"))),
    ("RuntimeService", "PortForward", lambda c: c.runtime.port_forward(api_pb2.PortForwardRequest(pod_sandbox_id="s"))),
    ("RuntimeService", "ContainerStats", lambda c: c.runtime.container_stats("c1")),
    ("RuntimeService", "ListContainerStats", lambda c: c.runtime.list_container_stats()),
    ("RuntimeService", "PodSandboxStats", lambda c: c.runtime.pod_sandbox_stats("s1")),
    ("RuntimeService", "ListPodSandboxStats", lambda c: c.runtime.list_pod_sandbox_stats()),
    ("RuntimeService", "UpdateRuntimeConfig", lambda c: c.runtime.update_runtime_config(api_pb2.RuntimeConfig())),
    ("RuntimeService", "Status", lambda c: c.runtime.status()),
    (
        "RuntimeService",
        "CheckpointContainer",
        lambda c: c.runtime.checkpoint_container(api_pb2.CheckpointContainerRequest(container_id="c1")),
    ),
    ("RuntimeService", "GetContainerEvents", _drain_events),
    ("RuntimeService", "ListMetricDescriptors", lambda c: c.runtime.list_metric_descriptors()),
    ("RuntimeService", "ListPodSandboxMetrics", lambda c: c.runtime.list_pod_sandbox_metrics()),
    ("RuntimeService", "RuntimeConfig", lambda c: c.runtime.runtime_config()),
    (
        "RuntimeService",
        "UpdatePodSandboxResources",
        lambda c: c.runtime.update_pod_sandbox_resources(api_pb2.UpdatePodSandboxResourcesRequest(pod_sandbox_id="s")),
    ),
    ("ImageService", "ListImages", lambda c: c.image.list_images()),
    ("ImageService", "ImageStatus", lambda c: c.image.image_status(IMAGE)),
    ("ImageService", "PullImage", lambda c: c.image.pull_image(IMAGE)),
    ("ImageService", "RemoveImage", lambda c: c.image.remove_image(IMAGE)),
    ("ImageService", "ImageFsInfo", lambda c: c.image.image_fs_info()),
]


def test_every_rpc_of_the_proto_has_a_client_method() -> None:
    rpcs = {
        (service.name, method.name)
        for service in api_pb2.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert {(service, rpc) for service, rpc, _ in CALLS} == rpcs


@pytest.mark.parametrize(("service", "rpc", "invoke"), CALLS, ids=[rpc for _, rpc, _ in CALLS])
async def test_method_calls_its_rpc_and_names_it_in_errors(
    service: str, rpc: str, invoke: Invoke, runtime: ScriptedRuntime, client: CRIClient
) -> None:
    runtime.script[rpc] = (
        [Fail(grpc.StatusCode.NOT_FOUND, "gone")]
        if rpc == "GetContainerEvents"
        else Fail(grpc.StatusCode.NOT_FOUND, "gone")
    )
    with pytest.raises(NotFoundError) as caught:
        await invoke(client)
    assert caught.value.method == f"/runtime.v1.{service}/{rpc}"
    assert [call.rpc for call in runtime.calls] == [rpc]


# Answers that pass the client's checks, for tests about something else.
USABLE_ANSWERS = {
    "Version": api_pb2.VersionResponse(
        version="0.1.0", runtime_name="containerd", runtime_version="1.7.1", runtime_api_version="v1"
    ),
    "RunPodSandbox": api_pb2.RunPodSandboxResponse(pod_sandbox_id="s1"),
    "PullImage": api_pb2.PullImageResponse(image_ref="sha256:abc"),
}

# Deadline the runtime sees per call, with the client's default of TIMEOUT; None: no deadline.
DEADLINES: list[tuple[str, str, Invoke, float | None]] = [
    ("default", "Version", lambda c: c.runtime.version("v1"), TIMEOUT),
    ("override", "Version", lambda c: c.runtime.version("v1", timeout=1.5), 1.5),
    ("sandbox gets twice", "RunPodSandbox", lambda c: c.runtime.run_pod_sandbox(SANDBOX_CONFIG), 2 * TIMEOUT),
    ("grace period on top", "StopContainer", lambda c: c.runtime.stop_container("c1", 7), TIMEOUT + 7),
    ("exec timeout on top", "ExecSync", lambda c: c.runtime.exec_sync("c1", ["true"], 3), TIMEOUT + 3),
    ("exec without timeout", "ExecSync", lambda c: c.runtime.exec_sync("c1", ["true"], 0), None),
    ("pull has none", "PullImage", lambda c: c.image.pull_image(IMAGE), None),
    ("pull override", "PullImage", lambda c: c.image.pull_image(IMAGE, timeout=4), 4),
    ("events have none", "GetContainerEvents", _drain_events, None),
    (
        "short checkpoint gets the default",
        "CheckpointContainer",
        lambda c: c.runtime.checkpoint_container(api_pb2.CheckpointContainerRequest(container_id="c", timeout=2)),
        TIMEOUT,
    ),
    (
        "long checkpoint keeps its own",
        "CheckpointContainer",
        lambda c: c.runtime.checkpoint_container(api_pb2.CheckpointContainerRequest(container_id="c", timeout=30)),
        30,
    ),
]


@pytest.mark.parametrize("case", DEADLINES, ids=[name for name, *_ in DEADLINES])
async def test_deadline_of_each_call(
    case: tuple[str, str, Invoke, float | None], runtime: ScriptedRuntime, client: CRIClient
) -> None:
    _, rpc, invoke, expected = case
    runtime.script.update(USABLE_ANSWERS)
    await invoke(client)
    (call,) = runtime.calls_of(rpc)
    if expected is None:
        assert call.time_remaining is None
    else:
        # gRPC rounds the deadline it sends up to a coarser unit; the cases differ by more than that.
        assert call.time_remaining == pytest.approx(expected, abs=0.5)


async def test_checkpoint_sends_the_effective_timeout_and_leaves_the_callers_request_alone(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    request = api_pb2.CheckpointContainerRequest(container_id="c1", location="/tmp/c1.tar", timeout=2)
    await client.runtime.checkpoint_container(request)
    (call,) = runtime.calls_of("CheckpointContainer")
    assert call.request == api_pb2.CheckpointContainerRequest(container_id="c1", location="/tmp/c1.tar", timeout=5)
    assert request.timeout == 2


def test_default_timeout_is_the_kubelets_runtime_request_timeout() -> None:
    assert DEFAULT_TIMEOUT == 120.0


async def test_answers_are_unwrapped(runtime: ScriptedRuntime, client: CRIClient) -> None:
    sandbox = api_pb2.PodSandbox(id="s1", metadata=SANDBOX_CONFIG.metadata, labels={"app": "web"})
    stats = api_pb2.ContainerStats(attributes=api_pb2.ContainerAttributes(id="c1"))
    runtime.script.update(
        RunPodSandbox=api_pb2.RunPodSandboxResponse(pod_sandbox_id="s1"),
        CreateContainer=api_pb2.CreateContainerResponse(container_id="c1"),
        ListPodSandbox=api_pb2.ListPodSandboxResponse(items=[sandbox]),
        ContainerStats=api_pb2.ContainerStatsResponse(stats=stats),
        ListContainerStats=api_pb2.ListContainerStatsResponse(stats=[stats, stats]),
        PullImage=api_pb2.PullImageResponse(image_ref="sha256:abc"),
    )
    assert await client.runtime.run_pod_sandbox(SANDBOX_CONFIG, "runc") == "s1"
    assert await client.runtime.create_container("s1", CONTAINER_CONFIG, SANDBOX_CONFIG) == "c1"
    assert await client.runtime.list_pod_sandbox() == [sandbox]
    assert await client.runtime.container_stats("c1") == stats
    assert await client.runtime.list_container_stats() == [stats, stats]
    assert await client.image.pull_image(IMAGE, api_pb2.AuthConfig(username="u")) == "sha256:abc"
    assert await client.runtime.list_containers() == []
    (run,) = runtime.calls_of("RunPodSandbox")
    assert run.request == api_pb2.RunPodSandboxRequest(config=SANDBOX_CONFIG, runtime_handler="runc")
    (pull,) = runtime.calls_of("PullImage")
    assert pull.request == api_pb2.PullImageRequest(image=IMAGE, auth=api_pb2.AuthConfig(username="u"))


async def test_requests_carry_the_arguments(runtime: ScriptedRuntime, client: CRIClient) -> None:
    linux = api_pb2.LinuxContainerResources(cpu_shares=512)
    await client.runtime.update_container_resources("c1", api_pb2.ContainerResources(linux=linux))
    await client.runtime.exec_sync("c1", ["cat", "/etc/hostname"], 2.9)
    await client.runtime.list_containers(api_pb2.ContainerFilter(pod_sandbox_id="s1"))
    assert [call.request for call in runtime.calls] == [
        api_pb2.UpdateContainerResourcesRequest(container_id="c1", linux=linux),
        api_pb2.ExecSyncRequest(container_id="c1", cmd=["cat", "/etc/hostname"], timeout=2),
        api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter(pod_sandbox_id="s1")),
    ]


async def test_exec_sync_returns_a_failing_command_as_an_answer(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["ExecSync"] = api_pb2.ExecSyncResponse(stderr=b"no such file", exit_code=1)
    result = await client.runtime.exec_sync("c1", ["cat", "/nope"], 5)
    assert (result.exit_code, result.stderr) == (1, b"no such file")


GOOD_SANDBOX = api_pb2.PodSandboxStatus(id="s1", metadata=SANDBOX_CONFIG.metadata, created_at=1)
GOOD_CONTAINER = api_pb2.ContainerStatus(
    id="c1", metadata=CONTAINER_CONFIG.metadata, created_at=1, image=IMAGE, image_ref="sha256:abc"
)


def _without(message: Any, field: str) -> Any:
    copy = type(message)()
    copy.CopyFrom(message)
    copy.ClearField(field)
    return copy


# Answers upstream's client refuses, and the complaint.
INVALID: list[tuple[str, Any, Invoke, str]] = [
    (
        "Version",
        api_pb2.VersionResponse(runtime_name="containerd", runtime_version="1.7"),
        lambda c: c.runtime.version("v1"),
        "missing Version, RuntimeApiVersion",
    ),
    ("RunPodSandbox", api_pb2.RunPodSandboxResponse(), lambda c: c.runtime.run_pod_sandbox(SANDBOX_CONFIG), "web"),
    (
        "CreateContainer",
        api_pb2.CreateContainerResponse(),
        lambda c: c.runtime.create_container("s1", CONTAINER_CONFIG, SANDBOX_CONFIG),
        "ContainerId is not set",
    ),
    (
        "PodSandboxStatus",
        api_pb2.PodSandboxStatusResponse(status=_without(GOOD_SANDBOX, "metadata")),
        lambda c: c.runtime.pod_sandbox_status("s1"),
        "status.Metadata is not set",
    ),
    (
        "PodSandboxStatus",
        api_pb2.PodSandboxStatusResponse(status=_without(GOOD_SANDBOX, "created_at")),
        lambda c: c.runtime.pod_sandbox_status("s1"),
        "status.CreatedAt is not set",
    ),
    (
        "ContainerStatus",
        api_pb2.ContainerStatusResponse(status=_without(GOOD_CONTAINER, "image_ref")),
        lambda c: c.runtime.container_status("c1"),
        "status.ImageRef is not set",
    ),
    (
        "ContainerStatus",
        api_pb2.ContainerStatusResponse(status=_without(GOOD_CONTAINER, "image")),
        lambda c: c.runtime.container_status("c1"),
        "status.Image is not set",
    ),
    ("Exec", api_pb2.ExecResponse(), lambda c: c.runtime.exec(api_pb2.ExecRequest()), "URL is not set"),
    ("Attach", api_pb2.AttachResponse(), lambda c: c.runtime.attach(api_pb2.AttachRequest()), "URL is not set"),
    (
        "PortForward",
        api_pb2.PortForwardResponse(),
        lambda c: c.runtime.port_forward(api_pb2.PortForwardRequest()),
        "URL is not set",
    ),
    (
        "Status",
        api_pb2.StatusResponse(
            status=api_pb2.RuntimeStatus(conditions=[api_pb2.RuntimeCondition(type="RuntimeReady")])
        ),
        lambda c: c.runtime.status(),
        "RuntimeReady or NetworkReady condition are not set",
    ),
    ("PullImage", api_pb2.PullImageResponse(), lambda c: c.image.pull_image(IMAGE), "imageRef"),
    (
        "ImageStatus",
        api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:abc")),
        lambda c: c.image.image_status(IMAGE),
        "Id or size of image 'registry/app:1' is not set",
    ),
]


@pytest.mark.parametrize("case", INVALID, ids=[f"{rpc}-{i}" for i, (rpc, *_) in enumerate(INVALID)])
async def test_unusable_answers_are_refused(
    case: tuple[str, Any, Invoke, str], runtime: ScriptedRuntime, client: CRIClient
) -> None:
    rpc, answer, invoke, complaint = case
    runtime.script[rpc] = answer
    with pytest.raises(InvalidResponseError) as caught:
        await invoke(client)
    assert complaint in caught.value.message
    assert caught.value.code is None
    assert caught.value.method.endswith(f"/{rpc}")


async def test_complete_answers_and_absent_objects_pass(runtime: ScriptedRuntime, client: CRIClient) -> None:
    ready = [api_pb2.RuntimeCondition(type="RuntimeReady", status=True), api_pb2.RuntimeCondition(type="NetworkReady")]
    runtime.script.update(USABLE_ANSWERS)
    runtime.script.update(
        PodSandboxStatus=api_pb2.PodSandboxStatusResponse(status=GOOD_SANDBOX),
        ContainerStatus=api_pb2.ContainerStatusResponse(status=GOOD_CONTAINER),
        Status=api_pb2.StatusResponse(status=api_pb2.RuntimeStatus(conditions=ready)),
    )
    assert (await client.runtime.version("v1")).runtime_api_version == "v1"
    assert (await client.runtime.pod_sandbox_status("s1")).status == GOOD_SANDBOX
    assert (await client.runtime.container_status("c1")).status == GOOD_CONTAINER
    assert len((await client.runtime.status()).status.conditions) == 2
    # ImageStatus of an absent image: no `image`, and no error.
    assert not (await client.image.image_status(IMAGE)).HasField("image")


async def test_container_events_arrive_in_order(runtime: ScriptedRuntime, client: CRIClient) -> None:
    events = [
        api_pb2.ContainerEventResponse(container_id="c1", container_event_type=api_pb2.CONTAINER_CREATED_EVENT),
        api_pb2.ContainerEventResponse(container_id="c1", container_event_type=api_pb2.CONTAINER_STARTED_EVENT),
    ]
    runtime.script["GetContainerEvents"] = events
    assert await _drain_events(client) == events


async def test_leaving_the_event_stream_ends_the_call(runtime: ScriptedRuntime, client: CRIClient) -> None:
    first = api_pb2.ContainerEventResponse(container_id="c1")
    runtime.script["GetContainerEvents"] = [first, Fail(grpc.StatusCode.INTERNAL, "must not be reached")]
    async with aclosing(client.runtime.get_container_events()) as stream:
        async for event in stream:
            assert event == first
            break
    # The stream was left cleanly (no error surfaced) and the client still works.
    assert await client.runtime.list_containers() == []


async def test_separate_image_endpoint_serves_image_calls(runtime: ScriptedRuntime) -> None:
    with tempfile.TemporaryDirectory(prefix="cri-") as other_dir:
        images = ScriptedRuntime(Path(other_dir) / "images.sock")
        await images.start()
        try:
            async with connect(runtime.endpoint, image_endpoint=images.endpoint, timeout=TIMEOUT) as cri:
                await cri.image.list_images()
                await cri.runtime.list_containers()
        finally:
            await images.stop()
    assert [call.rpc for call in images.calls] == ["ListImages"]
    assert [call.rpc for call in runtime.calls] == ["ListContainers"]
