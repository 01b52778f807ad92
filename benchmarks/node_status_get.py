"""What one node-status GET costs the process: CPU microseconds per GET of a Node, through httpx and over the
direct connection (`KubeClient(direct=True)`, `kube/direct.py`), in one run against a real apiserver.

Every node's status loop GETs its Node every 10 s, the first try from the watch cache (`resourceVersion=0`,
`NodeStatusManager.sync_node_status`): at 300 nodes a fleet makes 30 a second, as many as its Lease renewals. This
benchmark makes one Node with no status (`nsbench-<id>`, admin credential, deleted at the end), or reads an
existing one (--node, a fleet node's: its status is most of its bytes), and --nodes clients of each kind. In each
of --rounds rounds every client of one kind GETs it once, then every client of the other (the order alternating
round by round), at most --concurrency at a time. A round's CPU time (the process's user + system)
over its GETs is one sample; the medians of each kind and their ratio are what to quote on a loaded machine. It
also gives the event loop's turns per GET and the GET latency p50/p99 of each kind. The status PATCH (once in
nodeStatusReportFrequency, 5 min, or on a change) is not measured: its path is the same code with a body.

Run: `python -m benchmarks.node_status_get --testbed DIR [--nodes 100] [--rounds 20] [--concurrency 1]
[--node NAME]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import percentile
from benchmarks.lease_renewal import SelectCounter
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed.testbed import Testbed

KINDS = ("httpx", "direct")


async def _pass(clients: list[KubeClient], path: str, concurrency: int, latencies: list[float]) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(client: KubeClient) -> None:
        async with gate:
            began = time.monotonic()
            node = await client.get_direct(path, resource_version="0")
            latencies.append(time.monotonic() - began)
            if node.get("kind") != "Node":
                raise RuntimeError(f"not a Node: {node.get('kind')!r}")

    await asyncio.gather(*(one(client) for client in clients))


async def run(kubeconfig: Path, nodes: int, rounds: int, concurrency: int, node: str | None = None) -> dict[str, Any]:
    name = node or f"nsbench-{uuid.uuid4().hex[:5]}"
    path = paths.node(name)
    clients = {
        kind: [KubeClient.from_kubeconfig(kubeconfig, direct=kind == "direct") for _ in range(nodes)] for kind in KINDS
    }
    result: dict[str, Any] = {"bench": "node_status_get", "nodes": nodes, "rounds": rounds, "concurrency": concurrency}
    result["node"] = name
    result["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    turns: dict[str, int] = dict.fromkeys(KINDS, 0)
    latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
    async with KubeClient.from_kubeconfig(kubeconfig) as admin:
        if node is None:
            await admin.create(paths.nodes(), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        try:
            for kind in KINDS:  # each client's connection opened (and its TLS handshake done) before the rounds
                await _pass(clients[kind], path, concurrency, [])
            counter = SelectCounter(asyncio.get_running_loop())
            for i in range(rounds):
                for kind in KINDS if i % 2 == 0 else KINDS[::-1]:
                    turns_before, cpu_before = counter.turns, time.process_time()
                    await _pass(clients[kind], path, concurrency, latencies[kind])
                    cpu[kind].append((time.process_time() - cpu_before) / nodes)
                    turns[kind] += counter.turns - turns_before
        finally:
            if node is None:
                with contextlib.suppress(NotFound):
                    await admin.delete(path)
            for kind in KINDS:
                for client in clients[kind]:
                    await client.aclose()
    for kind in KINDS:
        result[kind] = {
            "cpu_us_per_get_median": round(statistics.median(cpu[kind]) * 1e6, 1),
            "cpu_us_per_get_min_max": [round(min(cpu[kind]) * 1e6, 1), round(max(cpu[kind]) * 1e6, 1)],
            "loop_turns_per_get": round(turns[kind] / (rounds * nodes), 2),
            "latency_p50_ms": round(percentile(latencies[kind], 0.5) * 1e3, 2),
            "latency_p99_ms": round(percentile(latencies[kind], 0.99) * 1e3, 2),
        }
    result["cpu_ratio_direct_to_httpx"] = round(
        result["direct"]["cpu_us_per_get_median"] / result["httpx"]["cpu_us_per_get_median"], 3
    )
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--testbed", type=Path, required=True, help="a running testbed's directory")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--node", default=None, help="GET this existing Node (a fleet node's) instead of an empty one")
    args = parser.parse_args(argv)
    kubeconfig = Testbed(args.testbed).layout.admin_kubeconfig
    result = await run(kubeconfig, args.nodes, args.rounds, args.concurrency, args.node)
    result["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
