"""PLEG: how fast a container's death reaches the apiserver, and what watching the runtime costs, generic vs evented.

For each mode (`pleg: generic`, then `pleg: evented`) in one run on one testbed, the agent runs as a detached process
(`nodeagent run`) and, for each pod count (default 20, then 100 busybox `sleep` pods, restartPolicy Always):

- CPU: once every pod is Running and the start-up has settled, the agent's CPU seconds (user + system, psutil on
  its PID) over a 60 s window in which nothing happens: the cost of noticing that nothing changed;
- latency: some pods not killed before (default 20 per pod count), one at a time, get their container's process
  SIGKILLed from outside; each sample is the time from the kill to the pod watch event in which the apiserver shows
  that container terminated (the status the agent patched after the PLEG reported the death).

Between modes every pod is deleted and the runtime left empty. Prints one JSON line and one summary line with
medians, p99 and the evented/generic ratios. Run: `python -m benchmarks.pleg [--pods 20,100] [--kills 20]
[--cpu-window 60] [--modes generic,evented] [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import yaml

from benchmarks.common import NS, percentile, pod_body
from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs, processes
from nodeagent.testbed.testbed import Testbed

SELECTOR = "bench=pleg"
SETTLE_SECONDS = 10.0


def main_status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = (pod.get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def container_id(pod: dict[str, Any]) -> str:
    return str(main_status(pod).get("containerID", "")).removeprefix("containerd://")


async def running_pods(admin: KubeClient) -> list[dict[str, Any]]:
    listed = await admin.list(paths.pods(NS), label_selector=SELECTOR)
    return [p for p in listed["items"] if "running" in main_status(p).get("state", {})]


async def scale_to(admin: KubeClient, image: str, count: int, timeout: float = 600) -> list[dict[str, Any]]:
    have = (await admin.list(paths.pods(NS), label_selector=SELECTOR))["items"]
    names = [f"pleg-{uuid.uuid4().hex[:8]}" for _ in range(count - len(have))]
    for start in range(0, len(names), 20):
        await asyncio.gather(
            *(admin.create(paths.pods(NS), pod_body(n, image, bench="pleg")) for n in names[start : start + 20])
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = await running_pods(admin)
        if len(pods) >= count:
            return pods
        await asyncio.sleep(1)
    raise RuntimeError(f"{count} pods not running after {timeout:.0f}s")


async def cpu_seconds(pid: int, window: float) -> float:
    proc = psutil.Process(pid)
    before = proc.cpu_times()
    await asyncio.sleep(window)
    after = proc.cpu_times()
    return (after.user - before.user) + (after.system - before.system)


async def container_pid(cri: CRIClient, cid: str) -> int:
    status = await cri.runtime.container_status(cid, verbose=True)
    return int(json.loads(status.info["info"])["pid"])


async def kill_latencies(admin: KubeClient, cri: CRIClient, pods: list[dict[str, Any]]) -> list[float]:
    """Kill each pod's container in turn; the time until a watch event shows it terminated."""
    listed = await admin.list(paths.pods(NS), label_selector=SELECTOR)
    waiting: dict[str, asyncio.Future[float]] = {}

    async def watch() -> None:
        rv = listed["metadata"]["resourceVersion"]
        while True:  # a watch may end at any time; resume from the last version seen
            async for event in admin.watch(paths.pods(NS), resource_version=rv, label_selector=SELECTOR):
                rv = event.resource_version or rv
                status = main_status(event.object)
                for state in (status.get("state") or {}, status.get("lastState") or {}):
                    dead = str((state.get("terminated") or {}).get("containerID", "")).removeprefix("containerd://")
                    future = waiting.get(dead)
                    if future is not None and not future.done():
                        future.set_result(time.monotonic())

    watcher = asyncio.create_task(watch())
    samples = []
    try:
        await asyncio.sleep(0.5)
        for pod in pods:
            cid = container_id(pod)
            pid = await container_pid(cri, cid)
            waiting[cid] = asyncio.get_running_loop().create_future()
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            seen = await asyncio.wait_for(waiting[cid], 120)
            samples.append(seen - killed)
            await asyncio.sleep(0.5)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    return samples


async def delete_all(admin: KubeClient, cri: CRIClient, timeout: float = 300) -> None:
    for pod in (await admin.list(paths.pods(NS), label_selector=SELECTOR))["items"]:
        await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not await cri.runtime.list_pod_sandbox() and not await cri.runtime.list_containers():
            return
        await asyncio.sleep(1)
    raise RuntimeError("the runtime did not empty")


