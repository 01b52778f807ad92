"""nodeagent against the upstream kubelet v1.34.4, head to head: one run, one testbed, the same containerd, CNI,
registry, image and pods; nodeagent first, then the kubelet (testbed/upstreamkubelet.py).

For each agent, from a node that does not exist yet:
- node registration → Ready: the agent is spawned with no Node object; `start_ready_s` is spawn → Ready,
  `registered_ready_s` is the Node's first sighting → Ready (polled every 50 ms);
- pod start for each of --pods (default 1, 20, 100): that many pods created through the apiserver at once (bound by
  the real scheduler), each timed from its create call to the watch event that shows it Running, p50/p99;
- steady state for each of --steady-pods (default 20, 100), while that round's pods run: the agent process's CPU
  seconds (user + system, psutil) over --steady seconds (default 60) and its RSS (sampled every second: max and
  last);
- pod delete → gone: each round's pods deleted at once (their own 30 s grace; the container's shell exits on
  SIGTERM), each timed from its delete call to the watch's DELETED event, p50/p99;
- container exit → pod status: --exits pods (default 20, restartPolicy Never); one at a time, after a random wait
  of 0-1 s (so the kubelet's 1 s relist is sampled at every phase), the container's process is SIGKILLed from the
  host (its PID from CRI's verbose ContainerStatus), timed to the watch event that shows the container terminated;
  p50/p99.
Between rounds the runtime is left with nothing running (stopped sandboxes the kubelet garbage-collects later are
allowed). Then the ratio nodeagent / upstream of every figure, and the issue's goals: pod start p50 ≤ 0.8x and
p99 ≤ 1.0x, exit → status ≤ 0.2x, steady CPU and RSS ≤ 1.5x.

Prints one JSON line and one summary line. Needs `nodeagent testbed install --with-kubelet`. Run:
`python -m benchmarks.versus [--pods 1,20,100] [--steady-pods 20,100] [--steady 60] [--exits 20] [--dir DIR]`
(about 15 minutes with the defaults on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import operator
import os
import random
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import NS, on_a_testbed, percentile, pod_body, watch_pods
from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, processes
from nodeagent.testbed.handover import forget_node, wait_nothing_running
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.upstreamkubelet import node_is_ready, start_kubelet, stop_kubelet

LABEL = "bench=versus"
AGENTS = ("nodeagent", "kubelet")
#: the issue's goals, as (metric, the largest ratio nodeagent / upstream that meets it).
GOALS = {
    "start_p50": 0.8,
    "start_p99": 1.0,
    "exit_p50": 0.2,
    "exit_p99": 0.2,
    "steady_cpu": 1.5,
    "steady_rss": 1.5,
}
# A shell that exits on SIGTERM (PID 1 ignores signals it has no handler for), so a graceful delete is the agent's
# work, not the 30 s grace running out.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]


def versus_pod(name: str, image: str, *, restart_policy: str = "Always") -> dict[str, Any]:
    body = pod_body(name, image, bench="versus")
    spec = body["spec"]
    spec["terminationGracePeriodSeconds"] = 30
    spec["restartPolicy"] = restart_policy
    spec["containers"][0]["command"] = COMMAND
    return body


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_s": round(statistics.median(values), 3) if values else float("nan"),
        "p99_s": round(percentile(values, 0.99), 3),
    }


def ratio(ours: float, theirs: float) -> float | None:
    if not theirs or math.isnan(ours) or math.isnan(theirs):
        return None
    return round(ours / theirs, 2)


@dataclass
class PodTimes:
    """What one watch over the benchmark's pods saw, by pod name (monotonic seconds)."""

    running: dict[str, float] = field(default_factory=dict)
    terminated: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def record(self, kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        name = str(obj.get("metadata", {}).get("name", ""))
        status = obj.get("status") or {}
        if kind == "DELETED":
            self.deleted.setdefault(name, now)
        if status.get("phase") == "Running":
            self.running.setdefault(name, now)
        for cs in status.get("containerStatuses") or ():
            if "terminated" in (cs.get("state") or {}):
                self.terminated.setdefault(name, now)
        async with self.changed:
            self.changed.notify_all()

    async def wait(self, done: Callable[[], bool], *, timeout: float, what: str) -> None:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(done), timeout)
            except TimeoutError:
                raise RuntimeError(f"{what}: not seen in {timeout:.0f}s") from None


async def start_round(admin: KubeClient, times: PodTimes, bodies: list[dict[str, Any]]) -> list[float]:
    names = [b["metadata"]["name"] for b in bodies]
    created: dict[str, float] = {}

    async def create(body: dict[str, Any]) -> None:
        created[body["metadata"]["name"]] = time.monotonic()
        await admin.create(paths.pods(NS), body)

    await asyncio.gather(*(create(b) for b in bodies))
    await times.wait(lambda: all(n in times.running for n in names), timeout=300, what=f"{len(names)} pods Running")
    return [times.running[n] - created[n] for n in names]


async def delete_round(admin: KubeClient, times: PodTimes, names: list[str]) -> list[float]:
    asked: dict[str, float] = {}

    async def delete(name: str) -> None:
        asked[name] = time.monotonic()
        await admin.delete(paths.pod(NS, name))

    await asyncio.gather(*(delete(n) for n in names))
    await times.wait(lambda: all(n in times.deleted for n in names), timeout=300, what=f"{len(names)} pods gone")
    return [times.deleted[n] - asked[n] for n in names]


async def steady(pid: int, seconds: float) -> dict[str, float]:
    """The agent's CPU seconds over `seconds` and its RSS (sampled every second) while its pods just run."""
    proc = psutil.Process(pid)
    before = proc.cpu_times()
    rss: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rss.append(proc.memory_info().rss)
        await asyncio.sleep(1.0)
    after = proc.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    return {
        "seconds": seconds,
        "cpu_s": round(cpu, 2),
        "rss_max_mib": round(max(rss) / 2**20, 1),
        "rss_last_mib": round(rss[-1] / 2**20, 1),
    }


async def container_pid(cri: CRIClient, container_id: str) -> int:
    response = await cri.runtime.container_status(container_id, verbose=True)
    return int(json.loads(response.info["info"])["pid"])


async def exit_round(admin: KubeClient, cri: CRIClient, times: PodTimes, image: str, count: int) -> list[float]:
    bodies = [versus_pod(f"versus-exit-{uuid.uuid4().hex[:8]}", image, restart_policy="Never") for _ in range(count)]
    names = [b["metadata"]["name"] for b in bodies]
    await start_round(admin, times, bodies)
    rng = random.Random(20)
    latencies = []
    for name in names:
        pod = await admin.get(paths.pod(NS, name))
        container_id = str(pod["status"]["containerStatuses"][0]["containerID"]).rpartition("://")[2]
        pid = await container_pid(cri, container_id)
        await asyncio.sleep(rng.uniform(0, 1.0))
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        seen = functools.partial(operator.contains, times.terminated, name)
        await times.wait(seen, timeout=60, what=f"{name} terminated")
        latencies.append(times.terminated[name] - killed)
    await delete_round(admin, times, names)
    return latencies


async def node_registration(admin: KubeClient, node: str, spawned: Callable[[], float | None]) -> dict[str, float]:
    """Poll the Node every 50 ms from before the agent is spawned: its first sighting and Ready."""
    registered = 0.0
    while True:
        try:
            obj = await admin.get(paths.node(node))
            registered = registered or time.monotonic()
            if node_is_ready(obj):
                ready = time.monotonic()
                start = spawned()
                return {
                    "start_ready_s": round(ready - start, 3) if start else float("nan"),
                    "registered_ready_s": round(ready - registered, 3),
                }
        except NotFound:
            pass
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class Options:
    pods: list[int]
    steady_pods: list[int]
    steady_seconds: float
    exits: int
    agents: list[str]


