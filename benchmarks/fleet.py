"""What `nodeagent fleet` costs per emulated node: CPU and memory of the fleet's process on a real apiserver, and
with `--peer kwok` the same figures for KWOK's controller in the same run, on the same apiserver and etcd.

The fleet runs as its own process (`python -m nodeagent fleet`, the admin credential shared by every node) against
a testbed (an existing one with `--testbed DIR`, or one brought up and down here); with `--processes P`, as P
processes of --nodes / P nodes each (`--first` apart, as a shard's processes), one per core, whose CPU and memory are
summed (and also given per process). Phases:
- start: from launch until every node is Ready (registration staggered by --stagger);
- pods: a Deployment of --pods-per-node times --nodes pods onto the fleet until every pod is Running (skipped at 0);
- steady: --steady seconds with nothing changing, over which the fleet's CPU is measured, and the apiserver's and
  etcd's beside it; lease renewals are sampled meanwhile from the apiserver (an independent poller, every second)
  and the intervals between two renewTimes of one lease give p50/p99/max. RSS and PSS of the process, and the load
  average, are read at the end of the window (the load average at the start too), and the apiserver's watches
  of pods, Services and RuntimeClasses from its /metrics (apiserver_longrunning_requests{verb="WATCH",resource=...},
  all clients included: the scheduler's, the controllers', the fleet's). The apiserver's request mix over the window
  is the difference of its apiserver_request_total between the window's start and end, by verb and resource
  (subresource after a slash), per second, every client included (the lease poller's LIST of leases is the
  benchmark's own).
From all Ready to the end of the window a watch of the nodes counts every Ready -> not Ready change (NotReady
flaps). Then the Deployment is deleted (the nodes delete their pods; `pods_deleted_s` until none is left), the fleet
is stopped (SIGTERM; `stop_s` until every process exited, SIGKILLed after 60 s: `stop_killed`) and its Nodes are
deleted. Every two seconds from launch the emulator's TCP connections to the apiserver are counted (psutil): the most
while the pods start (`apiserver_connections_max_pods`) and while they are deleted (`..._max_deleting`), and the
count at the end of the steady window (`apiserver_connections_steady`); `log_connect_timeouts` counts the fleet log's
lines that name a ConnectTimeout.

With `--peer kwok`, KWOK's controller (testbed/kwok.py, built by `nodeagent testbed install --with-kwok`) goes
through the same phases next: its nodes are created here from one of the fleet's Nodes, with the fleet's lease
duration, and its stages bring them and the same Deployment's pods to Ready and Running. Its figures are under
"kwok" in the same JSON line. The two run one after the other, not together, so that neither takes CPU from the other.

Prints one JSON line and one summary line per emulator. Run: `python -m benchmarks.fleet [--nodes 100]
[--pods-per-node 0] [--steady 60] [--testbed DIR] [--peer kwok] [--pod-watch per-node|shared] [--processes 1]`.
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.common import on_a_testbed, percentile, watch_objects
from benchmarks.podlatency import StartupLatency, paced_create
from nodeagent.fleet.plan import (
    DEFAULT_MAX_PODS,
    DEFAULT_POD_NETWORK,
    FLEET_LABEL,
    POD_WATCH_PER_NODE,
    POD_WATCHES,
    FleetOptions,
    plan_nodes,
)
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.kube.kubeconfig import ssl_context
from nodeagent.testbed import kwok, processes
from nodeagent.testbed.testbed import Testbed

DEPLOYMENTS = paths.api_path("deployments", group="apps", namespace="default")


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _time(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


Emulator = Sequence[asyncio.subprocess.Process]  # the emulator's processes (KWOK's controller: one)


class ConnectionCounter:
    """Counts the emulator's established TCP connections to the apiserver's port every `interval` seconds, keeping
    the most seen in each phase (a name the scenario sets as it goes)."""

    def __init__(self, emulator: Emulator, port: int, interval: float = 2.0) -> None:
        self._procs = [psutil.Process(process.pid) for process in emulator]
        self._port = port
        self._interval = interval
        self.phase = "start"
        self.most: dict[str, int] = {}

    def count(self) -> int:
        total = 0
        for proc in self._procs:
            with contextlib.suppress(psutil.Error):
                total += sum(
                    1
                    for c in proc.net_connections(kind="tcp")
                    if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port == self._port
                )
        return total

    async def run(self) -> None:
        while True:
            seen = await asyncio.to_thread(self.count)
            self.most[self.phase] = max(self.most.get(self.phase, 0), seen)
            await asyncio.sleep(self._interval)


async def _until(what: str, check: Any, timeout: float, emulator: Emulator) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        for process in emulator:
            if process.returncode is not None:
                raise RuntimeError(f"the emulator exited with {process.returncode} while waiting for {what}")
        if await check():
            return time.monotonic() - began
        await asyncio.sleep(1)
    raise RuntimeError(f"{what}: not after {timeout:.0f}s")


def _pod_spec(prefix: str) -> dict[str, Any]:
    """A pod for the emulator's nodes only (their label and taint); nothing is pulled, so any image name works."""
    return {
        "nodeSelector": {FLEET_LABEL: prefix},
        "tolerations": [{"key": FLEET_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": "registry.invalid/hollow:1", "command": ["serve"]}],
    }


def _deployment(name: str, prefix: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": _pod_spec(prefix)},
        },
    }


async def _startup_latency(
    admin: KubeClient, emulator: Emulator, prefix: str, pods: int, rate: float
) -> dict[str, Any]:
    """`pods` bare pods created at `rate` per second onto the emulator's nodes, timed as clusterloader2 times them
    (benchmarks/podlatency.py) until all are Running, then deleted (the nodes delete them, as kubelets do)."""
    label = f"latency-{prefix}-{int(rate)}"
    bodies: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{label}-{i}", "namespace": "default", "labels": {"latency": label}},
            "spec": _pod_spec(prefix),
        }
        for i in range(pods)
    ]
    timing = StartupLatency()
    selector = f"latency={label}"
    watcher = asyncio.create_task(watch_objects(admin, paths.pods("default"), timing.record, selector))
    try:
        await asyncio.sleep(0.5)  # the watch's list is done before the first create
        achieved = await paced_create(lambda body: admin.create(paths.pods("default"), body), bodies, rate)

        async def all_running() -> bool:
            return timing.running() == pods

        await _until(f"{pods} pods at {rate}/s Running", all_running, 120 + pods / 5, emulator)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        for body in bodies:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod("default", body["metadata"]["name"]))

    async def all_gone() -> bool:
        return not (await admin.list(paths.pods("default"), label_selector=selector))["items"]

    deleted = await _until("latency pods deleted", all_gone, 60 + pods / 5, emulator)
    return {"rate": rate, "rate_achieved": achieved, "pods": pods, **timing.summary(), "deleted_s": round(deleted, 1)}


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


