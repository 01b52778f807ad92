"""A real grpc.aio server on a unix socket that answers CRI calls from a script, for the client's unit tests.

Not a mock of the client: requests cross a real socket and real gRPC, with real deadlines and status codes. Each RPC
of RuntimeService and ImageService answers from `script[rpc_name]`:

    a response message         returned as is (unscripted RPCs return an empty response)
    Fail(code, details)        the call fails with that status
    HANG                       the call never answers (until its deadline or the server stops)
    async callable(request)    computes the answer
    list (streaming RPCs)      messages sent in order, where a Fail ends the stream with an error and HANG keeps it
                               open; the stream ends after the last item

Every call is recorded with its request and the deadline the server saw (`time_remaining`, None without one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from cri.v1 import api_pb2


@dataclass(frozen=True)
class Fail:
    code: grpc.StatusCode
    details: str = ""


HANG = object()


@dataclass(frozen=True)
class Call:
    rpc: str
    request: Message
    time_remaining: float | None


class ScriptedRuntime:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.script: dict[str, Any] = {}
        self.calls: list[Call] = []
        self._server = grpc.aio.server()
        for service in api_pb2.DESCRIPTOR.services_by_name.values():
            handlers = {method.name: self._handler(method) for method in service.methods}
            self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service.full_name, handlers)])
        self._server.add_insecure_port(f"unix://{socket}")

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def calls_of(self, rpc: str) -> list[Call]:
        return [call for call in self.calls if call.rpc == rpc]

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(grace=None)

    def _handler(self, method: Any) -> grpc.RpcMethodHandler:
        request_type = getattr(api_pb2, method.input_type.name)
        response_type = getattr(api_pb2, method.output_type.name)
        name = method.name

        async def unary(request: Message, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
            self.calls.append(Call(name, request, context.time_remaining()))
            behaviour = self.script.get(name, response_type())
            if isinstance(behaviour, Fail):
                await context.abort(behaviour.code, behaviour.details)
            if behaviour is HANG:
                await asyncio.Event().wait()
            if callable(behaviour):
                answer: Callable[[Message], Awaitable[Message]] = behaviour
                return await answer(request)
            assert isinstance(behaviour, response_type), f"script for {name} is {behaviour!r}"
            return behaviour

        async def stream(request: Message, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Message]:
            self.calls.append(Call(name, request, context.time_remaining()))
            for item in self.script.get(name, []):
                if isinstance(item, Fail):
                    await context.abort(item.code, item.details)
                if item is HANG:
                    await asyncio.Event().wait()
                yield item

        if method.server_streaming:
            return grpc.unary_stream_rpc_method_handler(
                stream,
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )
        return grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )
