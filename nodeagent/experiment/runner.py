"""`nodeagent experiment eviction SCENARIO.yaml`: run one scenario and record what the node did.

By default on a testbed of its own (in a temporary directory, as `nodeagent up` brings one up): the relative
thresholds are resolved from what the machine has then, the agent starts with the scenario's eviction settings (and
`--eviction-signal-injection` when the scenario injects), the pods start, and when they all run that is second 0:
the injection file gets its start time and the recording runs for the duration. Everything it made goes at the end,
also on Ctrl-C or a failure: pods, namespace, PriorityClasses, the agent, the testbed and its directory.

With `--kubeconfig K --node N` it uses a cluster and node whose agent the user runs: it reads the node's thresholds
from /configz (through the apiserver's node proxy) and warns where they differ from the scenario. A scenario that
injects needs `--injection-file F`, the file that agent was started with (`--eviction-signal-injection F`).

It records, every second, the Node's pressure conditions and taints and the pods' phases (an Evicted pod that never
ran was refused at admission), every two seconds the signals from /stats/summary (with the injection applied as the
agent applies it) and the events, and the agent's reclaim and eviction log lines when it runs the agent itself.
Outputs in `--out DIR`: timeline.jsonl, timeline.csv, NAME.png, summary.txt, agent.log, the config and the
injection file the agent had.

`--sweep SETTING=V1,V2,...` (sweep.py) and `--versus-upstream` (compare.py) run several such runs one after the
other on one testbed, each in a directory of its own below DIR, the agent started for each run and the node handed
over between them (testbed/handover.py); then the summary beside them (summaryplot.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from eviction.injection import SignalInjection, injection_document, parse_injection
from eviction.signals import Signal, parse_signal
from eviction.thresholds import DEFAULT_EVICTION_HARD, Threshold, ThresholdError, parse_thresholds, threshold_quantity
from nodeagent.config.durations import parse_go_duration
from nodeagent.config.quantity import parse_quantity
from nodeagent.evictionmanager import pod_info
from nodeagent.experiment import compare, machine, plot, report, summaryplot, sweep, workloads
from nodeagent.experiment.compare import NODEAGENT, UPSTREAM
from nodeagent.experiment.errors import ExperimentError
from nodeagent.experiment.scenario import (
    PodPlan,
    Scenario,
    is_threshold_relative,
    load_scenario,
    resolve_eviction,
    resolve_injection,
)
from nodeagent.experiment.timeline import (
    RESOURCE_OF_SIGNAL,
    Record,
    Timeline,
    observations_from_summary_json,
    pod_usage_json,
    read_jsonl,
    write_csv,
    write_jsonl,
)
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import KubeError, NotFound
from nodeagent.kuberuntime.qos import pod_qos

if TYPE_CHECKING:
    from nodeagent.testbed.testbed import Testbed

log = logging.getLogger(__name__)

SETUP_TIMEOUT = 120.0  # for the pods of second 0 to run
TICK = 1.0
REBASE_LEAD = 1.0  # seconds before a threshold-Q step that it is resolved again
EXPECTATIONS_FAILED = 2
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")
ADMISSION_PREFIX = "The node had condition"
_EVICTING = re.compile(
    r"eviction manager evicting pod pod=(?P<pod>\S+) .*?signal=(?P<signal>\S+)(?:.*? rank=(?P<rank>\d+))?"
)
_RECLAIM = re.compile(r"attempting to reclaim|reduce resource pressure|must evict pod", re.IGNORECASE)
_GC = re.compile(r"image gc|container gc|garbage collect|removing (unused )?image|deleting image", re.IGNORECASE)


@dataclass(frozen=True)
class RunOptions:
    scenario: Path
    out: Path | None = None
    kubeconfig: Path | None = None
    node: str | None = None
    injection_file: Path | None = None
    image: str | None = None
    sweep: str | None = None  # SETTING=V1,V2,... (sweep.parse_sweep)
    versus_upstream: bool = False


@dataclass
class Target:
    """Where the scenario runs."""

    admin: KubeClient
    node: str
    image: str
    eviction: Mapping[str, Any]  # the eviction fields in force on the node
    injection_file: Path | None
    agent_log: Path | None = None
    registry: str | None = None  # what "{registry}" in a pod's image stands for (the testbed's)


@dataclass
class PodState:
    phase: str = ""
    created: bool = False
    outcome: str = ""  # evicted | refused | ""


@dataclass
class Recorder:
    """The loop's state: what was seen last, so each change is recorded once."""

    scenario: Scenario
    target: Target
    namespace: str
    timeline: Timeline
    thresholds: tuple[Threshold, ...]
    signals: tuple[Signal, ...]
    injection: SignalInjection | None = None
    conditions: dict[str, str] = field(default_factory=dict)
    taints: set[str] = field(default_factory=set)
    pods: dict[str, PodState] = field(default_factory=dict)
    events: set[tuple[str, int]] = field(default_factory=set)
    evicting: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # pod name -> (signal, rank) from log
    log_offset: int = 0
    allocatable_memory: int | None = None
    ticks: int = 0
    # pod name -> {resource: effective request} (memory, ephemeral-storage), read from the pod objects
    requests: dict[str, dict[str, int]] = field(default_factory=dict)


