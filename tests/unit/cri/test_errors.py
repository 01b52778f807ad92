"""Every gRPC status of a failed call becomes the most specific CRIError, over a real server on a unix socket."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from cri.client import CRIClient, connect
from cri.errors import (
    AlreadyExistsError,
    CRIError,
    DeadlineExceededError,
    NotFoundError,
    UnavailableError,
    UnimplementedError,
    UnknownCRIError,
)
from cri.v1 import api_pb2
from tests.unit.cri.scripted import HANG, Fail, ScriptedRuntime

SPECIFIC: dict[grpc.StatusCode, type[CRIError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}
FAILURE_CODES = [code for code in grpc.StatusCode if code is not grpc.StatusCode.OK]


@pytest.mark.parametrize("code", FAILURE_CODES, ids=lambda code: code.name)
async def test_status_code_maps_to_its_class(
    code: grpc.StatusCode, runtime: ScriptedRuntime, client: CRIClient
) -> None:
    runtime.script["StartContainer"] = Fail(code, f"container c1: {code.name.lower()}")
    with pytest.raises(CRIError) as caught:
        await client.runtime.start_container("c1")
    error = caught.value
    assert type(error) is SPECIFIC.get(code, UnknownCRIError)
    assert error.code is code
    assert error.method == "/runtime.v1.RuntimeService/StartContainer"
    assert error.message == f"container c1: {code.name.lower()}"
    assert isinstance(error.__cause__, grpc.aio.AioRpcError)


async def test_message_is_readable(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["PullImage"] = Fail(grpc.StatusCode.NOT_FOUND, 'pulling "registry/none:1": not found')
    with pytest.raises(NotFoundError) as caught:
        await client.image.pull_image(api_pb2.ImageSpec(image="registry/none:1"))
    assert str(caught.value) == '/runtime.v1.ImageService/PullImage: NOT_FOUND: pulling "registry/none:1": not found'


async def test_rpc_the_runtime_lacks_is_unimplemented(socket_dir: Path) -> None:
    # A plain server with no CRI service at all: gRPC itself answers UNIMPLEMENTED.
    server = grpc.aio.server()
    server.add_insecure_port(f"unix://{socket_dir / 'empty.sock'}")
    await server.start()
    try:
        async with connect(str(socket_dir / "empty.sock"), timeout=5.0) as cri:
            with pytest.raises(UnimplementedError) as caught:
                await cri.runtime.runtime_config()
        assert caught.value.method == "/runtime.v1.RuntimeService/RuntimeConfig"
    finally:
        await server.stop(grace=None)


async def test_missing_socket_is_unavailable(socket_dir: Path) -> None:
    async with connect(f"unix://{socket_dir / 'nobody-listens.sock'}", timeout=5.0) as cri:
        with pytest.raises(UnavailableError) as caught:
            await cri.runtime.version("v1")
    assert caught.value.code is grpc.StatusCode.UNAVAILABLE


async def test_call_past_its_timeout_is_deadline_exceeded(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["ListContainers"] = HANG
    with pytest.raises(DeadlineExceededError) as caught:
        await client.runtime.list_containers(timeout=0.2)
    assert caught.value.method == "/runtime.v1.RuntimeService/ListContainers"
    assert caught.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_client_default_timeout_applies(runtime: ScriptedRuntime, socket_dir: Path) -> None:
    runtime.script["ImageFsInfo"] = HANG
    async with connect(runtime.endpoint, timeout=0.2) as cri:
        with pytest.raises(DeadlineExceededError):
            await cri.image.image_fs_info()


async def test_event_stream_past_its_timeout_is_deadline_exceeded(runtime: ScriptedRuntime, client: CRIClient) -> None:
    event = api_pb2.ContainerEventResponse(container_id="c1")
    runtime.script["GetContainerEvents"] = [event, HANG]
    received = []
    with pytest.raises(DeadlineExceededError) as caught:
        async for item in client.runtime.get_container_events(timeout=0.3):
            received.append(item)
    assert received == [event]
    assert caught.value.method == "/runtime.v1.RuntimeService/GetContainerEvents"
