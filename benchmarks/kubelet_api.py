"""The kubelet API against its floors, in one run on one testbed:

- exec: `kubectl exec POD -- true` (kubectl → apiserver → the agent's TLS port → containerd's streaming server)
  against `crictl exec CONTAINER true` (straight to containerd), each run N times, wall time of the process;
- logs: `kubectl logs POD` of a ~100 MB log, in MB/s, against `cat` of the same file.

Prints one JSON line and one summary line. Run: `python -m benchmarks.kubelet_api [--runs 20] [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import NS, percentile
from cri.client import connect
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import crictl_path, kubernetes_bin_dir

LOG_MB = 100


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Wall time of the command, its output read through a pipe (so `cat` copies bytes as kubectl must, rather than
    splicing a file into /dev/null)."""
    started = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, timeout=300)
    return time.monotonic() - started


async def _running_container(admin: KubeClient, name: str) -> str:
    for _ in range(600):
        pod: dict[str, Any] = await admin.get(paths.pod(NS, name))
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            if "running" in (status.get("state") or {}):
                return str(status["containerID"]).rpartition("://")[2]
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{name} did not run")


def _pod(name: str, image: str, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": image, "command": command}],
        },
    }


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-"))
    bed = Testbed(root)
    await bed.up()
    result: dict[str, Any] = {"benchmark": "kubelet_api"}
    try:
        # Log rotation off for this run: the 100 MB log must stay one file.
        config = yaml.safe_load(bed.layout.agent_config.read_text())
        config["containerLogMaxSize"] = "2Gi"
        bench_config = root / "bench-agent.yaml"
        bench_config.write_text(yaml.safe_dump(config))
        await bed.start_agent(config=bench_config)
        image = configs.busybox_image(bed.settings)
        kubectl = [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(bed.layout.admin_kubeconfig)]
        crictl = str(crictl_path())
        crictl_env = {**os.environ, "CONTAINER_RUNTIME_ENDPOINT": f"unix://{bed.layout.containerd_socket}"}
        async with (
            KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
            connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri,
        ):
            await admin.create(paths.pods(NS), _pod("bench-exec", image, ["sleep", "3600"]))
            container = await _running_container(admin, "bench-exec")
            # One warm-up each (caches, the first TLS sessions), then alternate.
            await asyncio.to_thread(_timed, [*kubectl, "exec", "bench-exec", "--", "true"])
            await asyncio.to_thread(_timed, [crictl, "exec", container, "true"], crictl_env)
            agent_exec: list[float] = []
            floor_exec: list[float] = []
            for _ in range(args.runs):
                agent_exec.append(await asyncio.to_thread(_timed, [*kubectl, "exec", "bench-exec", "--", "true"]))
                floor_exec.append(await asyncio.to_thread(_timed, [crictl, "exec", container, "true"], crictl_env))

            # LOG_MB MiB of 'a' in 72-byte lines (busybox's head has no size suffixes; dd counts blocks).
            script = f"dd if=/dev/zero bs=1048576 count={LOG_MB} 2>/dev/null | tr '\\0' a | fold -w 72; sleep 3600"
            await admin.create(paths.pods(NS), _pod("bench-logs", image, ["sh", "-c", script]))
            logs_id = await _running_container(admin, "bench-logs")
            log_path = (await cri.runtime.container_status(logs_id)).status.log_path
            content_bytes = LOG_MB * 1024 * 1024 * 73 // 72  # fold adds a newline every 72 bytes
            for _ in range(600):  # until the whole output is in the file
                done = await asyncio.to_thread(_log_complete, log_path, content_bytes)
                if done:
                    break
                await asyncio.sleep(0.5)
            file_bytes = await asyncio.to_thread(os.path.getsize, log_path)
            if file_bytes < content_bytes:
                raise RuntimeError(f"the container's log holds {file_bytes} bytes, less than its {content_bytes}")
            agent_logs: list[float] = []
            floor_logs: list[float] = []
            for _ in range(3):
                agent_logs.append(await asyncio.to_thread(_timed, [*kubectl, "logs", "bench-logs"]))
                floor_logs.append(await asyncio.to_thread(_timed, ["cat", log_path]))
        exec_p50, floor_p50 = statistics.median(agent_exec), statistics.median(floor_exec)
        logs_mb_s = content_bytes / 1e6 / statistics.median(agent_logs)
        cat_mb_s = file_bytes / 1e6 / statistics.median(floor_logs)
        result.update(
            exec_runs=args.runs,
            kubectl_exec_p50_s=round(exec_p50, 4),
            kubectl_exec_p99_s=round(percentile(agent_exec, 0.99), 4),
            crictl_exec_p50_s=round(floor_p50, 4),
            crictl_exec_p99_s=round(percentile(floor_exec, 0.99), 4),
            exec_ratio_p50=round(exec_p50 / floor_p50, 2),
            exec_goal_met=exec_p50 <= 1.3 * floor_p50,
            log_content_mb=round(content_bytes / 1e6, 1),
            log_file_mb=round(file_bytes / 1e6, 1),
            kubectl_logs_mb_s=round(logs_mb_s, 1),
            cat_mb_s=round(cat_mb_s, 1),
            logs_share_of_cat=round(logs_mb_s / cat_mb_s, 2),
            logs_goal_met=logs_mb_s >= 0.5 * cat_mb_s,
        )
    finally:
        with contextlib.suppress(Exception):
            await bed.down()
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    print(
        f"kubelet_api: kubectl exec p50 {result['kubectl_exec_p50_s']}s vs crictl exec {result['crictl_exec_p50_s']}s "
        f"(x{result['exec_ratio_p50']}, goal x1.3 {'met' if result['exec_goal_met'] else 'missed'}); kubectl logs of "
        f"{result['log_content_mb']} MB at {result['kubectl_logs_mb_s']} MB/s vs cat {result['cat_mb_s']} MB/s "
        f"({result['logs_share_of_cat']} of cat, goal 0.5 {'met' if result['logs_goal_met'] else 'missed'})"
    )
    return 0


def _log_complete(path: str, content_bytes: int) -> bool:
    """Whether the CRI log holds all of the content (each record adds its prefix; count the content only)."""
    total = 0
    with open(path, "rb") as f:
        for line in f:
            parts = line.split(b" ", 3)
            if len(parts) == 4:
                total += len(parts[3])
    return total >= content_bytes - 4096  # the last, unterminated line stays in the runtime's buffer


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
