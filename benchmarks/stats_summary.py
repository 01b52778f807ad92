"""/stats/summary: how long the stats provider takes to build the summary at 20 and 100 pods, on the real containerd.

For each N (default 20, then 100) in one run on one testbed: N one-container busybox pods (`sleep 3600`) are
started straight over CRI in the agent's layout (a BestEffort pod cgroup under kubepods, the pod log directory),
then, after two warm-up calls:

- summary: `StatsProvider.summary()` (the whole summary: the four CRI calls, cgroupfs, statvfs, the log and volume
  walks) --calls times, one after another; the figure quoted;
- json: the same plus turning it into the JSON the server sends (summary_json + json.dumps with go-restful's
  indent);
- cpu_and_memory: `summary(only_cpu_and_memory=True)`, what /metrics/resource reads;
- cri_floor: the CRI calls the provider makes, alone (ListPodSandbox, ListContainers, ListContainerStats and
  ImageFsInfo, together): the part that is containerd's;
- sandbox_stats: containerd's ListPodSandboxStats alone, which would answer the pods' part too, for comparison
  (it enters every pod's network namespace; the provider reads the pod cgroups and the pause containers' /proc
  instead).

The pods are removed (and their cgroups) before the next N. Prints one JSON line and one summary line with medians
and p99. Run: `python -m benchmarks.stats_summary [--pods 20,100] [--calls 50] [--dir DIR]`.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.common import percentile
from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kuberuntime.cgroups import remove_cgroup_tree
from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.sandbox_config import pod_cgroup_parent
from nodeagent.stats.provider import StatsProvider
from nodeagent.stats.types import summary_json
from nodeagent.testbed import configs
from nodeagent.testbed.testbed import Testbed

NAMESPACE = "bench-stats"
PARALLEL = 10


async def start_pod(cri: CRIClient, image: str, index: int, log_root: Path, cgroup_root: str) -> tuple[str, str]:
    uid = str(uuid.uuid4())
    name = f"stats-{index}"
    log_dir = log_root / f"{NAMESPACE}_{name}_{uid}"
    await asyncio.to_thread(log_dir.mkdir, parents=True)
    cgroup = pod_cgroup_parent(uid, QOSClass.BEST_EFFORT, cgroup_root)
    labels = {"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": NAMESPACE, "io.kubernetes.pod.uid": uid}
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, uid=uid, namespace=NAMESPACE, attempt=0),
        hostname=name,
        log_directory=str(log_dir),
        labels=labels,
        linux=api_pb2.LinuxPodSandboxConfig(cgroup_parent=cgroup),
    )
    sandbox_id = await cri.runtime.run_pod_sandbox(config)
    container = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="main", attempt=0),
        image=api_pb2.ImageSpec(image=image),
        command=["sleep", "3600"],
        log_path="main/0.log",
        labels={**labels, "io.kubernetes.container.name": "main"},
        linux=api_pb2.LinuxContainerConfig(),
    )
    container_id = await cri.runtime.create_container(sandbox_id, container, config)
    await cri.runtime.start_container(container_id)
    return sandbox_id, cgroup


async def start_pods(cri: CRIClient, image: str, count: int, log_root: Path, cgroup_root: str) -> list[tuple[str, str]]:
    gate = asyncio.Semaphore(PARALLEL)

    async def one(index: int) -> tuple[str, str]:
        async with gate:
            return await start_pod(cri, image, index, log_root, cgroup_root)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def remove_pods(cri: CRIClient, pods: list[tuple[str, str]]) -> None:
    gate = asyncio.Semaphore(PARALLEL)

    async def one(sandbox_id: str, cgroup: str) -> None:
        async with gate:
            with contextlib.suppress(Exception):
                await cri.runtime.stop_pod_sandbox(sandbox_id)
            with contextlib.suppress(Exception):
                await cri.runtime.remove_pod_sandbox(sandbox_id)
            await asyncio.to_thread(remove_cgroup_tree, cgroup)

    await asyncio.gather(*(one(s, c) for s, c in pods))


async def timed(call: Callable[[], Awaitable[Any]], calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


def stats(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(samples) * 1000, 1), "p99_ms": round(percentile(samples, 0.99) * 1000, 1)}


async def measure(provider: StatsProvider, cri: CRIClient, count: int, calls: int) -> dict[str, Any]:
    for _ in range(2):
        summary = await provider.summary()
    assert len([p for p in summary.pods if p.pod_ref.namespace == NAMESPACE]) == count, "every pod in the summary"

    async def with_json() -> None:
        json.dumps(summary_json(await provider.summary()), indent=1).encode()

    async def floor() -> None:
        await asyncio.gather(
            cri.runtime.list_pod_sandbox(),
            cri.runtime.list_containers(),
            cri.runtime.list_container_stats(),
            cri.image.image_fs_info(),
        )

    return {
        "pods": count,
        "summary": stats(await timed(provider.summary, calls)),
        "json": stats(await timed(with_json, calls)),
        "cpu_and_memory": stats(await timed(lambda: provider.summary(only_cpu_and_memory=True), calls)),
        "cri_floor": stats(await timed(floor, calls)),
        "sandbox_stats": stats(await timed(cri.runtime.list_pod_sandbox_stats, max(calls // 5, 3))),
    }


async def run(bed: Testbed, root: Path, counts: list[int], calls: int) -> list[dict[str, Any]]:
    settings = bed.settings
    image = configs.busybox_image(settings)
    cgroup_root = configs.agent_cgroup_root(settings)
    log_root = root / "pod-logs"
    results = []
    async with connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri:
        await cri.image.pull_image(api_pb2.ImageSpec(image=image))
        provider = StatsProvider(
            cri.runtime,
            cri.image,
            node_name=settings.node_name,
            root_dir=str(bed.layout.kubelet_root),
            pod_log_dir_root=str(log_root),
            cgroup_root=cgroup_root,
        )
        for count in counts:
            pods = await start_pods(cri, image, count, log_root, cgroup_root)
            try:
                results.append(await measure(provider, cri, count, calls))
            finally:
                await remove_pods(cri, pods)
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", default="20,100")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.pods.split(",")]
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-stats-"))
    bed = Testbed(root)
    # the testbed comes up and goes down outside the measuring loop, as the integration tests' session does
    asyncio.run(bed.up())
    try:
        results = asyncio.run(run(bed, root, counts, args.calls))
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(bed.down())
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"benchmark": "stats_summary", "calls": args.calls, "results": results}))
    print(
        "stats_summary: "
        + "; ".join(
            f"{r['pods']} pods summary p50 {r['summary']['p50_ms']} ms p99 {r['summary']['p99_ms']} ms "
            f"(with JSON p50 {r['json']['p50_ms']} ms, cpu+memory only p50 {r['cpu_and_memory']['p50_ms']} ms, "
            f"its CRI calls alone p50 {r['cri_floor']['p50_ms']} ms; containerd's ListPodSandboxStats alone p50 "
            f"{r['sandbox_stats']['p50_ms']} ms)"
            for r in results
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
