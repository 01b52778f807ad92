"""What `nodeagent fleet` costs per emulated node: CPU and memory of the fleet's process on a real apiserver.

The fleet runs as its own process (`python -m nodeagent fleet`, the admin credential shared by every node) against
a testbed (an existing one with `--testbed DIR`, or one brought up and down here). Phases:
- start: from launch until every node is Ready (registration staggered by --stagger);
- pods: a Deployment of --pods-per-node times --nodes pods onto the fleet until every pod is Running (skipped at 0);
- steady: --steady seconds with nothing changing, over which the fleet's CPU is measured; lease renewals are
  sampled meanwhile from the apiserver (an independent poller, every second) and the intervals between two
  renewTimes of one lease give p50/p99/max. RSS and PSS of the process, and the load average, are read at the end of
  the window (the load average at the start too).
Then the Deployment and the Nodes are deleted and the fleet is stopped (SIGTERM).

Prints one JSON line and one summary line. Run: `python -m benchmarks.fleet [--nodes 100] [--pods-per-node 0]
[--steady 60] [--testbed DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import percentile
from nodeagent.fleet.plan import FLEET_LABEL
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed.testbed import Testbed

DEPLOYMENTS = paths.api_path("deployments", group="apps", namespace="default")


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _time(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def _until(what: str, check: Any, timeout: float, fleet: asyncio.subprocess.Process) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if fleet.returncode is not None:
            raise RuntimeError(f"the fleet exited with {fleet.returncode} while waiting for {what}")
        if await check():
            return time.monotonic() - began
        await asyncio.sleep(1)
    raise RuntimeError(f"{what}: not after {timeout:.0f}s")


def _deployment(name: str, prefix: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {FLEET_LABEL: prefix},
                    "tolerations": [{"key": FLEET_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 1,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "main", "image": "registry.invalid/hollow:1", "command": ["serve"]}],
                },
            },
        },
    }


async def _lease_intervals(admin: KubeClient, prefix: str, seconds: float) -> tuple[list[float], list[float]]:
    """The renew intervals seen, and how long each of the poller's own LISTs took (the apiserver's latency as a
    client beside the fleet sees it)."""
    seen: dict[str, float] = {}
    intervals: list[float] = []
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.monotonic()
        listed = (await admin.list(paths.leases("kube-node-lease")))["items"]
        latencies.append(time.monotonic() - began)
        for lease in listed:
            name = lease["metadata"]["name"]
            if not name.startswith(prefix + "-") or not lease["spec"].get("renewTime"):
                continue
            renewed = _time(lease["spec"]["renewTime"])
            if name in seen and renewed > seen[name]:
                intervals.append(renewed - seen[name])
            seen[name] = renewed
        await asyncio.sleep(1)
    return intervals, latencies


async def run(
    bed: Testbed,
    nodes: int,
    pods_per_node: int,
    steady: float,
    stagger: float,
    *,
    keep: bool = False,
    switch_interval: float | None = None,
) -> dict[str, Any]:
    prefix = f"bench-{uuid.uuid4().hex[:5]}"
    workdir = Path(tempfile.mkdtemp(prefix="nodeagent-bench-fleet-"))
    log = workdir / "fleet.log"
    argv = [
        sys.executable, "-m", "nodeagent", "fleet", "--nodes", str(nodes), "--prefix", prefix,
        "--kubeconfig", str(bed.layout.admin_kubeconfig), "--dir", str(workdir / "fleet"), "--stagger", str(stagger),
    ]  # fmt: skip
    if switch_interval is not None:
        argv += ["--switch-interval", str(switch_interval)]
    result: dict[str, Any] = {"bench": "fleet", "nodes": nodes, "pods_per_node": pods_per_node, "steady_s": steady}
    if switch_interval is not None:
        result["switch_interval_s"] = switch_interval
    # The machine's load when the fleet starts and when the steady window ends: late renewals mean little without it.
    result["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    async with KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin:
        with log.open("wb") as out:
            fleet = await asyncio.create_subprocess_exec(
                *argv, stdout=out, stderr=asyncio.subprocess.STDOUT, env=dict(os.environ)
            )
        proc = psutil.Process(fleet.pid)
        deployment = f"{prefix}-pods"
        try:

            async def all_ready() -> bool:
                listed = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
                return len(listed) == nodes and all(_ready(n) for n in listed)

            result["start_to_all_ready_s"] = round(await _until("all nodes Ready", all_ready, 120 + nodes, fleet), 1)
            if pods_per_node:
                await admin.create(DEPLOYMENTS, _deployment(deployment, prefix, pods_per_node * nodes))

                async def all_running() -> bool:
                    pods = (await admin.list(paths.pods("default"), label_selector=f"app={deployment}"))["items"]
                    running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
                    return running == pods_per_node * nodes

                result["pods_to_running_s"] = round(
                    await _until("all pods Running", all_running, 120 + pods_per_node * nodes / 5, fleet), 1
                )
            before = proc.cpu_times()
            began = time.monotonic()
            intervals, latencies = await _lease_intervals(admin, prefix, steady)
            elapsed = time.monotonic() - began
            after = proc.cpu_times()
            cpu = (after.user + after.system) - (before.user + before.system)
            memory = proc.memory_full_info()
            result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
            result.update(
                {
                    "cpu_cores": round(cpu / elapsed, 3),
                    "cpu_s_per_node_minute": round(cpu / nodes / (elapsed / 60), 4),
                    "nodes_per_core": round(nodes / (cpu / elapsed), 1) if cpu else None,
                    "rss_mib": round(memory.rss / 2**20, 1),
                    "pss_mib": round(memory.pss / 2**20, 1),
                    "rss_per_node_mib": round(memory.rss / 2**20 / nodes, 2),
                    "pss_per_node_mib": round(memory.pss / 2**20 / nodes, 2),
                    "lease_renewals": len(intervals),
                    "lease_interval_p50_s": round(percentile(intervals, 0.5), 2) if intervals else None,
                    "lease_interval_p99_s": round(percentile(intervals, 0.99), 2) if intervals else None,
                    "lease_interval_max_s": round(max(intervals), 2) if intervals else None,
                    # Over 15 s: a renewal missed (every 10 s, a 40 s lease); 40 s would make the node NotReady.
                    "lease_intervals_over_15s": sum(1 for i in intervals if i > 15),
                    "poller_list_p50_s": round(percentile(latencies, 0.5), 3),
                    "poller_list_max_s": round(max(latencies), 3),
                }
            )
        finally:
            with contextlib.suppress(NotFound):
                await admin.delete(f"{DEPLOYMENTS}/{deployment}")
            if pods_per_node and fleet.returncode is None:
                # The nodes delete their pods (as kubelets do); stopped before, the pods would stay Terminating.

                async def all_gone() -> bool:
                    listed = await admin.list(paths.pods("default"), label_selector=f"app={deployment}")
                    return not listed["items"]

                with contextlib.suppress(RuntimeError):
                    result["pods_deleted_s"] = round(
                        await _until("pods deleted", all_gone, 60 + pods_per_node * nodes / 5, fleet), 1
                    )
            if fleet.returncode is None:
                fleet.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(fleet.wait(), 60)
                except TimeoutError:
                    fleet.kill()
                    await fleet.wait()
            for ordinal in range(nodes):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.node(f"{prefix}-{ordinal}"))
    if keep:
        result["fleet_log"] = str(log)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def summary_line(r: dict[str, Any]) -> str:
    return (
        f"fleet: {r['nodes']} nodes ({r['pods_per_node']} pods each) Ready in {r['start_to_all_ready_s']} s; "
        f"steady {r['steady_s']:.0f} s: {r['cpu_s_per_node_minute']} CPU s per node-minute "
        f"({r['cpu_cores']} cores, {r['nodes_per_core']} nodes/core), RSS {r['rss_per_node_mib']} MiB/node "
        f"(PSS {r['pss_per_node_mib']}), lease renew p50/p99/max {r['lease_interval_p50_s']}/"
        f"{r['lease_interval_p99_s']}/{r['lease_interval_max_s']} s ({r['lease_intervals_over_15s']} over 15 s); "
        f"apiserver LIST from beside p50/max {r['poller_list_p50_s']}/{r['poller_list_max_s']} s; "
        f"load average {r['loadavg_start']} -> {r.get('loadavg_end')}"
    )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods-per-node", type=int, default=0)
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state measured")
    parser.add_argument("--stagger", type=float, default=0.05)
    parser.add_argument("--testbed", type=Path, default=None, help="a running testbed's directory (else one here)")
    parser.add_argument("--keep", action="store_true", help="keep the fleet's directory and log")
    parser.add_argument("--switch-interval", type=float, default=None, help="the fleet's --switch-interval")
    args = parser.parse_args(argv)
    if args.testbed is not None:
        bed = Testbed(args.testbed)
        result = await run(
            bed,
            args.nodes,
            args.pods_per_node,
            args.steady,
            args.stagger,
            keep=args.keep,
            switch_interval=args.switch_interval,
        )
    else:
        root = Path(tempfile.mkdtemp(prefix="nodeagent-bench-fleet-tb-"))
        bed = Testbed(root)
        await bed.up()
        try:
            result = await run(
                bed,
                args.nodes,
                args.pods_per_node,
                args.steady,
                args.stagger,
                keep=args.keep,
                switch_interval=args.switch_interval,
            )
        finally:
            with contextlib.suppress(Exception):
                await bed.down()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
