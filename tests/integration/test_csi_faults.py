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
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, csistack
from nodeagent.testbed.csistack import DriverSpec, DriverStack
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    events,
    eventually,
    node_ready,
    running_id,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
NODE = "/csi.v1.Node/"
STAGE, UNSTAGE = NODE + "NodeStageVolume", NODE + "NodeUnstageVolume"
PUBLISH, UNPUBLISH = NODE + "NodePublishVolume", NODE + "NodeUnpublishVolume"
# A driver of its own: the faults injected here touch no other test's driver.
FAULTY = DriverSpec(
    name="faults.csi-mock.nodeagent.test", attach_required=False, mock_args=("--node-volume-condition",)
)
TIMEOUT = 90.0
INJECTED = "injected publish failure"
# klog's header: Lmmdd hh:mm:ss.uuuuuu
_KLOG_TIME = re.compile(r"^[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+)")


class Bed:
    def __init__(self, testbed: Testbed, agent: Agent) -> None:
        self.testbed = testbed
        self.agent = agent
        self.stack: DriverStack | None = None

    @property
    def driver_log(self) -> Path:
        return csistack.driver_log(self.testbed.layout, FAULTY.name)

    def timed_calls(self, volume_id: str, *methods: str) -> list[tuple[float, str, str]]:
        """(seconds of the day, method, error) of the driver's calls about `volume_id`, from its log."""
        out = []
        try:
            text = self.driver_log.read_text(errors="replace")
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

    def calls(self, volume_id: str, *methods: str) -> list[str]:
        return [method for _, method, _ in self.timed_calls(volume_id, *methods)]


