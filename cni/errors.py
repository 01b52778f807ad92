"""CNI errors: the spec's well-known codes, the plugin's own (100+), and the error JSON a runtime reads.

Spec 1.0/1.1, "Error": the plugin exits non-zero and prints `{"cniVersion", "code", "msg", "details"}` on stdout.
Codes 1-99 are the spec's; 100 and up are plugin specific. Messages say what is wrong and what to change, since
containerd shows them verbatim in the sandbox error a user reads (FailedCreatePodSandBox).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class Code(IntEnum):
    INCOMPATIBLE_VERSION = 1
    UNSUPPORTED_FIELD = 2
    UNKNOWN_CONTAINER = 3
    INVALID_ENVIRONMENT = 4
    IO_FAILURE = 5
    DECODE_FAILURE = 6
    INVALID_CONFIG = 7
    TRY_AGAIN_LATER = 11
    # STATUS (spec 1.1).
    NOT_AVAILABLE = 50
    LIMITED_CONNECTIVITY = 51
    # Plugin specific.
    ADDRESSES_EXHAUSTED = 100
    CHECK_FAILED = 101
    NETLINK_FAILURE = 102
    INTERNAL = 999


class CNIError(Exception):
    """An error the plugin reports to the runtime as CNI error JSON."""

    def __init__(self, code: Code, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str) -> dict[str, Any]:
        doc: dict[str, Any] = {"cniVersion": cni_version, "code": int(self.code), "msg": self.msg}
        if self.details:
            doc["details"] = self.details
        return doc

    def __repr__(self) -> str:
        return f"CNIError({self.code.name}, {self.msg!r})"
