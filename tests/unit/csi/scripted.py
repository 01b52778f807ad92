"""A tiny CSI driver double: a real grpc.aio server on a unix socket that answers from a script.

A test double of the driver for the client's unit tests (the real driver is the testbed's): requests cross a real
socket and real gRPC, with real deadlines and status codes. It serves the given services of csi.v1 (by default
Identity, Node and Controller); each RPC answers from `script[rpc_name]`:

    a response message         returned as is (unscripted RPCs return an empty response)
    Fail(code, details)        the call fails with that status
    HANG                       the call never answers (until its deadline or the server stops)

Every call is recorded with its request and the deadline the server saw (`time_remaining`, None without one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from csi.v1 import csi_pb2


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


class ScriptedDriver:
    def __init__(self, socket: Path, services: Iterable[str] = ("Identity", "Node", "Controller")) -> None:
        self.socket = socket
        self.script: dict[str, Any] = {}
        self.calls: list[Call] = []
        self._server = grpc.aio.server()
        for name in services:
            service = csi_pb2.DESCRIPTOR.services_by_name[name]
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
        request_type = getattr(csi_pb2, method.input_type.name)
        response_type = getattr(csi_pb2, method.output_type.name)
        name = method.name

        async def unary(request: Message, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
            self.calls.append(Call(name, request, context.time_remaining()))
            behaviour = self.script.get(name, response_type())
            if isinstance(behaviour, Fail):
                await context.abort(behaviour.code, behaviour.details)
            if behaviour is HANG:
                await asyncio.Event().wait()
            assert isinstance(behaviour, response_type), f"script for {name} is {behaviour!r}"
            return behaviour

        return grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )
