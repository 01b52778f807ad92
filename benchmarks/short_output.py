"""Short-lived containers' output under CPU load: how many logs come out empty, nodeagent against the upstream kubelet
v1.34.4 on one testbed (issue 34).

For each agent in turn (nodeagent first, then the kubelet, as benchmarks/versus does), --pods pods (restartPolicy
Never) whose one container prints one line (`echo short-output <name>`) and exits, created --batch at a time through
the apiserver, while --load busy loops (`sh -c 'while :; do :; done'`, started here, ended by PID) compete for the
CPU. Each pod, once Succeeded, is read two ways:

- the CRI log file (`<podLogsDir>/<ns>_<name>_<uid>/main/0.log`, what containerd wrote: /var/log/pods for nodeagent,
  the testbed's own directory for the kubelet, see testbed/upstreamkubelet.py);
- `kubectl logs` (GET pods/<name>/log through the apiserver, which asks the agent's kubelet API).

A third column, `cri`, has no kubelet at all: the same pods made straight through CRI (RunPodSandbox,
CreateContainer, StartContainer; ContainerStatus polled every 10 ms until EXITED; then at once StopPodSandbox and
the log read; then RemovePodSandbox), to tell containerd's own losses from an agent's. It also times, per
container, StartContainer's return → the exit containerd recorded (FinishedAt) → the EXITED state seen.

A log without the line is read again after --reread seconds: still without it, the output is `empty` (lost); with
it, it was only `late` (containerd writes the file from its own goroutine, after the exit is reported). containerd's
own log is searched for its "Failed to pipe stdout ... reading from a closed fifo" lines of these containers.

What found the cause (issue 34): the logs were not lost in containerd but deleted afterwards by an upstream kubelet
of another testbed on the same machine, whose container GC removes every /var/log/pods directory of a pod it does
not know. So each run plants a canary log directory in /var/log/pods and reports whether it was swept meanwhile
(`canary_swept`), and names the kubelets of other testbeds it saw running (`foreign_kubelets`): a run with a swept
canary measures the machine, not the agent.

Prints one JSON line and one summary line. Needs `nodeagent testbed install --with-kubelet`. Run:
`python -m benchmarks.short_output [--pods 100] [--batch 10] [--load 2] [--agents nodeagent,kubelet] [--dir DIR]`
(about 1 s a pod per agent on 2 cores with the default load).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import NS, on_a_testbed, percentile
from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.kube.kubeconfig import load_kubeconfig, ssl_context
from nodeagent.testbed import configs, processes
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.upstreamkubelet import start_kubelet, stop_kubelet

AGENTS = ("nodeagent", "kubelet", "cri")
LABEL = "bench=short-output"
POD_LOGS = Path("/var/log/pods")
LINE = "short-output"
_CLOSED_FIFO = re.compile(r'Failed to pipe (stdout|stderr) of container \\?"([0-9a-f]{64})\\?".*closed fifo')


def short_pod(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "short-output"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", f"echo {LINE} {name}"],
                }
            ],
        },
    }


@contextlib.contextmanager
def cpu_load(count: int) -> Iterator[list[int]]:
    """`count` busy shell loops for the duration of the block, each ended by its own PID."""
    procs = [
        subprocess.Popen(["sh", "-c", "while :; do :; done"], stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


@dataclass
class Outcome:
    """What one agent's run saw; pod names by kind of loss."""

    pods: int = 0
    succeeded: int = 0
    not_succeeded: list[str] = field(default_factory=list)
    empty_file: list[str] = field(default_factory=list)
    late_file: list[str] = field(default_factory=list)
    empty_api: list[str] = field(default_factory=list)
    late_api: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # every pod made, to remove what an agent left in /var/log/pods
    container_ids: dict[str, str] = field(default_factory=dict)  # container id -> pod name
    timings: list[dict[str, Any]] = field(default_factory=list)  # the `cri` column's, per container
    seconds: float = 0.0

    def as_dict(self, fifo_errors: dict[str, str]) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "succeeded": self.succeeded,
            "empty_file": len(self.empty_file),
            "late_file": len(self.late_file),
            "empty_api": len(self.empty_api),
            "late_api": len(self.late_api),
            "closed_fifo_errors": len(fifo_errors),
            "seconds": round(self.seconds, 1),
            "pods_per_s": round(self.pods / self.seconds, 2) if self.seconds else None,
            "not_succeeded_pods": self.not_succeeded,
            "empty_file_pods": self.empty_file,
            "empty_api_pods": self.empty_api,
            "late_file_pods": self.late_file,
            "closed_fifo_pods": sorted(set(fifo_errors.values())),
            **({"timings": _timing_summary(self.timings)} if self.timings else {}),
        }


