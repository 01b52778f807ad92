"""The kubelet API under load while pods keep starting, in one run on one testbed (issue 34):

- idle: pods started one after another (create → Running, seen by a watch), nothing else running;
- load: the same pod starts, while clients hold STREAMS long-lived streams on the agent (half `logs -f` of a
  chatty container, half WebSocket exec sessions of a shell that prints every second) and send REQUESTS requests
  of mixed endpoints (/healthz, /pods, /runningpods/, /configz, /metrics, /metrics/probes, /metrics/resource,
  /metrics/cadvisor, /stats/summary, /containerLogs with a tail, /logs/) from WORKERS keep-alive connections;
- after: the streams closed, the agent's RSS settles (`--settle` s), then 5 s of samples give "after";
- the load phase and its settle are repeated `--rounds` times on the same agent: RSS that keeps growing round after
  round is a leak, RSS that stays where the first round left it is the allocator's high-water mark.

Clients talk straight to the agent's TLS port on the node address with the apiserver's kubelet client certificate
(what `kubectl logs -f` and `kubectl exec` reach through the apiserver), so the load is the agent's and not 200
kubectl processes'. The load generator runs on the same 2 cores as the agent: its CPU is part of the load. It runs
in a process of its own (`--generator process`, the default), so that the watch that times the pod starts is not
served by the event loop the generator saturates: with `--generator inprocess` (how the benchmark first ran) every
pod's Running event waited behind the generator's own callbacks, and that wait counted as pod start. Both loops'
lag (how late a 50 ms sleep wakes) is in the result.

`--kubelet upstream` runs the same phases against the upstream kubelet v1.34.4 as the testbed's node
(testbed/upstreamkubelet.py; needs `nodeagent testbed install --with-kubelet`) instead of nodeagent: the same
endpoints, streams, pods and client certificate (the apiserver's, authorized by the same webhook on both). On 2 cores
the load generator, containerd and the apiserver take CPU from the pod starts whichever kubelet serves, so upstream's
ratio on the same machine is the reference the agent's is read against.

`--profile FILE` (nodeagent only) samples the agent with py-spy (`--py-spy`, default `py-spy` on the PATH; it is not a
dependency of the project) for `--profile-seconds` from 5 s after the requests start, without pausing it
(`--nonblocking`), one thread per stack root, in py-spy's raw (collapsed) format.

Prints one JSON line and one summary line: pod start p50 under load against idle (goal at most 1.3 times), the requests'
latency and errors, the streams opened, and the agent's RSS before, at its peak and after.
Run: `python -m benchmarks.kubelet_api_load [--kubelet nodeagent|upstream] [--requests 10000] [--streams 200]
[--pods 15] [--rounds 2] [--profile FILE] [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import multiprocessing.process
import os
import shutil
import ssl
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import NS, percentile
from benchmarks.pod_startup import agent_round
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.upstreamkubelet import KubeletProcess, start_kubelet, stop_kubelet

KUBELETS = ("nodeagent", "upstream")

ENDPOINTS = [
    "/healthz",
    "/pods",
    "/runningpods/",
    "/configz",
    "/metrics",
    "/metrics/probes",
    "/metrics/resource",
    "/metrics/cadvisor",
    "/stats/summary",
    f"/containerLogs/{NS}/load-logs/main?tailLines=10",
    "/logs/",
]


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    """This process's CPU time (user + system): the load generator's, which runs on the same cores."""
    times = os.times()
    return times.user + times.system


def _machine_busy_seconds() -> tuple[float, float]:
    """All cores' busy and total CPU seconds since boot (/proc/stat's first line; idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(values[:8])
    return (total - values[3] - values[4]) / tick, total / tick


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


async def _running(admin: KubeClient, name: str) -> None:
    for _ in range(600):
        pod: dict[str, Any] = await admin.get(paths.pod(NS, name))
        if any("running" in (s.get("state") or {}) for s in (pod.get("status") or {}).get("containerStatuses") or ()):
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{name} did not run")


