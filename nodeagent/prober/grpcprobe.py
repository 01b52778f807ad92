"""The grpc probe (upstream pkg/probe/grpc): one grpc.health.v1.Health/Check call to the pod IP on the probe's port.

SERVING is success; any other status a failure ("service unhealthy (responded with "NOT_SERVING")"). A server
without the health service, a call that misses the timeout, and a connection that fails are failures with
upstream's messages. The connection is plaintext, with `kube-probe/<major>.<minor>` as user agent and no proxy.

The two messages of the health protocol are tiny (a string `service` = 1; an enum `status` = 1), so they are
encoded here by hand instead of generated from a vendored proto: field 1, wire types 2 and 0.
"""

from __future__ import annotations

import grpc

from nodeagent.prober.probe import USER_AGENT, Outcome, ProbeOutcome, go_code_name, go_duration, join_host_port

CHECK_METHOD = "/grpc.health.v1.Health/Check"
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
SERVING = 1


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


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def encode_check_request(service: str) -> bytes:
    """HealthCheckRequest{service}: an empty service is the default value, which proto3 leaves out."""
    if not service:
        return b""
    raw = service.encode()
    return b"\x0a" + _varint(len(raw)) + raw


def decode_check_response(data: bytes) -> int:
    """HealthCheckResponse.status; unknown fields are skipped, a missing status is 0 (UNKNOWN)."""
    status = 0
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            if field == 1:
                status = value
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated message")
    return status


async def probe_grpc(
    host: str, port: int, service: str, timeout: float, *, user_agent: str = USER_AGENT
) -> ProbeOutcome:
    address = join_host_port(host, port)
    options = [("grpc.primary_user_agent", user_agent), ("grpc.enable_http_proxy", 0)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        check = channel.unary_unary(
            CHECK_METHOD, request_serializer=lambda b: b, response_deserializer=decode_check_response
        )
        try:
            status: int = await check(encode_check_request(service), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code is grpc.StatusCode.UNIMPLEMENTED:
                return ProbeOutcome(
                    Outcome.FAILURE,
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): "
                    + (exc.details() or ""),
                )
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                message = f"timeout: health rpc did not complete within {go_duration(timeout)}"
                return ProbeOutcome(Outcome.FAILURE, message)
            return ProbeOutcome(
                Outcome.FAILURE,
                f"error: health rpc probe failed: rpc error: code = {go_code_name(code)} desc = {exc.details() or ''}",
            )
    if status != SERVING:
        name = SERVING_STATUS.get(status, str(status))
        return ProbeOutcome(Outcome.FAILURE, f'service unhealthy (responded with "{name}")')
    return ProbeOutcome(Outcome.SUCCESS, "service healthy")