def _now() -> datetime:
    return datetime.now(UTC)


class Progress:
    """A plain-text bar on stderr: redrawn in place on a terminal, a line every 10 s otherwise."""

    def __init__(self, total: float) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()
        self.last_line = 0.0

    def show(self, elapsed: float, status: str) -> None:
        width = 30
        done = min(width, int(width * max(0.0, elapsed) / self.total)) if self.total else width
        line = f"[{'#' * done}{'-' * (width - done)}] {max(0.0, elapsed):5.0f}/{self.total:.0f} s  {status}"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(100))
            sys.stderr.flush()
        elif time.monotonic() - self.last_line >= 10:
            self.last_line = time.monotonic()
            print(line, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def thresholds_in_force(fields: Mapping[str, Any]) -> tuple[Threshold, ...]:
    """The thresholds the agent parses from these fields (upstream's Linux defaults when evictionHard is unset)."""
    hard = fields.get("evictionHard")
    try:
        return parse_thresholds(
            hard={str(k): str(v) for k, v in (hard if hard is not None else DEFAULT_EVICTION_HARD).items()},
            soft={str(k): str(v) for k, v in (fields.get("evictionSoft") or {}).items()},
            soft_grace_period={str(k): str(v) for k, v in (fields.get("evictionSoftGracePeriod") or {}).items()},
            minimum_reclaim={str(k): str(v) for k, v in (fields.get("evictionMinimumReclaim") or {}).items()},
            parse_quantity=parse_quantity,
            parse_duration=parse_go_duration,
        )
    except ThresholdError as exc:
        raise ExperimentError(f"the node's eviction settings cannot be parsed: {exc}") from exc


def signals_of_interest(scenario: Scenario, fields: Mapping[str, Any]) -> tuple[Signal, ...]:
    """The signals the scenario sets thresholds for or injects, in that order (the plot's panels)."""
    names = [
        *(fields.get("evictionHard") or DEFAULT_EVICTION_HARD),
        *(fields.get("evictionSoft") or {}),
        *scenario.inject,
    ]
    result: list[Signal] = []
    for name in names:
        signal = parse_signal(str(name))
        if signal is not None and signal not in result:
            result.append(signal)
    return tuple(result)


def eviction_differences(scenario_fields: Mapping[str, Any], node_fields: Mapping[str, Any]) -> list[str]:
    """Where the node's eviction settings differ from the scenario's (a field the scenario leaves out is fine)."""
    result = []
    for name, wanted in scenario_fields.items():
        have = node_fields.get(name)
        if isinstance(wanted, Mapping):
            have_map = have if isinstance(have, Mapping) else {}
            for signal, value in wanted.items():
                if str(have_map.get(signal)) != str(value):
                    result.append(f"{name}.{signal}: the scenario says {value}, the node has {have_map.get(signal)}")
        elif str(have) != str(wanted):
            result.append(f"{name}: the scenario says {wanted}, the node has {have}")
    return result


def classify_failed(pod: Mapping[str, Any]) -> str:
    """For a Failed pod: `refused` (rejected at admission: it never ran), `evicted`, or `failed`."""
    status = pod.get("status") or {}
    if status.get("reason") != "Evicted":
        return "failed"
    # As upstream's admit handler words a refusal; an eviction says "The node was low on resource" (or names
    # the local storage limit it broke).
    return "refused" if str(status.get("message", "")).startswith(ADMISSION_PREFIX) else "evicted"


def parse_agent_log_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """An agent log line the timeline keeps: ("evicting", {pod, signal, rank}), ("reclaim", {message}) for the
    eviction manager's reclaim, or ("gc", {message}) for image and container garbage collection."""
    parts = line.split(" ", 4)
    message = parts[4] if len(parts) == 5 else line
    found = _EVICTING.search(message)
    if found is not None:
        rank = found.group("rank")
        name = found.group("pod").rpartition("/")[2]
        return "evicting", {"pod": name, "signal": found.group("signal"), "rank": int(rank) if rank else None}
    if _RECLAIM.search(message):
        return "reclaim", {"message": message.strip()}
    if _GC.search(message):
        return "gc", {"message": message.strip()}
    return None


# --- the loop ---------------------------------------------------------------------------------------------------


async def _record_node(rec: Recorder) -> None:
    node = await rec.target.admin.get(paths.node(rec.target.node))
    now = _now()
    status = node.get("status") or {}
    allocatable = (status.get("allocatable") or {}).get("memory")
    if allocatable is not None:
        rec.allocatable_memory = int(parse_quantity(str(allocatable)))
    for condition in status.get("conditions") or ():
        kind = str(condition.get("type"))
        if kind not in PRESSURE_CONDITIONS:
            continue
        value = str(condition.get("status"))
        if rec.conditions.get(kind) != value:
            rec.conditions[kind] = value
            rec.timeline.add(now, "condition", condition=kind, status=value, reason=condition.get("reason"),
                             message=condition.get("message"))  # fmt: skip
    taints = {f"{t.get('key')}:{t.get('effect')}" for t in (node.get("spec") or {}).get("taints") or ()}
    for taint in sorted(taints - rec.taints):
        rec.timeline.add(now, "taint", taint=taint, status="added")
    for taint in sorted(rec.taints - taints):
        rec.timeline.add(now, "taint", taint=taint, status="removed")
    rec.taints = taints


async def _record_pods(rec: Recorder) -> None:
    items = (await rec.target.admin.list(paths.pods(rec.namespace)))["items"]
    now = _now()
    for pod in items:
        name = str(pod["metadata"]["name"])
        state = rec.pods.setdefault(name, PodState(created=True))
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        priority = (pod.get("spec") or {}).get("priority")
        qos = pod_qos(pod).value
        info = pod_info(pod)
        rec.requests[name] = {"memory": info.memory_request, "ephemeral-storage": info.ephemeral_storage_request}
        if phase != state.phase:
            state.phase = phase
            rec.timeline.add(now, "pod", pod=name, phase=phase, qos=qos, priority=priority)
        if phase != "Failed" or state.outcome:
            continue
        status = pod.get("status") or {}
        outcome = classify_failed(pod)
        state.outcome = outcome
        if outcome == "refused":
            rec.timeline.add(now, "admission-refused", pod=name, qos=qos, priority=priority,
                             reason=status.get("reason"), message=status.get("message"))  # fmt: skip
        elif outcome == "evicted":
            signal, rank = rec.evicting.get(name, (None, None))
            rec.timeline.add(now, "eviction", pod=name, qos=qos, priority=priority, signal=signal, rank=rank,
                             reason=status.get("reason"), message=status.get("message"))  # fmt: skip


async def _record_stats(rec: Recorder) -> None:
    summary = await rec.target.admin.get(paths.node(rec.target.node, "proxy") + "/stats/summary")
    now = _now()
    observed = observations_from_summary_json(summary, rec.allocatable_memory)
    effective = rec.injection.apply(observed, now) if rec.injection is not None else observed
    elapsed = rec.injection.elapsed(now) if rec.injection is not None else None
    for signal in rec.signals:
        seen = effective.get(signal)
        if seen is None:
            continue
        injected = (
            rec.injection is not None
            and elapsed is not None
            and elapsed >= 0
            and rec.injection.value_at(signal, elapsed) is not None
        )
        hard = next((t for t in rec.thresholds if t.signal == signal and t.hard), None)
        soft = next((t for t in rec.thresholds if t.signal == signal and not t.hard), None)
        real = observed.get(signal)
        rec.timeline.add(
            now,
            "signal",
            signal=str(signal),
            available=seen.available,
            observed=real.available if real is not None else None,
            capacity=seen.capacity,
            injected=injected,
            threshold=int(threshold_quantity(hard.value, seen.capacity)) if hard is not None else None,
            soft_threshold=int(threshold_quantity(soft.value, seen.capacity)) if soft is not None else None,
        )
    # Each pod's usage of what the signals rank pods by, next to its request: why a pod was chosen.
    resources = list(dict.fromkeys(RESOURCE_OF_SIGNAL[s] for s in rec.signals if s in RESOURCE_OF_SIGNAL))
    for name, usage in pod_usage_json(summary, rec.namespace).items():
        for resource in resources:
            if resource in usage:
                request = rec.requests.get(name, {}).get(resource)
                rec.timeline.add(now, "usage", pod=name, resource=resource, used=usage[resource], request=request)


async def _record_events(rec: Recorder) -> None:
    node_selector = f"involvedObject.kind=Node,involvedObject.name={rec.target.node}"
    found = [
        *(await rec.target.admin.list(paths.events("default"), field_selector=node_selector))["items"],
        *(await rec.target.admin.list(paths.events(rec.namespace)))["items"],
    ]
    now = _now()
    for event in found:
        key = (str(event["metadata"].get("uid")), int(event.get("count") or 1))
        if key in rec.events:
            continue
        rec.events.add(key)
        involved = event.get("involvedObject") or {}
        pod = involved.get("name") if involved.get("kind") == "Pod" else None
        rec.timeline.add(now, "event", pod=pod, reason=event.get("reason"), message=event.get("message"),
                         status=event.get("type"))  # fmt: skip
        if event.get("reason") == "EvictionThresholdMet" and rec.target.agent_log is None:
            rec.timeline.add(now, "reclaim", reason=event.get("reason"), message=event.get("message"))


def _record_log(rec: Recorder) -> None:
    path = rec.target.agent_log
    if path is None or not path.exists():
        return
    with path.open("rb") as f:
        f.seek(rec.log_offset)
        chunk = f.read()
    end = chunk.rfind(b"\n") + 1
    rec.log_offset += end
    now = _now()
    for raw in chunk[:end].decode(errors="replace").splitlines():
        parsed = parse_agent_log_line(raw)
        if parsed is None:
            continue
        kind, fields = parsed
        if kind in ("reclaim", "gc"):
            rec.timeline.add(now, kind, message=fields["message"])
            continue
        rec.evicting[fields["pod"]] = (fields["signal"], fields["rank"])
        for record in rec.timeline.of_kind("eviction"):  # the pod's status may have come first
            if record.get("pod") == fields["pod"]:
                record["signal"] = fields["signal"]
                if fields["rank"] is not None:
                    record["rank"] = fields["rank"]


async def _tick(rec: Recorder) -> None:
    rec.ticks += 1
    steps = [_record_node(rec), _record_pods(rec)]
    if rec.ticks % 2 == 1:
        steps += [_record_stats(rec), _record_events(rec)]
    for step in steps:
        try:
            await step
        except (KubeError, OSError, ValueError) as exc:  # one failed read leaves a gap, not an end
            log.debug("experiment read failed error=%r", exc)
    _record_log(rec)


def _status(rec: Recorder) -> str:
    pressure = ",".join(k for k, v in rec.conditions.items() if v == "True") or "no pressure"
    evicted = sum(p.outcome == "evicted" for p in rec.pods.values())
    refused = sum(p.outcome == "refused" for p in rec.pods.values())
    return f"{pressure}  evicted {evicted}  refused {refused}"


async def _create_pod(rec: Recorder, plan: PodPlan, run_id: str) -> None:
    image = rec.target.image
    if plan.image is not None:
        if "{registry}" in plan.image and rec.target.registry is None:
            raise ExperimentError(f"pod {plan.name}: {plan.image} names the testbed's registry: run it on a testbed")
        image = plan.image.replace("{registry}", rec.target.registry or "")
    body = workloads.pod_body(plan, namespace=rec.namespace, node_name=rec.target.node, image=image, run_id=run_id)
    await rec.target.admin.create(paths.pods(rec.namespace), body)
    rec.pods.setdefault(plan.name, PodState()).created = True
    rec.timeline.add(_now(), "pod", pod=plan.name, phase="Created", priority=plan.priority)


async def _resolve_injection(rec: Recorder, when: str) -> dict[str, tuple[tuple[float, str], ...]]:
    """The scenario's injection with each `threshold-Q` step resolved against what the node has now."""
    inject = rec.scenario.inject
    if not any(is_threshold_relative(v) for steps in inject.values() for _, v in steps):
        return dict(inject)
    summary = await rec.target.admin.get(paths.node(rec.target.node, "proxy") + "/stats/summary")
    observations = observations_from_summary_json(summary, rec.allocatable_memory)
    thresholds = {
        t.signal: int(threshold_quantity(t.value, observations[t.signal].capacity))
        for t in rec.thresholds
        if t.hard and t.signal in observations
    }
    resolved = resolve_injection(
        inject, observed={s: o.available for s, o in observations.items()}, thresholds=thresholds
    )
    for name, steps in resolved.items():
        rec.timeline.add(_now(), "note", signal=name, message=f"injection resolved {when}: {list(steps)}")
    return resolved


async def _inject(rec: Recorder, start: datetime, when: str) -> None:
    assert rec.target.injection_file is not None
    inject = await _resolve_injection(rec, when)
    document = injection_document(start, inject, rec.scenario.inject_capacity)
    rec.injection = parse_injection(document, parse_quantity)
    _write_atomic(rec.target.injection_file, json.dumps(document, indent=2))


async def _wait_running(rec: Recorder, names: list[str], progress: Progress) -> None:
    deadline = time.monotonic() + SETUP_TIMEOUT
    while True:
        await _tick(rec)
        waiting = [n for n in names if rec.pods.get(n, PodState()).phase != "Running"]
        if not waiting:
            return
        failed = [n for n in waiting if rec.pods.get(n, PodState()).phase in ("Failed", "Succeeded")]
        if failed:
            raise ExperimentError(f"pods of second 0 ended before the experiment began: {', '.join(failed)}")
        if time.monotonic() > deadline:
            raise ExperimentError(f"pods not Running after {SETUP_TIMEOUT:.0f}s: {', '.join(waiting)}")
        progress.show(0, f"setting up: waiting for {', '.join(waiting)}")
        await asyncio.sleep(TICK)


async def record(rec: Recorder, run_id: str) -> None:
    scenario = rec.scenario
    progress = Progress(scenario.duration)
    first = [p for p in scenario.pods if p.start_at == 0]
    for plan in first:
        await _create_pod(rec, plan, run_id)
    await _wait_running(rec, [p.name for p in first], progress)
    start = _now()
    rec.timeline.set_start(start)
    rec.timeline.add(start, "note", message="second 0: the pods run; injection starts")
    if scenario.inject and rec.target.injection_file is not None:
        await _inject(rec, start, "at second 0")
    # A threshold-Q step is resolved again just before it begins: what the node has moves meanwhile (other disk
    # writers, for one), and the step is meant to start Q below the threshold.
    rebase = sorted({at for steps in scenario.inject.values() for at, v in steps if is_threshold_relative(v)})
    late = sorted((p for p in scenario.pods if p.start_at > 0), key=lambda p: p.start_at)
    stopping = sorted((p for p in scenario.pods if p.stop_at is not None), key=lambda p: p.stop_at or 0.0)
    began = time.monotonic()
    while (elapsed := time.monotonic() - began) < scenario.duration:
        while rebase and rebase[0] - REBASE_LEAD <= elapsed:
            at = rebase.pop(0)
            if rec.target.injection_file is not None:
                await _inject(rec, start, f"for the step at {at:g} s")
        while stopping and (stopping[0].stop_at or 0.0) <= elapsed:
            plan = stopping.pop(0)
            with contextlib.suppress(NotFound):
                await rec.target.admin.delete(paths.pod(rec.namespace, plan.name), grace_period_seconds=0)
                rec.timeline.add(_now(), "pod", pod=plan.name, phase="Deleted")
        while late and late[0].start_at <= elapsed:
            plan = late.pop(0)
            try:
                await _create_pod(rec, plan, run_id)
            except KubeError as exc:
                rec.timeline.add(_now(), "note", pod=plan.name, message=f"not created: {exc}")
        await _tick(rec)
        progress.show(elapsed, _status(rec))
        await asyncio.sleep(max(0.0, TICK - (time.monotonic() - began - elapsed)))
    await _tick(rec)
    progress.done()


# --- set-up and tear-down ---------------------------------------------------------------------------------------


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


async def _wait_node_ready(admin: KubeClient, node: str, agent: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            raise ExperimentError(
                f"the agent exited ({agent.returncode}) before its node was Ready:\n{_tail(log_path)}"
            )
        with contextlib.suppress(NotFound):
            found = await admin.get(paths.node(node))
            conditions = (found.get("status") or {}).get("conditions") or ()
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return
        await asyncio.sleep(0.5)
    raise ExperimentError(f"node {node} not Ready after 90 s (agent log: {log_path})")


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _start_agent(argv: list[str], log_path: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as sink:
        return subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **env}
        )


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def _testbed(stack: AsyncExitStack) -> Testbed:
    """A testbed of the run's own, in a temporary directory, down and removed when `stack` closes."""
    from nodeagent.testbed import install as installer  # noqa: PLC0415
    from nodeagent.testbed.testbed import Testbed  # noqa: PLC0415

    installer.install()
    root = Path(tempfile.mkdtemp(prefix="nodeagent-experiment-", dir=os.environ.get("NODEAGENT_TEST_DIR")))
    bed = Testbed(root)

    async def down() -> None:
        await bed.down()
        shutil.rmtree(root, ignore_errors=True)

    stack.push_async_callback(down)
    log.info("experiment testbed coming up dir=%s", root)
    await bed.up()
    return bed


def _hand_over(bed: Testbed, stack: AsyncExitStack, admin: KubeClient) -> None:
    """Callbacks on `stack` so that the next run on `bed` (another value of a sweep, the other agent) starts as the
    first did: pushed before the agent's stop, run after it (last in, first out): no Node, no Lease."""
    from nodeagent.testbed.handover import forget_node  # noqa: PLC0415

    stack.push_async_callback(forget_node, admin, bed.settings.node_name)


async def _runtime_idle(bed: Testbed) -> None:
    """After the run's namespace is gone and before its agent stops: none of its pods' containers runs."""
    from cri.client import connect  # noqa: PLC0415
    from nodeagent.testbed.handover import HandoverError, wait_nothing_running  # noqa: PLC0415

    async with connect(f"unix://{bed.layout.containerd_socket}", timeout=30.0) as cri:
        try:
            await wait_nothing_running(cri, timeout=60.0)
        except HandoverError as exc:
            log.warning("experiment runtime not idle after the run error=%s", exc)


async def _testbed_target(
    stack: AsyncExitStack, bed: Testbed, scenario: Scenario, out: Path, *, image: str | None, agent: str
) -> Target:
    """`agent` (nodeagent, or the upstream kubelet) as `bed`'s node with the scenario's eviction settings, stopped
    when `stack` closes; the thresholds relative to what the machine has are resolved now."""
    from nodeagent.testbed import configs  # noqa: PLC0415
    from nodeagent.testbed.upstreamkubelet import start_kubelet, stop_kubelet  # noqa: PLC0415

    settings = bed.settings
    current = machine.current_available(root_dir=bed.layout.kubelet_root, image_dir=bed.layout.containerd / "root")
    fields, notes = resolve_eviction(scenario, current)
    for where, note in notes.items():
        log.info("experiment threshold resolved agent=%s field=%s value=%s", agent, where, note)
    config = yaml.safe_load(bed.layout.agent_config.read_text())
    config.update(fields)
    config_path = out / "agent-config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    injection_file = None
    agent_log = None
    admin = KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig)
    stack.push_async_callback(admin.aclose)
    _hand_over(bed, stack, admin)
    if agent == UPSTREAM:
        # Its eviction lines are klog's, not ours: the run reads its EvictionThresholdMet events instead.
        kubelet = await start_kubelet(bed, out / "kubelet.log", config=config_path)
        stack.push_async_callback(stop_kubelet, kubelet)  # removes what it left in the runtime, too
    else:
        argv = [
            sys.executable, "-m", "nodeagent", "run",
            "--config", str(config_path),
            "--kubeconfig", str(bed.layout.node_kubeconfig),
            "--node-name", settings.node_name,
            "--node-ip", settings.node_ip,
            "--root-dir", str(bed.layout.kubelet_root),
        ]  # fmt: skip
        if scenario.inject:
            injection_file = out / "injection.json"
            _write_atomic(injection_file, json.dumps(scenario.injection(), indent=2))
            argv += ["--eviction-signal-injection", str(injection_file)]
        agent_log = out / "agent.log"
        process = _start_agent(argv, agent_log, scenario.agent_env)
        stack.callback(_stop_process, process)  # before the testbed goes (callbacks run last in, first out)
    stack.push_async_callback(_runtime_idle, bed)
    if agent != UPSTREAM:
        assert agent_log is not None
        await _wait_node_ready(admin, settings.node_name, process, agent_log)
    return Target(
        admin=admin,
        node=settings.node_name,
        image=image or scenario.image or configs.busybox_image(settings),
        eviction=fields,
        injection_file=injection_file,
        agent_log=agent_log,
        registry=settings.registry,
    )


