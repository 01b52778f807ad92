"""An emulated node's idle eviction pass: what one `EvictionManager.synchronize` costs a fleet node with no pods.

Builds what `run_emulated_agent` builds for eviction (the fake runtime, a `StatsProvider` over it with a root dir of
its own, the eviction manager with the default thresholds), warms up, then runs --passes passes one after another,
twice in the same run: without sharing (the provider reads the host every pass, as a real node's does), then with
the per-process `SharedHostReads` a fleet node has. Prints one JSON line and a summary line: the median and p90 wall
time per pass and the process's CPU per pass (time.process_time: the stats reader's worker thread included), in µs,
for each, and the ratio of the medians (the real node's pass is the peer). No testbed, no cluster.

Run: `python -m benchmarks.eviction_idle [--passes 3000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import percentile
from cri.fake import FakeCRI
from nodeagent.clock import SystemClock
from nodeagent.config import KubeletConfiguration
from nodeagent.evictionmanager import EvictionInputs, EvictionManager, eviction_config
from nodeagent.stats.provider import SharedHostReads, StatsProvider

WARM_UP = 20


async def measure(passes: int, shared: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="eviction-idle-") as directory:
        root = Path(directory)
        cri = FakeCRI("node-1")
        config = KubeletConfiguration()
        stats = StatsProvider(
            cri.runtime,
            cri.image,
            node_name="node-1",
            root_dir=str(root),
            cgroup_root=config.cgroup_root,
            cgroup_driver=config.cgroup_driver.value,
            pod_log_dir_root=str(root / "pod-logs"),
            shared_host_reads=SharedHostReads() if shared else None,
        )
        manager = EvictionManager(eviction_config(config), clock=SystemClock())
        inputs = EvictionInputs(summary=stats.summary, active_pods=lambda: [], evict=lambda pod, evicted: None)
        for _ in range(WARM_UP):
            await manager.synchronize(inputs)
        times: list[float] = []
        cpu = time.process_time()
        for _ in range(passes):
            start = time.perf_counter()
            await manager.synchronize(inputs)
            times.append((time.perf_counter() - start) * 1e6)
        cpu_us = (time.process_time() - cpu) / passes * 1e6
    return {
        "median_us": round(statistics.median(times), 1),
        "p90_us": round(percentile(times, 0.9), 1),
        "cpu_per_pass_us": round(cpu_us, 1),
    }


async def run(passes: int) -> None:
    own = await measure(passes, shared=False)
    shared = await measure(passes, shared=True)
    ratio = own["median_us"] / shared["median_us"] if shared["median_us"] else 0.0
    print(json.dumps({"bench": "eviction_idle", "passes": passes, "own": own, "shared": shared, "ratio": ratio}))
    print(
        f"eviction idle pass: own reads median {own['median_us']:.0f} us (cpu {own['cpu_per_pass_us']:.0f} us), "
        f"shared reads median {shared['median_us']:.0f} us (cpu {shared['cpu_per_pass_us']:.0f} us), "
        f"x{ratio:.1f} cheaper"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--passes", type=int, default=3000)
    args = parser.parse_args()
    asyncio.run(run(args.passes))


if __name__ == "__main__":
    main()