class ReadyFlaps:
    """Ready -> not Ready transitions of nodes, as a watch of them delivers every change: each is a NotReady flap
    (the node-lifecycle controller set Ready Unknown because the lease was late, or the node said NotReady)."""

    def __init__(self) -> None:
        self.ready: dict[str, bool] = {}
        self.flaps: dict[str, int] = {}

    def observe(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self.ready.pop(name, None)
            return
        now = _ready(node)
        if self.ready.get(name) and not now:
            self.flaps[name] = self.flaps.get(name, 0) + 1
        self.ready[name] = now

    async def record(self, kind: str, node: dict[str, Any]) -> None:
        self.observe(kind, node)


WATCHED = ("pods", "services", "runtimeclasses")  # the resources whose open watches the benchmark reports


def _watches(metrics: str, resource: str) -> int | None:
    """The apiserver's open WATCH requests of `resource` (apiserver_longrunning_requests, every client), or None
    when the metric is absent."""
    total, seen = 0, False
    for line in metrics.splitlines():
        if (
            line.startswith("apiserver_longrunning_requests{")
            and 'verb="WATCH"' in line
            and f'resource="{resource}"' in line
        ):
            labels, _, value = line.rpartition(" ")
            if 'subresource=""' in labels or "subresource=" not in labels:
                total += int(float(value))
                seen = True
    return total if seen else None


def _label(labels: str, name: str) -> str:
    start = labels.find(f'{name}="')
    if start < 0:
        return ""
    start += len(name) + 2
    return labels[start : labels.index('"', start)]


def request_counts(metrics: str) -> dict[str, float]:
    """apiserver_request_total summed by "VERB resource[/subresource]" (codes, scopes and versions together)."""
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        resource, sub = _label(labels, "resource"), _label(labels, "subresource")
        key = f"{_label(labels, 'verb')} {resource}{'/' + sub if sub else ''}"
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def request_mix(before: dict[str, float], after: dict[str, float], seconds: float, top: int = 10) -> dict[str, float]:
    """The `top` busiest "VERB resource" by requests per second between two `request_counts`, and "total"."""
    rates = {key: (n - before.get(key, 0.0)) / seconds for key, n in after.items()}
    busiest = sorted(((r, k) for k, r in rates.items() if r > 0), reverse=True)[:top]
    mix = {key: round(rate, 2) for rate, key in busiest}
    mix["total"] = round(sum(r for r in rates.values() if r > 0), 2)
    return mix


async def _apiserver_metrics(admin: KubeClient) -> str | None:
    credentials = admin.credentials
    headers = {"Authorization": f"Bearer {credentials.token}"} if credentials.token else {}
    async with httpx.AsyncClient(base_url=credentials.server, verify=ssl_context(credentials), headers=headers) as http:
        answer = await http.get("/metrics", timeout=30)
    return answer.text if answer.status_code == 200 else None


async def _apiserver_watches(admin: KubeClient) -> dict[str, int | None]:
    metrics = await _apiserver_metrics(admin)
    return {r: _watches(metrics, r) if metrics is not None else None for r in WATCHED}


def _processes_cpu_seconds(procs: Sequence[psutil.Process]) -> float:
    return sum(_cpu_seconds(proc) for proc in procs)


def memory_totals(infos: Sequence[Any]) -> tuple[float, float]:
    """RSS and PSS in bytes summed over processes (`memory_full_info()` of each): PSS adds up to the memory they
    use together, RSS counts the pages they share once per process."""
    return float(sum(info.rss for info in infos)), float(sum(info.pss for info in infos))


def _cpu_seconds(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def _testbed_process(bed: Testbed, name: str) -> psutil.Process | None:
    """The testbed's own daemon `name` (its PID file), to read its CPU beside the emulator's."""
    recorded = processes.load(bed.layout.pids, name)
    if recorded is None or not recorded.alive():
        return None
    return psutil.Process(recorded.pid)


@dataclass(frozen=True)
class Scenario:
    """What both emulators are put through: how many nodes, pods on each, seconds of steady state measured."""

    nodes: int
    pods_per_node: int
    steady: float
    latency_pods: int = 0
    latency_rates: tuple[float, ...] = ()


async def _scenario(
    admin: KubeClient,
    bed: Testbed,
    emulator: Emulator,
    prefix: str,
    scenario: Scenario,
    *,
    started: float,
    connections: ConnectionCounter | None = None,
) -> dict[str, Any]:
    """The phases every emulator goes through (the module docstring), on nodes labelled FLEET_LABEL=prefix, from
    `started` (monotonic: the emulator's launch, or the first node created). The pods are deleted at the end; the
    emulator is left running."""
    nodes, pods_per_node, steady = scenario.nodes, scenario.pods_per_node, scenario.steady
    result: dict[str, Any] = {"loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    procs = [psutil.Process(process.pid) for process in emulator]
    selector = f"{FLEET_LABEL}={prefix}"
    deployment = f"{prefix}-pods"
    flaps = ReadyFlaps()
    watcher: asyncio.Task[None] | None = None
    try:

        async def all_ready() -> bool:
            listed = (await admin.list(paths.nodes(), label_selector=selector))["items"]
            return len(listed) == nodes and all(_ready(n) for n in listed)

        await _until("all nodes Ready", all_ready, 120 + nodes, emulator)
        result["start_to_all_ready_s"] = round(time.monotonic() - started, 1)
        # From here on every node is Ready: an independent watch counts each Ready -> not Ready change.
        watcher = asyncio.create_task(watch_objects(admin, paths.nodes(), flaps.record, selector), name="flaps")
        if pods_per_node:
            if connections is not None:
                connections.phase = "pods"
            await admin.create(DEPLOYMENTS, _deployment(deployment, prefix, pods_per_node * nodes))

            async def all_running() -> bool:
                pods = (await admin.list(paths.pods("default"), label_selector=f"app={deployment}"))["items"]
                running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
                return running == pods_per_node * nodes

            result["pods_to_running_s"] = round(
                await _until("all pods Running", all_running, 120 + pods_per_node * nodes / 5, emulator), 1
            )
        apiserver, etcd = _testbed_process(bed, "kube-apiserver"), _testbed_process(bed, "etcd")
        result["cpu_s_before_steady"] = round(_processes_cpu_seconds(procs), 2)
        requests_before = request_counts(await _apiserver_metrics(admin) or "")
        each_before = [_cpu_seconds(proc) for proc in procs]
        before = sum(each_before), _cpu_seconds(apiserver), _cpu_seconds(etcd)
        began = time.monotonic()
        intervals, latencies = await _lease_intervals(admin, prefix, steady)
        elapsed = time.monotonic() - began
        requests_after = request_counts(await _apiserver_metrics(admin) or "")
        result["apiserver_requests_per_s"] = request_mix(requests_before, requests_after, time.monotonic() - began)
        cpu, apiserver_cpu, etcd_cpu = (
            after - first
            for after, first in zip(
                (_processes_cpu_seconds(procs), _cpu_seconds(apiserver), _cpu_seconds(etcd)), before, strict=True
            )
        )
        if len(procs) > 1:
            result["cpu_cores_per_process"] = [
                round((_cpu_seconds(proc) - first) / elapsed, 3) for proc, first in zip(procs, each_before, strict=True)
            ]
        rss, pss = memory_totals([proc.memory_full_info() for proc in procs])
        if connections is not None:
            connections.phase = "steady"
            result["apiserver_connections_steady"] = await asyncio.to_thread(connections.count)
        watches = await _apiserver_watches(admin)
        result["apiserver_pod_watches"] = watches["pods"]
        result["apiserver_service_watches"] = watches["services"]
        result["apiserver_runtimeclass_watches"] = watches["runtimeclasses"]
        result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        # After the steady window, with the Deployment's pods still in place (clusterloader2's density test times
        # its latency pods beside its saturation pods).
        result["startup_latency"] = [
            await _startup_latency(admin, emulator, prefix, scenario.latency_pods, rate)
            for rate in (scenario.latency_rates if scenario.latency_pods else ())
        ]
        result.update(
            {
                "cpu_cores": round(cpu / elapsed, 3),
                "cpu_s_per_node_minute": round(cpu / nodes / (elapsed / 60), 4),
                "nodes_per_core": round(nodes / (cpu / elapsed), 1) if cpu else None,
                "rss_mib": round(rss / 2**20, 1),
                "pss_mib": round(pss / 2**20, 1),
                "rss_per_node_mib": round(rss / 2**20 / nodes, 2),
                "pss_per_node_mib": round(pss / 2**20 / nodes, 2),
                "lease_renewals": len(intervals),
                "lease_interval_p50_s": round(percentile(intervals, 0.5), 2) if intervals else None,
                "lease_interval_p99_s": round(percentile(intervals, 0.99), 2) if intervals else None,
                "lease_interval_max_s": round(max(intervals), 2) if intervals else None,
                # Over 15 s: a renewal missed (every 10 s, a 40 s lease); 40 s would make the node NotReady.
                "lease_intervals_over_15s": sum(1 for i in intervals if i > 15),
                "poller_list_p50_s": round(percentile(latencies, 0.5), 3),
                "poller_list_max_s": round(max(latencies), 3),
                "apiserver_cpu_cores": round(apiserver_cpu / elapsed, 3) if apiserver else None,
                "etcd_cpu_cores": round(etcd_cpu / elapsed, 3) if etcd else None,
            }
        )
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        # Every flap from all Ready to the end of the steady window (the pod burst included).
        result["ready_flaps"] = sum(flaps.flaps.values())
        result["nodes_flapped"] = len(flaps.flaps)
        if connections is not None:
            connections.phase = "deleting"
        with contextlib.suppress(NotFound):
            await admin.delete(f"{DEPLOYMENTS}/{deployment}")
        if pods_per_node and all(process.returncode is None for process in emulator):
            # The nodes delete their pods (as kubelets do); stopped before, the pods would stay Terminating.

            async def all_gone() -> bool:
                listed = await admin.list(paths.pods("default"), label_selector=f"app={deployment}")
                return not listed["items"]

            with contextlib.suppress(RuntimeError):
                result["pods_deleted_s"] = round(
                    await _until("pods deleted", all_gone, 60 + pods_per_node * nodes / 5, emulator), 1
                )
        if connections is not None:
            for phase in ("pods", "deleting"):
                if phase in connections.most:
                    result[f"apiserver_connections_max_{phase}"] = connections.most[phase]
    return result


async def _stop(emulator: Emulator, grace: float = 60.0) -> tuple[float, bool]:
    """SIGTERM every process, SIGKILL those still running after `grace`: seconds until all exited, and whether any
    had to be killed."""
    began = time.monotonic()
    killed = False
    for process in emulator:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
    for process in emulator:
        try:
            await asyncio.wait_for(process.wait(), max(grace - (time.monotonic() - began), 0.1))
        except TimeoutError:
            killed = True
            process.kill()
            await process.wait()
    return time.monotonic() - began, killed


def connect_timeouts(logs: Sequence[Path]) -> int:
    """Lines of the fleet's logs that name a ConnectTimeout (a connection to the apiserver not made in time)."""
    total = 0
    for log in logs:
        with contextlib.suppress(OSError), log.open("rb") as lines:
            total += sum(1 for line in lines if b"ConnectTimeout" in line)
    return total


async def _delete_nodes(admin: KubeClient, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.node(name))


async def run(
    bed: Testbed,
    nodes: int,
    pods_per_node: int,
    steady: float,
    stagger: float,
    *,
    keep: bool = False,
    switch_interval: float | None = None,
    peer: str | None = None,
    latency_pods: int = 0,
    latency_rates: tuple[float, ...] = (10.0, 50.0),
    max_pods: int | None = None,
    pod_watch: str = POD_WATCH_PER_NODE,
    processes: int = 1,
    max_requests: int | None = None,
) -> dict[str, Any]:
    """The fleet's figures at the top level of the result; with `peer` "kwok", KWOK's under "kwok", from the same
    scenario run after the fleet's on the same testbed, its nodes made from one of the fleet's."""
    prefix = f"bench-{uuid.uuid4().hex[:5]}"
    workdir = Path(tempfile.mkdtemp(prefix="nodeagent-bench-fleet-"))
    logs = [workdir / "fleet.log"] if processes == 1 else [workdir / f"fleet-{i}.log" for i in range(processes)]
    argv = [
        sys.executable, "-m", "nodeagent", "fleet", "--prefix", prefix,
        "--kubeconfig", str(bed.layout.admin_kubeconfig), "--dir", str(workdir / "fleet"), "--stagger", str(stagger),
    ]  # fmt: skip
    if switch_interval is not None:
        argv += ["--switch-interval", str(switch_interval)]
    if max_pods is not None:
        # Each node's pod capacity; the fleet's memory check counts every node full, so 1,000 nodes of 110 pods
        # (the kubelet's default) do not fit this machine's memory, 1,000 of 30 do (30 is also the most a node's
        # default /27 of pod addresses holds).
        argv += ["--max-pods", str(max_pods)]
    argv += ["--pod-watch", pod_watch]
    if max_requests is not None:
        argv += ["--max-requests", str(max_requests)]
    result: dict[str, Any] = {
        "bench": "fleet",
        "nodes": nodes,
        "pods_per_node": pods_per_node,
        "steady_s": steady,
        "pod_watch": pod_watch,
        "processes": processes,
        "max_requests": max_requests,
    }
    if switch_interval is not None:
        result["switch_interval_s"] = switch_interval
    scenario = Scenario(nodes, pods_per_node, steady, latency_pods, latency_rates)
    if peer == "kwok" and not kwok.kwok_path().exists():
        raise RuntimeError(f"{kwok.kwok_path()} is missing: `nodeagent testbed install --with-kwok` builds it")
    async with KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin:
        started = time.monotonic()
        fleet: list[asyncio.subprocess.Process] = []
        try:
            for (first, count), log in zip(split_nodes(nodes, processes), logs, strict=True):
                with log.open("wb") as out:
                    fleet.append(
                        await asyncio.create_subprocess_exec(
                            *argv,
                            "--nodes",
                            str(count),
                            "--first",
                            str(first),
                            stdout=out,
                            stderr=asyncio.subprocess.STDOUT,
                            env=dict(os.environ),
                        )
                    )
            counter = ConnectionCounter(fleet, httpx.URL(admin.credentials.server).port or 443)
            counting = asyncio.create_task(counter.run(), name="connections")
            try:
                result.update(
                    await _scenario(admin, bed, fleet, prefix, scenario, started=started, connections=counter)
                )
            finally:
                counting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await counting
            # The node every KWOK node is made from: as a fleet node registered it and keeps it, Ready.
            template = await admin.get(paths.node(f"{prefix}-0")) if peer == "kwok" else None
        finally:
            stop_s, killed = await _stop(fleet)
            result["stop_s"], result["stop_killed"] = round(stop_s, 1), killed
            result["log_connect_timeouts"] = connect_timeouts(logs)
            await _delete_nodes(admin, [f"{prefix}-{ordinal}" for ordinal in range(nodes)])
        if template is not None:
            result["kwok"] = await _run_kwok(admin, bed, template, scenario, workdir)
    if keep:
        result["fleet_log"] = str(logs[0]) if processes == 1 else [str(log) for log in logs]
    else:
        result.get("kwok", {}).pop("kwok_log", None)
        shutil.rmtree(workdir, ignore_errors=True)
    return result


async def _run_kwok(
    admin: KubeClient, bed: Testbed, template: dict[str, Any], scenario: Scenario, workdir: Path
) -> dict[str, Any]:
    """The same scenario with KWOK's controller: its stages from the template's conditions, its nodes created here
    (the fleet's addresses, planned as the fleet plans them), selected by their label."""
    prefix = f"kwok-{uuid.uuid4().hex[:5]}"
    nodes = scenario.nodes
    plans = plan_nodes(
        FleetOptions(nodes=nodes, prefix=prefix, directory=workdir / "kwok", kubeconfig=bed.layout.admin_kubeconfig)
    )
    config = workdir / "kwok.yaml"
    config.write_text(kwok.kwok_config(kwok.template_conditions(template)))
    argv = kwok.kwok_argv(
        kwok.kwok_path(),
        kubeconfig=bed.layout.admin_kubeconfig,
        config=config,
        label_selector=f"{FLEET_LABEL}={prefix}",
        pod_cidr=DEFAULT_POD_NETWORK,
    )
    result: dict[str, Any] = {"kwok_version": kwok.KWOK_VERSION, "kwok_log": str(workdir / "kwok.log")}
    with (workdir / "kwok.log").open("wb") as out:
        process = await asyncio.create_subprocess_exec(*argv, stdout=out, stderr=asyncio.subprocess.STDOUT)
    try:
        started = time.monotonic()
        for plan in plans:
            body = kwok.kwok_node(
                template,
                name=plan.name,
                label=FLEET_LABEL,
                value=prefix,
                internal_ip=plan.internal_ip,
                machine_id=plan.machine_id,
            )
            await admin.create(paths.nodes(), body)
        result["nodes_created_s"] = round(time.monotonic() - started, 1)
        result.update(await _scenario(admin, bed, [process], prefix, scenario, started=started))
    finally:
        await _stop([process])
        await _delete_nodes(admin, [plan.name for plan in plans])
    return result


def split_nodes(nodes: int, processes: int) -> list[tuple[int, int]]:
    """(first ordinal, how many) for each of `processes` fleet processes sharing `nodes`, as even as it goes."""
    if not 1 <= processes <= nodes:
        raise ValueError(f"--processes {processes} must be between 1 and --nodes {nodes}")
    share, rest = divmod(nodes, processes)
    counts = [share + (1 if i < rest else 0) for i in range(processes)]
    return [(sum(counts[:i]), count) for i, count in enumerate(counts)]


def summary_line(r: dict[str, Any], name: str = "fleet") -> str:
    processes = r.get("processes", 1) if name == "fleet" else 1
    return (
        f"{name}{' (pod watch ' + r['pod_watch'] + ')' if name == 'fleet' and 'pod_watch' in r else ''}"
        f"{f' in {processes} processes' if processes > 1 else ''}: "
        f"{r.get('nodes')} nodes ({r.get('pods_per_node')} pods each) Ready in {r['start_to_all_ready_s']} s; "
        f"steady {r.get('steady_s', 0):.0f} s: {r['cpu_s_per_node_minute']} CPU s per node-minute "
        f"({r['cpu_cores']} cores, {r['nodes_per_core']} nodes/core), RSS {r['rss_per_node_mib']} MiB/node "
        f"(PSS {r['pss_per_node_mib']}), lease renew p50/p99/max {r['lease_interval_p50_s']}/"
        f"{r['lease_interval_p99_s']}/{r['lease_interval_max_s']} s ({r['lease_intervals_over_15s']} over 15 s), "
        f"{r['ready_flaps']} NotReady flaps; apiserver {r['apiserver_cpu_cores']} cores"
        + (
            f"; apiserver connections {r['apiserver_connections_steady']} steady, most "
            f"{r.get('apiserver_connections_max_pods')} starting pods, {r.get('apiserver_connections_max_deleting')} "
            f"deleting; pods deleted in {r.get('pods_deleted_s')} s ({r.get('log_connect_timeouts')} ConnectTimeout "
            f"lines); stopped in {r.get('stop_s')} s{' (killed)' if r.get('stop_killed') else ''}"
            if name == "fleet" and "apiserver_connections_steady" in r
            else ""
        )
        + (f", {r['apiserver_pod_watches']} pod watches" if r.get("apiserver_pod_watches") is not None else "")
        + (
            f", {r['apiserver_service_watches']} Service / {r['apiserver_runtimeclass_watches']} RuntimeClass watches"
            if r.get("apiserver_service_watches") is not None
            else ""
        )
        + (
            f" ({r['apiserver_requests_per_s'].get('total')} requests/s, the most: "
            + ", ".join(f"{k} {v}" for k, v in list(r["apiserver_requests_per_s"].items())[:3] if k != "total")
            + ")"
            if r.get("apiserver_requests_per_s")
            else ""
        )
        + f", etcd {r['etcd_cpu_cores']}; "
        f"apiserver LIST from beside p50/max {r['poller_list_p50_s']}/{r['poller_list_max_s']} s; "
        f"load average {r['loadavg_start']} -> {r.get('loadavg_end')}"
        + "".join(
            f"; {phase['rate']:g} pods/s: schedule_to_watch p50/p99 {phase['schedule_to_watch']['p50_ms']}/"
            f"{phase['schedule_to_watch']['p99_ms']} ms"
            for phase in r.get("startup_latency", [])
        )
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
    parser.add_argument(
        "--peer",
        choices=["kwok"],
        default=None,
        help="then the same scenario with KWOK's controller (`nodeagent testbed install --with-kwok`), figures under "
        '"kwok"',
    )
    parser.add_argument(
        "--latency-pods",
        type=int,
        default=100,
        help="after the steady window, this many pods at each --latency-rates, timed as clusterloader2 does "
        "(schedule_to_watch, pod_startup); 0: none",
    )
    parser.add_argument("--latency-rates", default="10,50", help="pods per second, comma-separated")
    parser.add_argument("--max-pods", type=int, default=None, help="each node's pod capacity (the fleet's default)")
    parser.add_argument("--pod-watch", choices=POD_WATCHES, default=POD_WATCH_PER_NODE, help="the fleet's --pod-watch")
    parser.add_argument(
        "--max-requests", type=int, default=None, help="the fleet's --max-requests (default: the fleet's default)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="fleet processes sharing --nodes (--first apart, as a shard's processes; one per core)",
    )
    args = parser.parse_args(argv)
    try:
        split_nodes(args.nodes, args.processes)
    except ValueError as exc:
        parser.error(str(exc))
    capacity = args.max_pods if args.max_pods is not None else DEFAULT_MAX_PODS
    if args.latency_pods and args.pods_per_node + args.latency_pods / args.nodes > capacity:
        # The latency pods are created beside the Deployment's: with every node full they never schedule.
        parser.error(
            f"--pods-per-node {args.pods_per_node} leaves no room for --latency-pods {args.latency_pods} on "
            f"{args.nodes} nodes of {capacity} pods; fewer pods per node, or --latency-pods 0"
        )

    async def work(bed: Testbed) -> dict[str, Any]:
        return await run(
            bed,
            args.nodes,
            args.pods_per_node,
            args.steady,
            args.stagger,
            keep=args.keep,
            switch_interval=args.switch_interval,
            peer=args.peer,
            latency_pods=args.latency_pods,
            latency_rates=tuple(float(rate) for rate in args.latency_rates.split(",") if rate),
            max_pods=args.max_pods,
            pod_watch=args.pod_watch,
            processes=args.processes,
            max_requests=args.max_requests,
        )

    if args.testbed is not None:
        result = await work(Testbed(args.testbed))
    else:
        result = await on_a_testbed(None, "nodeagent-bench-fleet-tb-", work)
    print(json.dumps(result))
    print(summary_line(result))
    if "kwok" in result:
        print(summary_line({**result, **result["kwok"]}, "kwok"))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