async def _cluster_target(stack: AsyncExitStack, scenario: Scenario, options: RunOptions) -> Target:
    assert options.kubeconfig is not None
    if not options.node:
        raise ExperimentError("--kubeconfig needs --node: the node whose agent the scenario exercises")
    if scenario.inject and options.injection_file is None:
        raise ExperimentError(
            "the scenario injects signals: give --injection-file F, the file the node's agent was started with "
            "(nodeagent run --eviction-signal-injection F), or run it on a testbed (without --kubeconfig)"
        )
    image = options.image or scenario.image
    if image is None:
        raise ExperimentError("--kubeconfig needs an image with sh, dd and sleep: --image or the scenario's image")
    admin = KubeClient.from_kubeconfig(options.kubeconfig)
    stack.push_async_callback(admin.aclose)
    try:
        configz = await admin.get(paths.node(options.node, "proxy") + "/configz")
        summary = await admin.get(paths.node(options.node, "proxy") + "/stats/summary")
    except KubeError as exc:
        raise ExperimentError(f"node {options.node}: cannot read /configz and /stats/summary: {exc}") from exc
    node_fields = configz.get("kubeletconfig") or {}
    current = {s: o.available for s, o in observations_from_summary_json(summary).items()}
    fields, _ = resolve_eviction(scenario, current)
    for difference in eviction_differences(fields, node_fields):
        log.warning("experiment: the node's eviction settings differ from the scenario's: %s", difference)
    injection_file = options.injection_file
    if injection_file is not None and scenario.inject:
        _write_atomic(injection_file, json.dumps(scenario.injection(), indent=2))
        # At the end, back to observed signals for that agent.
        stack.callback(_write_atomic, injection_file, json.dumps(injection_document(None, {}), indent=2))
    in_force = {k: node_fields[k] for k in ("evictionHard", "evictionSoft") if k in node_fields}
    return Target(
        admin=admin, node=options.node, image=image, eviction=in_force or fields, injection_file=options.injection_file
    )


