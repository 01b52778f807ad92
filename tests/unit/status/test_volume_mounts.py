"""containerStatuses[].volumeMounts as upstream's convertToAPIContainerStatuses writes them: from the spec while a
container waits (readOnly as the spec says, recursiveReadOnly resolved to Enabled or Disabled for read-only mounts),
then carried over unchanged from the previous status once the runtime has the container."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeagent.status import ContainerInput, RuntimeState, container_status, generate_pod_status
from nodeagent.status.volume_mounts import volume_mount_statuses

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
Obj = dict[str, Any]


def vm(name: str, path: str, **fields: Any) -> Obj:
    return {"name": name, "mountPath": path, **fields}


@pytest.mark.parametrize(
    ("mount", "supported", "expected"),
    [
        (vm("a", "/a"), False, {"name": "a", "mountPath": "/a"}),
        (vm("a", "/a", readOnly=False, recursiveReadOnly="Disabled"), True, {"name": "a", "mountPath": "/a"}),
        (
            vm("a", "/a", readOnly=True),
            True,
            {"name": "a", "mountPath": "/a", "readOnly": True, "recursiveReadOnly": "Disabled"},
        ),
        (
            vm("a", "/a", readOnly=True, recursiveReadOnly="IfPossible"),
            False,
            {"name": "a", "mountPath": "/a", "readOnly": True, "recursiveReadOnly": "Disabled"},
        ),
        (
            vm("a", "/a", readOnly=True, recursiveReadOnly="IfPossible"),
            True,
            {"name": "a", "mountPath": "/a", "readOnly": True, "recursiveReadOnly": "Enabled"},
        ),
        (
            vm("a", "/a", readOnly=True, recursiveReadOnly="Enabled"),
            True,
            {"name": "a", "mountPath": "/a", "readOnly": True, "recursiveReadOnly": "Enabled"},
        ),
        (  # cannot be honoured: Disabled in the status (the container waits with CreateContainerConfigError)
            vm("a", "/a", readOnly=True, recursiveReadOnly="Enabled"),
            False,
            {"name": "a", "mountPath": "/a", "readOnly": True, "recursiveReadOnly": "Disabled"},
        ),
        (
            vm("a", "/a", readOnly=True, recursiveReadOnly="Enabled", mountPropagation="HostToContainer"),
            True,
            {"name": "a", "mountPath": "/a", "readOnly": True, "recursiveReadOnly": "Disabled"},
        ),
        # not read-only: no mode shown, whatever was asked
        (vm("a", "/a", recursiveReadOnly="Enabled"), True, {"name": "a", "mountPath": "/a"}),
        # subPath, propagation and the like are not part of the status
        (vm("a", "/a", subPath="x", mountPropagation="HostToContainer"), False, {"name": "a", "mountPath": "/a"}),
    ],
)
def test_one_mount(mount: Obj, supported: bool, expected: Obj) -> None:
    assert volume_mount_statuses({"name": "c", "volumeMounts": [mount]}, supports_rro=supported) == [expected]


def test_order_and_absence() -> None:
    container = {"name": "c", "volumeMounts": [vm("b", "/b"), vm("a", "/a", readOnly=True)]}
    assert [m["name"] for m in volume_mount_statuses(container, supports_rro=False)] == ["b", "a"]
    assert volume_mount_statuses({"name": "c"}, supports_rro=False) == []


MOUNTS = [{"name": "a", "mountPath": "/a", "readOnly": True, "recursiveReadOnly": "Disabled"}]
OLD_MOUNTS = [{"name": "old", "mountPath": "/old"}]
WAITING = ContainerInput(name="c", image="img")
RUNNING = ContainerInput(name="c", image="img", state=RuntimeState.RUNNING, container_id="id1")
EXITED = ContainerInput(name="c", image="img", state=RuntimeState.EXITED, container_id="id1", exit_code=1)


def _previous(state: Obj, mounts: list[Obj] | None) -> Obj:
    status: Obj = {"name": "c", "state": state, "lastState": {}, "restartCount": 0, "image": "img"}
    if mounts is not None:
        status["volumeMounts"] = mounts
    return status


@pytest.mark.parametrize(
    ("given", "previous", "expected"),
    [
        (WAITING, None, MOUNTS),  # waiting: from the spec
        (WAITING, _previous({"waiting": {"reason": "ContainerCreating"}}, OLD_MOUNTS), MOUNTS),
        (RUNNING, _previous({"waiting": {}}, OLD_MOUNTS), OLD_MOUNTS),  # immutable once written
        (RUNNING, None, None),  # no previous status: upstream has nothing to carry over
        (RUNNING, _previous({"waiting": {}}, None), None),
        (EXITED, _previous({"running": {}}, OLD_MOUNTS), OLD_MOUNTS),
        # a previous terminated status without a runtime container is kept whole
        (WAITING, _previous({"terminated": {"exitCode": 0}}, OLD_MOUNTS), OLD_MOUNTS),
        (  # the last sync could not create it: it waits with that reason, the list from the spec
            ContainerInput(name="c", image="img", waiting_reason="CreateContainerConfigError", waiting_message="m"),
            None,
            MOUNTS,
        ),
    ],
)
def test_container_status(given: ContainerInput, previous: Obj | None, expected: list[Obj] | None) -> None:
    status = container_status(given, previous=previous, volume_mounts=MOUNTS)
    assert status.get("volumeMounts") == expected


def test_no_mounts_no_field() -> None:
    assert "volumeMounts" not in container_status(WAITING)


def test_pod_status_covers_every_kind_of_container() -> None:
    ro = {"name": "v", "mountPath": "/v", "readOnly": True, "recursiveReadOnly": "IfPossible"}
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {
            "initContainers": [{"name": "init", "image": "img", "volumeMounts": [ro]}],
            "containers": [{"name": "app", "image": "img", "volumeMounts": [ro, vm("v", "/w")]}],
            "ephemeralContainers": [{"name": "debug", "image": "img", "volumeMounts": [ro]}],
        },
        "status": {},
    }
    enabled = {"name": "v", "mountPath": "/v", "readOnly": True, "recursiveReadOnly": "Enabled"}
    disabled = {**enabled, "recursiveReadOnly": "Disabled"}
    for supported, shown in ((True, enabled), (False, disabled)):
        status = generate_pod_status(
            pod, now=T0, containers=[], sandbox_ready=True, supports_recursive_read_only=supported
        )
        assert status["initContainerStatuses"][0]["volumeMounts"] == [shown]
        assert status["containerStatuses"][0]["volumeMounts"] == [shown, {"name": "v", "mountPath": "/w"}]
        assert status["ephemeralContainerStatuses"][0]["volumeMounts"] == [shown]
