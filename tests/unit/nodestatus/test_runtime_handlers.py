"""The runtime's handlers and features: from CRI Status to what the agent keeps (upstream toKubeRuntimeStatus and
runtimeState), and on to Node.status.runtimeHandlers / .features (the nodestatus setters), through a real
NodeStatusManager against the stateful fake apiserver of test_manager."""

from __future__ import annotations

from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.config import defaults
from nodeagent.kube import paths
from nodeagent.kuberuntime.runtime_handlers import (
    RuntimeFeatures,
    RuntimeHandler,
    RuntimeState,
    features_of,
    handlers_of,
    supports_recursive_read_only_mounts,
)
from nodeagent.nodestatus import build_node_status, initial_node
from nodeagent.nodestatus.manager import NodeStatusManager, _status_patch
from nodeagent.nodestatus.runtime_handlers import node_features_status, runtime_handlers_status
from tests.unit.fakeclock import FakeClock
from tests.unit.nodestatus.test_manager import CONFIG, FACTS, NAME, Api, Health
from tests.unit.nodestatus.test_node import FACTS as NODE_FACTS

H = api_pb2.RuntimeHandler
F = api_pb2.RuntimeHandlerFeatures


def response(
    *handlers: api_pb2.RuntimeHandler, ready: bool = True, features: api_pb2.RuntimeFeatures | None = None
) -> api_pb2.StatusResponse:
    conditions = [
        api_pb2.RuntimeCondition(type="RuntimeReady", status=ready),
        api_pb2.RuntimeCondition(type="NetworkReady", status=True),
    ]
    return api_pb2.StatusResponse(
        status=api_pb2.RuntimeStatus(conditions=conditions), runtime_handlers=handlers, features=features
    )


@pytest.mark.parametrize(
    ("resp", "expected"),
    [
        (response(), ()),  # containerd 1.7
        (response(H(name="")), (RuntimeHandler(""),)),  # no features: none supported
        (
            response(
                H(name="", features=F(recursive_read_only_mounts=True, user_namespaces=True)),
                H(name="runc", features=F(recursive_read_only_mounts=True)),
                H(name="kata", features=F(user_namespaces=True)),
            ),
            (
                RuntimeHandler("", True, True),
                RuntimeHandler("runc", supports_recursive_read_only_mounts=True),
                RuntimeHandler("kata", supports_user_namespaces=True),
            ),
        ),
    ],
)
def test_handlers_of(resp: api_pb2.StatusResponse, expected: tuple[RuntimeHandler, ...]) -> None:
    assert handlers_of(resp) == expected


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        (None, None),
        (api_pb2.RuntimeFeatures(), RuntimeFeatures(False)),
        (api_pb2.RuntimeFeatures(supplemental_groups_policy=True), RuntimeFeatures(True)),
    ],
)
def test_features_of(features: api_pb2.RuntimeFeatures | None, expected: RuntimeFeatures | None) -> None:
    assert features_of(response(features=features)) == expected


RRO = RuntimeHandler("", supports_recursive_read_only_mounts=True)


@pytest.mark.parametrize(
    ("name", "handlers", "expected"),
    [
        ("", (), False),  # no handler list: unsupported, whatever the name
        ("", (RRO,), True),
        ("", (RuntimeHandler(""), RuntimeHandler("runc", True)), False),
        ("runc", (RuntimeHandler(""), RuntimeHandler("runc", True)), True),
        ("kata", (RRO,), False),  # a handler the runtime does not list
    ],
)
def test_supports_recursive_read_only_mounts(name: str, handlers: tuple[RuntimeHandler, ...], expected: bool) -> None:
    assert supports_recursive_read_only_mounts(name, handlers) is expected


def test_runtime_state_keeps_what_a_ready_runtime_said() -> None:
    state = RuntimeState()
    assert (state.handlers(), state.features(), state.supports_recursive_read_only_mounts()) == ((), None, False)
    rro = H(name="", features=F(recursive_read_only_mounts=True))
    state.update(response(rro, features=api_pb2.RuntimeFeatures(supplemental_groups_policy=True)))
    assert state.handlers() == (RRO,)
    assert state.features() == RuntimeFeatures(True)
    assert state.supports_recursive_read_only_mounts()
    # As upstream's updateRuntimeUp: a runtime that is not ready changes nothing.
    state.update(response(ready=False))
    assert state.handlers() == (RRO,)
    state.update(response())
    assert (state.handlers(), state.features(), state.supports_recursive_read_only_mounts()) == ((), None, False)


# --- Node.status ------------------------------------------------------------------------------------------------


def test_node_status_fields() -> None:
    handlers = (RRO, RuntimeHandler("kata", supports_user_namespaces=True))
    assert runtime_handlers_status(handlers) == [
        {"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}},
        {"name": "kata", "features": {"recursiveReadOnlyMounts": False, "userNamespaces": True}},
    ]
    assert node_features_status(None) is None
    assert node_features_status(RuntimeFeatures(False)) == {"supplementalGroupsPolicy": False}


@pytest.mark.parametrize(
    ("handlers", "features", "expected"),
    [
        ((), None, {}),  # containerd 1.7: neither field
        (
            (RRO,),
            RuntimeFeatures(True),
            {
                "runtimeHandlers": [
                    {"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}}
                ],
                "features": {"supplementalGroupsPolicy": True},
            },
        ),
    ],
)
def test_build_node_status_and_initial_node(
    handlers: tuple[RuntimeHandler, ...], features: RuntimeFeatures | None, expected: dict[str, Any]
) -> None:
    status = build_node_status(NODE_FACTS, defaults(), [], runtime_handlers=handlers, runtime_features=features)
    assert {k: v for k, v in status.items() if k in ("runtimeHandlers", "features")} == expected
    node = initial_node("n1", NODE_FACTS, defaults(), runtime_handlers=handlers, runtime_features=features)
    assert {k: v for k, v in node["status"].items() if k in ("runtimeHandlers", "features")} == expected


def test_status_patch_removes_what_the_runtime_no_longer_reports() -> None:
    old = {"runtimeHandlers": [{"name": ""}], "features": {"supplementalGroupsPolicy": True}, "capacity": {}}
    assert _status_patch(old, {"capacity": {}}) == {
        "status": {"capacity": {}, "runtimeHandlers": None, "features": None}
    }
    assert _status_patch({"capacity": {}}, {"capacity": {}}) == {"status": {"capacity": {}}}


async def test_manager_registers_and_updates_the_handlers() -> None:
    api = Api()
    state = RuntimeState()
    state.update(response(H(name="", features=F(recursive_read_only_mounts=True))))
    async with api.client() as client:
        manager = NodeStatusManager(
            client,
            node_name=NAME,
            config=CONFIG,
            facts=FACTS,
            runtime_health=Health(),
            clock=FakeClock(),
            runtime_handlers=state.handlers,
            node_features=state.features,
        )
        await manager.register()
        node = api.objects[paths.node(NAME)]
        assert node["status"]["runtimeHandlers"] == [
            {"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}}
        ]
        assert "features" not in node["status"]
        # The runtime is replaced by one that lists no handlers: the next status drops the field.
        state.update(response(features=api_pb2.RuntimeFeatures()))
        assert await manager.sync_node_status()
        node = api.objects[paths.node(NAME)]
        assert "runtimeHandlers" not in node["status"]
        assert node["status"]["features"] == {"supplementalGroupsPolicy": False}