class Streams:
    """Long-lived streams on the agent: `logs -f` (chunked) and WebSocket exec sessions; counts what they read."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        self.host, self.port, self.context = host, port, context
        self.opened = 0
        self.failed: Counter[str] = Counter()
        self.bytes_read = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def _open(self, head: str, expect: bytes) -> None:
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.context, server_hostname=self.host
            )
        except OSError as exc:
            self.failed[type(exc).__name__] += 1
            return
        try:
            writer.write(head.encode())
            await writer.drain()
            status = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            if not status.startswith(expect):
                self.failed[status.split(b"\r\n", 1)[0].decode("latin-1")] += 1
                return
            self.opened += 1
            while data := await reader.read(65536):
                self.bytes_read += len(data)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            self.failed[type(exc).__name__] += 1
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def logs_follow(self) -> None:
        head = f"GET /containerLogs/{NS}/load-logs/main?follow=true HTTP/1.1\r\nHost: {self.host}\r\n\r\n"
        self._tasks.append(asyncio.create_task(self._open(head, b"HTTP/1.1 200")))

    def exec_session(self) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        query = "command=sh&command=-c&command=while%20true%3B%20do%20echo%20x%3B%20sleep%201%3B%20done&output=1"
        head = (
            f"GET /exec/{NS}/load-exec/main?{query} HTTP/1.1\r\nHost: {self.host}\r\nConnection: Upgrade\r\n"
            f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
        )
        self._tasks.append(asyncio.create_task(self._open(head, b"HTTP/1.1 101")))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _requests(base: str, context: ssl.SSLContext, total: int, workers: int) -> tuple[list[float], Counter[str]]:
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    counter = iter(range(total))

    async def worker() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(verify=context, timeout=60, limits=limits, trust_env=False) as client:
            for i in counter:
                path = ENDPOINTS[i % len(ENDPOINTS)]
                started = time.monotonic()
                try:
                    response = await client.get(base + path)
                    outcomes[str(response.status_code)] += 1
                except httpx.HTTPError as exc:
                    outcomes[type(exc).__name__] += 1
                    continue
                latencies.append(time.monotonic() - started)

    await asyncio.gather(*(worker() for _ in range(workers)))
    return latencies, outcomes


@dataclass(frozen=True)
class LoadPlan:
    """What the load generator needs (picklable: it crosses into the generator's own process)."""

    host: str
    port: int
    cafile: str
    certfile: str
    keyfile: str
    streams: int
    requests: int
    workers: int


def _client_context(plan: LoadPlan) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=plan.cafile)
    context.load_cert_chain(plan.certfile, plan.keyfile)
    return context


class LoopLag:
    """How late a 50 ms sleep wakes on this event loop: the delay every callback on it waits (the pod-start watch
    in the observer's loop, the requests in the generator's)."""

    PERIOD = 0.05

    def __init__(self) -> None:
        self.lags: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.PERIOD)
            self.lags.append(loop.time() - before - self.PERIOD)

    def summary(self) -> dict[str, float]:
        lags = self.lags or [float("nan")]
        return {"p50_ms": round(1000 * statistics.median(lags), 1), "p99_ms": round(1000 * percentile(lags, 0.99), 1)}


Send = Callable[[tuple[Any, ...]], Awaitable[None]]
Receive = Callable[[], Awaitable[Any]]


async def _generate(plan: LoadPlan, send: Send, receive: Receive) -> None:
    """The load: STREAMS streams opened in a ramp, then REQUESTS requests; ("requests_started",) once they start,
    ("requests_done", latencies, outcomes, loop lag) when they end; the streams stay open until "close" is received,
    then ("closed", opened, failed, bytes read)."""
    context = _client_context(plan)
    lag = LoopLag()
    lagging = asyncio.create_task(lag.run())
    streams = Streams(plan.host, plan.port, context)
    for i in range(plan.streams):
        if i % 2:
            streams.exec_session()
        else:
            streams.logs_follow()
        if i % 20 == 19:
            await asyncio.sleep(0.5)  # a ramp: the exec sessions each start a process in the container
    await asyncio.sleep(3)
    await send(("requests_started",))
    base = f"https://{plan.host}:{plan.port}"
    latencies, outcomes = await _requests(base, context, plan.requests, plan.workers)
    lagging.cancel()
    await send(("requests_done", latencies, dict(outcomes), lag.summary()))
    await receive()
    opened, failed, streamed = streams.opened, dict(streams.failed), streams.bytes_read
    await streams.close()
    await send(("closed", opened, failed, streamed))


