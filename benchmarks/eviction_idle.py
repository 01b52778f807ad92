"""An emulated node's idle eviction pass: what one `EvictionManager.synchronize` costs a fleet node with no pods.

Builds what `run_emulated_agent` builds for eviction (the fake runtime, a `StatsProvider` over it with a root dir of
its own, the eviction manager with the default thresholds), warms up, then runs --passes passes one after another
and prints the median and p90 wall time per pass and the process's CPU per pass (time.process_time: the stats
reader's worker thread included), in µs. `--shared` gives the provider the per-process `SharedHostReads` as a fleet
node has it; without it, the provider reads the host every pass, as a real node's does. No testbed, no cluster.

Run: `python -m benchmarks.eviction_idle [--passes 3000] [--shared]`.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def run(passes: int, shared: bool) -> None:
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
    print(
        f"eviction idle pass shared={shared} passes={passes} median_us={statistics.median(times):.0f} "
        f"p90_us={percentile(times, 0.9):.0f} cpu_per_pass_us={cpu_us:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--passes", type=int, default=3000)
    parser.add_argument("--shared", action="store_true", help="share the host-wide reads, as a fleet node does")
    args = parser.parse_args()
    asyncio.run(run(args.passes, args.shared))


if __name__ == "__main__":
    main()
