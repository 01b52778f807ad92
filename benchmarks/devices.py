"""Devices at pod start: a plain pod, the same pod with a device-plugin device, and with a DRA claim, in one run.

One testbed, nodeagent as the node, upstream's sample device plugin (`example.com/resource`, Dev-1 and Dev-2;
nodeagent/testbed/sampledeviceplugin.py) and the project's sample DRA driver (`dra.nodeagent.test`, 2 devices;
nodeagent/testbed/sampledradriver.py) run beside it as in tests/integration/test_device_plugin.py and test_dra.py.
Three kinds of the same one-container busybox pod (benchmarks/common.py's `pod_body`):
- plain: nothing more;
- device_plugin: `limits: {example.com/resource: 1}`;
- dra: one ResourceClaim made from a ResourceClaimTemplate (one device of a DeviceClass of the sample driver), named by
  the container (`resources.claims`).
Each is created through the apiserver and scheduled by the real scheduler. N rounds (--pods, default 8) of one pod
of each kind, interleaved (plain, device_plugin, dra, plain, ...), so a drift of the machine's load touches the three
alike; one untimed round first (the first claim, the first Allocate and the first CDI spec of the run). Each pod is
timed from its create call to the watch event that shows it Running (`start`), and from the watch event that shows
it bound (`spec.nodeName`) to Running (`node`: the kubelet's part; for a DRA pod the resourceclaim controller made
the claim and the scheduler allocated and reserved it before the binding). Then it is deleted (grace 1 s, so the
agent terminates it and, for DRA, unprepares the claim before the pod leaves the API), and the next pod is created
only once the runtime runs nothing, the DRA driver recorded the claim's NodeUnprepareResources and the claim is gone.

The driver's own time: the sample driver records, for each claim, when NodePrepareResources came and how long its
work took (reading the claim from the apiserver, writing the CDI spec and the claim's file; `took_s` in its
--record lines), the gRPC transport not included. The goals (issue 32): p50(device_plugin) - p50(plain) <= 30 ms;
p50(dra) - p50(plain) <= p50(NodePrepareResources in the driver) + 60 ms, both checked on `start` and on `node`.

Prints one JSON line and one summary line. Run: `python -m benchmarks.devices [--pods 8] [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import NS, percentile, pod_body, watch_pods
from cri.client import CRIClient
from cri.client import connect as cri_connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed import sampledeviceplugin as plugin
from nodeagent.testbed import sampledradriver as driver
from nodeagent.testbed.handover import wait_nothing_running
from nodeagent.testbed.install import Progress
from nodeagent.testbed.processes import stop_children
from nodeagent.testbed.testbed import Testbed

BENCH = "devices"
LABEL = f"bench={BENCH}"
PLAIN, DEVICE_PLUGIN, DRA = "plain", "device_plugin", "dra"
KINDS = (PLAIN, DEVICE_PLUGIN, DRA)
DEVICE_PLUGIN_GOAL_S = 0.030
DRA_GOAL_S = 0.060
CLASS = "bench-devices"
TEMPLATE = "bench-devices-one"
CLAIM = "accel"
PREPARE, UNPREPARE = "NodePrepareResources", "NodeUnprepareResources"

Obj = dict[str, Any]


# --- the pods --------------------------------------------------------------------------------------------------------


def plain_pod(name: str, image: str) -> Obj:
    body = pod_body(name, image, bench=BENCH)
    # Not 0: the apiserver would drop the pod at once, before the agent unprepared its claim.
    body["spec"]["terminationGracePeriodSeconds"] = 1
    return body


def device_plugin_pod(name: str, image: str) -> Obj:
    body = plain_pod(name, image)
    body["spec"]["containers"][0]["resources"] = {"limits": {plugin.RESOURCE: "1"}}
    return body


def dra_pod(name: str, image: str) -> Obj:
    body = plain_pod(name, image)
    spec = body["spec"]
    spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": TEMPLATE}]
    spec["containers"][0]["resources"] = {"claims": [{"name": CLAIM}]}
    return body


BODIES: Mapping[str, Callable[[str, str], Obj]] = {PLAIN: plain_pod, DEVICE_PLUGIN: device_plugin_pod, DRA: dra_pod}


def _resource(resource: str, namespace: str | None = None, name: str | None = None) -> str:
    return paths.api_path(resource, group="resource.k8s.io", version="v1", namespace=namespace, name=name)


def device_class() -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver.DRIVER}"'}}]},
    }


def claim_template() -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": CLASS}}]}}},
    }


# --- the figures (pure) ----------------------------------------------------------------------------------------------


def stats(values: Sequence[float]) -> dict[str, float]:
    """n, p50 and p90 (nearest rank) in seconds; NaN without values."""
    return {
        "n": len(values),
        "p50_s": round(statistics.median(values), 4) if values else float("nan"),
        "p90_s": round(percentile(list(values), 0.90), 4),
    }


def versus_plain(kind: Sequence[float], plain: Sequence[float]) -> dict[str, float]:
    """A kind against the plain pods: the added ms at p50 and p90, and the ratio of the p50s."""
    k, p = stats(kind), stats(plain)
    return {
        "added_p50_ms": round((k["p50_s"] - p["p50_s"]) * 1000, 1),
        "added_p90_ms": round((k["p90_s"] - p["p90_s"]) * 1000, 1),
        "ratio_p50": round(k["p50_s"] / p["p50_s"], 3) if p["p50_s"] else float("nan"),
    }


def device_plugin_goal_met(added_p50_ms: float) -> bool:
    return added_p50_ms <= DEVICE_PLUGIN_GOAL_S * 1000


def dra_goal_met(added_p50_ms: float, driver_p50_ms: float) -> bool:
    return added_p50_ms <= driver_p50_ms + DRA_GOAL_S * 1000


def summarize(
    start: Mapping[str, Sequence[float]], node: Mapping[str, Sequence[float]], prepare: Sequence[float]
) -> Obj:
    """The JSON of a run: per kind `start` (create → Running) and `node` (bound → Running) stats, each kind against
    plain, the driver's NodePrepareResources time and the two goals on both measures."""
    driver_p50_ms = round(statistics.median(prepare) * 1000, 2) if prepare else float("nan")
    out: Obj = {"driver_prepare": stats(prepare), "driver_prepare_p50_ms": driver_p50_ms}
    for measure, samples in (("start", start), ("node", node)):
        part: Obj = {kind: stats(samples[kind]) for kind in KINDS}
        for kind in (DEVICE_PLUGIN, DRA):
            part[f"{kind}_vs_plain"] = versus_plain(samples[kind], samples[PLAIN])
        part["device_plugin_goal_met"] = device_plugin_goal_met(part["device_plugin_vs_plain"]["added_p50_ms"])
        dra_added = part["dra_vs_plain"]["added_p50_ms"]
        part["dra_added_beyond_driver_p50_ms"] = round(dra_added - driver_p50_ms, 1)
        part["dra_goal_met"] = dra_goal_met(dra_added, driver_p50_ms)
        out[measure] = part
    return out


def _goal(met: bool) -> str:
    return "met" if met else "missed"


def summary_line(result: Obj) -> str:
    parts = []
    for measure, what in (("start", "create→Running"), ("node", "bound→Running")):
        r = result[measure]
        dp, dra = r["device_plugin_vs_plain"], r["dra_vs_plain"]
        parts.append(
            f"{what} p50/p90: plain {r[PLAIN]['p50_s']}/{r[PLAIN]['p90_s']}s, device plugin "
            f"{r[DEVICE_PLUGIN]['p50_s']}/{r[DEVICE_PLUGIN]['p90_s']}s ({dp['added_p50_ms']:+.1f} ms, goal +30: "
            f"{_goal(r['device_plugin_goal_met'])}), DRA {r[DRA]['p50_s']}/{r[DRA]['p90_s']}s "
            f"({dra['added_p50_ms']:+.1f} ms, {r['dra_added_beyond_driver_p50_ms']:+.1f} beyond the driver, goal +60: "
            f"{_goal(r['dra_goal_met'])})"
        )
    return (
        f"devices ({result['pods']} pods per kind, load {result['load_before']}→{result['load_after']}): "
        + "; ".join(parts)
        + f"; driver NodePrepareResources p50 {result['driver_prepare_p50_ms']} ms"
    )


# --- the run ---------------------------------------------------------------------------------------------------------


@dataclass
class Times:
    """What one watch over the benchmark's pods saw, by pod name (monotonic seconds)."""

    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def record(self, kind: str, obj: Obj) -> None:
        now = time.monotonic()
        name = str(obj.get("metadata", {}).get("name", ""))
        if kind == "DELETED":
            self.deleted.setdefault(name, now)
        if (obj.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(name, now)
        if (obj.get("status") or {}).get("phase") == "Running":
            self.running.setdefault(name, now)
        async with self.changed:
            self.changed.notify_all()

    async def wait(self, done: Callable[[], bool], *, timeout: float, what: str) -> None:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(done), timeout)
            except TimeoutError:
                raise RuntimeError(f"{what}: not seen in {timeout:.0f}s") from None


async def wait_until(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not seen in {timeout:.0f}s")
        await asyncio.sleep(0.1)


class DriverRecord:
    """The sample driver's --record file (JSON lines, only appended to)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def calls(self) -> list[Obj]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]


@dataclass
class Round:
    kind: str
    name: str
    start_s: float
    node_s: float
    claim_uid: str = ""


class Bench:
    def __init__(self, bed: Testbed, admin: KubeClient, cri: CRIClient, times: Times, record: DriverRecord) -> None:
        self.bed = bed
        self.admin = admin
        self.cri = cri
        self.times = times
        self.record = record
        self.image = configs.busybox_image(bed.settings)

    async def one(self, kind: str) -> Round:
        name = f"bench-dev-{kind.replace('_', '')}-{uuid.uuid4().hex[:6]}"
        created = time.monotonic()
        await self.admin.create(paths.pods(NS), BODIES[kind](name, self.image))
        await self.times.wait(lambda: name in self.times.running, timeout=120, what=f"{name} Running")
        running = self.times.running[name]
        result = Round(kind, name, running - created, running - self.times.bound.get(name, created))
        pod = await self.admin.get(paths.pod(NS, name))
        claim_name = ""
        if kind == DRA:
            [status] = pod["status"]["resourceClaimStatuses"]
            claim_name = str(status["resourceClaimName"])
            claim = await self.admin.get(_resource("resourceclaims", NS, claim_name))
            result.claim_uid = str(claim["metadata"]["uid"])
        await self.check_devices(kind, str(pod["metadata"]["uid"]), result.claim_uid)
        await self.admin.delete(paths.pod(NS, name))
        await self.times.wait(lambda: name in self.times.deleted, timeout=120, what=f"{name} gone")
        await wait_nothing_running(self.cri, timeout=120)
        if kind == DRA:
            uid = result.claim_uid

            async def unprepared() -> bool:
                return any(c["method"] == UNPREPARE and c["uid"] == uid for c in self.record.calls())

            async def claim_gone() -> bool:
                try:
                    await self.admin.get(_resource("resourceclaims", NS, claim_name))
                except NotFound:
                    return True
                return False

            await wait_until(unprepared, timeout=60, what=f"NodeUnprepareResources of {claim_name}")
            await wait_until(claim_gone, timeout=60, what=f"ResourceClaim {claim_name} deleted")
        return result

    async def check_devices(self, kind: str, pod_uid: str, claim_uid: str) -> None:
        """What is timed is a start with the device (untimed check): the runtime spec containerd gave runc has the
        plugin's /tmp/Dev-N mount, or the CDI edits of the claim's device (its DRA_CLAIM_UID env), and a plain pod
        neither."""
        [container] = await self.cri.runtime.list_containers(
            api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod_uid})
        )
        info = json.loads((await self.cri.runtime.container_status(container.id, verbose=True)).info.get("info", "{}"))
        spec = info.get("runtimeSpec") or {}
        mounts = {str(m.get("destination", "")) for m in spec.get("mounts") or []}
        env = set((spec.get("process") or {}).get("env") or [])
        has_plugin = bool(mounts & {f"/tmp/{d}" for d in plugin.DEVICES})
        has_claim = f"DRA_CLAIM_UID={claim_uid}" in env if claim_uid else any(e.startswith("DRA_") for e in env)
        if (has_plugin, has_claim) != (kind == DEVICE_PLUGIN, kind == DRA):
            raise RuntimeError(f"{kind} pod {pod_uid}: plugin device {has_plugin}, claim device {has_claim}")

    def prepare_times(self, rounds: Sequence[Round]) -> list[float]:
        by_uid = {c["uid"]: float(c["took_s"]) for c in self.record.calls() if c["method"] == PREPARE}
        return [by_uid[r.claim_uid] for r in rounds if r.kind == DRA and r.claim_uid in by_uid]


async def set_up_devices(
    bed: Testbed, admin: KubeClient, agent_log: Path, record: Path
) -> list[subprocess.Popen[bytes]]:
    """The plugin and the driver started beside the agent, and waited for: the Node advertises 2
    example.com/resource, the agent registered the driver, its ResourceSlice is published; the DeviceClass and the
    ResourceClaimTemplate made."""
    lay = bed.layout
    node = bed.settings.node_name
    binary = plugin.build_sample_device_plugin(Progress(lambda message: None))
    started = [
        plugin.start(binary, lay.kubelet_root, lay.logs / "sample-device-plugin.log"),
        driver.start(
            root_dir=lay.kubelet_root,
            cdi_dir=lay.cdi_spec_dir,
            kubeconfig=lay.admin_kubeconfig,
            node_name=node,
            log_path=lay.logs / "sample-dra-driver.log",
            record=record,
        ),
    ]

    async def advertised() -> bool:
        status = (await admin.get(paths.node(node))).get("status") or {}
        return (status.get("allocatable") or {}).get(plugin.RESOURCE) == str(len(plugin.DEVICES))

    async def registered() -> bool:
        text = await asyncio.to_thread(agent_log.read_text, errors="replace")
        return f"DRA plugin registered driver={driver.DRIVER}" in text

    async def published() -> bool:
        try:
            await admin.get(_resource("resourceslices", name=driver.slice_name(node, driver.DRIVER)))
        except NotFound:
            return False
        return True

    await wait_until(advertised, timeout=60, what=f"{plugin.RESOURCE} on the Node")
    await wait_until(registered, timeout=60, what="the DRA driver registered")
    await wait_until(published, timeout=60, what="the DRA driver's ResourceSlice")
    await admin.create(_resource("deviceclasses"), device_class())
    await admin.create(_resource("resourceclaimtemplates", NS), claim_template())
    return started


def stop_and_remove(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    stop_children(processes)
    for device in plugin.DEVICES:  # the files the plugin's Allocate made on the host
        Path("/tmp", device).unlink(missing_ok=True)


async def clean_up(admin: KubeClient) -> None:
    listed = await admin.list(paths.pods(NS), label_selector=LABEL)
    for item in listed["items"]:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, item["metadata"]["name"]), grace_period_seconds=0)
    with contextlib.suppress(NotFound):
        await admin.delete(_resource("resourceclaimtemplates", NS, TEMPLATE))
    with contextlib.suppress(NotFound):
        await admin.delete(_resource("deviceclasses", name=CLASS))


def load() -> float:
    with open("/proc/loadavg", encoding="ascii") as f:
        return float(f.read().split()[0])


async def run(bed: Testbed, count: int) -> Obj:
    agent = await bed.start_agent()
    record = bed.layout.logs / "bench-devices-dra-calls.jsonl"
    record.unlink(missing_ok=True)
    times = Times()
    async with (
        KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
        cri_connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri,
    ):
        await cri.image.pull_image(api_pb2.ImageSpec(image=configs.busybox_image(bed.settings)))
        watcher = asyncio.create_task(watch_pods(admin, times.record, LABEL), name="watch")
        started: list[subprocess.Popen[bytes]] = []
        try:
            started = await set_up_devices(bed, admin, agent.log_path, record)
            bench = Bench(bed, admin, cri, times, DriverRecord(record))
            for kind in KINDS:  # the untimed round
                await bench.one(kind)
            load_before = load()
            rounds = [await bench.one(kind) for _ in range(count) for kind in KINDS]
            load_after = load()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            with contextlib.suppress(Exception):
                await clean_up(admin)
            await asyncio.to_thread(stop_and_remove, started)
    start = {kind: [r.start_s for r in rounds if r.kind == kind] for kind in KINDS}
    node = {kind: [r.node_s for r in rounds if r.kind == kind] for kind in KINDS}
    result: Obj = {"benchmark": BENCH, "pods": count, "load_before": load_before, "load_after": load_after}
    result.update(summarize(start, node, bench.prepare_times(rounds)))
    result["samples"] = [{"kind": r.kind, "start_s": round(r.start_s, 4), "node_s": round(r.node_s, 4)} for r in rounds]
    return result


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=8, help="timed pods per kind (plain, device plugin, DRA)")
    parser.add_argument("--dir", type=Path, default=None, help="the testbed's directory (kept)")
    args = parser.parse_args(argv)
    if args.pods < 1:
        parser.error("--pods must be at least 1")
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-devices-"))
    bed = Testbed(root)
    await bed.up()
    try:
        result = await run(bed, args.pods)
    finally:
        with contextlib.suppress(Exception):
            await bed.down()
        for spec in bed.layout.cdi_spec_dir.glob(f"{driver.DRIVER}-*.json"):
            spec.unlink()
    if args.dir is None:  # a directory of our own: logs are kept only when the run failed (raised above)
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
