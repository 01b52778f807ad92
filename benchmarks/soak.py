"""A soak of nodeagent under faults and churn, on one testbed (issue 34).

Five phases, chosen with --phases (each starts from an empty node and leaves one):

- `agent-kill`: pods churn (bare pods created and deleted, a Deployment scaled up and down, at most --pods live) and
  the agent is SIGKILLed --agent-kills times at random points, down 0-3 s each time. After each restart: the time to
  a fresh Ready heartbeat, then (churn paused) the time until the node is clean: exactly one running container and
  one ready sandbox per live pod and nothing else in containerd (every state), one veth per pod, the IPAM files
  exactly the pods' addresses, restartCount 0 (benchmarks/nodestate.py);
- `containerd-kill`: a Deployment of --pods running, containerd SIGKILLed --containerd-kills times (down 1-5 s, 5-15 s
  apart); the node's Ready condition sampled every second meanwhile; after the last kill, the time until every pod
  is Ready again, and whether each kept its container (same ID, 0 restarts);
- `apiserver-down`: --pods running and one pod whose container exits (code 3) during the outage; kube-apiserver stopped
  for --outage seconds, then started with an audit log of the node's requests. Reports whether the running pods were
  undisturbed, the time until the lease is renewed, the node status heartbeat is fresh and the exited pod's status
  reaches the API, and the agent's LIST and WATCH requests in the --outage seconds after the apiserver returned;
- `disk-full`: the agent restarted with --root-dir on a 64 MiB loop-mounted ext4 (nodefs eviction off, so the writes
  themselves fail); a pod runs, the filesystem is filled, a second pod is created and the agent is restarted while it
  is full; then the fill is removed. Reports the events and their messages, whether the agent stayed up (and came up
  again), tracebacks in its log, and the time until the second pod runs once space returns;
- `churn`: --minutes of churn without faults; the agent's RSS and open file descriptors sampled every --sample
  seconds, with their least-squares slope per hour.

--short runs every phase small (10 pods, 2 agent kills, 1 containerd kill, a 30 s outage, 3 minutes of churn: about
12 minutes on a quiet machine). The testbed is brought up here (in --dir if given, kept; else a temporary directory,
removed unless the run failed) and down at the end. Prints one JSON line (with the load average at the start and
the end) and one summary line. Run: `python -m benchmarks.soak [--short] [--phases a,b] [--dir DIR] [--seed N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import NS, on_a_testbed
from benchmarks.nodestate import live_pods, problems, runtime_records
from cri.client import CRIClient, connect
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError, NotFound
from nodeagent.testbed import audit, configs, processes
from nodeagent.testbed.testbed import AGENT, Testbed

PHASES = ("agent-kill", "containerd-kill", "apiserver-down", "disk-full", "churn")
SELECTOR = "bench=soak"
DEPLOYMENT = "soak"
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]  # leaves at SIGTERM: deletions take no grace
Obj = dict[str, Any]


@dataclass(frozen=True)
class Options:
    phases: list[str]
    pods: int
    agent_kills: int
    containerd_kills: int
    outage: float
    minutes: float
    sample: float
    seed: int
    converge_timeout: float = 300.0


def deployments() -> str:
    return paths.api_path("deployments", group="apps", namespace=NS)


def pod_spec(image: str, **extra: Any) -> Obj:
    return {
        "terminationGracePeriodSeconds": 2,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": COMMAND}],
        **extra,
    }


def bare_pod(name: str, image: str, **extra: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "soak"}},
        "spec": pod_spec(image, **extra),
    }


def deployment(image: str, replicas: int) -> Obj:
    labels = {"bench": "soak", "app": DEPLOYMENT}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(image)},
        },
    }


def wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def until(check: Callable[[], Awaitable[bool]], timeout: float, period: float = 0.5) -> float | None:
    """Seconds until `check` is true, or None after the timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with contextlib.suppress(ApiError, OSError):
            if await check():
                return round(time.monotonic() - started, 1)
        await asyncio.sleep(period)
    return None


