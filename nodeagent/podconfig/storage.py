"""Per-source pod state and the merge that turns a source's report into typed updates.

The merge is a pure function of the stored state and the report, as upstream's podStorage.merge: a pod seen for
the first time is an ADD; a change to its spec, labels, annotations or deletion fields is an UPDATE, or a DELETE
when it carries a deletionTimestamp (graceful deletion); a change to its status only is a RECONCILE; a pod that a
SET no longer lists, or that a REMOVE names, is a REMOVE. Updates come out in upstream's order: removes, adds,
updates, deletes, reconciles. A source's first SET always produces an update (possibly empty) so that "all
sources ready" can be known.

Within one report, a pod whose full name (name and namespace) an earlier pod of the report already has is ignored
and reported once through `on_invalid` (upstream's filterInvalidPods: a FailedValidation event), naming where both
came from when the source says so (`SourceUpdate.origins`: the manifest files of the static directory, say).
The source annotation is always the storing source's own name, as upstream overwrites it: a mirror pod copies its
static pod's annotations, yet it came from the apiserver.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Pod = dict[str, Any]

# Set on a pod the first time any source reports it (upstream: kubernetes.io/config.seen).
CONFIG_SEEN_ANNOTATION = "kubernetes.io/config.seen"
CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FAILED_VALIDATION = "FailedValidation"  # upstream's event reason


class Operation(enum.Enum):
    SET = "SET"
    ADD = "ADD"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    REMOVE = "REMOVE"
    RECONCILE = "RECONCILE"


@dataclass(frozen=True)
class SourceUpdate:
    """What a source reports: a full SET of its pods, or an incremental ADD / UPDATE / DELETE / REMOVE."""

    source: str
    op: Operation
    pods: tuple[Pod, ...]
    # Where each pod (by UID) came from, for messages about it: a manifest file, "URL items[2]". Optional.
    origins: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodUpdate:
    """What the syncLoop receives: one operation over some pods of one source."""

    source: str
    op: Operation
    pods: tuple[Pod, ...]


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str(pod.get("metadata", {}).get("uid", ""))


def pod_full_name(pod: Mapping[str, Any]) -> str:
    """Upstream's GetPodFullName: name_namespace, unique among the pods of a node."""
    meta = pod.get("metadata", {})
    return f"{meta.get('name', '')}_{meta.get('namespace', '')}"


def pod_ref(pod: Mapping[str, Any]) -> str:
    """namespace/name, how log lines name a pod (upstream's klog.KObj)."""
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def format_pod(pod: Mapping[str, Any]) -> str:
    """Upstream's format.Pod: name_namespace(uid), how the kubelet names a pod in its messages."""
    return f"{pod_full_name(pod)}({pod_uid(pod)})"


# (pod, message): a pod of a report that was ignored, and why (the caller logs it and posts a FailedValidation event).
InvalidPodSink = Callable[[Pod, str], None]


def _semantic_view(pod: Pod) -> tuple[Any, ...]:
    meta = pod.get("metadata", {})
    # The annotations the kubelet adds itself are not part of what the source said (upstream: localAnnotations).
    ours = (CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION, CONFIG_MIRROR_ANNOTATION)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in ours}
    return (
        pod.get("spec"),
        meta.get("labels") or {},
        annotations,
        meta.get("deletionTimestamp"),
        meta.get("deletionGracePeriodSeconds"),
    )


