"""CRI errors printed as upstream prints a gRPC error (grpc-go's status text), for the messages that carry one."""

from __future__ import annotations

import pytest

from nodeagent.kuberuntime.errors import rpc_error_text


@pytest.mark.parametrize(
    ("code", "message", "text"),
    [
        ("NOT_FOUND", "x: not found", "rpc error: code = NotFound desc = x: not found"),
        ("CANCELLED", "gone", "rpc error: code = Canceled desc = gone"),  # grpc-go's one-l spelling
        ("DEADLINE_EXCEEDED", "slow", "rpc error: code = DeadlineExceeded desc = slow"),
        ("UNKNOWN", "?", "rpc error: code = Unknown desc = ?"),
        (None, "no image id", "no image id"),  # an OK answer without what the kubelet needs: the message alone
    ],
)
def test_rpc_error_text(code: str | None, message: str, text: str) -> None:
    assert rpc_error_text(code, message) == text