def slope_per_hour(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (monotonic seconds, value), per hour."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if not var:
        return None
    return round(3600 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / var, 2)


class Node:
    """The testbed, its agent (started and SIGKILLed here, by PID) and the clients the phases share."""

    def __init__(self, bed: Testbed, admin: KubeClient, cri: CRIClient, agent: processes.Process) -> None:
        self.bed = bed
        self.admin = admin
        self.cri = cri
        self.agent = agent
        self.name = bed.settings.node_name
        self.image = configs.busybox_image(bed.settings)

    def agent_alive(self) -> bool:
        return self.agent.alive()

    def kill_agent(self) -> None:
        os.kill(self.agent.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.agent.alive() and time.monotonic() < deadline:
            time.sleep(0.02)

    def start_agent(self, argv: list[str] | None = None) -> float:
        """Start the agent (the last command line, or `argv`); returns the wall time it was started."""
        started = time.time()
        self.agent = processes.start(
            AGENT, argv or list(self.agent.argv), pid_dir=self.bed.layout.pids, log_dir=self.bed.layout.logs
        )
        return started

    async def restarted(self, argv: list[str] | None = None, timeout: float = 120) -> float | None:
        """Start the agent; seconds until its first Ready heartbeat (None if none within the timeout)."""
        started = self.start_agent(argv)
        return await until(lambda: self.ready_since(started), timeout)

    async def stop_agent(self) -> None:
        await asyncio.to_thread(processes.stop, self.agent, pid_dir=self.bed.layout.pids, grace=20)

    async def ready_since(self, since: float) -> bool:
        """The node's Ready condition is True with a heartbeat written at or after `since` (wall seconds)."""
        node = await self.admin.get(paths.node(self.name))
        for cond in (node.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Ready":
                return bool(cond["status"] == "True" and wall(cond["lastHeartbeatTime"]) >= int(since))
        return False

    async def lease_since(self, since: float) -> bool:
        lease = await self.admin.get(paths.lease("kube-node-lease", self.name))
        renewed = str((lease.get("spec") or {}).get("renewTime") or "")
        return bool(renewed) and wall(renewed) >= since

    async def clean(self) -> list[str]:
        return await problems(self.cri, self.admin, self.bed, NS, SELECTOR)

    async def converge(self, timeout: float) -> tuple[float | None, list[str]]:
        """Seconds until the node is clean (None if not within the timeout) and what was left at the end."""
        last: list[str] = []

        async def clean() -> bool:
            nonlocal last
            last = await self.clean()
            return not last

        took = await until(clean, timeout, period=1.0)
        return took, last

    async def clear(self, timeout: float = 300) -> float | None:
        """Delete the soak's Deployment and pods; seconds until the API and containerd hold none of them."""
        with contextlib.suppress(NotFound):
            await self.admin.delete(f"{deployments()}/{DEPLOYMENT}", propagation_policy="Background")
        for pod in (await self.admin.list(paths.pods(NS), label_selector=SELECTOR))["items"]:
            with contextlib.suppress(NotFound):
                await self.admin.delete(paths.pod(NS, pod["metadata"]["name"]))

        async def empty() -> bool:
            listed = await self.admin.list(paths.pods(NS), label_selector=SELECTOR)
            return not listed["items"] and not await runtime_records(self.cri, self.bed)

        return await until(empty, timeout, period=1.0)

    async def deploy(self, replicas: int, timeout: float) -> float | None:
        """A Deployment of `replicas`; seconds until exactly they run on a clean node."""
        await self.admin.create(deployments(), deployment(self.image, replicas))

        async def up() -> bool:
            return len(await live_pods(self.admin, NS, SELECTOR)) == replicas and not await self.clean()

        return await until(up, timeout, period=1.0)

    def rss_and_fds(self) -> tuple[float, int]:
        status = Path(f"/proc/{self.agent.pid}/status").read_text()
        rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return rss_kib / 1024, len(os.listdir(f"/proc/{self.agent.pid}/fd"))


@dataclass
class Churn:
    """Bare pods created and deleted and the Deployment scaled, at most `max_pods` live, until stopped."""

    node: Node
    max_pods: int
    rng: random.Random
    created: int = 0
    deleted: int = 0
    scaled: int = 0
    errors: int = 0
    bare: set[str] = field(default_factory=set)
    replicas: int = 0

    async def setup(self) -> None:
        await self.node.admin.create(deployments(), deployment(self.node.image, 0))

    async def step(self) -> None:
        admin = self.node.admin
        half = max(1, self.max_pods // 2)
        action = self.rng.choice(("create", "create", "delete", "scale"))
        if action == "create" and len(self.bare) < half:
            for _ in range(min(self.rng.randint(1, 5), half - len(self.bare))):
                name = f"soak-{self.rng.getrandbits(40):010x}"
                await admin.create(paths.pods(NS), bare_pod(name, self.node.image))
                self.bare.add(name)
                self.created += 1
        elif action == "delete" and self.bare:
            for name in self.rng.sample(sorted(self.bare), min(len(self.bare), self.rng.randint(1, 5))):
                self.bare.discard(name)
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(NS, name))
                self.deleted += 1
        elif action == "scale":
            self.replicas = self.rng.randint(0, half)
            await admin.patch(f"{deployments()}/{DEPLOYMENT}", {"spec": {"replicas": self.replicas}})
            self.scaled += 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.step()
            except (ApiError, OSError):
                self.errors += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(0.3, 2.0))

    def figures(self) -> Obj:
        return {"created": self.created, "deleted": self.deleted, "scaled": self.scaled, "errors": self.errors}


@contextlib.asynccontextmanager
async def churning(churn: Churn) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(churn.run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


async def phase_agent_kill(node: Node, options: Options, rng: random.Random) -> Obj:
    churn = Churn(node, options.pods, rng)
    await churn.setup()
    kills: list[Obj] = []
    for _ in range(options.agent_kills):
        async with churning(churn):
            await asyncio.sleep(rng.uniform(2.0, 12.0))
            node.kill_agent()
            live = len(await live_pods(node.admin, NS, SELECTOR))
            await asyncio.sleep(rng.uniform(0.0, 3.0))
            ready = await node.restarted()
        converged, left = await node.converge(options.converge_timeout)
        kills.append(
            {
                "live_pods_at_kill": live,
                "ready_s": ready,
                "clean_s": converged,
                "left": left[:10],
                "live_pods_after": len(await live_pods(node.admin, NS, SELECTOR)),
            }
        )
    return {
        "kills": kills,
        "churn": churn.figures(),
        "all_clean": all(k["clean_s"] is not None for k in kills),
        "all_ready": all(k["ready_s"] is not None for k in kills),
        "cleared_s": await node.clear(),
    }


async def ready_conditions(node: Node, stop: asyncio.Event, out: list[Obj]) -> None:
    """Every change of the node's Ready condition (status, reason, message), sampled each second."""
    started = time.monotonic()
    last: tuple[str, str, str] | None = None
    while True:  # a last sample once stopped
        with contextlib.suppress(ApiError, OSError):
            got = await node.admin.get(paths.node(node.name))
            for cond in (got.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Ready":
                    now = (cond["status"], cond.get("reason", ""), cond.get("message", ""))
                    if now != last:
                        out.append({"t": round(time.monotonic() - started, 1), "status": now[0], "reason": now[1],
                                    "message": now[2][:160]})  # fmt: skip
                        last = now
        if stop.is_set():
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def container_ids(node: Node) -> dict[str, str]:
    """pod uid → id of its running container."""
    out: dict[str, str] = {}
    for pod in (await live_pods(node.admin, NS, SELECTOR)).values():
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            out[pod["metadata"]["uid"]] = str(cs.get("containerID", "")).rpartition("://")[2]
    return out


async def all_ready(node: Node, count: int) -> bool:
    """`count` live pods, each with every container running and ready (what a user sees; `clean` is stricter)."""
    pods = await live_pods(node.admin, NS, SELECTOR)
    return len(pods) == count and all(
        cs.get("ready") and "running" in (cs.get("state") or {})
        for pod in pods.values()
        for cs in (pod.get("status") or {}).get("containerStatuses") or [{}]
    )


async def phase_containerd_kill(node: Node, options: Options, rng: random.Random) -> Obj:
    up = await node.deploy(options.pods, options.converge_timeout)
    before = await container_ids(node)
    conditions: list[Obj] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(ready_conditions(node, stop, conditions))
    downs: list[float] = []
    try:
        for i in range(options.containerd_kills):
            proc = processes.load(node.bed.layout.pids, "containerd")
            assert proc is not None and proc.alive(), "containerd is not running"
            os.kill(proc.pid, signal.SIGKILL)
            last_kill = time.monotonic()
            down = rng.uniform(1.0, 5.0)
            downs.append(round(down, 1))
            await asyncio.sleep(down)
            await node.bed.start_containerd()
            if i < options.containerd_kills - 1:
                await asyncio.sleep(rng.uniform(5.0, 15.0))
        returned = time.time()
        node_ready = await until(lambda: node.ready_since(returned), 300)
        pods_ready = await until(lambda: all_ready(node, options.pods), max(1.0, 300 - (time.monotonic() - last_kill)))
        if pods_ready is not None:
            pods_ready = round(time.monotonic() - last_kill, 1)
        after_kill = round(time.monotonic() - last_kill, 1)
        converged, left = await node.converge(max(1.0, 300 - (time.monotonic() - last_kill)))
    finally:
        stop.set()
        await sampler
    after = await container_ids(node)
    return {
        "pods": options.pods,
        "deployed_s": up,
        "downs_s": downs,
        "node_ready_after_return_s": node_ready,
        "pods_ready_after_last_kill_s": pods_ready,
        "clean_after_last_kill_s": None if converged is None else round(after_kill + converged, 1),
        "left": left[:10],
        "same_containers": before == after,
        "ready_conditions": conditions,
        "agent_alive": node.agent_alive(),
        "cleared_s": await node.clear(),
    }


async def phase_apiserver_down(node: Node, options: Options, rng: random.Random) -> Obj:
    del rng
    up = await node.deploy(options.pods, options.converge_timeout)
    before = await container_ids(node)
    exiter = bare_pod("soak-exiter", node.image, restartPolicy="Never")
    exiter["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 8; exit 3"]
    await node.admin.create(paths.pods(NS), exiter)

    async def exiter_running() -> bool:
        pod = await node.admin.get(paths.pod(NS, "soak-exiter"))
        return any("running" in (cs.get("state") or {}) for cs in pod["status"].get("containerStatuses") or [])

    await until(exiter_running, 120)
    user = f"system:node:{node.name}"
    log, flags = audit.enable(node.bed.layout.root, user)
    await node.bed.stop_apiserver()
    await asyncio.sleep(options.outage)
    alive_during = node.agent_alive()
    await node.bed.start_apiserver(extra_args=flags)
    returned = time.time()

    async def exiter_failed() -> bool:
        pod = await node.admin.get(paths.pod(NS, "soak-exiter"))
        return bool(pod["status"].get("phase") == "Failed")

    lease_s, status_s, exiter_s = await asyncio.gather(
        until(lambda: node.lease_since(returned), 120),
        until(lambda: node.ready_since(returned), 120),
        until(exiter_failed, 120),
    )
    await asyncio.sleep(max(0.0, returned + options.outage - time.time()))
    requests = audit.requests(log, user, returned - 5, returned + options.outage)
    with contextlib.suppress(NotFound):
        await node.admin.delete(paths.pod(NS, "soak-exiter"))
    after = await container_ids(node)
    clean_s, left = await node.converge(120)  # the exited pod gone, the others as they were
    return {
        "pods": options.pods,
        "deployed_s": up,
        "outage_s": options.outage,
        "agent_alive_during": alive_during,
        "same_containers": before == after,
        "clean_s": clean_s,
        "left": left[:10],
        "lease_renewed_s": lease_s,
        "node_status_fresh_s": status_s,
        "exited_pod_status_s": exiter_s,
        "window_s": options.outage,
        "lists": audit.total(requests, "list"),
        "watches": audit.total(requests, "watch"),
        "requests": requests,
        "cleared_s": await node.clear(),
    }


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)


async def phase_disk_full(node: Node, options: Options, rng: random.Random) -> Obj:
    del options, rng
    root = node.bed.layout.root
    image, mount = root / "soak-rootfs.img", root / "soak-root"
    config = root / "soak-disk.yaml"
    doc = yaml.safe_load(node.bed.layout.agent_config.read_text())
    doc["evictionHard"] = {"memory.available": "1Mi"}  # nodefs eviction off: the writes themselves must fail
    config.write_text(yaml.safe_dump(doc))
    normal = list(node.agent.argv)
    argv = list(normal)
    argv[argv.index("--root-dir") + 1] = str(mount)
    argv[argv.index("--config") + 1] = str(config)
    log = node.bed.layout.logs / f"{AGENT}.log"
    out: Obj = {}
    await node.stop_agent()
    mount.mkdir(exist_ok=True)
    _run("truncate", "-s", "64M", str(image))
    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    _run("mount", "-o", "loop", str(image), str(mount))
    fill = mount / "fill"
    try:
        log_from = log.stat().st_size if log.exists() else 0
        out["ready_s"] = await node.restarted(argv)
        await node.admin.create(paths.pods(NS), disk_pod("soak-disk-before", node.image))
        out["before_running_s"] = await until(lambda: pod_running(node, "soak-disk-before"), 120)
        await asyncio.to_thread(fill_up, fill)
        out["free_after_fill_kib"] = shutil.disk_usage(mount).free // 1024
        await node.admin.create(paths.pods(NS), disk_pod("soak-disk-full", node.image))
        created = time.monotonic()
        events: list[Obj] = []

        async def told() -> bool:
            events[:] = await pod_events(node, "soak-disk-full")
            return any("no space" in e["message"] for e in events)

        out["event_s"] = await until(told, 60)
        out["events"] = events[:6]
        out["full_pod_running"] = await pod_running(node, "soak-disk-full")
        out["before_pod_still_running"] = await pod_running(node, "soak-disk-before")
        out["agent_alive_while_full"] = node.agent_alive()
        await node.stop_agent()
        out["restart_while_full_ready_s"] = await node.restarted(argv, 90)
        out["agent_alive_after_restart_while_full"] = node.agent_alive()
        fill.unlink()
        out["full_pod_running_after_space_s"] = await until(lambda: pod_running(node, "soak-disk-full"), 180)
        out["full_pod_running_since_create_s"] = round(time.monotonic() - created, 1)
        out["agent_alive_at_end"] = node.agent_alive()
        with log.open("rb") as f:
            f.seek(log_from)
            text = f.read().decode(errors="replace")
        out["tracebacks_in_log"] = text.count("Traceback")
        out["no_space_log_lines"] = sum(1 for line in text.splitlines() if "No space left" in line)
        out["cleared_s"] = await node.clear()
    finally:
        fill.unlink(missing_ok=True)
        if node.agent_alive():
            await node.stop_agent()
        await asyncio.to_thread(subprocess.run, ["umount", "-R", str(mount)], capture_output=True)
        image.unlink(missing_ok=True)
        await node.restarted(normal)
    return out


def fill_up(path: Path) -> None:
    """One file taking every free block of its filesystem (1 MiB writes, then 4 KiB ones, until ENOSPC)."""
    with path.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 512):
            chunk = bytes(size)
            with contextlib.suppress(OSError):
                while True:
                    f.write(chunk)
            with contextlib.suppress(OSError):
                os.fsync(f.fileno())


def disk_pod(name: str, image: str) -> Obj:
    """A pod whose volumes the agent writes under its root dir (an emptyDir and a downward API file)."""
    body = bare_pod(name, image)
    body["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
    ]
    body["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "info", "mountPath": "/info"},
    ]
    return body


async def pod_running(node: Node, name: str) -> bool:
    pod = await node.admin.get(paths.pod(NS, name))
    return any("running" in (cs.get("state") or {}) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


async def pod_events(node: Node, name: str) -> list[Obj]:
    listed = await node.admin.list(paths.events(NS), field_selector=f"involvedObject.name={name}")
    return [
        {
            "reason": e.get("reason"),
            "type": e.get("type"),
            "count": e.get("count"),
            "message": e.get("message", "")[:200],
        }
        for e in listed["items"]
    ]


async def phase_churn(node: Node, options: Options, rng: random.Random) -> Obj:
    churn = Churn(node, options.pods, rng)
    await churn.setup()
    rss: list[tuple[float, float]] = []
    fds: list[tuple[float, float]] = []
    started = time.monotonic()
    exited: float | None = None
    async with churning(churn):
        while time.monotonic() - started < options.minutes * 60:
            if not node.agent_alive():
                exited = round(time.monotonic() - started, 1)
                break
            value, count = node.rss_and_fds()
            now = time.monotonic() - started
            rss.append((now, value))
            fds.append((now, count))
            # Each sample at once, so a run cut short still has its figures.
            print(f"soak churn sample t={now:.0f} rss_mib={value:.1f} fds={count}", file=sys.stderr, flush=True)
            await asyncio.sleep(options.sample)
    converged, left = await node.converge(options.converge_timeout)
    return {
        "minutes": options.minutes,
        "agent_exited_at_s": exited,
        "samples": len(rss),
        "rss_mib_first": round(rss[0][1], 1),
        "rss_mib_last": round(rss[-1][1], 1),
        "rss_mib_max": round(max(v for _, v in rss), 1),
        "rss_mib_per_h": slope_per_hour(rss),
        "fds_first": int(fds[0][1]),
        "fds_last": int(fds[-1][1]),
        "fds_max": int(max(v for _, v in fds)),
        "fds_per_h": slope_per_hour(fds),
        "churn": churn.figures(),
        "clean_after_s": converged,
        "left": left[:10],
        "cleared_s": await node.clear(),
    }


RUNNERS = {
    "agent-kill": phase_agent_kill,
    "containerd-kill": phase_containerd_kill,
    "apiserver-down": phase_apiserver_down,
    "disk-full": phase_disk_full,
    "churn": phase_churn,
}


async def run(bed: Testbed, options: Options) -> Obj:
    rng = random.Random(options.seed)
    agent = await bed.start_agent()
    result: Obj = {"benchmark": "soak", "options": asdict(options), "load_start": list(os.getloadavg()), "phases": {}}
    async with (
        KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
        connect(f"unix://{bed.layout.containerd_socket}", timeout=60) as cri,
    ):
        node = Node(bed, admin, cri, agent)
        try:
            for phase in options.phases:
                started = time.monotonic()
                got = await RUNNERS[phase](node, options, rng)
                got["seconds"] = round(time.monotonic() - started, 1)
                got["load_end"] = [round(x, 1) for x in os.getloadavg()]
                result["phases"][phase] = got
                print(f"soak phase={phase} {json.dumps(got)}", file=sys.stderr, flush=True)
        finally:
            await node.stop_agent()
    result["load_end"] = list(os.getloadavg())
    return result


def summary_line(result: Obj) -> str:
    parts = []
    ph = result["phases"]
    if got := ph.get("agent-kill"):
        ready = [k["ready_s"] for k in got["kills"]]
        clean = [k["clean_s"] for k in got["kills"]]
        parts.append(f"agent-kill {len(got['kills'])}x: Ready {ready} s, clean {clean} s")
    if got := ph.get("containerd-kill"):
        parts.append(
            f"containerd-kill {len(got['downs_s'])}x {got['pods']} pods: "
            f"all Ready {got['pods_ready_after_last_kill_s']} s, clean {got['clean_after_last_kill_s']} s "
            f"after the last kill, same containers {got['same_containers']}"
        )
    if got := ph.get("apiserver-down"):
        parts.append(
            f"apiserver-down {got['outage_s']:.0f}s: pods undisturbed {got['same_containers']}, lease "
            f"{got['lease_renewed_s']} s, status {got['exited_pod_status_s']} s, {got['lists']} LISTs"
        )
    if got := ph.get("disk-full"):
        parts.append(
            f"disk-full: event {got.get('event_s')} s, alive {got.get('agent_alive_at_end')}, running "
            f"{got.get('full_pod_running_after_space_s')} s after space returned"
        )
    if got := ph.get("churn"):
        parts.append(
            f"churn {got['minutes']} min: RSS {got['rss_mib_first']}→{got['rss_mib_last']} MiB "
            f"({got['rss_mib_per_h']} MiB/h), fds {got['fds_first']}→{got['fds_last']} ({got['fds_per_h']}/h)"
        )
    load = result["load_start"][0], result["load_end"][0]
    return f"soak (load {load[0]:.1f}→{load[1]:.1f}): " + "; ".join(parts)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="every phase small (about 12 minutes)")
    parser.add_argument("--phases", default=",".join(PHASES), help="which phases, in order")
    parser.add_argument("--pods", type=int, default=None, help="pods per phase (full: 100, short: 10)")
    parser.add_argument("--agent-kills", type=int, default=None, help="agent SIGKILLs (full: 10, short: 2)")
    parser.add_argument("--containerd-kills", type=int, default=None, help="containerd SIGKILLs (full: 6, short: 1)")
    parser.add_argument("--outage", type=float, default=None, help="apiserver down, seconds (full: 60, short: 30)")
    parser.add_argument("--minutes", type=float, default=None, help="churn minutes (full: 60, short: 3)")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between RSS/fd samples")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--dir", type=Path, default=None, help="the testbed's directory (kept)")
    args = parser.parse_args(argv)
    short = args.short

    def pick(value: Any, full: Any, small: Any) -> Any:
        return value if value is not None else (small if short else full)

    options = Options(
        phases=[p for p in args.phases.split(",") if p],
        pods=pick(args.pods, 100, 10),
        agent_kills=pick(args.agent_kills, 10, 2),
        containerd_kills=pick(args.containerd_kills, 6, 1),
        outage=pick(args.outage, 60.0, 30.0),
        minutes=pick(args.minutes, 60.0, 3.0),
        sample=args.sample,
        seed=args.seed,
    )
    unknown = set(options.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    result = await on_a_testbed(args.dir, "nodeagent-soak-", lambda bed: run(bed, options))
    print(json.dumps(result))
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
