"""What one Lease renewal costs the renewing process: CPU microseconds per renewal, against a real apiserver.

`nodeagent fleet` renews every node's Lease on one thread (`nodeagent.fleet.heartbeat`); at 300 nodes that is 30
renewals a second, and the CPU each one takes is what the thread competes for with the nodes' loop. This benchmark
runs `NodeLease` (the agent's own lease controller) for --nodes leases, each with a client of its own as in the fleet,
in one event loop: one first sync each (which creates the Lease), then --rounds rounds in which every lease syncs
once, at most --concurrency at a time. It reports the process's CPU time (user + system, every thread) over the rounds
divided by the renewals, the event loop's turns per renewal (each one gives up the GIL and takes it back), the
wall time, the renewal latency p50/p99, and the memory each lease's client and connection hold (RSS growth over the
first round, divided by the leases). `--busy-thread` computes in a thread beside the renewals, as a fleet's nodes
do in theirs: the latency then shows what the GIL hand-offs cost. `--profile FILE` runs the rounds under
cProfile and prints the 30 functions with the most own time (FILE keeps the pstats). The Leases are deleted at the
end.

The leases are named `<prefix>-N` in kube-node-lease, renewed with the admin credential and no owner (no Node).
The clients are the fleet's heartbeat clients (`direct=True`, `kube/direct.py`); `--httpx` makes them as the single
agent's, through httpx.

Run: `python -m benchmarks.lease_renewal --testbed DIR [--nodes 100] [--rounds 20] [--concurrency 1]
[--busy-thread] [--profile FILE] [--httpx]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import datetime
import json
import os
import pstats
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import percentile
from nodeagent.clock import SystemClock
from nodeagent.config import KubeletConfiguration
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.nodestatus.lease import NodeLease
from nodeagent.nodestatus.report import NODE_LEASE_NAMESPACE
from nodeagent.testbed.testbed import Testbed


async def _rounds(leases: list[NodeLease], rounds: int, concurrency: int) -> list[float]:
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(lease: NodeLease) -> None:
        async with gate:
            began = time.monotonic()
            if not await lease.sync():
                raise RuntimeError("a renewal failed")
            latencies.append(time.monotonic() - began)

    for _ in range(rounds):
        await asyncio.gather(*(one(lease) for lease in leases))
    return latencies


class _Busy:
    """A thread that only computes, in pure Python: the nodes' busy event loop of a fleet, as the GIL sees it."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="busy", daemon=True)

    def _spin(self) -> None:
        while not self._stop.is_set():
            sum(range(2000))

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class SelectCounter:
    """Counts the event loop's turns (one selector.select each): each turn gives up the GIL and takes it back."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.turns = 0
        selector = getattr(loop, "_selector", None)  # a selector event loop's; the benchmark's own loop
        if selector is None:
            return
        select = selector.select

        def counted(timeout: float | None = None) -> Any:
            self.turns += 1
            return select(timeout)

        selector.select = counted


async def run(
    kubeconfig: Path,
    nodes: int,
    rounds: int,
    concurrency: int,
    profile: Path | None = None,
    *,
    busy: bool = False,
    direct: bool = True,
) -> dict[str, Any]:
    prefix = f"leasebench-{uuid.uuid4().hex[:5]}"
    config = KubeletConfiguration()
    clock = SystemClock()
    process = psutil.Process()
    rss_before = process.memory_info().rss
    clients = [KubeClient.from_kubeconfig(kubeconfig, timeout=10.0, direct=direct) for _ in range(nodes)]
    leases = [
        NodeLease(client, node_name=f"{prefix}-{i}", config=config, clock=clock, node_uid=lambda: "")
        for i, client in enumerate(clients)
    ]
    result: dict[str, Any] = {
        "bench": "lease_renewal",
        "nodes": nodes,
        "rounds": rounds,
        "concurrency": concurrency,
        "direct": direct,
    }
    result["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    try:
        await _rounds(leases, 1, concurrency)  # create each Lease and open each client's connection
        # What one renewing node holds: its client (TLS context, pools) and its open connection(s).
        result["rss_per_lease_kib"] = round((process.memory_info().rss - rss_before) / nodes / 1024, 1)
        profiler = cProfile.Profile(time.process_time) if profile is not None else None
        counter = SelectCounter(asyncio.get_running_loop())
        with _Busy() if busy else contextlib.nullcontext():
            turns_before = counter.turns
            cpu_before = time.process_time()
            began = time.monotonic()
            if profiler is not None:
                profiler.enable()
            latencies = await _rounds(leases, rounds, concurrency)
            if profiler is not None:
                profiler.disable()
            wall = time.monotonic() - began
            cpu = time.process_time() - cpu_before
            turns = counter.turns - turns_before
        renewals = len(latencies)
        result.update(
            {
                "renewals": renewals,
                "busy_thread": busy,
                "cpu_us_per_renewal": None if busy else round(cpu / renewals * 1e6, 1),
                "loop_turns_per_renewal": round(turns / renewals, 2),
                "wall_s": round(wall, 2),
                "latency_p50_ms": round(percentile(latencies, 0.5) * 1e3, 2),
                "latency_p99_ms": round(percentile(latencies, 0.99) * 1e3, 2),
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                "profiled": profiler is not None,
            }
        )
        if profiler is not None and profile is not None:
            profiler.dump_stats(str(profile))
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(40)
    finally:
        async with KubeClient.from_kubeconfig(kubeconfig) as admin:
            for i in range(nodes):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.lease(NODE_LEASE_NAMESPACE, f"{prefix}-{i}"))
        for client in clients:
            await client.aclose()
    return result


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--testbed", type=Path, required=True, help="a running testbed's directory")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--busy-thread", action="store_true", help="a thread computing beside the renewals")
    parser.add_argument("--profile", type=Path, default=None, help="run the rounds under cProfile; pstats here")
    parser.add_argument("--httpx", action="store_true", help="clients without direct=True (the single agent's path)")
    args = parser.parse_args(argv)
    bed = Testbed(args.testbed)
    result = await run(
        bed.layout.admin_kubeconfig,
        args.nodes,
        args.rounds,
        args.concurrency,
        args.profile,
        busy=args.busy_thread,
        direct=not args.httpx,
    )
    result["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
