"""Every gRPC status of a failed CSI call becomes the most specific CSIError; `is_final` follows upstream's rule."""

from __future__ import annotations

import grpc
import pytest

from csi.client import CSIClient
from csi.errors import (
    AbortedError,
    AlreadyExistsError,
    CancelledError,
    CSIError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidResponseError,
    NotFoundError,
    OutOfRangeError,
    RequestError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
    UnknownCSIError,
    is_final,
)
from csi.v1 import csi_pb2
from tests.unit.csi.scripted import Fail, ScriptedDriver

SPECIFIC: dict[grpc.StatusCode, type[CSIError]] = {
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
# upstream's isFinalError (pkg/volume/csi/csi_client.go): the operation may still be in progress after these.
NOT_FINAL = {
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
}
FAILURE_CODES = [code for code in grpc.StatusCode if code is not grpc.StatusCode.OK]
RWO = csi_pb2.VolumeCapability(mount=csi_pb2.VolumeCapability.MountVolume())


@pytest.mark.parametrize("code", FAILURE_CODES, ids=lambda code: code.name)
async def test_status_code_maps_to_its_class_and_finality(
    code: grpc.StatusCode, driver: ScriptedDriver, plugin: CSIClient
) -> None:
    driver.script["NodeStageVolume"] = Fail(code, f"volume v1: {code.name.lower()}")
    with pytest.raises(CSIError) as caught:
        await plugin.node.node_stage_volume("v1", "/stage", RWO)
    error = caught.value
    assert type(error) is SPECIFIC.get(code, UnknownCSIError)
    assert error.code is code
    assert error.method == "/csi.v1.Node/NodeStageVolume"
    assert error.message == f"volume v1: {code.name.lower()}"  # the driver's own message, for the event
    assert isinstance(error.__cause__, grpc.aio.AioRpcError)
    assert is_final(error) is (code not in NOT_FINAL)
    assert is_final(error.__cause__) is (code not in NOT_FINAL)  # the raw gRPC error too


async def test_message_is_readable(driver: ScriptedDriver, plugin: CSIClient) -> None:
    driver.script["NodePublishVolume"] = Fail(grpc.StatusCode.INTERNAL, "mount failed: exit status 32")
    with pytest.raises(UnknownCSIError) as caught:
        await plugin.node.node_publish_volume("v1", "/target", RWO)
    assert str(caught.value) == "/csi.v1.Node/NodePublishVolume: INTERNAL: mount failed: exit status 32"


@pytest.mark.parametrize(
    ("error", "final"),
    [
        (RequestError("/csi.v1.Node/NodeStageVolume", None, "missing volume id"), True),  # nothing was sent
        (InvalidResponseError("/csi.v1.Node/NodeGetVolumeStats", None, "no usage"), True),  # the driver finished
        (OSError("socket gone"), False),  # not a gRPC status: uncertain, as upstream
        (TimeoutError(), False),
    ],
    ids=["request-error", "invalid-response", "os-error", "timeout-error"],
)
def test_is_final_outside_grpc_statuses(error: BaseException, final: bool) -> None:
    assert is_final(error) is final


def test_str_without_a_code_names_the_class() -> None:
    error = RequestError("/csi.v1.Node/NodeStageVolume", None, "missing volume id")
    assert str(error) == "/csi.v1.Node/NodeStageVolume: RequestError: missing volume id"