async def start_agent(bed: Testbed, agent: str) -> tuple[int, Callable[[], Awaitable[None]]]:
    """Start `agent` as the testbed's node (returns once the Node is Ready): its PID and how to stop it."""
    if agent == "nodeagent":
        proc = await bed.start_agent()

        async def stop_nodeagent() -> None:
            await asyncio.to_thread(processes.stop, proc, pid_dir=bed.layout.pids, grace=20)

        return proc.pid, stop_nodeagent
    kubelet = await start_kubelet(bed, bed.layout.logs / "kubelet.log")

    async def stop_upstream() -> None:
        await stop_kubelet(kubelet)

    return kubelet.pid, stop_upstream


async def measure(
    bed: Testbed, admin: KubeClient, cri: CRIClient, times: PodTimes, *, agent: str, options: Options
) -> dict[str, Any]:
    settings = bed.settings
    image = configs.busybox_image(settings)
    await forget_node(admin, settings.node_name)
    spawned: list[float] = []
    registration = asyncio.create_task(node_registration(admin, settings.node_name, lambda: spawned[0]))
    spawned.append(time.monotonic())
    pid, stop = await start_agent(bed, agent)
    result: dict[str, Any] = {"pid": pid}
    try:
        result["registration"] = await asyncio.wait_for(registration, 60)
        starts: dict[str, Any] = {}
        deletes: dict[str, Any] = {}
        steadies: dict[str, Any] = {}
        for count in options.pods:
            bodies = [versus_pod(f"versus-{uuid.uuid4().hex[:8]}", image) for _ in range(count)]
            starts[str(count)] = summary(await start_round(admin, times, bodies))
            if count in options.steady_pods:
                await asyncio.sleep(5)  # past the start's own work (status updates, the first probes of stats)
                steadies[str(count)] = await steady(pid, options.steady_seconds)
            deletes[str(count)] = summary(await delete_round(admin, times, [b["metadata"]["name"] for b in bodies]))
            await wait_nothing_running(cri)
        result["start"], result["delete"], result["steady"] = starts, deletes, steadies
        if options.exits:
            result["exit"] = summary(await exit_round(admin, cri, times, image, options.exits))
            await wait_nothing_running(cri)
    finally:
        registration.cancel()
        await stop()
    return result


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "start_ready": ratio(ours["registration"]["start_ready_s"], theirs["registration"]["start_ready_s"]),
        "registered_ready": ratio(
            ours["registration"]["registered_ready_s"], theirs["registration"]["registered_ready_s"]
        ),
    }
    for kind in ("start", "delete"):
        for count, mine in ours[kind].items():
            other = theirs[kind].get(count)
            if other:
                out[f"{kind}_{count}_p50"] = ratio(mine["p50_s"], other["p50_s"])
                out[f"{kind}_{count}_p99"] = ratio(mine["p99_s"], other["p99_s"])
    for count, mine in ours["steady"].items():
        other = theirs["steady"].get(count)
        if other:
            out[f"steady_{count}_cpu"] = ratio(mine["cpu_s"], other["cpu_s"])
            out[f"steady_{count}_rss"] = ratio(mine["rss_max_mib"], other["rss_max_mib"])
    if "exit" in ours and "exit" in theirs:
        out["exit_p50"] = ratio(ours["exit"]["p50_s"], theirs["exit"]["p50_s"])
        out["exit_p99"] = ratio(ours["exit"]["p99_s"], theirs["exit"]["p99_s"])
    return out


