"""containerd's task Kill/Delete as `cri.containerd_tasks` sends them: the hand-encoded requests parse, with
protobuf's own parser, as containerd's KillRequest and DeleteTaskRequest (their field numbers, from
containerd/api/services/tasks/v1/tasks.proto), reach the right methods with the `k8s.io` namespace in the metadata,
and failures map to cri.errors. A real grpc.aio server on a unix socket answers."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from cri.channel import open_channel
from cri.containerd_tasks import ContainerdTasks, delete_request, kill_request
from cri.errors import NotFoundError, UnknownCRIError

_F = descriptor_pb2.FieldDescriptorProto


def _messages() -> tuple[Any, Any]:
    """containerd's two request messages, declared here with their field numbers and types."""
    proto = descriptor_pb2.FileDescriptorProto(name="tasks_probe.proto", package="probe", syntax="proto3")
    kill = proto.message_type.add(name="KillRequest")
    kill.field.add(name="container_id", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    kill.field.add(name="exec_id", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    kill.field.add(name="signal", number=3, type=_F.TYPE_UINT32, label=_F.LABEL_OPTIONAL)
    kill.field.add(name="all", number=4, type=_F.TYPE_BOOL, label=_F.LABEL_OPTIONAL)
    delete = proto.message_type.add(name="DeleteTaskRequest")
    delete.field.add(name="container_id", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("probe.KillRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("probe.DeleteTaskRequest")),
    )


KillRequest, DeleteTaskRequest = _messages()
CID = "4b6fec559afea900ff07c682f25071a6bbb7301f3399552b91ef26df22a91704"


def test_kill_request_parses_as_containerds() -> None:
    parsed = KillRequest.FromString(kill_request(CID, signal.SIGKILL))
    assert (parsed.container_id, parsed.exec_id, parsed.signal, parsed.all) == (CID, "", 9, False)
    assert KillRequest.FromString(kill_request("x" * 300, 15)).container_id == "x" * 300  # a two-byte length


def test_delete_request_parses_as_containerds() -> None:
    assert DeleteTaskRequest.FromString(delete_request(CID)).container_id == CID


class TasksServer:
    """Answers containerd's Tasks service from `answers` (method -> StatusCode, OK by default) and records calls."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.calls: list[tuple[str, bytes, str | None]] = []
        self.answers: dict[str, list[grpc.StatusCode]] = {}
        self._server = grpc.aio.server()

        def handler(method: str) -> grpc.RpcMethodHandler:
            async def unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
                namespace = dict(context.invocation_metadata() or ()).get("containerd-namespace")
                self.calls.append((method, request, namespace))
                queue = self.answers.get(method, [])
                code = queue.pop(0) if queue else grpc.StatusCode.OK
                if code != grpc.StatusCode.OK:
                    await context.abort(code, f"{method} says {code.name}")
                return b""

            return grpc.unary_unary_rpc_method_handler(unary)

        self._server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "containerd.services.tasks.v1.Tasks", {m: handler(m) for m in ("Kill", "Delete")}
                )
            ]
        )
        self._server.add_insecure_port(f"unix://{socket}")


@pytest_asyncio.fixture(loop_scope="session")
async def server(socket_dir: Path) -> AsyncIterator[TasksServer]:
    tasks = TasksServer(socket_dir / "containerd.sock")
    await tasks._server.start()
    try:
        yield tasks
    finally:
        await tasks._server.stop(grace=None)


@pytest_asyncio.fixture(loop_scope="session")
async def tasks(server: TasksServer) -> AsyncIterator[ContainerdTasks]:
    channel = open_channel(f"unix://{server.socket}")
    try:
        yield ContainerdTasks(channel)
    finally:
        await channel.close(None)


async def test_end_kills_then_deletes_in_the_cri_namespace(server: TasksServer, tasks: ContainerdTasks) -> None:
    await tasks.end(CID)
    assert [(m, ns) for m, _, ns in server.calls] == [("Kill", "k8s.io"), ("Delete", "k8s.io")]
    assert KillRequest.FromString(server.calls[0][1]).signal == signal.SIGKILL
    assert DeleteTaskRequest.FromString(server.calls[1][1]).container_id == CID


async def test_end_retries_delete_until_the_process_has_exited(server: TasksServer, tasks: ContainerdTasks) -> None:
    server.answers["Delete"] = [grpc.StatusCode.FAILED_PRECONDITION] * 3
    await tasks.end(CID, wait=5)
    assert [m for m, _, _ in server.calls] == ["Kill", "Delete", "Delete", "Delete", "Delete"]


async def test_a_task_already_gone_is_fine(server: TasksServer, tasks: ContainerdTasks) -> None:
    server.answers = {"Kill": [grpc.StatusCode.NOT_FOUND], "Delete": [grpc.StatusCode.NOT_FOUND]}
    await tasks.end(CID)
    assert [m for m, _, _ in server.calls] == ["Kill", "Delete"]
    server.answers["Kill"] = [grpc.StatusCode.NOT_FOUND]
    with pytest.raises(NotFoundError):
        await tasks.kill(CID)  # the plain calls map the status as CRI calls do


async def test_end_gives_up_after_its_wait(server: TasksServer, tasks: ContainerdTasks) -> None:
    server.answers["Delete"] = [grpc.StatusCode.FAILED_PRECONDITION] * 100
    with pytest.raises(UnknownCRIError, match="FAILED_PRECONDITION"):
        await tasks.end(CID, wait=0.3)
