"""Pod start-up: N pods created through the API → Running as seen by a watch, against the raw CRI floor.

For each N (default 1, 20, 100) in one run on one testbed:
- agent: N pods are created through the apiserver at once (bound by the real scheduler); each pod's time is from
  its create call to the watch event that shows it Running; then they are deleted and the runtime is left empty;
- floor: the same N pods started directly over CRI at once (RunPodSandbox + CreateContainer + StartContainer, busybox,
  image present), each timed from its first call to StartContainer returning. The floor carries no kubelet labels,
  so the agent's housekeeping leaves it alone.

Prints one JSON line and one summary line. Run: `python -m benchmarks.pod_startup [--pods 1,20,100] [--dir DIR]`.
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
from pathlib import Path

from benchmarks.common import NS, percentile, pod_body
from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.testbed import Testbed


async def agent_round(admin: KubeClient, image: str, count: int) -> list[float]:
    listed = await admin.list(paths.pods(NS), label_selector="bench=pod-startup")
    version = listed["metadata"]["resourceVersion"]
    names = [f"bench-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    wanted = set(names)
    created_at: dict[str, float] = {}
    running_at: dict[str, float] = {}

    async def watch() -> None:
        rv = version
        while len(running_at) < count:  # a watch may end at any time; resume from the last version seen
            async for event in admin.watch(paths.pods(NS), resource_version=rv, label_selector="bench=pod-startup"):
                rv = event.resource_version or rv
                name = event.object.get("metadata", {}).get("name", "")
                phase = (event.object.get("status") or {}).get("phase")
                # Only this round's pods: the previous round's are still Running while they are deleted.
                if name in wanted and phase == "Running" and name not in running_at:
                    running_at[name] = time.monotonic()
                    if len(running_at) == count:
                        return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.2)

    async def create(name: str) -> None:
        created_at[name] = time.monotonic()
        await admin.create(paths.pods(NS), pod_body(name, image, bench="pod-startup"))

    await asyncio.gather(*(create(n) for n in names))
    await asyncio.wait_for(watcher, 300)
    durations = [running_at[n] - created_at[n] for n in names]
    for name in names:
        await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
    return durations


async def wait_runtime_empty(cri: CRIClient, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not await cri.runtime.list_pod_sandbox() and not await cri.runtime.list_containers():
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("the runtime did not empty after the round")


async def floor_round(cri: CRIClient, image: str, count: int, log_root: Path) -> list[float]:
    async def one(i: int) -> tuple[float, str]:
        uid = str(uuid.uuid4())
        config = api_pb2.PodSandboxConfig(
            metadata=api_pb2.PodSandboxMetadata(name=f"floor-{i}", uid=uid, namespace="bench", attempt=0),
            hostname=f"floor-{i}",
            log_directory=str(log_root / uid),
            linux=api_pb2.LinuxPodSandboxConfig(),
        )
        started = time.monotonic()
        sandbox_id = await cri.runtime.run_pod_sandbox(config)
        container = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="main", attempt=0),
            image=api_pb2.ImageSpec(image=image),
            command=["sleep", "3600"],
            log_path="main/0.log",
            linux=api_pb2.LinuxContainerConfig(),
        )
        container_id = await cri.runtime.create_container(sandbox_id, container, config)
        await cri.runtime.start_container(container_id)
        return time.monotonic() - started, sandbox_id

    results = await asyncio.gather(*(one(i) for i in range(count)))
    for _, sandbox_id in results:
        await cri.runtime.stop_pod_sandbox(sandbox_id)
        await cri.runtime.remove_pod_sandbox(sandbox_id)
    return [d for d, _ in results]


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", default="1,20,100")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.pods.split(",")]
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-"))
    bed = Testbed(root)
    await bed.up()
    results = []
    try:
        await bed.start_agent()
        settings = bed.settings
        image = configs.busybox_image(settings)
        async with (
            KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
            connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri,
        ):
            await cri.image.pull_image(api_pb2.ImageSpec(image=image))
            for count in counts:
                agent = await agent_round(admin, image, count)
                await wait_runtime_empty(cri)
                floor = await floor_round(cri, image, count, root / "floor-logs")
                results.append(
                    {
                        "pods": count,
                        "agent_p50_s": round(statistics.median(agent), 3),
                        "agent_p99_s": round(percentile(agent, 0.99), 3),
                        "floor_p50_s": round(statistics.median(floor), 3),
                        "floor_p99_s": round(percentile(floor, 0.99), 3),
                        "ratio_p50": round(statistics.median(agent) / statistics.median(floor), 2),
                    }
                )
    finally:
        with contextlib.suppress(Exception):
            await bed.down()
    if args.dir is None:  # a directory of our own: logs are kept only when the run failed (raised above)
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"benchmark": "pod_startup", "results": results}))
    print(
        "pod_startup: "
        + "; ".join(
            f"{r['pods']} pods agent p50 {r['agent_p50_s']}s p99 {r['agent_p99_s']}s vs CRI floor p50 "
            f"{r['floor_p50_s']}s p99 {r['floor_p99_s']}s (x{r['ratio_p50']})"
            for r in results
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
