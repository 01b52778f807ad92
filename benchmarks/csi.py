"""CSI volumes at pod start: a pod with one CSI volume next to one without, in one run, against the driver's own time.

One testbed, nodeagent as the node, the CSI stack of the testbed (nodeagent/testbed/csistack.py: the e2e suite's mock
driver and its registration sidecar; the external-attacher too for the attach driver). Per driver (--drivers, default
the one without attach):
- N (--pods, default 20) volumes provisioned up front as external-provisioner would (CreateVolume, then the PV), each
  with a claim bound to it (volumeName), so no binding is timed;
- N rounds, interleaved (the order alternates each round, so a drift of the machine's load favours neither): a pod
  with one of those claims mounted, and a pod without any volume (automountServiceAccountToken false for both); each
  timed from its create call to the watch event that shows it Running, then deleted, and the next pod created only
  once the runtime runs nothing (no ready sandbox, no running container); the CSI pod's round ends once
  the driver logged its NodeUnstageVolume, so every pod starts with a new volume (a PV used by one pod);
- the CSI calls of each volume pod, from the driver's own call log (`gRPCCall:` lines): by method, from the create
  call to Running (`start`) and over the pod's whole life up to the unstage (`life`);
- the driver's own time for one pod's calls: NodeStageVolume + NodePublishVolume timed directly against the driver's
  socket with csi.client (the mock's log carries no durations), on one warm connection as the agent keeps one per
  driver, for N fresh volumes; p50 (and the calls alone);
- the goal (issue 18): the CSI path adds no more than the driver's own call time plus 30 ms at p50, i.e.
  p50(with) - p50(without) <= p50(NodeStage + NodePublish) + 30 ms;
- for the attach driver also: create → its VolumeAttachment attached (seen by a watch; the attach-detach controller's
  and the external-attacher's work, which the agent only waits for), attached → Running, and the goal checked on the
  latter.

Prints one JSON line and one summary line. Run: `python -m benchmarks.csi [--pods 20] [--drivers noattach] [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import NS, percentile, pod_body, watch_pods
from benchmarks.versus import PodTimes
from cri.client import CRIClient
from cri.client import connect as cri_connect
from cri.v1 import api_pb2
from csi.capability import volume_capability
from csi.client import connect as csi_connect
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Gone, KubeError, NotFound
from nodeagent.testbed import configs, csistack
from nodeagent.testbed.csistack import ATTACH, NO_ATTACH, DriverSpec, DriverStack
from nodeagent.testbed.handover import wait_nothing_running
from nodeagent.testbed.testbed import Testbed
from nodeagent.volume import csiutil

BENCH = "csi"
LABEL = f"bench={BENCH}"
PREFIX = "bench-csi-"
GOAL_SLACK_S = 0.030
DRIVERS = {"noattach": NO_ATTACH, "attach": ATTACH}
NODE = "/csi.v1.Node/"
STAGE, PUBLISH = NODE + "NodeStageVolume", NODE + "NodePublishVolume"
UNSTAGE = NODE + "NodeUnstageVolume"
CAPACITY = 1 << 20

Obj = dict[str, Any]


def plain_pod(name: str, image: str) -> Obj:
    return pod_body(name, image, bench=BENCH)


def csi_pod(name: str, image: str, claim: str) -> Obj:
    body = plain_pod(name, image)
    spec = body["spec"]
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return body


def claim_body(name: str, pv_name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": BENCH}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }


def stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_s": round(statistics.median(values), 4) if values else float("nan"),
        "p99_s": round(percentile(values, 0.99), 4),
    }


def count_calls(calls: list[Obj]) -> dict[str, int]:
    """The driver's calls by method, the service prefix dropped (`Node/NodeStageVolume`)."""
    return dict(sorted(Counter(str(c.get("Method", "")).removeprefix("/csi.v1.") for c in calls).items()))


def per_pod(counts: list[dict[str, int]]) -> dict[str, dict[str, float]]:
    """For each method: min, max and mean calls per pod over the pods (a pod that made none counts as 0)."""
    methods = sorted({m for c in counts for m in c})
    return {
        m: {
            "min": min(c.get(m, 0) for c in counts),
            "max": max(c.get(m, 0) for c in counts),
            "mean": round(sum(c.get(m, 0) for c in counts) / len(counts), 2),
        }
        for m in methods
    }


def goal_met(with_p50: float, without_p50: float, driver_p50: float) -> bool:
    return with_p50 - without_p50 <= driver_p50 + GOAL_SLACK_S


