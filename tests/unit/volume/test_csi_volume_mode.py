"""Volume modes of CSI claims: a mode mismatch (a Filesystem PV as a device, a Block PV mounted) fails with
upstream's populator message, before any driver call."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.volume import csiutil
from nodeagent.volume.csierrors import event_message
from nodeagent.volume.errors import SetUpError
from tests.unit.volume.test_csi_plugin import PVC_VOLUME, Env, env, pod, pv

__all__ = ["env"]  # the fixture, imported for the tests below


def _pv(mode: str | None) -> dict[str, Any]:
    obj = pv()
    if mode is None:
        del obj["spec"]["volumeMode"]
    else:
        obj["spec"]["volumeMode"] = mode
    return obj


@pytest.mark.parametrize(
    ("mode", "mounted", "device", "expected"),
    [
        ("Filesystem", True, False, None),
        ("Block", False, True, None),
        ("Block", True, False, "volume data has volumeMode Block, but is specified in volumeMounts"),
        ("Filesystem", False, True, "volume data has volumeMode Filesystem, but is specified in volumeDevices"),
        ("Block", True, True, "volume data has volumeMode Block, but is specified in volumeMounts"),
        (None, True, False, "cannot get volumeMode for volume: pv-1"),
    ],
)
def test_volume_mode_error(mode: str | None, mounted: bool, device: bool, expected: str | None) -> None:
    assert csiutil.volume_mode_error("data", _pv(mode), mounted=mounted, device=device) == expected


def test_volume_usage_over_all_container_kinds() -> None:
    spec = {
        "initContainers": [{"name": "i", "volumeDevices": [{"name": "raw", "devicePath": "/dev/xvda"}]}],
        "containers": [{"name": "c", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}],
        "ephemeralContainers": [{"name": "e", "volumeMounts": [{"name": "raw", "mountPath": "/r"}]}],
    }
    p = {"spec": spec}
    assert csiutil.volume_usage(p, "raw") == (True, True)
    assert csiutil.volume_usage(p, "data") == (True, False)
    assert csiutil.volume_usage(p, "other") == (False, False)


def _device_pod() -> dict[str, Any]:
    obj = pod()
    obj["spec"]["containers"] = [{"name": "app", "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}]}]
    return obj


@pytest.mark.parametrize(
    ("mode", "device", "message"),
    [
        ("Filesystem", True, "volume data has volumeMode Filesystem, but is specified in volumeDevices"),
        ("Block", False, "volume data has volumeMode Block, but is specified in volumeMounts"),
    ],
)
async def test_mode_mismatch_fails_set_up(env: Env, mode: str, device: bool, message: str) -> None:
    env.store.put("", "persistentvolumes", "", _pv(mode))
    with pytest.raises(SetUpError) as failure:
        await env.plugin().set_up(_device_pod() if device else pod(), PVC_VOLUME)
    assert str(failure.value) == message
    assert event_message(failure.value, "data") == f'MountVolume.SetUp failed for volume "data" : {message}'
    assert env.node.calls == []
