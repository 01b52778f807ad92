from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nodeagent.volume.errors import UnsupportedVolumeError
from nodeagent.volumemanager.actual import ActualStateOfWorld, MountedVolume
from nodeagent.volumemanager.desired import DesiredStateOfWorld, PluginInfo, pod_volumes, used_volume_names
from nodeagent.volumemanager.reconciler import Backoff, Operation, OpKind, plan


def lookup(volume: Mapping[str, Any]) -> PluginInfo:
    if "configMap" in volume:
        return PluginInfo("kubernetes.io/configmap", True)
    if "emptyDir" in volume:
        return PluginInfo("kubernetes.io/empty-dir", False)
    raise UnsupportedVolumeError(f"{next(k for k in volume if k != 'name')} volumes are not supported on this node")


def pod(uid: str, *volumes: dict[str, Any], mounts: tuple[str, ...] | None = None) -> dict[str, Any]:
    names = mounts if mounts is not None else tuple(v["name"] for v in volumes)
    return {
        "metadata": {"uid": uid},
        "spec": {
            "volumes": list(volumes),
            "containers": [{"name": "c", "volumeMounts": [{"name": n, "mountPath": f"/{n}"} for n in names]}],
        },
    }


CM = {"name": "cfg", "configMap": {"name": "cfg"}}
ED = {"name": "scratch", "emptyDir": {}}
PVC = {"name": "data", "persistentVolumeClaim": {"claimName": "c"}}


def test_used_volume_names() -> None:
    p = pod("u", CM, ED, mounts=("cfg",))
    p["spec"]["initContainers"] = [{"name": "i", "volumeDevices": [{"name": "blk"}]}]
    assert used_volume_names(p) == {"cfg", "blk"}


def test_pod_volumes_skips_unused_and_records_unsupported() -> None:
    entry = pod_volumes(pod("u", CM, ED, PVC, mounts=("cfg", "data")), lookup)
    assert sorted(entry.volumes) == ["cfg"]
    assert entry.errors == {
        "data": 'failed to get Plugin from volumeSpec for volume "data" '
        "err=persistentVolumeClaim volumes are not supported on this node"
    }


def mounted(uid: str, name: str, plugin: str = "kubernetes.io/empty-dir", reconstructed: bool = False) -> MountedVolume:
    return MountedVolume(uid, name, plugin, f"/p/{uid}/{name}", False, reconstructed)


def state(pods: list[dict[str, Any]], volumes: list[MountedVolume]) -> tuple[DesiredStateOfWorld, ActualStateOfWorld]:
    actual = ActualStateOfWorld()
    for v in volumes:
        actual.add(v)
    desired = DesiredStateOfWorld()
    for p in pods:
        desired.add_pod(p, lookup, mounted=lambda key: key in actual)
    return desired, actual


@pytest.mark.parametrize(
    ("pods", "volumes", "released", "in_flight", "not_before", "ops"),
    [
        # New pod: both volumes set up.
        (
            [pod("a", CM, ED)],
            [],
            set(),
            set(),
            {},
            [
                Operation(OpKind.MOUNT, ("a", "cfg"), "kubernetes.io/configmap"),
                Operation(OpKind.MOUNT, ("a", "scratch"), "kubernetes.io/empty-dir"),
            ],
        ),
        # Re-processed: the configMap follows its object (remount), the emptyDir does not.
        (
            [pod("a", CM, ED)],
            [mounted("a", "cfg", "kubernetes.io/configmap"), mounted("a", "scratch")],
            set(),
            set(),
            {},
            [Operation(OpKind.REMOUNT, ("a", "cfg"), "kubernetes.io/configmap")],
        ),
        # In flight, or in back-off: nothing.
        ([pod("a", ED)], [], set(), {("a", "scratch")}, {}, []),
        ([pod("a", ED)], [], set(), set(), {("a", "scratch"): 11.0}, []),
        (
            [pod("a", ED)],
            [],
            set(),
            set(),
            {("a", "scratch"): 9.0},
            [Operation(OpKind.MOUNT, ("a", "scratch"), "kubernetes.io/empty-dir")],
        ),
        # A released pod's volumes come down, unmounts first.
        (
            [pod("b", ED)],
            [mounted("a", "scratch")],
            {"a"},
            set(),
            {},
            [
                Operation(OpKind.UNMOUNT, ("a", "scratch"), "kubernetes.io/empty-dir"),
                Operation(OpKind.MOUNT, ("b", "scratch"), "kubernetes.io/empty-dir"),
            ],
        ),
        # Reconstructed after a restart, its pod not synced yet and not released: left alone.
        ([], [mounted("a", "scratch", reconstructed=True)], set(), set(), {}, []),
        # An unsupported volume is never planned.
        ([pod("a", PVC)], [], set(), set(), {}, []),
    ],
)
def test_plan(
    pods: list[dict[str, Any]],
    volumes: list[MountedVolume],
    released: set[str],
    in_flight: set[tuple[str, str]],
    not_before: dict[tuple[str, str], float],
    ops: list[Operation],
) -> None:
    desired, actual = state(pods, volumes)
    assert plan(desired, actual, released=released, in_flight=in_flight, not_before=not_before, now=10.0) == ops


def test_remount_done_clears_the_mark() -> None:
    desired, actual = state([pod("a", CM)], [mounted("a", "cfg", "kubernetes.io/configmap")])
    desired.remount_done(("a", "cfg"))
    assert plan(desired, actual, released=set(), in_flight=set(), not_before={}, now=0) == []
    desired.remove_pod("a")
    assert not desired.needs_remount(("a", "cfg"))


def test_backoff_doubles_to_the_cap_and_resets() -> None:
    backoff = Backoff()
    key = ("a", "cfg")
    assert [backoff.failed(key, 0.0) for _ in range(10)] == [0.5, 1, 2, 4, 8, 16, 32, 64, 122, 122]
    assert backoff.not_before[key] == 122
    backoff.succeeded(key)
    assert backoff.failed(key, 5.0) == 0.5
    backoff.forget_pod("a")
    assert backoff.not_before == {}