def _timing_summary(timings: list[dict[str, Any]]) -> dict[str, Any]:
    starts = [t["start_to_exit_ms"] for t in timings]
    seen = [t["exit_to_seen_ms"] for t in timings]
    return {
        "start_to_exit_ms_p50": percentile(starts, 0.5),
        "start_to_exit_ms_min": min(starts),
        "exit_to_seen_ms_p50": percentile(seen, 0.5),
        "lost": [t for t in timings if t["lost"]],
    }


def log_file(pod: dict[str, Any], root: Path) -> Path:
    meta = pod["metadata"]
    return root / f"{NS}_{meta['name']}_{meta['uid']}" / "main" / "0.log"


def _has_line(path: Path) -> bool:
    try:
        return LINE in path.read_text(errors="replace")
    except OSError:
        return False


def file_has_line(pod: dict[str, Any], root: Path) -> bool:
    return _has_line(log_file(pod, root))


async def api_has_line(http: httpx.AsyncClient, name: str) -> bool:
    response = await http.get(f"{paths.pod(NS, name)}/log", params={"container": "main"})
    return response.status_code == 200 and LINE in response.text


async def wait_finished(admin: KubeClient, names: set[str], timeout: float) -> dict[str, dict[str, Any]]:
    """The pods once each is Succeeded or Failed (or the timeout passed), by name."""
    deadline = time.monotonic() + timeout
    while True:
        listed = await admin.list(paths.pods(NS), label_selector=LABEL)
        mine = {p["metadata"]["name"]: p for p in listed["items"] if p["metadata"]["name"] in names}
        done = {n: p for n, p in mine.items() if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")}
        if len(done) == len(names) or time.monotonic() > deadline:
            return mine
        await asyncio.sleep(0.2)


async def delete_and_wait(admin: KubeClient, names: list[str], timeout: float = 120) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = await admin.list(paths.pods(NS), label_selector=LABEL)
        if not {p["metadata"]["name"] for p in listed["items"]} & set(names):
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{len(names)} pods not gone in {timeout:.0f}s")


async def run_batch(
    admin: KubeClient, http: httpx.AsyncClient, image: str, size: int, *, reread: float, out: Outcome, logs: Path
) -> None:
    names = [f"short-{uuid.uuid4().hex[:8]}" for _ in range(size)]
    out.names.extend(names)
    await asyncio.gather(*(admin.create(paths.pods(NS), short_pod(n, image)) for n in names))
    pods = await wait_finished(admin, set(names), timeout=300)
    out.pods += size
    first_file: dict[str, bool] = {}
    first_api: dict[str, bool] = {}
    for name in names:
        pod = pods.get(name)
        status = (pod or {}).get("status") or {}
        if pod is None or status.get("phase") != "Succeeded":
            out.not_succeeded.append(name)
            continue
        out.succeeded += 1
        for cs in status.get("containerStatuses") or ():
            out.container_ids[str(cs.get("containerID", "")).rpartition("://")[2]] = name
        first_file[name] = file_has_line(pod, logs)
        first_api[name] = await api_has_line(http, name)
    if not all(first_file.values()) or not all(first_api.values()):
        await asyncio.sleep(reread)
    for name, seen in first_file.items():
        if not seen:
            (out.late_file if file_has_line(pods[name], logs) else out.empty_file).append(name)
    for name, seen in first_api.items():
        if not seen:
            (out.late_api if await api_has_line(http, name) else out.empty_api).append(name)
    await delete_and_wait(admin, names)


def closed_fifo_errors(containerd_log: Path, since: int) -> dict[str, str]:
    """container id -> stream, from containerd's log lines written after byte offset `since`."""
    found: dict[str, str] = {}
    with containerd_log.open("rb") as f:
        f.seek(since)
        for raw in f:
            match = _CLOSED_FIFO.search(raw.decode(errors="replace"))
            if match:
                found[match.group(2)] = match.group(1)
    return found


async def cri_pod(cri: CRIClient, image: str, cgroup_root: str, *, reread: float, out: Outcome) -> None:
    """One short pod straight through CRI, no kubelet: the sandbox stopped as soon as the exit is seen."""
    name = f"short-{uuid.uuid4().hex[:8]}"
    uid = str(uuid.uuid4())
    log_dir = POD_LOGS / f"{NS}_{name}_{uid}"
    sandbox_config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, uid=uid, namespace=NS, attempt=0),
        hostname=name,
        log_directory=str(log_dir),
        labels={"bench": "short-output"},
        linux=api_pb2.LinuxPodSandboxConfig(cgroup_parent=f"{cgroup_root}/short-output-{uid}"),
    )
    sandbox_id = await cri.runtime.run_pod_sandbox(sandbox_config)
    try:
        config = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="main", attempt=0),
            image=api_pb2.ImageSpec(image=image),
            command=["sh", "-c", f"echo {LINE} {name}"],
            log_path="main/0.log",
        )
        container_id = await cri.runtime.create_container(sandbox_id, config, sandbox_config)
        await cri.runtime.start_container(container_id)
        started = time.time_ns()
        out.pods += 1
        out.container_ids[container_id] = name
        while True:
            status = (await cri.runtime.container_status(container_id)).status
            if status.state == api_pb2.CONTAINER_EXITED:
                seen = time.time_ns()
                break
            await asyncio.sleep(0.01)
        await cri.runtime.stop_pod_sandbox(sandbox_id)
        if status.exit_code == 0:
            out.succeeded += 1
        else:
            out.not_succeeded.append(name)
        path = log_dir / "main" / "0.log"
        first = _has_line(path)
        if not first:
            await asyncio.sleep(reread)
            (out.late_file if _has_line(path) else out.empty_file).append(name)
        out.timings.append(
            {
                "name": name,
                "start_to_exit_ms": round((status.finished_at - started) / 1e6, 1),
                "exit_to_seen_ms": round((seen - status.finished_at) / 1e6, 1),
                "lost": not first,
            }
        )
    finally:
        await cri.runtime.stop_pod_sandbox(sandbox_id)
        await cri.runtime.remove_pod_sandbox(sandbox_id)
        shutil.rmtree(log_dir, ignore_errors=True)


