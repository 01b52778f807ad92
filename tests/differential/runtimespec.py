"""The runtime spec of a scenario's sandboxes and containers as containerd holds it, normalised for comparison.

`crictl inspectp` / `crictl inspect` show the same thing: PodSandboxStatus / ContainerStatus with verbose=true, whose
`info` map carries containerd's view of the object: the OCI runtime spec it gave runc (`runtimeSpec`) and the CRI
config the agent sent (`config`), plus the runtime handler. Two agents that honour a pod alike give runc the same
spec, so a capability never added, a mount that is not read-only or a cgroup value not set shows here even where
the API status looks the same.

A snapshot is one flat `path -> value` mapping (as normalise.State) over every sandbox (`sandbox[POD].…`) and
container (`container[POD/NAME].…`) of the namespace. Normalised: IDs (`<hex>`), pod UIDs (`<uid:NAME>`), the
namespace, each agent's root dir (`<root>`) and pod log dir (`<podlogs>`), the testbed's dir (`<testbed>`),
/proc/PID, addresses, times, the attempt (`<attempt>`) and the container hash (`<hash>`); the env and labels are
scrubbed as the status is. Lists of scalars become one sorted value (capabilities, masked paths, mount options,
groups: a set, not a sequence), except argv; lists of objects are keyed by their destination/path/type/name;
seccomp's syscall list becomes its count and a hash.

Each sandbox also brings its pod cgroup (`sandbox[POD].podCgroup.…`): the values the agent itself wrote into the
cgroup its `cgroup_parent` names (upstream's ResourceConfigForPod; no runtime spec holds them), read from the host's
cgroupfs: cpu.shares, cpu.cfs_quota_us, cpu.cfs_period_us and memory.limit_in_bytes on cgroup v1; cpu.weight,
cpu.max and memory.max on v2. A file that is not there is left out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cri.client import CRIClient
from cri.errors import CRIError
from cri.v1 import api_pb2
from tests.differential.normalise import Context, State, flatten, scrub

Obj = dict[str, Any]
_Item = TypeVar("_Item", api_pb2.PodSandbox, api_pb2.Container)

POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
CONTAINER_NAME = "io.kubernetes.container.name"

# containerd's own bookkeeping in `info`, which says nothing of how the agent asked for the pod: the process's PID,
# snapshot keys (IDs), the CNI result (addresses; the network is compared through the API status).
DROPPED_INFO = {"pid", "removing", "snapshotKey", "snapshotter", "sandboxID", "processStatus", "netNamespaceClosed",
                "cniResult", "image"}  # fmt: skip
# Lists whose order is meaning: argv.
ORDERED = {"args", "command"}
# How a list of objects is keyed: by the list's own key field where it has one, else the first field present (else
# the index).
LIST_KEYS = {"namespaces": ("type",), "rlimits": ("type",), "envs": ("key",)}
DEFAULT_KEYS = ("destination", "container_path", "path", "name", "pageSize", "page_size")
# Values that change with the run's attempt or the agent's own hashing, not with how the pod is honoured.
ATTEMPT_PATHS = re.compile(r"(^|\.)metadata\.attempt$|annotations\.io\.kubernetes\.container\.restartCount$")
HASH_PATHS = re.compile(r"annotations\.io\.kubernetes\.container\.hash$")
_LOG_ATTEMPT = re.compile(r"/(\d+)\.log\b")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
# The termination-message file: <pod dir>/containers/NAME/<random 8 hex> (upstream's too).
_TERMINATION_FILE = re.compile(r"(/containers/[^/]+/)[0-9a-f]{8}\b")
_PROC_PID = re.compile(r"/proc/\d+/")


@dataclass(frozen=True)
class Roots:
    """Directories that differ by agent or by testbed, replaced by placeholders (longest first)."""

    agents: tuple[str, ...] = ()
    testbed: str = ""
    pod_logs: tuple[str, ...] = ()  # each agent's podLogsDir (the kubelet's may lie inside its root dir)

    def scrub(self, text: str) -> str:
        named = [(r, "<podlogs>") for r in self.pod_logs if r] + [(r, "<root>") for r in self.agents if r]
        for root, placeholder in sorted(named, key=lambda n: len(n[0]), reverse=True):
            text = text.replace(root, placeholder)
        if self.testbed:
            text = text.replace(self.testbed, "<testbed>")
        return _PROC_PID.sub("/proc/<pid>/", text)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _seccomp_syscalls(rules: list[Any]) -> Obj:
    canonical = json.dumps(rules, sort_keys=True, separators=(",", ":"))
    return {"count": len(rules), "sha256": hashlib.sha256(canonical.encode()).hexdigest()[:16]}


def shape(value: Any, key: str = "", roots: Roots = Roots()) -> Any:
    """The info tree with lists turned into what compares well: scalar lists into one (sorted) JSON string, object
    lists into mappings by their natural key, `KEY=VALUE` env into a mapping, seccomp's syscalls into a digest.
    Root directories are replaced before sorting, so that the order does not depend on them."""
    if isinstance(value, dict):
        return {k: shape(v, k, roots) for k, v in value.items()}
    if isinstance(value, str):
        return roots.scrub(value)
    if not isinstance(value, list):
        return value
    if key == "syscalls":
        return _seccomp_syscalls(value)
    if key == "env" and all(isinstance(v, str) for v in value):
        return {k: roots.scrub(v) for k, _, v in (item.partition("=") for item in value)} or "[]"
    if all(_scalar(v) for v in value):
        items = [roots.scrub(v) if isinstance(v, str) else v for v in value]
        return json.dumps(items if key in ORDERED else sorted(items, key=json.dumps))
    out: Obj = {}
    for index, item in enumerate(value):
        name = str(index)
        if isinstance(item, dict):
            keys = LIST_KEYS.get(key, DEFAULT_KEYS)
            name = next((str(item[k]) for k in keys if isinstance(item.get(k), str | int)), name)
        while name in out:  # the same destination twice: keep both, in order
            name += "'"
        out[name] = shape(item, key, roots)
    return out or "[]"


def _normalise_value(path: str, value: str) -> str:
    if ATTEMPT_PATHS.search(path):
        return "<attempt>"
    if HASH_PATHS.search(path):
        return "<hash>"
    value = _TERMINATION_FILE.sub(r"\1<rand>", _TIME.sub("<time>", value))
    return _LOG_ATTEMPT.sub("/<attempt>.log", value)


def object_state(prefix: str, info: Obj, ctx: Context, roots: Roots) -> State:
    """One sandbox's or container's verbose info as `prefix.path -> value` lines, normalised."""
    kept = {k: v for k, v in info.items() if k not in DROPPED_INFO}
    flat = flatten(shape(kept, roots=roots), ctx)
    out: State = {}
    for path, value in flat.items():
        full = f"{prefix}.{scrub(roots.scrub(path), ctx)}"
        out[full] = _normalise_value(full, value)
    return out


CGROUP_ROOT = Path("/sys/fs/cgroup")
# (controller directory on cgroup v1, file) of the pod cgroup values the kubelet writes.
POD_CGROUP_V1 = (
    ("cpu", "cpu.shares"),
    ("cpu", "cpu.cfs_quota_us"),
    ("cpu", "cpu.cfs_period_us"),
    ("memory", "memory.limit_in_bytes"),
)
POD_CGROUP_V2 = ("cpu.weight", "cpu.max", "memory.max")


def pod_cgroup_state(prefix: str, cgroup_parent: str, ctx: Context, root: Path = CGROUP_ROOT) -> State:
    """The pod cgroup's values as `prefix.podCgroup.FILE -> value` lines (the cgroupfs driver's path)."""
    relative = cgroup_parent.strip("/")
    if not relative:
        return {}
    unified = (root / "cgroup.controllers").is_file()
    files = (
        [(root / relative / name, name) for name in POD_CGROUP_V2]
        if unified
        else [(root / controller / relative / name, name) for controller, name in POD_CGROUP_V1]
    )
    out: State = {}
    for path, name in files:
        with contextlib.suppress(OSError):
            out[f"{prefix}.podCgroup.{name}"] = scrub(path.read_text().strip(), ctx)
    return out


def _latest(items: Iterable[_Item], key: Callable[[_Item], str]) -> dict[str, _Item]:
    newest: dict[str, _Item] = {}
    for item in items:
        k = key(item)
        if k not in newest or item.created_at > newest[k].created_at:
            newest[k] = item
    return newest


async def snapshot(cri: CRIClient, namespace: str, ctx: Context, roots: Roots) -> State:
    """Every sandbox and container of `namespace` now in the runtime (the newest attempt of each), normalised.

    An object removed between the list and its status is skipped: it is seen in another snapshot or not at all."""
    out: State = {}
    selector = {POD_NAMESPACE: namespace}
    sandboxes = await cri.runtime.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector=selector))
    for pod, sandbox in _latest(sandboxes, lambda s: s.labels.get(POD_NAME, s.metadata.name)).items():
        with contextlib.suppress(CRIError):
            response = await cri.runtime.pod_sandbox_status(sandbox.id, verbose=True)
            info = json.loads(response.info.get("info", "{}"))
            info["runtimeHandler"] = response.status.runtime_handler or info.get("runtimeHandler", "")
            out.update(object_state(f"sandbox[{pod}]", info, ctx, roots))
            parent = str((((info.get("config") or {}).get("linux") or {}).get("cgroup_parent")) or "")
            out.update(pod_cgroup_state(f"sandbox[{pod}]", parent, ctx))
    containers = await cri.runtime.list_containers(api_pb2.ContainerFilter(label_selector=selector))
    by_name = _latest(containers, lambda c: f"{c.labels.get(POD_NAME, '?')}/{c.labels.get(CONTAINER_NAME, '?')}")
    for name, container in by_name.items():
        with contextlib.suppress(CRIError):
            status = await cri.runtime.container_status(container.id, verbose=True)
            out.update(object_state(f"container[{name}]", json.loads(status.info.get("info", "{}")), ctx, roots))
    return out


def objects(state: State) -> set[str]:
    """The `sandbox[…]` / `container[…]` prefixes present in a snapshot."""
    return {path.partition("].")[0] + "]" for path in state}


def merge(seen: State, new: State) -> None:
    """First seen wins, per object: a container's spec as it was when a wait of the scenario first found it."""
    have = objects(seen)
    for path, value in new.items():
        if path.partition("].")[0] + "]" not in have:
            seen[path] = value