async def _namespace(stack: AsyncExitStack, admin: KubeClient, run_id: str) -> str:
    name = f"eviction-experiment-{run_id}"
    await admin.create(paths.namespaces(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    async def delete() -> None:
        with contextlib.suppress(KubeError):
            for pod in (await admin.list(paths.pods(name)))["items"]:
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(name, pod["metadata"]["name"]), grace_period_seconds=0)
            await admin.delete(paths.namespace(name))

    stack.push_async_callback(delete)
    # Pods can be created once the controller-manager made the namespace's default ServiceAccount.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            await admin.get(paths.api_path("serviceaccounts", namespace=name, name="default"))
            return name
        await asyncio.sleep(0.5)
    raise ExperimentError(f"namespace {name}: no default ServiceAccount after 60 s")


async def _priority_classes(stack: AsyncExitStack, admin: KubeClient, scenario: Scenario, run_id: str) -> None:
    collection = paths.api_path("priorityclasses", group="scheduling.k8s.io")
    for value in sorted({p.priority for p in scenario.pods if p.priority is not None}):
        body = workloads.priority_class(run_id, value)
        await admin.create(collection, body)
        name = body["metadata"]["name"]

        async def delete(name: str = name) -> None:
            with contextlib.suppress(KubeError):
                await admin.delete(f"{collection}/{name}")

        stack.push_async_callback(delete)


def _write_outputs(rec: Recorder, out: Path) -> tuple[Path, str]:
    records = rec.timeline.records
    write_jsonl(records, out / "timeline.jsonl")
    write_csv(records, out / "timeline.csv")
    png = plot.render(
        records, out / f"{rec.scenario.name}.png", title=_title(rec.scenario), duration=rec.scenario.duration
    )
    table = report.summary_table(rec.scenario, records)
    (out / "summary.txt").write_text(table + "\n")
    return png, table


def replot(run: Path) -> tuple[Path, str]:
    """A run's plot and summary drawn again from what it recorded (its timeline.jsonl and scenario.yaml)."""
    scenario = load_scenario(run / "scenario.yaml")
    records = read_jsonl(run / "timeline.jsonl")
    png = plot.render(records, run / f"{scenario.name}.png", title=_title(scenario), duration=scenario.duration)
    table = report.summary_table(scenario, records)
    (run / "summary.txt").write_text(table + "\n")
    return png, table


def _title(scenario: Scenario) -> str:
    """The figure's title: the scenario's name only; its description is in the report (summary.txt)."""
    return f"eviction experiment: {scenario.name}"


def _prepare_dir(out: Path, scenario_file: Path) -> None:
    """`out` made, with the scenario run in it as scenario.yaml (what `experiment plot` reads)."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "scenario.yaml").exists() or not (out / "scenario.yaml").samefile(scenario_file):
        shutil.copyfile(scenario_file, out / "scenario.yaml")


OpenTarget = Callable[[AsyncExitStack, Scenario, Path], Awaitable[Target]]


async def _run_scenario(scenario_file: Path, out: Path, open_target: OpenTarget) -> tuple[Scenario, list[Record]]:
    """One run of the scenario in `scenario_file` on the target `open_target` makes, its outputs in `out`;
    everything the run made is removed when it ends, also when it fails."""
    scenario = load_scenario(scenario_file)
    _prepare_dir(out, scenario_file)
    run_id = uuid.uuid4().hex[:6]
    timeline = Timeline(_now())
    async with AsyncExitStack() as stack:
        target = await open_target(stack, scenario, out)
        namespace = await _namespace(stack, target.admin, run_id)
        await _priority_classes(stack, target.admin, scenario, run_id)
        rec = Recorder(
            scenario=scenario,
            target=target,
            namespace=namespace,
            timeline=timeline,
            thresholds=thresholds_in_force(target.eviction),
            signals=signals_of_interest(scenario, target.eviction),
        )
        try:
            await record(rec, run_id)
        finally:
            # Whatever was recorded is written, also when the run is cut short.
            if timeline.records:
                png, table = _write_outputs(rec, out)
                print(table, flush=True)
                print(f"timeline: {out / 'timeline.jsonl'} (and .csv); plot: {png}", flush=True)
    return scenario, timeline.records


async def run_experiment(options: RunOptions) -> int:
    scenario = load_scenario(options.scenario)
    plot.require_matplotlib()
    out = (options.out or Path.cwd() / f"eviction-{scenario.name}").resolve()
    if options.sweep is not None:
        return await _run_sweep(options, scenario, out)
    if options.versus_upstream:
        return await _run_comparison(options, scenario, out)
    if options.kubeconfig is not None:

        async def on_cluster(stack: AsyncExitStack, scenario: Scenario, _: Path) -> Target:
            return await _cluster_target(stack, scenario, options)

        scenario, records = await _run_scenario(options.scenario, out, on_cluster)
    else:
        async with AsyncExitStack() as stack:
            bed = await _testbed(stack)
            scenario, records = await _run_scenario(options.scenario, out, _on_testbed(bed, options.image, NODEAGENT))
    checks = report.check_expectations(scenario, report.pod_outcomes(scenario, records))
    return EXPECTATIONS_FAILED if any(not c.ok for c in checks) else 0


def _on_testbed(bed: Testbed, image: str | None, agent: str) -> OpenTarget:
    async def open_target(stack: AsyncExitStack, scenario: Scenario, out: Path) -> Target:
        return await _testbed_target(stack, bed, scenario, out, image=image, agent=agent)

    return open_target


def _load_doc(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)  # load_scenario has checked it
    return doc


async def _run_sweep(options: RunOptions, scenario: Scenario, out: Path) -> int:
    """Each value of the sweep, one run after the other on one testbed, each in a directory of its own; then the
    summary (sweep.txt, sweep.png, sweep.json) beside them."""
    assert options.sweep is not None
    if options.kubeconfig is not None:
        raise ExperimentError("--sweep runs on a testbed of its own: it sets the agent's thresholds (no --kubeconfig)")
    spec = sweep.parse_sweep(options.sweep)
    runs = sweep.sweep_scenarios(_load_doc(options.scenario), spec, str(options.scenario))
    _prepare_dir(out, options.scenario)
    done: list[tuple[str, Path]] = []
    async with AsyncExitStack() as stack:
        bed = await _testbed(stack)
        for index, (value, doc) in enumerate(runs):
            run_dir = _sweep_run_dir(out, index, value, doc)
            print(f"sweep {spec.setting}={value} ({index + 1} of {len(runs)}): {run_dir}", flush=True)
            await _run_scenario(run_dir / "scenario.yaml", run_dir, _on_testbed(bed, options.image, NODEAGENT))
            done.append((value, run_dir))
            _write_sweep(out, scenario, spec, done)  # after each run: a cut-short sweep keeps what it has
    print(_write_sweep(out, scenario, spec, done)[1], flush=True)
    return 0


def _sweep_run_dir(out: Path, index: int, value: str, doc: Mapping[str, Any]) -> Path:
    run_dir = out / sweep.run_dir_name(index, value)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(dict(doc), sort_keys=False))
    return run_dir


def _write_sweep(
    out: Path, scenario: Scenario, spec: sweep.SweepSpec, runs: list[tuple[str, Path]]
) -> tuple[Path, str]:
    (out / "sweep.json").write_text(json.dumps({"setting": spec.setting, "runs": [
        {"value": value, "dir": run_dir.name} for value, run_dir in runs]}, indent=2) + "\n")  # fmt: skip
    rows = [sweep.sweep_row(spec, value, read_jsonl(run_dir / "timeline.jsonl")) for value, run_dir in runs]
    table = sweep.sweep_table(scenario, spec, rows)
    (out / "sweep.txt").write_text(table + "\n")
    png = summaryplot.render_sweep(spec, rows, out / "sweep.png", title=f"eviction sweep: {scenario.name}",
                                   duration=scenario.duration)  # fmt: skip
    return png, table


async def _run_comparison(options: RunOptions, scenario: Scenario, out: Path) -> int:
    """The scenario on nodeagent, then on the upstream kubelet, on one testbed; then comparison.txt and
    comparison.png beside the two runs. Exit status 2 when they did not evict the same pods in the same order."""
    if options.kubeconfig is not None:
        raise ExperimentError("--versus-upstream runs both agents on a testbed of its own (no --kubeconfig)")
    compare.check_comparable(scenario)
    from nodeagent.testbed.versions import kubelet_path  # noqa: PLC0415

    if not kubelet_path().exists():
        raise ExperimentError(f"the upstream kubelet is not built ({kubelet_path()}): nodeagent testbed install "
                              "--with-kubelet")  # fmt: skip
    _prepare_dir(out, options.scenario)
    async with AsyncExitStack() as stack:
        bed = await _testbed(stack)
        for agent in compare.AGENTS:
            print(f"comparison: the scenario on {agent}: {out / agent}", flush=True)
            await _run_scenario(options.scenario, out / agent, _on_testbed(bed, options.image, agent))
    png, table, same = _write_comparison(out, scenario)
    print(table, flush=True)
    print(f"plot: {png}", flush=True)
    return 0 if same else EXPECTATIONS_FAILED


def _write_comparison(out: Path, scenario: Scenario) -> tuple[Path, str, bool]:
    records = {agent: read_jsonl(out / agent / "timeline.jsonl") for agent in compare.AGENTS}
    rows = compare.comparison_rows(scenario, records)
    table = compare.comparison_table(scenario, rows)
    (out / "comparison.txt").write_text(table + "\n")
    png = summaryplot.render_comparison(records, rows, out / "comparison.png",
                                        title=f"eviction experiment: {scenario.name}, nodeagent and the upstream "
                                        "kubelet", duration=scenario.duration)  # fmt: skip
    return png, table, compare.agree(rows)


def replot_summary(directory: Path) -> tuple[Path, str] | None:
    """A sweep's or a comparison's summary drawn again from its runs (None: `directory` is neither)."""
    if (directory / "sweep.json").exists():
        saved = json.loads((directory / "sweep.json").read_text())
        spec = sweep.parse_sweep(f"{saved['setting']}=" + ",".join(r["value"] for r in saved["runs"]))
        runs = [(str(r["value"]), directory / str(r["dir"])) for r in saved["runs"]]
        for _, run_dir in runs:
            replot(run_dir)
        return _write_sweep(directory, load_scenario(directory / "scenario.yaml"), spec, runs)
    if all((directory / agent / "timeline.jsonl").exists() for agent in compare.AGENTS):
        for agent in compare.AGENTS:
            replot(directory / agent)
        png, table, _ = _write_comparison(directory, load_scenario(directory / "scenario.yaml"))
        return png, table
    return None


__all__ = [
    "EXPECTATIONS_FAILED",
    "RunOptions",
    "classify_failed",
    "eviction_differences",
    "parse_agent_log_line",
    "replot",
    "replot_summary",
    "run_experiment",
    "signals_of_interest",
    "thresholds_in_force",
]
