"""The runtime manager's exception tree.

`KubeRuntimeError` is the root. Each subclass carries the `reason` upstream reports in the container's waiting state
or in an event, so a caller maps an exception to a pod status without a lookup table.
"""

from __future__ import annotations


class KubeRuntimeError(Exception):
    """Root of the errors raised by `nodeagent.kuberuntime`."""

    reason = "KubeRuntimeError"


class CreateContainerConfigError(KubeRuntimeError):
    """The container config could not be built (a missing ConfigMap key, a bad fieldRef, runAsNonRoot violated)."""

    reason = "CreateContainerConfigError"


class CreatePodSandboxConfigError(KubeRuntimeError):
    """The sandbox config could not be built (as upstream's CreatePodSandboxError reason)."""

    reason = "CreatePodSandboxError"


class LabelsError(KubeRuntimeError):
    """A runtime object lacks the labels the kubelet puts on what it creates, so it cannot be adopted."""

    reason = "LabelsError"


# grpc-go's names of the status codes (codes.Code.String()), which upstream's messages carry.
_GO_CODE_NAMES = {
    "OK": "OK",
    "CANCELLED": "Canceled",
    "UNKNOWN": "Unknown",
    "INVALID_ARGUMENT": "InvalidArgument",
    "DEADLINE_EXCEEDED": "DeadlineExceeded",
    "NOT_FOUND": "NotFound",
    "ALREADY_EXISTS": "AlreadyExists",
    "PERMISSION_DENIED": "PermissionDenied",
    "RESOURCE_EXHAUSTED": "ResourceExhausted",
    "FAILED_PRECONDITION": "FailedPrecondition",
    "ABORTED": "Aborted",
    "OUT_OF_RANGE": "OutOfRange",
    "UNIMPLEMENTED": "Unimplemented",
    "INTERNAL": "Internal",
    "UNAVAILABLE": "Unavailable",
    "DATA_LOSS": "DataLoss",
    "UNAUTHENTICATED": "Unauthenticated",
}


def rpc_error_text(code_name: str | None, message: str) -> str:
    """A CRI call's error as upstream prints a gRPC error (`err.Error()`): "rpc error: code = NotFound desc = ...".
    `code_name` is the Python grpc.StatusCode name (NOT_FOUND); None (an OK answer the kubelet cannot use) is the
    message alone, as upstream's own errors are."""
    if code_name is None:
        return message
    return f"rpc error: code = {_GO_CODE_NAMES.get(code_name, code_name)} desc = {message}"