class CallLog:
    """The driver's call log, read from byte offsets (it is only appended to)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def offset(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def since(self, offset: int, until: int | None = None) -> list[Obj]:
        with self.path.open("rb") as f:
            f.seek(offset)
            data = f.read() if until is None else f.read(max(0, until - offset))
        return csistack.parse_calls(data.decode(errors="replace"))


async def watch_attachments(admin: KubeClient, attached: dict[str, float]) -> None:
    """When each VolumeAttachment was first seen attached (the attach-detach controller and the external-attacher's
    work, which the agent waits for before it stages)."""
    path = paths.api_path("volumeattachments", group=csistack.STORAGE)
    rv = ""
    while True:
        if not rv:
            rv = (await admin.list(path))["metadata"]["resourceVersion"]
        try:
            async for event in admin.watch(path, resource_version=rv):
                rv = event.resource_version or rv
                if (event.object.get("status") or {}).get("attached") is True:
                    attached.setdefault(str(event.object["metadata"]["name"]), time.monotonic())
        except Gone:
            rv = ""
        except KubeError:
            await asyncio.sleep(0.2)


async def wait_until(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not seen in {timeout:.0f}s")
        await asyncio.sleep(0.1)


@dataclass
class Provisioned:
    pv: str
    claim: str
    volume_id: str


async def provision_all(admin: KubeClient, stack: DriverStack, count: int) -> list[Provisioned]:
    out = []
    for _ in range(count):
        pv_name = f"{PREFIX}pv-{uuid.uuid4().hex[:8]}"
        volume = await csistack.provision(admin, stack, pv_name, capacity_bytes=CAPACITY)
        claim = f"{PREFIX}claim-{uuid.uuid4().hex[:8]}"
        await admin.create(paths.api_path("persistentvolumeclaims", namespace=NS), claim_body(claim, pv_name))
        out.append(Provisioned(pv_name, claim, volume.volume_id))

    async def all_bound() -> bool:
        listed = await admin.list(paths.api_path("persistentvolumeclaims", namespace=NS), label_selector=LABEL)
        phases = {c["metadata"]["name"]: (c.get("status") or {}).get("phase") for c in listed["items"]}
        return all(phases.get(p.claim) == "Bound" for p in out)

    await wait_until(all_bound, timeout=120, what=f"{count} claims Bound")
    return out


async def start_and_delete(admin: KubeClient, times: PodTimes, body: Obj) -> float:
    """Create → Running (as the watch saw it), then delete and wait until the pod is gone; the start time."""
    name = body["metadata"]["name"]
    created = time.monotonic()
    await admin.create(paths.pods(NS), body)
    await times.wait(lambda: name in times.running, timeout=120, what=f"{name} Running")
    started = times.running[name] - created
    await admin.delete(paths.pod(NS, name))
    await times.wait(lambda: name in times.deleted, timeout=120, what=f"{name} gone")
    return started


@dataclass
class DriverResult:
    with_volume: list[float] = field(default_factory=list)
    without: list[float] = field(default_factory=list)
    start_calls: list[dict[str, int]] = field(default_factory=list)
    life_calls: list[dict[str, int]] = field(default_factory=list)
    # attachRequired only: create → the VolumeAttachment attached, and attached → Running.
    attach: list[float] = field(default_factory=list)
    after_attach: list[float] = field(default_factory=list)
    attached: dict[str, float] = field(default_factory=dict)
    direct: list[float] = field(default_factory=list)
    direct_stage: list[float] = field(default_factory=list)
    direct_publish: list[float] = field(default_factory=list)


async def csi_round(
    admin: KubeClient,
    times: PodTimes,
    log: CallLog,
    image: str,
    volume: Provisioned,
    *,
    into: DriverResult,
    attachment: str | None = None,
) -> None:
    name = f"{PREFIX}vol-{uuid.uuid4().hex[:8]}"
    begin = log.offset()
    created = time.monotonic()
    await admin.create(paths.pods(NS), csi_pod(name, image, volume.claim))
    await times.wait(lambda: name in times.running, timeout=120, what=f"{name} Running")
    into.with_volume.append(times.running[name] - created)
    running = log.offset()
    attached = into.attached.get(attachment or "")
    if attached is not None:
        into.attach.append(attached - created)
        into.after_attach.append(times.running[name] - attached)
    await admin.delete(paths.pod(NS, name))
    await times.wait(lambda: name in times.deleted, timeout=120, what=f"{name} gone")

    async def unstaged() -> bool:
        return any(
            c.get("Method") == UNSTAGE and (c.get("Request") or {}).get("volume_id") == volume.volume_id
            for c in log.since(begin)
        )

    await wait_until(unstaged, timeout=60, what=f"NodeUnstageVolume of {volume.volume_id}")
    into.start_calls.append(count_calls(log.since(begin, running)))
    into.life_calls.append(count_calls(log.since(begin)))


async def driver_time(stack: DriverStack, scratch: Path, count: int, into: DriverResult) -> None:
    """NodeStageVolume + NodePublishVolume on the driver's socket, as the agent sends them, for `count` new volumes;
    each volume unpublished and unstaged after (not timed)."""
    spec = stack.spec
    capability = volume_capability("ReadWriteOnce", fs_type="ext4")
    # The attach driver stages only with the device its ControllerPublishVolume returned.
    publish_context = {"device": "/dev/mock"} if spec.attach_required else {}
    async with csi_connect(str(stack.socket), timeout=10) as plugin:
        await plugin.node.node_get_capabilities()  # the connection is up before the first timed call
        for _ in range(count):
            name = f"{PREFIX}direct-{uuid.uuid4().hex[:8]}"
            volume = await csistack.create_volume(
                stack.socket, name, capacity_bytes=CAPACITY, access_modes=("ReadWriteOnce",), fs_type="ext4"
            )
            staging = Path(csiutil.device_mount_path(str(scratch), spec.name, volume.volume_id))
            target = scratch / "pods" / name / "mount"
            for directory in (staging, target.parent):
                await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
            t0 = time.monotonic()
            await plugin.node.node_stage_volume(
                volume.volume_id, str(staging), capability, publish_context=publish_context
            )
            t1 = time.monotonic()
            await plugin.node.node_publish_volume(
                volume.volume_id,
                str(target),
                capability,
                staging_target_path=str(staging),
                publish_context=publish_context,
                volume_context={"csi.storage.k8s.io/pod.name": name, "csi.storage.k8s.io/ephemeral": "false"},
            )
            t2 = time.monotonic()
            into.direct_stage.append(t1 - t0)
            into.direct_publish.append(t2 - t1)
            into.direct.append(t2 - t0)
            await plugin.node.node_unpublish_volume(volume.volume_id, str(target))
            await plugin.node.node_unstage_volume(volume.volume_id, str(staging))


async def measure_driver(
    bed: Testbed, admin: KubeClient, cri: CRIClient, spec: DriverSpec, count: int
) -> dict[str, Any]:
    layout = bed.layout
    stack = await csistack.start_driver(layout, spec)
    with contextlib.suppress(NotFound):
        await csistack.delete_csidriver(admin, spec.name)
    await csistack.create_csidriver(admin, spec)
    image = configs.busybox_image(bed.settings)
    log = CallLog(csistack.driver_log(layout, spec.name))
    volumes = await provision_all(admin, stack, count)
    times = PodTimes()
    result = DriverResult()
    watchers = [
        asyncio.create_task(watch_pods(admin, times.record, LABEL)),
        asyncio.create_task(watch_attachments(admin, result.attached)),
    ]
    node = bed.settings.node_name

    def attachment(volume: Provisioned) -> str | None:
        return csiutil.attachment_name(volume.volume_id, spec.name, node) if spec.attach_required else None

    try:
        # One pod of each kind first, not timed: the first pod of a driver pays for its client connection.
        warm = await provision_all(admin, stack, 1)
        await csi_round(admin, times, log, image, warm[0], into=DriverResult())
        await wait_nothing_running(cri)
        await start_and_delete(admin, times, plain_pod(f"{PREFIX}warm-{uuid.uuid4().hex[:8]}", image))
        await wait_nothing_running(cri)
        for i, volume in enumerate(volumes):
            plain = plain_pod(f"{PREFIX}none-{uuid.uuid4().hex[:8]}", image)
            for kind in ("csi", "plain") if i % 2 == 0 else ("plain", "csi"):
                if kind == "csi":
                    await csi_round(admin, times, log, image, volume, into=result, attachment=attachment(volume))
                else:
                    result.without.append(await start_and_delete(admin, times, plain))
                # The pod is gone from the apiserver at once (no grace period): its tear-down must not overlap the
                # next pod's start.
                await wait_nothing_running(cri)
    finally:
        for watcher in watchers:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    scratch = layout.root / "csi-bench-direct"
    try:
        await driver_time(stack, scratch, count, result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summarize(spec, result)


def summarize(spec: DriverSpec, r: DriverResult) -> dict[str, Any]:
    with_p50, without_p50 = statistics.median(r.with_volume), statistics.median(r.without)
    driver_p50 = statistics.median(r.direct)
    overhead = with_p50 - without_p50
    return {
        "driver": spec.name,
        "attach_required": spec.attach_required,
        "with_volume": stats(r.with_volume),
        "without_volume": stats(r.without),
        "overhead_p50_ms": round(overhead * 1000, 1),
        "driver_stage_publish": stats(r.direct),
        "driver_stage": stats(r.direct_stage),
        "driver_publish": stats(r.direct_publish),
        "budget_p50_ms": round((driver_p50 + GOAL_SLACK_S) * 1000, 1),
        "goal_met": goal_met(with_p50, without_p50, driver_p50),
        **(
            {
                "attach": stats(r.attach),
                "after_attach": stats(r.after_attach),
                # What the agent adds once the volume is attached (the controllers' attach is not its work).
                "overhead_after_attach_p50_ms": round((statistics.median(r.after_attach) - without_p50) * 1000, 1),
                "goal_met_after_attach": goal_met(statistics.median(r.after_attach), without_p50, driver_p50),
            }
            if r.attach
            else {}
        ),
        "calls_per_pod_start": per_pod(r.start_calls),
        "calls_per_pod_life": per_pod(r.life_calls),
    }


async def clean_up(admin: KubeClient) -> None:
    """Every pod, claim and PV of the benchmark, and the CSIDriver objects (the testbed goes down after)."""
    for pod in (await admin.list(paths.pods(NS), label_selector=LABEL))["items"]:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
    claims = paths.api_path("persistentvolumeclaims", namespace=NS)
    for claim in (await admin.list(claims, label_selector=LABEL))["items"]:
        name = claim["metadata"]["name"]
        with contextlib.suppress(NotFound):
            await admin.delete(paths.api_path("persistentvolumeclaims", namespace=NS, name=name))
    for pv in (await admin.list(paths.api_path("persistentvolumes")))["items"]:
        if pv["metadata"]["name"].startswith(PREFIX):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.api_path("persistentvolumes", name=pv["metadata"]["name"]))
    for spec in DRIVERS.values():
        await csistack.delete_csidriver(admin, spec.name)


async def run(bed: Testbed, drivers: list[DriverSpec], count: int) -> dict[str, Any]:
    agent = await bed.start_agent()
    image = configs.busybox_image(bed.settings)
    results = []
    async with (
        KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
        cri_connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri,
    ):
        await cri.image.pull_image(api_pb2.ImageSpec(image=image))  # present: no pull is measured
        try:
            for spec in drivers:
                results.append(await measure_driver(bed, admin, cri, spec, count))
        finally:
            with contextlib.suppress(Exception):
                await clean_up(admin)
    return {"benchmark": BENCH, "pods": count, "agent_pid": agent.pid, "results": results}


def _calls_text(calls: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{m.removeprefix('Node/').removeprefix('Identity/')} {c['mean']:g}" for m, c in calls.items())


def summary_line(result: dict[str, Any]) -> str:
    parts = []
    for r in result["results"]:
        parts.append(
            f"{r['driver']}: with a CSI volume p50 {r['with_volume']['p50_s']}s p99 {r['with_volume']['p99_s']}s, "
            f"without p50 {r['without_volume']['p50_s']}s p99 {r['without_volume']['p99_s']}s, "
            f"overhead {r['overhead_p50_ms']:+.1f} ms vs budget {r['budget_p50_ms']} ms (driver Stage+Publish p50 "
            f"{r['driver_stage_publish']['p50_s'] * 1000:.1f} ms + 30 ms): goal "
            f"{'met' if r['goal_met'] else 'missed'}"
            + (
                f" (attach p50 {r['attach']['p50_s']}s; attached→Running p50 {r['after_attach']['p50_s']}s, "
                f"{r['overhead_after_attach_p50_ms']:+.1f} ms: goal "
                f"{'met' if r['goal_met_after_attach'] else 'missed'} after the attach)"
                if "attach" in r
                else ""
            )
            + f"; CSI calls per pod to Running: "
            f"{_calls_text(r['calls_per_pod_start'])}; over its life: {_calls_text(r['calls_per_pod_life'])}"
        )
    return f"csi ({result['pods']} pods each): " + "; ".join(parts)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=20, help="rounds per driver: one pod with a volume, one without")
    parser.add_argument("--drivers", default="noattach", help="which drivers, in order: noattach, attach")
    parser.add_argument("--dir", type=Path, default=None, help="the testbed's directory (kept)")
    args = parser.parse_args(argv)
    names = [d for d in args.drivers.split(",") if d]
    unknown = set(names) - set(DRIVERS)
    if unknown or not names:
        parser.error(f"unknown drivers: {', '.join(sorted(unknown)) or '(none)'}")
    if args.pods < 1:
        parser.error("--pods must be at least 1")
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-csi-"))
    bed = Testbed(root)
    await bed.up()
    try:
        result = await run(bed, [DRIVERS[n] for n in names], args.pods)
    finally:
        with contextlib.suppress(Exception):
            await bed.down()  # the agent, then the CSI stack (csistack.stop_all), then the rest
    if args.dir is None:  # a directory of our own: logs are kept only when the run failed (raised above)
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
