"""The grpc probe: its hand-written health codec against protobuf's own encoding, and its verdicts against an
in-process gRPC server speaking grpc.health.v1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from nodeagent.prober.grpcprobe import decode_check_response, encode_check_request, probe_grpc
from nodeagent.prober.probe import Outcome, ProbeOutcome

F = descriptor_pb2.FieldDescriptorProto


def _health_messages() -> tuple[Any, Any]:
    """HealthCheckRequest / HealthCheckResponse built by protobuf itself from a descriptor (an independent oracle)."""
    proto = descriptor_pb2.FileDescriptorProto(name="oracle_health.proto", package="grpc.health.v1", syntax="proto3")
    request = proto.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    response = proto.message_type.add(name="HealthCheckResponse")
    status_enum = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status_enum.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        type=F.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=F.LABEL_OPTIONAL,
    )
    response.field.add(name="extra", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


Request, Response = _health_messages()


@pytest.mark.parametrize("service", ["", "db", "x" * 300, "ünïcode"])
def test_request_encoding_matches_protobuf(service: str) -> None:
    assert encode_check_request(service) == Request(service=service).SerializeToString()


@pytest.mark.parametrize(("status", "extra"), [(0, ""), (1, ""), (2, "ignored"), (3, "z" * 200)])
def test_response_decoding_matches_protobuf(status: int, extra: str) -> None:
    assert decode_check_response(Response(status=status, extra=extra).SerializeToString()) == status


@dataclass
class HealthServer:
    server: grpc.aio.Server
    port: int
    user_agents: list[str] = field(default_factory=list)


async def _start(with_health: bool) -> HealthServer:
    server = grpc.aio.server()
    holder = HealthServer(server, 0)

    async def check(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        holder.user_agents += [v for k, v in context.invocation_metadata() or () if k == "user-agent"]
        if request.service == "":
            return Response(status=1)
        if request.service == "db":
            return Response(status=2)
        if request.service == "slow":
            await asyncio.Event().wait()  # never answers; the deadline cancels it
        await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        raise AssertionError("unreachable")

    if with_health:
        handler = grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=Request.FromString, response_serializer=Response.SerializeToString
        )
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": handler})]
        )
    holder.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return holder


@pytest_asyncio.fixture(loop_scope="session")
async def health() -> AsyncIterator[HealthServer]:
    server = await _start(with_health=True)
    try:
        yield server
    finally:
        await server.server.stop(grace=None)


@pytest.mark.parametrize(
    ("service", "timeout", "expected"),
    [
        ("", 1, ProbeOutcome(Outcome.SUCCESS, "service healthy")),
        ("db", 1, ProbeOutcome(Outcome.FAILURE, 'service unhealthy (responded with "NOT_SERVING")')),
        (
            "nope",
            1,
            ProbeOutcome(
                Outcome.FAILURE, "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
            ),
        ),
        ("slow", 0.3, ProbeOutcome(Outcome.FAILURE, "timeout: health rpc did not complete within 0.3s")),
    ],
)
async def test_verdicts(health: HealthServer, service: str, timeout: float, expected: ProbeOutcome) -> None:
    assert await probe_grpc("127.0.0.1", health.port, service, timeout) == expected
    assert health.user_agents[-1].startswith("kube-probe/1.34")


async def test_server_without_health_service() -> None:
    bare = await _start(with_health=False)
    try:
        outcome = await probe_grpc("127.0.0.1", bare.port, "", 1)
    finally:
        await bare.server.stop(grace=None)
    assert outcome.result is Outcome.FAILURE
    assert outcome.output.startswith(
        "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"
    )


async def test_closed_port() -> None:
    bare = await _start(with_health=False)
    port = bare.port
    await bare.server.stop(grace=None)
    outcome = await probe_grpc("127.0.0.1", port, "", 1)
    assert outcome.result is Outcome.FAILURE
    assert outcome.output.startswith("error: health rpc probe failed: rpc error: code = Unavailable desc = ")
