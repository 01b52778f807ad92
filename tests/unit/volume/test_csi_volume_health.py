"""The VolumeConditionAbnormal event (upstream volume_stat_calculator.go, the CSIVolumeHealth gate): a measure of a
published volume whose driver reports it abnormal is a Warning on its pod, "Volume <name>: <driver's message>"."""

from __future__ import annotations

import pytest

from csi.v1 import csi_pb2
from nodeagent.volume.csi import CSIPlugin, DriverClients
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.plugin import VolumeHost
from tests.unit.volume.test_csi_plugin import NODE, PVC_VOLUME, Env, env, pod

__all__ = ["env"]  # the fixture, imported for the tests below

_RPC = csi_pb2.NodeServiceCapability.RPC


def _plugin(env: Env, events: list[tuple[str, str, str, str]]) -> CSIPlugin:
    return CSIPlugin(
        VolumeHost(PodDirs(env.root), env.mounter),
        DriverClients(env.registry, lambda endpoint: env.node),
        get=env.store.get,
        node_name=NODE,
        clock=env.clock,
        events=lambda p, t, r, m: events.append((p["metadata"]["uid"], t, r, m)),
    )


@pytest.mark.parametrize(
    ("gate", "condition", "expected"),
    [
        (True, True, [("u1", "Warning", "VolumeConditionAbnormal", "Volume data: degraded")]),
        (False, True, []),  # without the gate no condition is asked for
        (True, False, []),  # a driver without VOLUME_CONDITION
    ],
)
async def test_abnormal_volume_is_a_pod_event(
    env: Env, gate: bool, condition: bool, expected: list[tuple[str, str, str, str]]
) -> None:
    env.node.caps |= {_RPC.GET_VOLUME_STATS} | ({_RPC.VOLUME_CONDITION} if condition else set())
    events: list[tuple[str, str, str, str]] = []
    plugin = _plugin(env, events)
    await plugin.set_up(pod(), PVC_VOLUME)
    assert await plugin.volume_stats("u1", "data", volume_health=gate) is not None
    assert events == expected


async def test_no_event_for_a_torn_down_volume(env: Env) -> None:
    env.node.caps |= {_RPC.GET_VOLUME_STATS, _RPC.VOLUME_CONDITION}
    events: list[tuple[str, str, str, str]] = []
    plugin = _plugin(env, events)
    await plugin.set_up(pod(), PVC_VOLUME)
    await plugin.tear_down("u1", "data")
    assert await plugin.volume_stats("u1", "data", volume_health=True) is None
    assert events == []
