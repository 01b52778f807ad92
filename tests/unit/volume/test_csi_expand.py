"""Online node expansion of published CSI claims (csiexpand): when it runs, what the claim's status becomes, the
events, and the driver's NodeExpandVolume."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
import pytest

from csi.errors import UnknownCSIError
from csi.v1 import csi_pb2
from nodeagent.volume import csiexpand
from nodeagent.volume.csi import CSIPlugin, DriverClients
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.plugin import VolumeHost
from tests.unit.volume.test_csi_plugin import DRIVER, ENDPOINT, NODE, PVC_VOLUME, Env, env, pod, pv, pvc

__all__ = ["env"]  # the fixture, imported for the tests below

_RPC = csi_pb2.NodeServiceCapability.RPC
PENDING = {"allocatedResourceStatuses": {"storage": "NodeResizePending"}, "allocatedResources": {"storage": "2Gi"}}


def _claim(capacity: str = "1Gi", **status: Any) -> dict[str, Any]:
    obj = pvc()
    obj["metadata"]["resourceVersion"] = "7"
    obj["status"] = {"phase": "Bound", "capacity": {"storage": capacity}, **status}
    return obj


def _pv(capacity: str) -> dict[str, Any]:
    obj = pv()
    obj["spec"]["capacity"] = {"storage": capacity}
    return obj


@pytest.mark.parametrize(
    ("claim", "pv_capacity", "expected"),
    [
        (_claim(**PENDING), "2Gi", csiexpand.Expansion(1 << 30, 2 << 30, "2Gi")),
        (
            _claim(allocatedResourceStatuses={"storage": "NodeResizeInProgress"}),
            "2Gi",
            csiexpand.Expansion(1 << 30, 2 << 30, "2Gi"),
        ),
        (_claim(), "2Gi", None),  # the resizer did not ask the node (no NodeResizePending)
        (_claim("2Gi", **PENDING), "2Gi", None),  # done already
        (_claim(**PENDING), "1Gi", None),  # the PV did not grow
        (_claim(allocatedResourceStatuses={"storage": "ControllerResizeInProgress"}), "2Gi", None),
    ],
)
def test_plan(claim: dict[str, Any], pv_capacity: str, expected: csiexpand.Expansion | None) -> None:
    assert csiexpand.plan(claim, _pv(pv_capacity)) == expected


def test_patches_as_upstreams_status_updates() -> None:
    conditions = [{"type": "FileSystemResizePending", "status": "True"}, {"type": "Custom", "status": "True"}]
    claim = _claim(**PENDING, conditions=conditions)
    expansion = csiexpand.Expansion(1 << 30, 2 << 30, "2Gi")
    assert csiexpand.in_progress_patch(claim) == {
        "metadata": {"resourceVersion": "7"},
        "status": {"allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}},
    }
    assert csiexpand.finished_patch(claim, expansion) == {
        "metadata": {"resourceVersion": "7"},
        "status": {
            "capacity": {"storage": "2Gi"},
            "allocatedResourceStatuses": None,
            "conditions": [{"type": "Custom", "status": "True"}],
        },
    }


class Claims:
    """The claim's status patches, applied as a merge patch to the stored claim."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.patches: list[dict[str, Any]] = []

    async def __call__(self, namespace: str, name: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.patches.append(dict(body))
        stored = self.env.store.objects[("", "persistentvolumeclaims", namespace, name)]
        merged = _merge(stored, body)
        merged["metadata"]["resourceVersion"] = str(int(merged["metadata"]["resourceVersion"]) + 1)
        self.env.store.objects[("", "persistentvolumeclaims", namespace, name)] = merged
        return merged


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _plugin(env: Env, claims: Claims, events: list[tuple[str, str, str]]) -> CSIPlugin:
    env.registry.drivers[DRIVER] = ENDPOINT
    return CSIPlugin(
        VolumeHost(PodDirs(env.root), env.mounter),
        DriverClients(env.registry, lambda endpoint: env.node),
        get=env.store.get,
        node_name=NODE,
        clock=env.clock,
        patch_claim_status=claims,
        events=lambda p, t, r, m: events.append((t, r, m)),
    )


async def test_grown_pv_is_expanded_at_the_next_set_up_and_the_claim_updated(env: Env) -> None:
    env.node.caps.add(_RPC.EXPAND_VOLUME)
    env.store.put("", "persistentvolumeclaims", "default", _claim())
    env.store.put("", "persistentvolumes", "", _pv("1Gi"))
    claims, events = Claims(env), list[tuple[str, str, str]]()
    plugin = _plugin(env, claims, events)
    await plugin.set_up(pod(), PVC_VOLUME)
    await plugin.set_up(pod(), PVC_VOLUME)  # a resync: nothing grew
    assert (claims.patches, events) == ([], [])
    # the resizer's part: the PV grew, the claim waits for the node
    env.store.put("", "persistentvolumeclaims", "default", _claim(**PENDING))
    env.store.put("", "persistentvolumes", "", _pv("2Gi"))
    await plugin.set_up(pod(), PVC_VOLUME)
    assert env.node.args("NodeExpandVolume") == [{"volume_id": "vol-1"}]
    assert events == [
        ("Normal", "FileSystemResizeSuccessful", f'MountVolume.NodeExpandVolume succeeded for volume "pv-1" {NODE}')
    ]
    status = env.store.objects[("", "persistentvolumeclaims", "default", "claim")]["status"]
    assert status["capacity"] == {"storage": "2Gi"} and "allocatedResourceStatuses" not in status
    assert [p["status"].get("allocatedResourceStatuses") for p in claims.patches] == [
        {"storage": "NodeResizeInProgress"},
        None,
    ]
    await plugin.set_up(pod(), PVC_VOLUME)  # done: not again
    assert len(env.node.args("NodeExpandVolume")) == 1


@pytest.mark.parametrize(
    ("caps", "error", "message"),
    [
        (set(), None, f"NodeExpand is not supported by the CSI driver {DRIVER}"),
        (
            {_RPC.EXPAND_VOLUME},
            UnknownCSIError("/csi.v1.Node/NodeExpandVolume", grpc.StatusCode.INTERNAL, "disk full"),
            "Expander.NodeExpand failed to expand the volume : rpc error: code = Internal desc = disk full",
        ),
    ],
)
async def test_failed_expansion_is_a_pod_event_and_retried(
    env: Env, caps: set[int], error: UnknownCSIError | None, message: str
) -> None:
    env.node.caps |= caps
    claims, events = Claims(env), list[tuple[str, str, str]]()
    plugin = _plugin(env, claims, events)
    await plugin.set_up(pod(), PVC_VOLUME)
    env.store.put("", "persistentvolumeclaims", "default", _claim(**PENDING))
    env.store.put("", "persistentvolumes", "", _pv("2Gi"))
    if error is not None:
        env.node.fail["NodeExpandVolume"] = [error]
    assert await plugin.set_up(pod(), PVC_VOLUME)  # the volume stays set up
    assert events == [
        ("Warning", "VolumeResizeFailed", f'NodeExpandVolume.NodeExpandVolume failed for volume "pv-1" : {message}')
    ]
    status = env.store.objects[("", "persistentvolumeclaims", "default", "claim")]["status"]
    assert status["capacity"] == {"storage": "1Gi"}
    assert status["allocatedResourceStatuses"] == {"storage": "NodeResizeInProgress"}


async def test_read_only_claim_is_not_expanded(env: Env) -> None:
    env.node.caps.add(_RPC.EXPAND_VOLUME)
    claims, events = Claims(env), list[tuple[str, str, str]]()
    plugin = _plugin(env, claims, events)
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "claim", "readOnly": True}}
    await plugin.set_up(pod(), volume)
    env.store.put("", "persistentvolumeclaims", "default", _claim(**PENDING))
    env.store.put("", "persistentvolumes", "", _pv("2Gi"))
    await plugin.set_up(pod(), volume)
    assert env.node.args("NodeExpandVolume") == [] and claims.patches == []
    assert events == [
        (
            "Warning",
            "FileSystemResizeFailed",
            'MountVolume.NodeExpandVolume failed for volume "pv-1" requested read-only file system',
        )
    ]
