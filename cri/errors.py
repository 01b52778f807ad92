"""Errors of the CRI boundary.

Callers decide by class, never by parsing messages: a missing container is a `NotFoundError` whichever runtime said
so. Every gRPC failure of a CRI call is mapped once, in `from_rpc_error`, to the most specific class here and raised
`from` the original gRPC error, so the runtime's own message and the traceback stay available.

    CRIError                    any failed CRI call: method, grpc code, the runtime's message
    ├── NotFoundError           NOT_FOUND
    ├── AlreadyExistsError      ALREADY_EXISTS
    ├── UnavailableError        UNAVAILABLE (runtime down, socket missing)
    ├── DeadlineExceededError   DEADLINE_EXCEEDED (our per-call timeout ran out)
    ├── UnimplementedError      UNIMPLEMENTED (the runtime lacks the RPC)
    ├── UnknownCRIError         every other status code
    └── InvalidResponseError    the call succeeded but the answer lacks what the kubelet needs (code is None)

`EndpointError` is separate: it is raised before any call, for an endpoint the client cannot dial.
"""

from __future__ import annotations

import grpc


class CRIError(Exception):
    """A CRI call failed.

    `method` is the full gRPC method (`/runtime.v1.RuntimeService/StartContainer`), `code` the gRPC status code (None
    when the runtime answered OK with an unusable response) and `message` the runtime's own description.
    """

    def __init__(self, method: str, code: grpc.StatusCode | None, message: str) -> None:
        super().__init__(method, code, message)
        self.method = method
        self.code = code
        self.message = message

    def __str__(self) -> str:
        code = self.code.name if self.code is not None else "invalid response"
        return f"{self.method}: {code}: {self.message}"


class NotFoundError(CRIError):
    """The sandbox, container or image does not exist (anymore)."""


class AlreadyExistsError(CRIError):
    """A sandbox or container of that name exists already."""


class UnavailableError(CRIError):
    """The runtime cannot be reached: not started, restarting, or the socket is gone."""


class DeadlineExceededError(CRIError):
    """The call did not finish within its timeout."""


class UnimplementedError(CRIError):
    """The runtime does not implement this RPC (older runtime, or an optional feature)."""


class UnknownCRIError(CRIError):
    """Any other gRPC status; `code` says which."""


class InvalidResponseError(CRIError):
    """The runtime answered OK, but without a field the kubelet relies on (as upstream's remote client checks)."""


class EndpointError(ValueError):
    """A runtime endpoint that is not a unix socket (`unix:///path` or an absolute path)."""


_BY_CODE: dict[grpc.StatusCode, type[CRIError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}


def from_rpc_error(method: str, error: grpc.RpcError) -> CRIError:
    """The most specific `CRIError` for a failed call of `method`; use as `raise from_rpc_error(...) from error`."""
    code = error.code()
    cls = _BY_CODE.get(code, UnknownCRIError)
    return cls(method, code, error.details() or "")
