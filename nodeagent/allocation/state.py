"""The allocated and actuated resources of each pod's containers, checkpointed on disk (upstream:
pkg/kubelet/allocation/state, `stateCheckpoint`).

Two checkpoints under the agent's root dir, named as upstream's: `allocated_pods_state` (what the kubelet accepted
for each container: the spec's resources at admission, then each resize it allowed) and `actuated_pods_state` (what
the runtime was last told: at CreateContainer and after each UpdateContainerResources that succeeded). Both survive
a restart, so a resize accepted before one is neither forgotten nor re-decided against a node that has since filled.

The layout is upstream's: `{"data": "<json>", "checksum": N}` where the data is
`{"entries": {"<pod uid>": {"ContainerResources": {"<container>": {"limits": {...}, "requests": {...}}}}}}`. The
checksum is ours (FNV-1a 32 of the data text), not the Go kubelet's spew-printed hash: a file written by one agent
is not read by the other. A file that cannot be read is an error at start, as upstream's ("please drain this node
and delete ... before restarting Kubelet"); nothing is guessed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)

ALLOCATED_PODS_STATE = "allocated_pods_state"
ACTUATED_PODS_STATE = "actuated_pods_state"

# container name -> v1.ResourceRequirements as JSON ({"limits": {...}, "requests": {...}}; quantities as strings)
PodResources = dict[str, dict[str, Any]]


class AllocationStateError(Exception):
    """A checkpoint exists but cannot be used."""


def fnv1a_32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def _requirements(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key in ("limits", "requests"):
        part = value.get(key)
        if isinstance(part, Mapping) and part:
            out[key] = {str(k): str(v) for k, v in part.items()}
    return out


class ResourceState:
    """One checkpoint: pod UID -> container name -> resources, kept in memory and written on every change.

    `directory` None keeps it in memory only (unit tests, and a standalone agent without a root dir)."""

    def __init__(self, directory: str | None, name: str) -> None:
        self._path = os.path.join(directory, name) if directory else None
        self._pods: dict[str, PodResources] = {}
        self._last_checksum: int | None = None
        if self._path is not None:
            self._pods = self._restore(self._path)

    @property
    def path(self) -> str | None:
        return self._path

    @staticmethod
    def _restore(path: str) -> dict[str, PodResources]:
        try:
            with open(path, "rb") as handle:
                blob = handle.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise AllocationStateError(f"could not read checkpoint {path}: {exc}") from exc
        hint = f"please drain this node and delete pod resource information checkpoint file {path!r} before restarting"
        try:
            outer = json.loads(blob)
            data = outer["data"]
            checksum = int(outer["checksum"])
            if not isinstance(data, str):
                raise TypeError("data is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            raise AllocationStateError(f"could not restore state from checkpoint: {exc}, {hint}") from exc
        if fnv1a_32(data.encode()) != checksum:
            raise AllocationStateError(f"could not restore state from checkpoint: checksum mismatch, {hint}")
        try:
            entries = json.loads(data).get("entries") or {}
            pods = {
                str(uid): {
                    str(name): _requirements(resources)
                    for name, resources in (info.get("ContainerResources") or {}).items()
                }
                for uid, info in entries.items()
            }
        except (ValueError, AttributeError) as exc:
            raise AllocationStateError(f"could not restore state from checkpoint: {exc}, {hint}") from exc
        log.info("allocation checkpoint restored path=%s pods=%d", path, len(pods))
        return pods

    def _store(self) -> None:
        """Save the checkpoint. A write that fails (a full root dir) is logged and the in-memory state goes on, as
        upstream's storeState error is only logged by its callers; the next change writes everything again."""
        try:
            self._write()
        except OSError as exc:
            log.error("failed to save pod allocation checkpoint path=%s error=%s", self._path, exc)

    def _write(self) -> None:
        if self._path is None:
            return
        entries = {uid: {"ContainerResources": containers} for uid, containers in sorted(self._pods.items())}
        data = json.dumps({"entries": entries} if entries else {}, sort_keys=True, separators=(",", ":"))
        checksum = fnv1a_32(data.encode())
        if checksum == self._last_checksum:
            return
        blob = json.dumps({"data": data, "checksum": checksum}).encode()
        directory = os.path.dirname(self._path)
        os.makedirs(directory, exist_ok=True)
        # Written aside and renamed, so a crash leaves the old checkpoint or the new one, never half of one.
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(blob)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            with_suppressed_unlink(tmp)
            raise
        self._last_checksum = checksum

    def get_container(self, uid: str, name: str) -> dict[str, Any] | None:
        found = self._pods.get(uid, {}).get(name)
        return copy.deepcopy(found) if found is not None else None

    def get_pod(self, uid: str) -> PodResources | None:
        found = self._pods.get(uid)
        return copy.deepcopy(found) if found is not None else None

    def uids(self) -> set[str]:
        return set(self._pods)

    def set_pod(self, uid: str, resources: Mapping[str, Mapping[str, Any]]) -> None:
        self._pods[uid] = {str(name): _requirements(r) for name, r in resources.items()}
        self._store()

    def set_container(self, uid: str, name: str, resources: Mapping[str, Any]) -> None:
        self._pods.setdefault(uid, {})[name] = _requirements(resources)
        self._store()

    def remove_pod(self, uid: str) -> None:
        if self._pods.pop(uid, None) is not None:
            self._store()

    def remove_orphans(self, remaining: Iterable[str]) -> None:
        keep = set(remaining)
        gone = [uid for uid in self._pods if uid not in keep]
        for uid in gone:
            del self._pods[uid]
        if gone:
            self._store()


def with_suppressed_unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
