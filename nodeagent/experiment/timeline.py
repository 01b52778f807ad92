"""The experiment's timeline: one record per thing seen, in time order, written as JSON lines and as CSV.

A record is a flat dict: `t` (seconds since second 0; negative during set-up), `time` (RFC 3339) and `kind`:

- `signal`: `signal`, `available` (what the eviction manager decides on: injected when injected), `observed` (what
  the node reports), `capacity`, `injected`, `threshold` / `soft_threshold` (the amount each stands for);
- `condition`: `condition` (MemoryPressure, ...), `status`, `reason`, `message`, on each change;
- `taint`: `taint` (key:effect), `status` added / removed;
- `pod`: `pod`, `phase`, `qos`, `priority` on each phase change;
- `admission-refused`: `pod`, `reason`, `message` (Failed/Evicted before it ever ran);
- `usage`: `pod`, `resource` (memory, ephemeral-storage or pids: what the scenario's signals rank pods by), `used`
  (bytes or processes, from /stats/summary), `request` (the pod's effective request of it; none for pids, which
  have no request), each time the stats are read;
- `eviction`: `pod`, `signal`, `rank` (when the agent logs it), `reason`, `message`, `qos`, `priority`;
- `reclaim`: `message` (the agent's reclaim log lines, or its EvictionThresholdMet events on a cluster);
- `gc`: `message` (the agent's image and container garbage collection log lines);
- `event`: other events of the node and the pods (`reason`, `message`, `pod`).

`observations_from_summary_json` reads the signals from /stats/summary's JSON as the agent's manager reads them
from its summary (memory.available, nodefs, imagefs, pid), so the runner sees what the agent decides on.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from eviction.signals import Observation, Signal, fs_observations, memory_observation, pid_observation

Record = dict[str, Any]

CSV_COLUMNS = (
    "t",
    "time",
    "kind",
    "signal",
    "available",
    "observed",
    "capacity",
    "injected",
    "threshold",
    "soft_threshold",
    "condition",
    "taint",
    "status",
    "pod",
    "phase",
    "qos",
    "priority",
    "rank",
    "resource",
    "used",
    "request",
    "reason",
    "message",
)


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _fs(
    bytes_signal: Signal, inodes_signal: Signal, fs: Mapping[str, Any] | None, time: datetime | None
) -> dict[Signal, Observation]:
    if not fs:
        return {}
    return fs_observations(
        bytes_signal,
        inodes_signal,
        available_bytes=fs.get("availableBytes"),
        capacity_bytes=fs.get("capacityBytes"),
        inodes_free=fs.get("inodesFree"),
        inodes=fs.get("inodes"),
        time=_time(fs.get("time")) or time,
    )


def observations_from_summary_json(
    summary: Mapping[str, Any], allocatable_memory: int | None = None
) -> dict[Signal, Observation]:
    node: Mapping[str, Any] = summary.get("node") or {}
    result: dict[Signal, Observation] = {}
    memory = node.get("memory") or {}
    time = _time(memory.get("time"))
    available, working_set = memory.get("availableBytes"), memory.get("workingSetBytes")
    if available is not None and working_set is not None:
        result[Signal.MEMORY_AVAILABLE] = Observation(available, available + working_set, time)
    pods = next((c for c in node.get("systemContainers") or () if c.get("name") == "pods"), None)
    pods_working_set = ((pods or {}).get("memory") or {}).get("workingSetBytes")
    if allocatable_memory is not None and pods_working_set is not None:
        result[Signal.ALLOCATABLE_MEMORY_AVAILABLE] = memory_observation(allocatable_memory, pods_working_set, time)
    result.update(_fs(Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE, node.get("fs"), time))
    runtime = node.get("runtime") or {}
    result.update(_fs(Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE, runtime.get("imageFs"), time))
    rlimit = node.get("rlimit") or {}
    if rlimit.get("maxpid") is not None and rlimit.get("curproc") is not None:
        result[Signal.PID_AVAILABLE] = pid_observation(rlimit["maxpid"], rlimit["curproc"], _time(rlimit.get("time")))
    return result


# What each signal ranks pods by (upstream's rankMemoryPressure, rankDiskPressureFunc, rankPIDPressure): the
# resource whose per-pod usage and request the experiment records and plots.
RESOURCE_OF_SIGNAL: dict[Signal, str] = {
    Signal.MEMORY_AVAILABLE: "memory",
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: "memory",
    Signal.NODEFS_AVAILABLE: "ephemeral-storage",
    Signal.NODEFS_INODES_FREE: "ephemeral-storage",
    Signal.IMAGEFS_AVAILABLE: "ephemeral-storage",
    Signal.IMAGEFS_INODES_FREE: "ephemeral-storage",
    Signal.PID_AVAILABLE: "pids",
}


def pod_usage_json(summary: Mapping[str, Any], namespace: str) -> dict[str, dict[str, int]]:
    """Per pod of `namespace` (by name): memory working set, ephemeral storage used and process count, as far as
    /stats/summary reports them."""
    result: dict[str, dict[str, int]] = {}
    for pod in summary.get("pods") or ():
        ref = pod.get("podRef") or {}
        if ref.get("namespace") != namespace:
            continue
        found = {
            "memory": (pod.get("memory") or {}).get("workingSetBytes"),
            "ephemeral-storage": (pod.get("ephemeral-storage") or {}).get("usedBytes"),
            "pids": (pod.get("process_stats") or {}).get("process_count"),
        }
        result[str(ref.get("name"))] = {k: int(v) for k, v in found.items() if v is not None}
    return result


def pod_memory_json(summary: Mapping[str, Any]) -> dict[str, int]:
    """Working set per pod name (for the summary table)."""
    result = {}
    for pod in summary.get("pods") or ():
        working_set = (pod.get("memory") or {}).get("workingSetBytes")
        if working_set is not None:
            result[str((pod.get("podRef") or {}).get("name"))] = int(working_set)
    return result


class Timeline:
    """Records in arrival order; `t` is relative to `start` once it is set (before that, to the runner's start)."""

    def __init__(self, origin: datetime) -> None:
        self.origin = origin
        self.records: list[Record] = []

    def set_start(self, start: datetime) -> None:
        """Second 0: earlier records are moved to negative times."""
        shift = (start - self.origin).total_seconds()
        for record in self.records:
            record["t"] = round(record["t"] - shift, 3)
        self.origin = start

    def add(self, now: datetime, kind: str, **fields: Any) -> Record:
        record: Record = {"t": round((now - self.origin).total_seconds(), 3), "time": now.isoformat(), "kind": kind}
        record.update({k: v for k, v in fields.items() if v is not None})
        self.records.append(record)
        return record

    def of_kind(self, kind: str) -> list[Record]:
        return [r for r in self.records if r["kind"] == kind]


def write_jsonl(records: Iterable[Record], path: Path) -> None:
    with path.open("w") as out:
        for record in records:
            out.write(json.dumps(record, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[Record]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_csv(records: Iterable[Record], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for record in records:
            writer.writerow({k: record.get(k, "") for k in CSV_COLUMNS})


__all__ = [
    "CSV_COLUMNS",
    "RESOURCE_OF_SIGNAL",
    "Record",
    "Timeline",
    "observations_from_summary_json",
    "pod_memory_json",
    "pod_usage_json",
    "read_jsonl",
    "write_csv",
    "write_jsonl",
]