@pytest.fixture(scope="module")
def bed(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    config = agent_config(
        testbed, tmp_path_factory.mktemp("csi-faults") / "nodeagent.yaml", featureGates={"CSIVolumeHealth": True}
    )
    holder = Bed(testbed, start_agent(testbed, testbed.layout.logs / "agent-csi-faults.log", config=config))
    try:
        yield holder
    finally:
        stop_agent(holder.agent)
        csistack.set_faults(testbed.layout, FAULTY.name, {})
        asyncio.run(_delete_objects(testbed))
        csistack.stop_driver(testbed.layout, FAULTY.name)
        csistack.faults_file(testbed.layout, FAULTY.name).unlink(missing_ok=True)
        asyncio.run(clean_up(testbed, settings))


async def _delete_objects(testbed: Testbed) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for pod in (await admin.list(paths.pods(NS)))["items"]:
            if pod["metadata"]["name"].startswith("csif-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
        for claim in (await admin.list(paths.api_path("persistentvolumeclaims", namespace=NS)))["items"]:
            if claim["metadata"]["name"].startswith("csif-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(
                        paths.api_path("persistentvolumeclaims", namespace=NS, name=claim["metadata"]["name"])
                    )
        for pv in (await admin.list(paths.api_path("persistentvolumes")))["items"]:
            if pv["metadata"]["name"].startswith("csif-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.api_path("persistentvolumes", name=pv["metadata"]["name"]))
        await csistack.delete_csidriver(admin, FAULTY.name)


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=bed.agent)
    if bed.stack is None:
        csistack.set_faults(bed.testbed.layout, FAULTY.name, {})
        bed.stack = await csistack.start_driver(bed.testbed.layout, FAULTY)
        await csistack.delete_csidriver(admin, FAULTY.name)
        await csistack.create_csidriver(admin, FAULTY)
    yield bed
    csistack.set_faults(bed.testbed.layout, FAULTY.name, {})


def _name(prefix: str) -> str:
    return f"csif-{prefix}-{uuid.uuid4().hex[:5]}"


async def _claim_pod(admin: KubeClient, bed: Bed, settings: Settings) -> tuple[Obj, str, str]:
    """A provisioned PV, a claim bound to it and a pod using it (not waited for); (pod, volume id, PV name)."""
    assert bed.stack is not None
    pv_name = _name("pv")
    provisioned = await csistack.provision(admin, bed.stack, pv_name, capacity_bytes=1 << 20)
    claim = _name("claim")
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }
    await admin.create(paths.api_path("persistentvolumeclaims", namespace=NS), body)

    async def bound() -> bool:
        obj = await admin.get(paths.api_path("persistentvolumeclaims", namespace=NS, name=claim))
        return (obj.get("status") or {}).get("phase") == "Bound"

    await eventually(bound, timeout=60, what=f"claim {claim} Bound", agent=bed.agent)
    name = _name("pod")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "command": ["sleep", "3600"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    created: Obj = await admin.create(paths.pods(NS), pod)
    return created, provisioned.volume_id, pv_name


async def _running(admin: KubeClient, bed: Bed, name: str) -> Obj:
    async def running() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        return pod if running_id(pod, "main") else None

    got: Obj = await eventually(running, timeout=TIMEOUT, what=f"{name} running", agent=bed.agent)
    return got


async def _delete_pod(admin: KubeClient, bed: Bed, name: str) -> None:
    await admin.delete(paths.pod(NS, name))

    async def gone() -> bool:
        try:
            await admin.get(paths.pod(NS, name))
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=TIMEOUT, what=f"pod {name} deleted", agent=bed.agent)


async def _calls_are(bed: Bed, volume_id: str, methods: tuple[str, ...], expected: list[str]) -> None:
    async def check() -> bool:
        return bed.calls(volume_id, *methods) == expected

    try:
        await eventually(check, timeout=30, what=f"driver calls {expected}", agent=bed.agent)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ncalls: {bed.calls(volume_id, *methods)}") from None


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

    async def failed_mount() -> bool:
        return any(e.get("message") == expected for e in await events(admin, pod, "FailedMount"))

    await eventually(failed_mount, timeout=60, what="FailedMount with the driver's message", agent=bed.agent)

    def failed_publishes() -> list[float]:
        return [at for at, method, error in bed.timed_calls(volume_id, PUBLISH) if method == PUBLISH and error]

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
    await _running(admin, bed, pod["metadata"]["name"])
    calls = bed.timed_calls(volume_id, STAGE, PUBLISH)
    # one stage, the failed publishes, then one that worked
    assert calls[0][1:] == (STAGE, "")
    assert [c[1] for c in calls[1:]] == [PUBLISH] * (len(calls) - 1)
    assert all(error for _, _, error in calls[1:-1]) and calls[-1][2] == ""
    await _delete_pod(admin, bed, pod["metadata"]["name"])
    methods = (STAGE, UNPUBLISH, UNSTAGE)
    await _calls_are(bed, volume_id, methods, [STAGE, UNPUBLISH, UNSTAGE])


@pytest.mark.asyncio(loop_scope="session")
async def test_driver_killed_during_publish_is_retried_once_back_and_leaks_no_mount(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    layout = bed.testbed.layout
    assert bed.stack is not None
    offset = bed.driver_log.stat().st_size
    csistack.set_faults(layout, FAULTY.name, {"NodePublishVolume": {"sleep": 120}})
    pod, volume_id, _ = await _claim_pod(admin, bed, settings)
    uid = pod["metadata"]["uid"]

    async def in_publish() -> bool:
        with bed.driver_log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return "fault: sleeping" in text and PUBLISH in text.split("fault: sleeping", 1)[1].splitlines()[0]

    await eventually(in_publish, timeout=60, what="the driver in NodePublishVolume", agent=bed.agent)
    csistack.set_faults(layout, FAULTY.name, {})
    killed_pid = bed.stack.mock.pid
    bed.stack = await csistack.restart_driver(layout, bed.stack)  # SIGKILL by PID, then the driver again
    assert bed.stack.mock.pid != killed_pid
    await _running(admin, bed, pod["metadata"]["name"])
    # The killed call never answered (not in the log): the stage before the kill, then the publish after it.
    await _calls_are(bed, volume_id, (STAGE, PUBLISH), [STAGE, PUBLISH])
    failed = [e.get("message", "") for e in await events(admin, pod, "FailedMount")]
    assert any("code = Unavailable" in m for m in failed), failed
    volume_dir = _pod_volume_dir(layout.kubelet_root, uid)
    csi_dir = str(layout.kubelet_root.resolve() / "plugins" / "kubernetes.io" / "csi")
    await _delete_pod(admin, bed, pod["metadata"]["name"])
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
    await _running(admin, bed, pod["metadata"]["name"])

    async def abnormal() -> list[str]:
        return [e.get("message", "") for e in await events(admin, pod, "VolumeConditionAbnormal")]

    # the stats provider measures a new pod's volumes at its first summary (the eviction manager's, every 10 s)
    seen = await eventually(abnormal, timeout=60, what="VolumeConditionAbnormal", agent=bed.agent)
    assert seen == ["Volume data: disk on fire"]
    assert bed.calls(volume_id, NODE + "NodeGetVolumeStats")
    csistack.set_faults(bed.testbed.layout, FAULTY.name, {})
    await _delete_pod(admin, bed, pod["metadata"]["name"])