def goals(ratio_of: dict[str, Any]) -> dict[str, bool | None]:
    """Each goal of the issue against the ratios: every pod count's start, every steady count's CPU and RSS."""
    met: dict[str, bool | None] = {}
    for key, value in ratio_of.items():
        parts = key.split("_")
        if parts[0] == "start" and len(parts) == 3 and parts[1].isdigit():
            goal = GOALS[f"start_{parts[2]}"]
        elif parts[0] == "steady":
            goal = GOALS[f"steady_{parts[2]}"]
        elif key in GOALS:
            goal = GOALS[key]
        else:
            continue
        met[key] = None if value is None else value <= goal
    return met


def summary_line(result: dict[str, Any]) -> str:
    parts = []
    per = result["agents"]
    ratio_of = result.get("ratio", {})
    for count in per[next(iter(per))]["start"]:
        cells = ", ".join(
            f"{a} {per[a]['start'][count]['p50_s']}/{per[a]['start'][count]['p99_s']}s"
            for a in per
            if count in per[a]["start"]
        )
        parts.append(f"start {count} pods p50/p99 {cells} (x{ratio_of.get(f'start_{count}_p50')})")
    if all("exit" in per[a] for a in per):
        cells = ", ".join(f"{a} {per[a]['exit']['p50_s']}/{per[a]['exit']['p99_s']}s" for a in per)
        parts.append(f"exit→status p50/p99 {cells} (x{ratio_of.get('exit_p50')})")
    for count in per[next(iter(per))]["steady"]:
        cells = ", ".join(
            f"{a} {per[a]['steady'][count]['cpu_s']} CPU-s {per[a]['steady'][count]['rss_max_mib']} MiB"
            for a in per
            if count in per[a]["steady"]
        )
        parts.append(f"steady {count} pods {cells}")
    cells = ", ".join(f"{a} {per[a]['registration']['start_ready_s']}s" for a in per)
    parts.append(f"spawn→Ready {cells}")
    met = result.get("goals", {})
    missed = sorted(k for k, v in met.items() if v is False)
    parts.append(f"goals missed: {', '.join(missed) or 'none'}")
    return "versus: " + "; ".join(parts)


async def run(bed: Testbed, options: Options) -> dict[str, Any]:
    settings = bed.settings
    image = configs.busybox_image(settings)
    per: dict[str, Any] = {}
    async with (
        KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
        connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri,
    ):
        await cri.image.pull_image(api_pb2.ImageSpec(image=image))  # present for both: no pull is measured
        times = PodTimes()
        watcher = asyncio.create_task(watch_pods(admin, times.record, LABEL))
        try:
            for agent in options.agents:
                per[agent] = await measure(bed, admin, cri, times, agent=agent, options=options)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    result: dict[str, Any] = {"benchmark": "versus", "options": options.__dict__, "agents": per}
    if set(AGENTS) <= set(per):
        result["ratio"] = ratios(per["nodeagent"], per["kubelet"])
        result["goals"] = goals(result["ratio"])
    return result


def _counts(text: str) -> list[int]:
    return [int(c) for c in text.split(",") if c]


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=_counts, default=[1, 20, 100], help="pod counts of the start rounds")
    parser.add_argument("--steady-pods", type=_counts, default=[20, 100], help="rounds measured in steady state")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state")
    parser.add_argument("--exits", type=int, default=20, help="container exits timed (0: none)")
    parser.add_argument("--agents", default=",".join(AGENTS), help="which agents, in order")
    parser.add_argument("--dir", type=Path, default=None, help="the testbed's directory (kept)")
    args = parser.parse_args(argv)
    options = Options(
        pods=args.pods,
        steady_pods=[c for c in args.steady_pods if c in args.pods],
        steady_seconds=args.steady,
        exits=args.exits,
        agents=[a for a in args.agents.split(",") if a],
    )
    unknown = set(options.agents) - set(AGENTS)
    if unknown:
        parser.error(f"unknown agents: {', '.join(sorted(unknown))}")
    result = await on_a_testbed(args.dir, "nodeagent-versus-", lambda bed: run(bed, options))
    print(json.dumps(result))
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