def pleg_in_use(log_text: str) -> str:
    """Which PLEG the agent's log says ran last: "evented" or "generic" (the evented PLEG logs both switches). The log
    is appended to by every agent of the testbed: only the last agent's part counts."""
    log_text = log_text[log_text.rfind("pleg started mode=") :]
    evented, fell_back = log_text.rfind("evented pleg in use"), log_text.rfind("falling back to generic relisting")
    return "evented" if evented > fell_back else "generic"


async def run_mode(
    bed: Testbed, admin: KubeClient, cri: CRIClient, mode: str, *, counts: list[int], kills: int, window: float
) -> dict[str, Any]:
    config = yaml.safe_load(bed.layout.agent_config.read_text())
    config["pleg"] = mode
    path = bed.layout.root / f"nodeagent-{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    agent = await bed.start_agent(config=path)
    image = configs.busybox_image(bed.settings)
    result: dict[str, Any] = {"mode": mode, "cpu_s": {}, "latency_s": {}}
    killed: set[str] = set()
    latencies: list[float] = []
    try:
        for count in counts:
            pods = await scale_to(admin, image, count)
            await asyncio.sleep(SETTLE_SECONDS)
            result["cpu_s"][str(count)] = round(await cpu_seconds(agent.pid, window), 2)
            victims = [p for p in await running_pods(admin) if p["metadata"]["uid"] not in killed][:kills]
            killed.update(p["metadata"]["uid"] for p in victims)
            samples = await kill_latencies(admin, cri, victims)
            latencies += samples
            result["latency_s"][str(count)] = {
                "p50": round(statistics.median(samples), 3),
                "p99": round(percentile(samples, 0.99), 3),
                "n": len(samples),
            }
            del pods
        # An evented run that fell back to relisting would report generic figures under the evented label.
        ran = pleg_in_use(agent.log_path.read_text(errors="replace"))
        if ran != mode:
            raise RuntimeError(f"the agent ran the {ran} PLEG in the {mode} run; see {agent.log_path}")
        result["latency_p50_s"] = round(statistics.median(latencies), 3)
        result["latency_p99_s"] = round(percentile(latencies, 0.99), 3)
        result["samples"] = len(latencies)
        await delete_all(admin, cri)
    finally:
        processes.stop(agent, pid_dir=bed.layout.pids, grace=20)
    return result


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", default="20,100")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--cpu-window", type=float, default=60.0)
    parser.add_argument("--modes", default="generic,evented")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.pods.split(",")]
    modes = args.modes.split(",")
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-"))
    bed = Testbed(root)
    await bed.up()
    results = []
    try:
        async with (
            KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
            connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri,
        ):
            await cri.image.pull_image(api_pb2.ImageSpec(image=configs.busybox_image(bed.settings)))
            for mode in modes:
                results.append(
                    await run_mode(bed, admin, cri, mode, counts=counts, kills=args.kills, window=args.cpu_window)
                )
    finally:
        with contextlib.suppress(Exception):
            await bed.down()
    if args.dir is None:  # a directory of our own: logs are kept only when the run failed (raised above)
        shutil.rmtree(root, ignore_errors=True)
    by_mode = {r["mode"]: r for r in results}
    ratios: dict[str, float] = {}
    if {"generic", "evented"} <= set(by_mode):
        generic, evented = by_mode["generic"], by_mode["evented"]
        ratios["latency_p50_evented_over_generic"] = round(evented["latency_p50_s"] / generic["latency_p50_s"], 2)
        for count in counts:
            key = str(count)
            if generic["cpu_s"][key] > 0:
                ratios[f"cpu_{count}_evented_over_generic"] = round(evented["cpu_s"][key] / generic["cpu_s"][key], 2)
    print(json.dumps({"benchmark": "pleg", "cpu_window_s": args.cpu_window, "results": results, "ratios": ratios}))
    print(
        "pleg: "
        + "; ".join(
            f"{r['mode']} exit->apiserver p50 {r['latency_p50_s']}s p99 {r['latency_p99_s']}s (n={r['samples']}), "
            + ", ".join(f"CPU {c} pods {s}s/{args.cpu_window:.0f}s" for c, s in r["cpu_s"].items())
            for r in results
        )
        + (
            "; evented/generic: "
            + ", ".join(f"{k.removesuffix('_evented_over_generic')} x{v}" for k, v in ratios.items())
            if ratios
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
