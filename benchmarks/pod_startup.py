"""Pod start-up: N pods created through the API → Running as seen by a watch, against the raw CRI floor.

For each N (default 1, 20, 100) in one run on one testbed:
- agent: N pods are created through the apiserver at once (bound by the real scheduler); each pod's time is from
  its create call to the watch event that shows it Running; then they are deleted and the runtime is left empty;
- volumes: the same, but each pod has what real pods have: the ServiceAccount token volume the apiserver adds
  (`kube-api-access-*`: a TokenRequest, the kube-root-ca.crt ConfigMap, the namespace), plus a ConfigMap and a
  Secret volume (one ConfigMap and one Secret for all pods, as a Deployment's replicas share theirs). The goal
  (issue 15): volume setup adds at most 50 ms to the p50 start of one pod, and at most 20% at more pods;
- floor: the same N pods started directly over CRI at once (RunPodSandbox + CreateContainer + StartContainer, busybox,
  image present), each timed from its first call to StartContainer returning. The floor carries no kubelet labels,
  so the agent's housekeeping leaves it alone.

`--repeat R` runs the three rounds of each N R times, alternating which of agent and volumes goes first, and quotes
percentiles over all R*N starts: one pod started once is one sample, too few on a shared, noisy machine.

Prints one JSON line and one summary line. Run:
`python -m benchmarks.pod_startup [--pods 1,20,100] [--repeat 1] [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import NS, percentile, pod_body
from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Conflict, NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.testbed import Testbed

#: the ConfigMap and the Secret every volume pod mounts.
VOLUME_OBJECT = "bench-pod-startup"
ROOT_CA = "kube-root-ca.crt"
SA_VOLUME_PREFIX = "kube-api-access-"
ONE_POD_GOAL_S = 0.050
MANY_PODS_GOAL_RATIO = 1.2

PodBody = Callable[[str, str], dict[str, Any]]


def plain_pod(name: str, image: str) -> dict[str, Any]:
    return pod_body(name, image, bench="pod-startup")


def volume_pod(name: str, image: str) -> dict[str, Any]:
    """The plain pod with the ServiceAccount token volume left on (the apiserver adds it), a ConfigMap and a
    Secret volume."""
    body = plain_pod(name, image)
    spec = body["spec"]
    del spec["automountServiceAccountToken"]
    spec["volumes"] = [
        {"name": "cfg", "configMap": {"name": VOLUME_OBJECT}},
        {"name": "sec", "secret": {"secretName": VOLUME_OBJECT}},
    ]
    spec["containers"][0]["volumeMounts"] = [
        {"name": "cfg", "mountPath": "/etc/bench-config"},
        {"name": "sec", "mountPath": "/etc/bench-secret"},
    ]
    return body


async def ensure_volume_objects(admin: KubeClient) -> None:
    """The ConfigMap and Secret the volume pods mount, and the ConfigMap the token volume takes its CA from (the
    controller-manager publishes it shortly after start; a pod created before would wait for it)."""
    meta = {"name": VOLUME_OBJECT, "namespace": NS}
    data = {"app.conf": "listen=:8080\nworkers=4\n", "feature-flags": "a=true\nb=false\n"}
    with contextlib.suppress(Conflict):
        await admin.create(
            paths.api_path("configmaps", namespace=NS), {"apiVersion": "v1", "metadata": meta, "data": data}
        )
    secret = {"password": base64.b64encode(b"correct horse battery staple").decode()}
    with contextlib.suppress(Conflict):
        await admin.create(
            paths.api_path("secrets", namespace=NS), {"apiVersion": "v1", "metadata": meta, "data": secret}
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            await admin.get(paths.api_path("configmaps", namespace=NS, name=ROOT_CA))
            return
        except NotFound:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the controller-manager did not publish the {ROOT_CA} ConfigMap") from None
            await asyncio.sleep(0.5)


async def agent_round(admin: KubeClient, image: str, count: int, body: PodBody = plain_pod) -> list[float]:
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
        created = await admin.create(paths.pods(NS), body(name, image))
        if body is volume_pod:  # what this round is about: the admission really added the token volume
            volumes = [str(v.get("name", "")) for v in created["spec"].get("volumes") or []]
            if not any(v.startswith(SA_VOLUME_PREFIX) for v in volumes):
                raise RuntimeError(f"no {SA_VOLUME_PREFIX}* volume was added to {name}: {volumes}")

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


def volume_goal_met(count: int, agent_p50: float, volumes_p50: float) -> bool:
    if count == 1:
        return volumes_p50 - agent_p50 <= ONE_POD_GOAL_S
    return volumes_p50 <= agent_p50 * MANY_PODS_GOAL_RATIO


def summarize(count: int, agent: list[float], volumes: list[float], floor: list[float]) -> dict[str, Any]:
    agent_p50, volumes_p50 = statistics.median(agent), statistics.median(volumes)
    return {
        "pods": count,
        "samples": len(agent),
        "agent_p50_s": round(agent_p50, 3),
        "agent_p99_s": round(percentile(agent, 0.99), 3),
        "floor_p50_s": round(statistics.median(floor), 3),
        "floor_p99_s": round(percentile(floor, 0.99), 3),
        "ratio_p50": round(agent_p50 / statistics.median(floor), 2),
        "volumes_p50_s": round(volumes_p50, 3),
        "volumes_p99_s": round(percentile(volumes, 0.99), 3),
        "volumes_added_p50_ms": round((volumes_p50 - agent_p50) * 1000),
        "volumes_ratio_p50": round(volumes_p50 / agent_p50, 2),
        "volumes_goal_met": volume_goal_met(count, agent_p50, volumes_p50),
    }


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", default="1,20,100")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per pod count; percentiles pool them")
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
            await ensure_volume_objects(admin)
            for count in counts:
                agent: list[float] = []
                volumes: list[float] = []
                floor: list[float] = []
                for attempt in range(args.repeat):
                    # Alternate the order, so a drift of the machine's load does not favour one kind.
                    kinds = [(plain_pod, agent), (volume_pod, volumes)]
                    for body, into in kinds if attempt % 2 == 0 else reversed(kinds):
                        into.extend(await agent_round(admin, image, count, body))
                        await wait_runtime_empty(cri)
                    floor.extend(await floor_round(cri, image, count, root / "floor-logs"))
                results.append(summarize(count, agent, volumes, floor))
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
            f"{r['floor_p50_s']}s p99 {r['floor_p99_s']}s (x{r['ratio_p50']}), with token+configMap+secret volumes "
            f"p50 {r['volumes_p50_s']}s p99 {r['volumes_p99_s']}s ({r['volumes_added_p50_ms']:+d} ms, "
            f"x{r['volumes_ratio_p50']}, goal {'met' if r['volumes_goal_met'] else 'missed'})"
            for r in results
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
