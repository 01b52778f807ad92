"""The relist's diff: container and sandbox state changes become PodLifecycleEvents per pod UID."""

from __future__ import annotations

import pytest

from cri.v1 import api_pb2
from pleg.events import PodLifecycleEvent
from pleg.events import PodLifecycleEventType as T
from pleg.relist import diff

RUNNING, EXITED, CREATED = api_pb2.CONTAINER_RUNNING, api_pb2.CONTAINER_EXITED, api_pb2.CONTAINER_CREATED
READY, NOTREADY = api_pb2.SANDBOX_READY, api_pb2.SANDBOX_NOTREADY


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ({}, {("container", "c1"): ("u", RUNNING)}, [PodLifecycleEvent("u", T.CONTAINER_STARTED, "c1")]),
        ({}, {("container", "c1"): ("u", EXITED)}, [PodLifecycleEvent("u", T.CONTAINER_DIED, "c1")]),
        ({}, {("container", "c1"): ("u", CREATED)}, []),
        (
            {("container", "c1"): ("u", RUNNING)},
            {("container", "c1"): ("u", EXITED)},
            [PodLifecycleEvent("u", T.CONTAINER_DIED, "c1")],
        ),
        ({("container", "c1"): ("u", RUNNING)}, {("container", "c1"): ("u", RUNNING)}, []),
        ({("container", "c1"): ("u", EXITED)}, {}, [PodLifecycleEvent("u", T.CONTAINER_REMOVED, "c1")]),
        (
            {("container", "c1"): ("u", RUNNING)},
            {("container", "c1"): ("u", api_pb2.CONTAINER_UNKNOWN)},
            [PodLifecycleEvent("u", T.CONTAINER_CHANGED, "c1")],
        ),
        (
            {("sandbox", "s1"): ("u", READY)},
            {("sandbox", "s1"): ("u", NOTREADY)},
            [PodLifecycleEvent("u", T.POD_SYNC, "s1")],
        ),
        ({("sandbox", "s1"): ("u", READY)}, {}, [PodLifecycleEvent("u", T.POD_SYNC, "s1")]),
    ],
)
def test_diff(
    old: dict[tuple[str, str], tuple[str, int]],
    new: dict[tuple[str, str], tuple[str, int]],
    expected: list[PodLifecycleEvent],
) -> None:
    assert diff(old, new) == expected