def _generator_process(plan: LoadPlan, conn: Connection) -> None:
    """The generator's own process (spawned): its event loop, its CPU, nothing shared with the observer's loop."""

    async def send(message: tuple[Any, ...]) -> None:
        conn.send(message)

    async def receive() -> Any:
        return await asyncio.to_thread(conn.recv)

    asyncio.run(_generate(plan, send, receive))


class Generator:
    """The load generator, in a process of its own (`process`) or as a task on the observer's loop (`inprocess`,
    as the benchmark ran first: the pod-start watch then waited behind the generator's callbacks)."""

    def __init__(self, plan: LoadPlan, mode: str) -> None:
        self._mode = mode
        self._process: multiprocessing.process.BaseProcess | None = None
        self._task: asyncio.Task[None] | None = None
        if mode == "process":
            context = multiprocessing.get_context("spawn")
            self._conn, child = context.Pipe()
            self._process = context.Process(target=_generator_process, args=(plan, child), daemon=True)
            self._process.start()
            child.close()
        else:
            to_observer: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
            to_generator: asyncio.Queue[Any] = asyncio.Queue()
            self._from, self._to = to_observer, to_generator
            self._task = asyncio.create_task(_generate(plan, to_observer.put, to_generator.get))

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def receive(self) -> Any:
        if self._process is not None:
            return await asyncio.to_thread(self._conn.recv)
        return await self._from.get()

    async def send(self, message: Any) -> None:
        if self._process is not None:
            self._conn.send(message)
        else:
            await self._to.put(message)

    async def join(self) -> None:
        if self._process is not None:
            await asyncio.to_thread(self._process.join, 30)
            self._conn.close()
        elif self._task is not None:
            await self._task


async def _pod_starts(admin: KubeClient, image: str, count: int) -> list[float]:
    durations: list[float] = []
    for _ in range(count):
        durations += await agent_round(admin, image, 1)
    return durations