@dataclass
class PodStorage:
    """Per-source pods by UID, and the set of sources that have reported at least once."""

    now: Callable[[], str] | None = None  # the seen-time stamp (upstream: time.Now().String()); injected
    on_invalid: InvalidPodSink | None = None
    _pods: dict[str, dict[str, Pod]] = field(default_factory=dict)
    _seen_sources: set[str] = field(default_factory=set)
    _reported_duplicates: dict[str, set[str]] = field(default_factory=dict)  # source -> UIDs already reported

    def seen_all(self, sources: Sequence[str]) -> bool:
        """Housekeeping may kill unknown pods only once every source has reported (upstream: sourcesReady)."""
        return all(s in self._seen_sources for s in sources)

    def pods(self) -> list[Pod]:
        return [copy.deepcopy(p) for by_uid in self._pods.values() for p in by_uid.values()]

    def pod_views(self) -> list[Mapping[str, Any]]:
        """The stored pods themselves, not copies: for readers that only look (merge replaces a changed pod, it
        never edits one in place). With 100 pods, copying all of them every second was 15% of the agent's CPU."""
        return [p for by_uid in self._pods.values() for p in by_uid.values()]

    def pod_view(self, uid: str) -> Mapping[str, Any] | None:
        """The stored pod itself, not a copy (see pod_views)."""
        for by_uid in self._pods.values():
            pod = by_uid.get(uid)
            if pod is not None:
                return pod
        return None

    def pods_of(self, source: str) -> Mapping[str, Pod]:
        return dict(self._pods.get(source, {}))

    def pod_by_uid(self, uid: str) -> Pod | None:
        for by_uid in self._pods.values():
            pod = by_uid.get(uid)
            if pod is not None:
                return copy.deepcopy(pod)
        return None

    def pods_by_full_name(self, full_name: str) -> list[Pod]:
        """Every source's pods of that full name (a static pod and its mirror pod share one)."""
        return [
            copy.deepcopy(p) for by_uid in self._pods.values() for p in by_uid.values() if pod_full_name(p) == full_name
        ]

    def merge(self, update: SourceUpdate) -> list[PodUpdate]:
        first_report = update.source not in self._seen_sources
        self._seen_sources.add(update.source)
        stored = self._pods.setdefault(update.source, {})
        by_op: dict[Operation, list[Pod]] = {op: [] for op in Operation}
        removes = by_op[Operation.REMOVE]

        if update.op is Operation.REMOVE:
            for pod in update.pods:
                existing = stored.pop(pod_uid(pod), None)
                if existing is not None:
                    removes.append(existing)
        else:
            reported: dict[str, Pod] = {}
            for pod in self._filter_duplicate_names(update):
                uid = pod_uid(pod)
                if uid and uid not in reported:  # dedup within one report: the first wins, as upstream
                    reported[uid] = pod
            for uid, pod in reported.items():
                merged = self._merge_one(update.source, stored, uid, pod)
                if merged is not None:
                    by_op[merged[0]].append(merged[1])
            if update.op is Operation.SET:
                for uid in [u for u in stored if u not in reported]:
                    removes.append(stored.pop(uid))

        order = (Operation.REMOVE, Operation.ADD, Operation.UPDATE, Operation.DELETE)
        out = [self._update(update.source, op, by_op[op]) for op in order if by_op[op]]
        if first_report and not any(by_op[op] for op in order[1:]):
            out.append(PodUpdate(update.source, Operation.ADD, ()))
        if by_op[Operation.RECONCILE]:
            out.append(self._update(update.source, Operation.RECONCILE, by_op[Operation.RECONCILE]))
        return out

    def _filter_duplicate_names(self, update: SourceUpdate) -> list[Pod]:
        """The report without the pods whose full name an earlier pod of it has (upstream: filterInvalidPods)."""
        first_by_name: dict[str, Pod] = {}
        kept: list[Pod] = []
        duplicates: set[str] = set()
        already = self._reported_duplicates.get(update.source, set())
        for pod in update.pods:
            name = pod_full_name(pod)
            first = first_by_name.setdefault(name, pod)
            if first is pod or pod_uid(first) == pod_uid(pod):
                kept.append(pod)
                continue
            uid = pod_uid(pod)
            duplicates.add(uid)
            if uid not in already and self.on_invalid is not None:
                self.on_invalid(pod, self._duplicate_message(update, pod, first))
        if update.op is Operation.SET or duplicates:
            self._reported_duplicates[update.source] = (
                duplicates if update.op is Operation.SET else already | duplicates
            )
        return kept

    @staticmethod
    def _duplicate_message(update: SourceUpdate, pod: Pod, first: Pod) -> str:
        """Upstream's event message, then where both pods came from when the source says (two manifest files)."""
        meta = pod.get("metadata", {})
        message = (
            f"Error validating pod {format_pod(pod)} from {update.source} due to duplicate pod name "
            f'"{meta.get("name", "")}", ignoring'
        )
        mine = update.origins.get(pod_uid(pod))
        theirs = update.origins.get(pod_uid(first))
        where = [f"from {mine}"] if mine else []
        if theirs:
            where.append(f"the pod from {theirs} keeps the name")
        return f"{message} ({'; '.join(where)})" if where else message

    @staticmethod
    def _update(source: str, op: Operation, pods: list[Pod]) -> PodUpdate:
        return PodUpdate(source, op, tuple(copy.deepcopy(p) for p in pods))

    def _merge_one(self, source: str, stored: dict[str, Pod], uid: str, pod: Pod) -> tuple[Operation, Pod] | None:
        """Store one reported pod; say which update it makes (ADD, UPDATE, DELETE, RECONCILE) or None."""
        existing = stored.get(uid)
        if existing is not None and _semantic_view(existing) == _semantic_view(pod):
            if existing.get("status") == pod.get("status"):
                return None
            # A new object rather than an edit: pod_views hands out the stored ones.
            reconciled = {**existing, "status": copy.deepcopy(pod.get("status"))}
            stored[uid] = reconciled
            return Operation.RECONCILE, reconciled
        fresh = copy.deepcopy(pod)
        meta = fresh.setdefault("metadata", {})
        annotations = meta["annotations"] = dict(meta.get("annotations") or {})
        annotations[CONFIG_SOURCE_ANNOTATION] = source
        seen = None if existing is None else (existing["metadata"].get("annotations") or {}).get(CONFIG_SEEN_ANNOTATION)
        if seen is not None:
            annotations[CONFIG_SEEN_ANNOTATION] = seen
        elif self.now is not None:
            annotations[CONFIG_SEEN_ANNOTATION] = self.now()
        stored[uid] = fresh
        if existing is None:
            return Operation.ADD, fresh
        return (Operation.DELETE if meta.get("deletionTimestamp") else Operation.UPDATE), fresh
