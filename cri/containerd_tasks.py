"""Two calls of containerd's own task API (`containerd.services.tasks.v1.Tasks`), on the CRI socket: Kill and Delete.

CRI has no call that deletes a container's task. When a StartContainer is cut off (the agent killed while containerd
creates the task), containerd 1.7 can keep a task for a container its CRI record never marked started, and then
refuses RemoveContainer for good ("cannot delete running task ...: failed precondition", containerd issue 11037)
until containerd restarts. containerd serves its task API on the same socket, so the agent can end and delete that
task itself, after which RemoveContainer succeeds.

The two requests are small enough to encode here (protobuf fields: KillRequest container_id=1, exec_id=2, signal=3,
all=4; DeleteTaskRequest container_id=1), which spares generating containerd's API protos; the replies are not read.
The CRI plugin's objects live in the `k8s.io` namespace, passed as gRPC metadata as containerd's client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import grpc

from cri.errors import CRIError, NotFoundError, from_rpc_error

# The namespace of containerd's CRI plugin (its default `k8s.io`).
CRI_NAMESPACE = "k8s.io"
_KILL = "/containerd.services.tasks.v1.Tasks/Kill"
_DELETE = "/containerd.services.tasks.v1.Tasks/Delete"
_TIMEOUT = 30.0


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string_field(number: int, value: str) -> bytes:
    raw = value.encode()
    return _varint(number << 3 | 2) + _varint(len(raw)) + raw


def _uint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def kill_request(container_id: str, sig: int) -> bytes:
    """KillRequest{container_id, signal} for the task's init process (exec_id empty, all false)."""
    return _string_field(1, container_id) + _uint_field(3, sig)


def delete_request(container_id: str) -> bytes:
    """DeleteTaskRequest{container_id}."""
    return _string_field(1, container_id)


def _raw(data: bytes) -> bytes:
    return data


class ContainerdTasks:
    """Kill and Delete of a container's task, over a channel to containerd's socket."""

    def __init__(self, channel: grpc.aio.Channel, *, namespace: str = CRI_NAMESPACE) -> None:
        self._kill = channel.unary_unary(_KILL, request_serializer=_raw, response_deserializer=_raw)
        self._delete = channel.unary_unary(_DELETE, request_serializer=_raw, response_deserializer=_raw)
        self._metadata = (("containerd-namespace", namespace),)

    async def _call(self, method: str, stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes], request: bytes) -> None:
        try:
            await stub(request, timeout=_TIMEOUT, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(method, exc) from exc

    async def kill(self, container_id: str, sig: int = signal.SIGKILL) -> None:
        """Signal the task's init process. NotFoundError: no such task."""
        await self._call(_KILL, self._kill, kill_request(container_id, sig))

    async def delete(self, container_id: str) -> None:
        """Delete the task (its process must have exited). NotFoundError: no such task; FailedPrecondition-style
        CRIError while it still runs."""
        await self._call(_DELETE, self._delete, delete_request(container_id))

    async def end(self, container_id: str, *, wait: float = 5.0) -> None:
        """SIGKILL the task, then delete it once its process has exited (retried for up to `wait` seconds). A task
        already gone is fine; the last CRIError is raised if it cannot be deleted in time."""
        with contextlib.suppress(NotFoundError):
            await self.kill(container_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            try:
                with contextlib.suppress(NotFoundError):
                    await self.delete(container_id)
                return
            except CRIError:
                if loop.time() >= deadline:
                    raise
            await asyncio.sleep(0.1)
