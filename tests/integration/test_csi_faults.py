"""CSI faults on the real testbed: the e2e suite's CSI mock driver (csimock/main.go) made to fail through its
--faults-file (as upstream's e2e tests do with the embedded mock's Hooks), the agent (`nodeagent run`) recovering.

- the driver fails NodePublishVolume: a FailedMount event carries the driver's own message, the call is retried
  with growing back-off (the driver's call log gives the calls and their times), and the pod runs once the error
  stops, with one stage only;
- the driver is killed (SIGKILL, by its PID) while it is in NodePublishVolume: once it is back, the publish is
  retried and the pod runs; after the pod is deleted nothing of its volume is left mounted or on disk;
- the driver reports the volume abnormal in NodeGetVolumeStats (VOLUME_CONDITION, the CSIVolumeHealth gate on):
  a VolumeConditionAbnormal event on the pod with the driver's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import csistack
from nodeagent.testbed.csistack import DriverSpec
from nodeagent.testbed.layout import Settings
from tests.integration import csikit
from tests.integration.agentproc import NS, events, eventually, running_id
from tests.integration.csikit import NODE, PUBLISH, STAGE, UNPUBLISH, UNSTAGE, Bed, Obj

# A driver of its own: the faults injected here touch no other test's driver.
FAULTY = DriverSpec(
    name="faults.csi-mock.nodeagent.test", attach_required=False, mock_args=("--node-volume-condition",)
)
PREFIX = "csif"
INJECTED = "injected publish failure"
# klog's header: Lmmdd hh:mm:ss.uuuuuu
_KLOG_TIME = re.compile(r"^[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+)")


def _driver_log(bed: Bed) -> Path:
    return csistack.driver_log(bed.testbed.layout, FAULTY.name)


def _timed_calls(bed: Bed, volume_id: str, *methods: str) -> list[tuple[float, str, str]]:
    """(seconds of the day, method, error) of the driver's calls about `volume_id`, from its log."""
    out = []
    try:
        text = _driver_log(bed).read_text(errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        header = _KLOG_TIME.match(line)
        _, marker, payload = line.partition(csistack.CALL_MARKER)
        if not marker or header is None:
            continue
        with contextlib.suppress(ValueError):
            call = json.loads(payload)
            if call.get("Method") in methods and (call.get("Request") or {}).get("volume_id") == volume_id:
                at = int(header[1]) * 3600 + int(header[2]) * 60 + float(header[3])
                out.append((at, str(call["Method"]), str(call.get("Error") or "")))
    return out


def _calls(bed: Bed, volume_id: str, *methods: str) -> list[str]:
    return [method for _, method, _ in _timed_calls(bed, volume_id, *methods)]


async def _calls_are(bed: Bed, volume_id: str, methods: tuple[str, ...], expected: list[str]) -> None:
    await csikit.wait_calls(bed.agent, lambda: _calls(bed, volume_id, *methods), expected)


bed = csikit.module_bed("csi-faults", prefix=PREFIX, drivers=(FAULTY,), featureGates={"CSIVolumeHealth": True})


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    csistack.set_faults(bed.testbed.layout, FAULTY.name, {})
    await csikit.start_drivers(bed, admin, settings, FAULTY)
    yield bed
    csistack.set_faults(bed.testbed.layout, FAULTY.name, {})


async def _claim_pod(admin: KubeClient, bed: Bed, settings: Settings) -> tuple[Obj, str, str]:
    """A provisioned PV, a claim bound to it and a pod using it (not waited for); (pod, volume id, PV name)."""
    made = await csikit.claim_pod(admin, bed, settings, FAULTY.name, PREFIX)
    return made.pod, made.volume_id, made.pv_name


def _pod_volume_dir(root: Path, uid: str) -> str:
    return os.path.join(os.path.realpath(root), "pods", uid, "volumes")


def _mounts_under(path: str) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if mount_point == path or mount_point.startswith(path + "/"):
            out.append(mount_point)
    return out


@pytest.mark.asyncio(loop_scope="session")
async def test_publish_error_is_an_event_with_the_drivers_message_retried_with_backoff(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    layout = bed.testbed.layout
    csistack.set_faults(layout, FAULTY.name, {"NodePublishVolume": {"code": 13, "message": INJECTED}})
    pod, volume_id, pv_name = await _claim_pod(admin, bed, settings)
    expected = f'MountVolume.SetUp failed for volume "{pv_name}" : rpc error: code = Internal desc = {INJECTED}'
    await csikit.wait_failed_mount(admin, bed.agent, pod, expected)

    def failed_publishes() -> list[float]:
        return [at for at, method, error in _timed_calls(bed, volume_id, PUBLISH) if method == PUBLISH and error]

    async def five_failures() -> bool:
        return len(failed_publishes()) >= 5

    # upstream's back-off: 0.5 s, doubling: five failures take about 0.5+1+2+4 = 7.5 s
    await eventually(five_failures, timeout=60, what="five failed NodePublishVolume", agent=bed.agent)
    times = failed_publishes()[:5]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    print(f"failed NodePublishVolume gaps (s): {[round(g, 2) for g in gaps]}")  # figures for the note (-s)
    assert gaps[0] >= 0.4, gaps
    for before, after in itertools.pairwise(gaps):
        assert 1.5 * before <= after <= 3.0 * before + 0.5, gaps  # doubling, give or take the reconciler's 0.1 s
    current = await admin.get(paths.pod(NS, pod["metadata"]["name"]))
    assert not running_id(current, "main")  # never ran without its volume
    csistack.set_faults(layout, FAULTY.name, {})
    await csikit.running(admin, bed.agent, pod["metadata"]["name"])
    calls = _timed_calls(bed, volume_id, STAGE, PUBLISH)
    # one stage, the failed publishes, then one that worked
    assert calls[0][1:] == (STAGE, "")
    assert [c[1] for c in calls[1:]] == [PUBLISH] * (len(calls) - 1)
    assert all(error for _, _, error in calls[1:-1]) and calls[-1][2] == ""
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"])
    methods = (STAGE, UNPUBLISH, UNSTAGE)
    await _calls_are(bed, volume_id, methods, [STAGE, UNPUBLISH, UNSTAGE])


@pytest.mark.asyncio(loop_scope="session")
async def test_driver_killed_during_publish_is_retried_once_back_and_leaks_no_mount(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    layout = bed.testbed.layout
    offset = _driver_log(bed).stat().st_size
    csistack.set_faults(layout, FAULTY.name, {"NodePublishVolume": {"sleep": 120}})
    pod, volume_id, _ = await _claim_pod(admin, bed, settings)
    uid = pod["metadata"]["uid"]

    async def in_publish() -> bool:
        with _driver_log(bed).open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return "fault: sleeping" in text and PUBLISH in text.split("fault: sleeping", 1)[1].splitlines()[0]

    await eventually(in_publish, timeout=60, what="the driver in NodePublishVolume", agent=bed.agent)
    csistack.set_faults(layout, FAULTY.name, {})
    killed_pid = bed.stacks[FAULTY.name].mock.pid
    # SIGKILL by PID, then the driver again
    bed.stacks[FAULTY.name] = await csistack.restart_driver(layout, bed.stacks[FAULTY.name])
    assert bed.stacks[FAULTY.name].mock.pid != killed_pid
    await csikit.running(admin, bed.agent, pod["metadata"]["name"])
    # The killed call never answered (not in the log): the stage before the kill, then the publish after it.
    await _calls_are(bed, volume_id, (STAGE, PUBLISH), [STAGE, PUBLISH])
    failed = [e.get("message", "") for e in await events(admin, pod, "FailedMount")]
    assert any("code = Unavailable" in m for m in failed), failed
    volume_dir = _pod_volume_dir(layout.kubelet_root, uid)
    csi_dir = str(layout.kubelet_root.resolve() / "plugins" / "kubernetes.io" / "csi")
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"])
    await _calls_are(bed, volume_id, (STAGE, PUBLISH, UNPUBLISH, UNSTAGE), [STAGE, PUBLISH, UNPUBLISH, UNSTAGE])

    def left() -> list[str]:
        return [*_mounts_under(volume_dir), *_mounts_under(csi_dir)] + (
            [volume_dir] if os.path.exists(os.path.join(volume_dir, "kubernetes.io~csi")) else []
        )

    async def nothing_left() -> bool:
        return not await asyncio.to_thread(left)

    await eventually(nothing_left, timeout=30, what="no mount or directory of the pod's volume", agent=bed.agent)


@pytest.mark.asyncio(loop_scope="session")
async def test_abnormal_volume_condition_is_a_pod_event(ready: Bed, admin: KubeClient, settings: Settings) -> None:
    bed = ready
    csistack.set_faults(bed.testbed.layout, FAULTY.name, {"NodeGetVolumeStats": {"abnormal": "disk on fire"}})
    pod, volume_id, _ = await _claim_pod(admin, bed, settings)
    await csikit.running(admin, bed.agent, pod["metadata"]["name"])

    async def abnormal() -> list[str]:
        return [e.get("message", "") for e in await events(admin, pod, "VolumeConditionAbnormal")]

    # the stats provider measures a new pod's volumes at its first summary (the eviction manager's, every 10 s)
    seen = await eventually(abnormal, timeout=60, what="VolumeConditionAbnormal", agent=bed.agent)
    assert seen == ["Volume data: disk on fire"]
    assert _calls(bed, volume_id, NODE + "NodeGetVolumeStats")
    csistack.set_faults(bed.testbed.layout, FAULTY.name, {})
    await csikit.delete_pod(admin, bed.agent, pod["metadata"]["name"])