async def _profile(py_spy: str, pid: int, seconds: float, out: Path) -> None:
    """py-spy's samples of `pid` for `seconds` (raw collapsed stacks, a thread per root, the process not paused)."""
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "100"]
    command += ["--nonblocking", "--threads", "--format", "raw", "--output", str(out)]
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        print(
            f"kubelet_api_load: py-spy failed ({proc.returncode}): {err.decode(errors='replace')[-400:]}",
            file=sys.stderr,
        )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--pods", type=int, default=15, help="pod starts in each of the idle and load phases")
    parser.add_argument("--rounds", type=int, default=2, help="load rounds on the same agent (RSS after each)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after the load before RSS 'after'")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--kubelet", choices=KUBELETS, default="nodeagent", help="which kubelet serves as the node")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy's raw samples of nodeagent under load")
    parser.add_argument("--profile-seconds", type=float, default=25.0)
    parser.add_argument("--py-spy", default="py-spy")
    parser.add_argument(
        "--generator", choices=("process", "inprocess"), default="process", help="where the load generator runs"
    )
    args = parser.parse_args(argv)
    if args.profile is not None and args.kubelet != "nodeagent":
        parser.error("--profile samples nodeagent (a Python process) only")
    load_average_start = os.getloadavg()[0]
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-"))
    bed = Testbed(root)
    settings = await bed.up()
    result: dict[str, Any] = {"benchmark": "kubelet_api_load", "kubelet": args.kubelet}
    samples: list[tuple[float, float]] = []
    upstream: KubeletProcess | None = None
    try:
        if args.kubelet == "upstream":
            upstream = await start_kubelet(bed, bed.layout.logs / "kubelet.log")
            pid = upstream.pid
        else:
            pid = (await bed.start_agent()).pid
        image = configs.busybox_image(settings)
        pki = bed.layout.pki
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "apiserver-kubelet-client.crt"), str(pki / "apiserver-kubelet-client.key"))
        base = f"https://{settings.node_ip}:{settings.kubelet_port}"
        stop_sampling = asyncio.Event()

        async def sample() -> None:
            while not stop_sampling.is_set():
                samples.append((time.monotonic(), await asyncio.to_thread(_rss_mib, pid)))
                await asyncio.sleep(0.25)

        async with KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin:
            chatty = "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"
            await admin.create(paths.pods(NS), _pod("load-logs", image, ["sh", "-c", chatty]))
            await admin.create(paths.pods(NS), _pod("load-exec", image, ["sleep", "3600"]))
            await _running(admin, "load-logs")
            await _running(admin, "load-exec")
            async with httpx.AsyncClient(verify=context, timeout=30, trust_env=False) as probe:
                for _ in range(120):
                    with contextlib.suppress(httpx.HTTPError):
                        if (await probe.get(base + "/healthz")).status_code == 200:
                            break
                    await asyncio.sleep(0.5)
            sampler = asyncio.create_task(sample())
            await _pod_starts(admin, image, 2)  # warm-up: image, first sandbox, caches
            idle_started, idle_cpu = time.monotonic(), _cpu_seconds(pid)
            idle = await _pod_starts(admin, image, args.pods)
            idle_ended, idle_cpu = time.monotonic(), _cpu_seconds(pid) - idle_cpu

            rounds: list[dict[str, Any]] = []
            plan = LoadPlan(
                host=settings.node_ip,
                port=settings.kubelet_port,
                cafile=str(pki / "ca.crt"),
                certfile=str(pki / "apiserver-kubelet-client.crt"),
                keyfile=str(pki / "apiserver-kubelet-client.key"),
                streams=args.streams,
                requests=args.requests,
                workers=args.workers,
            )
            for _ in range(args.rounds):
                load_started, load_cpu = time.monotonic(), _cpu_seconds(pid)
                own_cpu, machine = _own_cpu_seconds(), _machine_busy_seconds()
                generator = Generator(plan, args.generator)
                generator_cpu = _cpu_seconds(generator.pid) if generator.pid else 0.0
                await generator.receive()  # the streams are open, the requests start
                observer_lag = LoopLag()
                lagging = asyncio.create_task(observer_lag.run())
                requests_done = asyncio.create_task(generator.receive())
                profiling: asyncio.Task[None] | None = None
                if args.profile is not None and not rounds:

                    async def profile_later(out: Path) -> None:
                        await asyncio.sleep(5)
                        await _profile(args.py_spy, pid, args.profile_seconds, out)

                    profiling = asyncio.create_task(profile_later(args.profile))
                loaded: list[float] = []
                while len(loaded) < args.pods or not requests_done.done():  # pods keep starting for the whole load
                    loaded += await _pod_starts(admin, image, 1)
                _, latencies, outcomes, generator_lag = await requests_done
                lagging.cancel()
                if profiling is not None:
                    await profiling
                load_ended, load_cpu = time.monotonic(), _cpu_seconds(pid) - load_cpu
                own_cpu = _own_cpu_seconds() - own_cpu
                if generator.pid:
                    own_cpu += _cpu_seconds(generator.pid) - generator_cpu
                busy, total = (b - a for a, b in zip(machine, _machine_busy_seconds(), strict=True))
                await generator.send("close")
                _, opened, failed, streamed = await generator.receive()
                await generator.join()
                await asyncio.sleep(args.settle)
                after_started = time.monotonic()
                await asyncio.sleep(5)
                rounds.append(
                    {
                        "loaded": loaded,
                        "latencies": latencies,
                        "outcomes": outcomes,
                        "window": (load_started, load_ended),
                        "cpu": load_cpu,
                        "generator_cpu": own_cpu,
                        "machine_busy": busy / total if total else float("nan"),
                        "lag": (observer_lag.summary(), generator_lag),
                        "streams": (opened, failed, streamed),
                        "after": (after_started, time.monotonic()),
                    }
                )
            stop_sampling.set()
            await sampler
            for name in ("load-logs", "load-exec"):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)

        def rss(start: float, end: float) -> list[float]:
            return [r for t, r in samples if start <= t <= end]

        first = rounds[0]
        loaded, latencies, outcomes = first["loaded"], first["latencies"], first["outcomes"]
        load_started, load_ended = first["window"]
        load_cpu = first["cpu"]
        opened, failed, streamed = first["streams"]
        idle_p50, load_p50 = statistics.median(idle), statistics.median(loaded)
        request_seconds = load_ended - load_started
        before, during, after = rss(idle_started, idle_ended), rss(load_started, load_ended), rss(*first["after"])
        result.update(
            pods_idle=len(idle),
            pods_under_load=len(loaded),
            pod_start_idle_p50_s=round(idle_p50, 3),
            pod_start_load_p50_s=round(load_p50, 3),
            pod_start_load_p90_s=round(percentile(loaded, 0.9), 3),
            pod_start_ratio_p50=round(load_p50 / idle_p50, 2),
            pod_start_goal_met=load_p50 <= 1.3 * idle_p50,
            requests=args.requests,
            request_outcomes=dict(outcomes),
            request_p50_ms=round(1000 * statistics.median(latencies), 1),
            request_p99_ms=round(1000 * percentile(latencies, 0.99), 1),
            load_seconds=round(request_seconds, 1),
            agent_cpu_share_idle=round(idle_cpu / (idle_ended - idle_started), 2),
            agent_cpu_share_load=round(load_cpu / request_seconds, 2),
            # the load generator (this process) and the whole machine (all cores, 1.0 = every core busy)
            generator_cpu_share_load=round(first["generator_cpu"] / request_seconds, 2),
            machine_busy_load=round(first["machine_busy"], 2),
            # how late callbacks ran on the observer's loop (the pod-start watch) and on the generator's
            observer_loop_lag=first["lag"][0],
            generator_loop_lag=first["lag"][1],
            generator=args.generator,
            streams_wanted=args.streams,
            streams_opened=opened,
            streams_failed=failed,
            streamed_mib=round(streamed / (1 << 20), 2),
            rss_before_mib=round(statistics.median(before), 1),
            rss_peak_mib=round(max(during), 1),
            rss_after_mib=round(statistics.median(after), 1),
            rss_after_over_before=round(statistics.median(after) / statistics.median(before), 2),
            # each further round repeats the load on the same agent: a leak grows, an allocator's high-water mark
            # stays where the first round left it
            later_rounds=[
                {
                    "pod_start_load_p50_s": round(statistics.median(r["loaded"]), 3),
                    "request_outcomes": dict(r["outcomes"]),
                    "streams_opened": r["streams"][0],
                    "rss_peak_mib": round(max(rss(*r["window"])), 1),
                    "rss_after_mib": round(statistics.median(rss(*r["after"])), 1),
                }
                for r in rounds[1:]
            ],
            load_average_start=load_average_start,
            load_average=os.getloadavg()[0],
        )
    finally:
        if upstream is not None:
            with contextlib.suppress(Exception):
                await stop_kubelet(upstream)
        with contextlib.suppress(Exception):
            await bed.down()
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    print(
        f"kubelet_api_load ({args.kubelet}): pod start p50 {result['pod_start_load_p50_s']}s under load vs "
        f"{result['pod_start_idle_p50_s']}s idle (x{result['pod_start_ratio_p50']}, goal x1.3 "
        f"{'met' if result['pod_start_goal_met'] else 'missed'}); {args.requests} requests p50 "
        f"{result['request_p50_ms']} ms p99 {result['request_p99_ms']} ms {result['request_outcomes']}; "
        f"{result['streams_opened']}/{args.streams} streams; CPU under load: {args.kubelet} "
        f"{result['agent_cpu_share_load']} (idle {result['agent_cpu_share_idle']}), load generator "
        f"{result['generator_cpu_share_load']} of a core, machine {result['machine_busy_load']} busy; load average "
        f"{result['load_average_start']} -> {result['load_average']}; loop lag p50/p99 observer "
        f"{result['observer_loop_lag']['p50_ms']}/{result['observer_loop_lag']['p99_ms']} ms, generator "
        f"{result['generator_loop_lag']['p50_ms']}/{result['generator_loop_lag']['p99_ms']} ms; "
        f"RSS {result['rss_before_mib']} -> peak "
        f"{result['rss_peak_mib']} -> {result['rss_after_mib']} MiB"
        + "".join(f", after round {i + 2} {r['rss_after_mib']} MiB" for i, r in enumerate(result["later_rounds"]))
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