@dataclass(frozen=True)
class Options:
    pods: int
    batch: int
    load: int
    reread: float
    agents: list[str]
    containerd_debug: bool = False


async def containerd_debug(bed: Testbed) -> None:
    """containerd at log level debug ("received exit event", "Finish piping stdout ..."), restarted to take it."""
    config = bed.layout.containerd_config
    config.write_text(config.read_text().replace('level = "info"', 'level = "debug"'))
    await bed.stop_containerd()
    await bed.start_containerd()


async def measure(bed: Testbed, agent: str, options: Options) -> dict[str, Any]:
    image = configs.busybox_image(bed.settings)
    containerd_log = bed.layout.logs / "containerd.log"
    since = containerd_log.stat().st_size
    out = Outcome()
    canary = plant_canary()
    foreign = set(foreign_kubelets(bed))
    try:
        if agent == "cri":
            await measure_cri(bed, options, out)
        else:
            await measure_agent(bed, agent, options, out, image)
    finally:
        foreign |= set(foreign_kubelets(bed))
        swept = not canary.exists()
        shutil.rmtree(canary.parent.parent, ignore_errors=True)
    result = _result(out, containerd_log, since)
    result["canary_swept"] = swept
    result["foreign_kubelets"] = sorted(foreign)
    return result


def remove_pod_logs(names: list[str]) -> None:
    for name in names:
        for directory in POD_LOGS.glob(f"{NS}_{name}_*"):
            shutil.rmtree(directory, ignore_errors=True)


def plant_canary() -> Path:
    """A log directory in /var/log/pods of a pod no agent here runs, as another testbed's agent leaves one: if it is
    gone at the end, something on this machine swept /var/log/pods during the run (an upstream kubelet's log GC)."""
    path = POD_LOGS / f"{NS}_short-output-canary_{uuid.uuid4()}" / "main" / "0.log"
    path.parent.mkdir(parents=True)
    path.write_text(f"{LINE} canary\n")
    return path


