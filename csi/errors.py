"""Errors of the CSI boundary, and whether a failed operation is over (`is_final`).

Callers decide by class, never by parsing messages. Every gRPC failure of a CSI call is mapped once, in
`from_rpc_error`, to the most specific class here and raised `from` the original gRPC error; the driver's own message
is kept as `message` (the kubelet puts it in the FailedMount event).

    CSIError                        any failed CSI call: method, grpc code, the driver's message
    ├── InvalidArgumentError        INVALID_ARGUMENT
    ├── NotFoundError               NOT_FOUND (the volume, node or snapshot does not exist)
    ├── AlreadyExistsError          ALREADY_EXISTS (same name or target, incompatible parameters)
    ├── FailedPreconditionError     FAILED_PRECONDITION (e.g. published elsewhere, staged without capability)
    ├── OutOfRangeError             OUT_OF_RANGE (an unsupported capacity)
    ├── ResourceExhaustedError      RESOURCE_EXHAUSTED (e.g. the node's volume limit)
    ├── AbortedError                ABORTED (an operation for this volume is already in progress)
    ├── UnavailableError            UNAVAILABLE (driver down, socket missing)
    ├── DeadlineExceededError       DEADLINE_EXCEEDED (our per-call timeout ran out)
    ├── CancelledError              CANCELLED
    ├── UnimplementedError          UNIMPLEMENTED (the driver lacks the RPC or the service)
    ├── UnknownCSIError             every other status code
    ├── RequestError                refused before dialling: the request lacks what the spec requires (code None)
    └── InvalidResponseError        the call succeeded but the answer lacks what the kubelet needs (code None)

`EndpointError` is separate: it is raised before any call, for an endpoint the client cannot dial.
"""

from __future__ import annotations

import grpc


class CSIError(Exception):
    """A CSI call failed.

    `method` is the full gRPC method (`/csi.v1.Node/NodeStageVolume`), `code` the gRPC status code (None when no
    call was made or the driver answered OK with an unusable response) and `message` the driver's own description.
    """

    def __init__(self, method: str, code: grpc.StatusCode | None, message: str) -> None:
        super().__init__(method, code, message)
        self.method = method
        self.code = code
        self.message = message

    def __str__(self) -> str:
        code = self.code.name if self.code is not None else type(self).__name__
        return f"{self.method}: {code}: {self.message}"


class InvalidArgumentError(CSIError):
    """The driver refused a field of the request."""


class NotFoundError(CSIError):
    """The volume (or node, snapshot) does not exist."""


class AlreadyExistsError(CSIError):
    """Something of that name or at that path exists already, incompatible with the request."""


class FailedPreconditionError(CSIError):
    """The volume is not in a state the call allows (published elsewhere, not staged, ...)."""


class OutOfRangeError(CSIError):
    """An unsupported capacity or size."""


class ResourceExhaustedError(CSIError):
    """The driver, or the node's volume limit, is out of room; the operation may still be running."""


class AbortedError(CSIError):
    """Another operation on the same volume is in progress (the spec's answer to concurrent calls)."""


class UnavailableError(CSIError):
    """The driver cannot be reached: not started, restarting, or its socket is gone."""


class DeadlineExceededError(CSIError):
    """The call did not finish within its timeout; the driver may still be working on it."""


class CancelledError(CSIError):
    """The call was cancelled on our side."""


class UnimplementedError(CSIError):
    """The driver does not implement this RPC (or the whole service, e.g. no Controller on a node plugin)."""


class UnknownCSIError(CSIError):
    """Any other gRPC status; `code` says which."""


class RequestError(CSIError):
    """The request was not sent: it lacks a field the spec requires (as upstream's client checks before dialling)."""


class InvalidResponseError(CSIError):
    """The driver answered OK, but without something the kubelet relies on."""


class EndpointError(ValueError):
    """A plugin endpoint that is not a unix socket (`unix:///path` or an absolute path)."""


_BY_CODE: dict[grpc.StatusCode, type[CSIError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}

# As upstream's kubelet (pkg/volume/csi/csi_client.go, isFinalError): after these codes the driver may still be
# working on the operation (or on an earlier call of it), so the kubelet treats the volume's state as uncertain.
_UNCERTAIN: frozenset[grpc.StatusCode] = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)


def from_rpc_error(method: str, error: grpc.aio.AioRpcError) -> CSIError:
    """The most specific `CSIError` for a failed call of `method`; use as `raise from_rpc_error(...) from error`."""
    code = error.code()
    return _BY_CODE.get(code, UnknownCSIError)(method, code, error.details() or "")


def is_final(error: BaseException) -> bool:
    """Whether the operation that raised `error` is surely over (failed, not running), as upstream's isFinalError.

    A gRPC status outside CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED and ABORTED is final: the
    operation did not start or failed. Those five are not: the driver may still be working on it. A `RequestError`
    is final (nothing was sent), as is an `InvalidResponseError` (the driver finished with OK). Any other exception
    is not a gRPC status at all, and like upstream we stay on the safe side and call it uncertain.
    """
    if isinstance(error, CSIError):
        return error.code not in _UNCERTAIN
    if isinstance(error, grpc.aio.AioRpcError):
        return error.code() not in _UNCERTAIN
    return False