def foreign_kubelets(bed: Testbed) -> list[str]:
    """The upstream kubelets running on this machine for other testbeds (their --config), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"/kubelet"):
                config = next((a.decode() for a in argv if a.startswith(b"--config=")), "")
                if not config.startswith(f"--config={bed.layout.root}/"):
                    found.append(config.removeprefix("--config="))
    return found


async def measure_agent(bed: Testbed, agent: str, options: Options, out: Outcome, image: str) -> None:
    if agent == "nodeagent":
        proc = await bed.start_agent()
        logs = POD_LOGS  # the testbed leaves nodeagent's podLogsDir at its default
    else:
        kubelet = await start_kubelet(bed, bed.layout.logs / "kubelet-short-output.log")
        logs = kubelet.pod_logs_dir
    credentials = load_kubeconfig(bed.layout.admin_kubeconfig)
    try:
        async with (
            KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
            httpx.AsyncClient(base_url=credentials.server, verify=ssl_context(credentials), timeout=30) as http,
        ):
            started = time.monotonic()
            with cpu_load(options.load):
                left = options.pods
                while left > 0:
                    size = min(options.batch, left)
                    await run_batch(admin, http, image, size, reread=options.reread, out=out, logs=logs)
                    left -= size
            out.seconds = time.monotonic() - started
    finally:
        if agent == "nodeagent":
            await asyncio.to_thread(processes.stop, proc, pid_dir=bed.layout.pids, grace=20)
            # The last batch's pods left the apiserver at once (grace 0), before the agent removed their logs.
            await asyncio.to_thread(remove_pod_logs, out.names)
        else:
            await stop_kubelet(kubelet)


async def measure_cri(bed: Testbed, options: Options, out: Outcome) -> None:
    image = configs.busybox_image(bed.settings)
    cgroup_root = configs.agent_cgroup_root(bed.settings)
    async with connect(f"unix://{bed.layout.containerd_socket}", timeout=60) as cri:
        started = time.monotonic()
        with cpu_load(options.load):
            left = options.pods
            while left > 0:
                size = min(options.batch, left)
                await asyncio.gather(
                    *(cri_pod(cri, image, cgroup_root, reread=options.reread, out=out) for _ in range(size))
                )
                left -= size
        out.seconds = time.monotonic() - started


def _result(out: Outcome, containerd_log: Path, since: int) -> dict[str, Any]:
    errors = closed_fifo_errors(containerd_log, since)
    mine = {cid: out.container_ids[cid] for cid in errors if cid in out.container_ids}
    result = out.as_dict(mine)
    result["closed_fifo_errors_other"] = len(errors) - len(mine)
    return result


async def run(bed: Testbed, options: Options) -> dict[str, Any]:
    if options.containerd_debug:
        await containerd_debug(bed)
    async with connect(f"unix://{bed.layout.containerd_socket}", timeout=120) as cri:
        await cri.image.pull_image(api_pb2.ImageSpec(image=configs.busybox_image(bed.settings)))
    per: dict[str, Any] = {}
    for agent in options.agents:
        per[agent] = await measure(bed, agent, options)
    return {"benchmark": "short_output", "options": options.__dict__, "agents": per}


def summary_line(result: dict[str, Any]) -> str:
    parts = []
    for agent, got in result["agents"].items():
        api = "" if agent == "cri" else f", {got['empty_api']} empty kubectl logs"
        parts.append(
            f"{agent} {got['empty_file']}/{got['succeeded']} empty log files{api}, {got['late_file']} late, "
            f"{got['closed_fifo_errors']} closed-fifo errors, {got['pods'] - got['succeeded']} not Succeeded "
            f"({got['pods_per_s']} pods/s{', /var/log/pods swept meanwhile' if got['canary_swept'] else ''})"
        )
    load = result["options"]["load"]
    return f"short_output (load {load} busy loops): " + "; ".join(parts)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=100, help="short pods per agent")
    parser.add_argument("--batch", type=int, default=10, help="pods created at once")
    parser.add_argument("--load", type=int, default=2, help="busy loops beside the pods")
    parser.add_argument("--reread", type=float, default=2.0, help="seconds before an empty log is read again")
    parser.add_argument("--agents", default=",".join(AGENTS), help="which agents, in order")
    parser.add_argument("--dir", type=Path, default=None, help="the testbed's directory (kept)")
    parser.add_argument("--containerd-debug", action="store_true", help="containerd at log level debug")
    args = parser.parse_args(argv)
    options = Options(
        pods=args.pods,
        batch=args.batch,
        load=args.load,
        reread=args.reread,
        agents=[a for a in args.agents.split(",") if a],
        containerd_debug=args.containerd_debug,
    )
    unknown = set(options.agents) - set(AGENTS)
    if unknown:
        parser.error(f"unknown agents: {', '.join(sorted(unknown))}")
    result = await on_a_testbed(args.dir, "nodeagent-short-output-", lambda bed: run(bed, options))
    print(json.dumps(result))
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
