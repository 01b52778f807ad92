"""PodStorage.merge: a source's reports become typed, deduplicated updates, as upstream's podStorage does."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.podconfig import Operation, PodStorage, PodUpdate, SourceUpdate

Pod = dict[str, Any]


def pod(
    uid: str,
    *,
    image: str = "busybox",
    labels: dict[str, str] | None = None,
    phase: str | None = None,
    deleted: bool = False,
) -> Pod:
    meta: dict[str, Any] = {"name": f"p-{uid}", "namespace": "default", "uid": uid, "labels": labels or {}}
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    out: Pod = {"metadata": meta, "spec": {"containers": [{"name": "c", "image": image}]}}
    if phase:
        out["status"] = {"phase": phase}
    return out


def summary(updates: list[PodUpdate]) -> list[tuple[str, list[str]]]:
    return [(u.op.value, [p["metadata"]["uid"] for p in u.pods]) for u in updates]


def storage_with(*pods: Pod) -> PodStorage:
    storage = PodStorage(now=lambda: "seen-1")
    storage.merge(SourceUpdate("api", Operation.SET, pods))
    return storage


@pytest.mark.parametrize(
    ("before", "report", "expected"),
    [
        # new pods are ADDs
        ((), SourceUpdate("api", Operation.SET, (pod("a"), pod("b"))), [("ADD", ["a", "b"])]),
        # a spec change is an UPDATE
        ((pod("a"),), SourceUpdate("api", Operation.SET, (pod("a", image="other"),)), [("UPDATE", ["a"])]),
        # a label change is an UPDATE too
        ((pod("a"),), SourceUpdate("api", Operation.UPDATE, (pod("a", labels={"x": "y"}),)), [("UPDATE", ["a"])]),
        # a deletionTimestamp is a graceful DELETE
        ((pod("a"),), SourceUpdate("api", Operation.UPDATE, (pod("a", deleted=True),)), [("DELETE", ["a"])]),
        # a status-only change is a RECONCILE
        ((pod("a"),), SourceUpdate("api", Operation.UPDATE, (pod("a", phase="Running"),)), [("RECONCILE", ["a"])]),
        # an identical report is nothing at all
        ((pod("a"),), SourceUpdate("api", Operation.SET, (pod("a"),)), []),
        # a SET that no longer lists a pod REMOVEs it
        ((pod("a"), pod("b")), SourceUpdate("api", Operation.SET, (pod("b"),)), [("REMOVE", ["a"])]),
        # an explicit REMOVE; unknown pods are ignored
        ((pod("a"),), SourceUpdate("api", Operation.REMOVE, (pod("a"), pod("zz"))), [("REMOVE", ["a"])]),
        # duplicates within one report are merged once
        ((), SourceUpdate("api", Operation.ADD, (pod("a"), pod("a", image="x"))), [("ADD", ["a"])]),
        # upstream's order: removes, adds, updates, deletes, reconciles
        (
            (pod("gone"), pod("upd"), pod("del"), pod("rec")),
            SourceUpdate(
                "api",
                Operation.SET,
                (pod("rec", phase="Running"), pod("del", deleted=True), pod("upd", image="x"), pod("new")),
            ),
            [("REMOVE", ["gone"]), ("ADD", ["new"]), ("UPDATE", ["upd"]), ("DELETE", ["del"]), ("RECONCILE", ["rec"])],
        ),
    ],
)
def test_merge(before: tuple[Pod, ...], report: SourceUpdate, expected: list[tuple[str, list[str]]]) -> None:
    storage = storage_with(*before)
    assert summary(storage.merge(report)) == expected


def test_first_empty_report_still_marks_the_source_seen() -> None:
    storage = PodStorage()
    assert not storage.seen_all(["api", "file"])
    assert summary(storage.merge(SourceUpdate("file", Operation.SET, ()))) == [("ADD", [])]
    assert not storage.seen_all(["api", "file"])
    storage.merge(SourceUpdate("api", Operation.SET, ()))
    assert storage.seen_all(["api", "file"])
    # Later empty reports produce nothing.
    assert storage.merge(SourceUpdate("api", Operation.SET, ())) == []


def test_sources_are_kept_apart() -> None:
    storage = PodStorage()
    storage.merge(SourceUpdate("api", Operation.SET, (pod("a"),)))
    storage.merge(SourceUpdate("file", Operation.SET, (pod("f"),)))
    # A SET from one source never removes another source's pods.
    assert summary(storage.merge(SourceUpdate("api", Operation.SET, ()))) == [("REMOVE", ["a"])]
    assert [p["metadata"]["uid"] for p in storage.pods()] == ["f"]


def test_annotations_record_source_and_first_seen_time() -> None:
    stamps = iter(["t1", "t2"])
    storage = PodStorage(now=lambda: next(stamps))
    [added] = storage.merge(SourceUpdate("file", Operation.SET, (pod("a"),)))
    assert added.pods[0]["metadata"]["annotations"] == {
        "kubernetes.io/config.source": "file",
        "kubernetes.io/config.seen": "t1",
    }
    [updated] = storage.merge(SourceUpdate("file", Operation.SET, (pod("a", image="x"),)))
    assert updated.pods[0]["metadata"]["annotations"]["kubernetes.io/config.seen"] == "t1"


def test_updates_are_copies_not_views_of_storage() -> None:
    storage = PodStorage()
    [added] = storage.merge(SourceUpdate("api", Operation.SET, (pod("a"),)))
    added.pods[0]["spec"]["containers"][0]["image"] = "mutated"
    assert storage.pods()[0]["spec"]["containers"][0]["image"] == "busybox"


def test_views_are_the_stored_pods_and_an_update_replaces_rather_than_edits_them() -> None:
    """pod_views/pod_view hand out the stored objects (no copy, for hot read-only paths), so an update must
    replace a pod, never edit it: a view taken before the update still shows the old version."""
    storage = storage_with(pod("a"), pod("b"))
    before = storage.pod_view("a")
    assert before is not None and before is storage.pod_view("a")
    assert [v["metadata"]["uid"] for v in storage.pod_views()] == ["a", "b"]
    assert storage.pod_view("missing") is None
    storage.merge(SourceUpdate("api", Operation.UPDATE, (pod("a", image="v2"),)))
    assert before["spec"]["containers"][0]["image"] == "busybox"
    after = storage.pod_view("a")
    assert after is not None and after["spec"]["containers"][0]["image"] == "v2"
    # A status-only change (RECONCILE) too.
    storage.merge(SourceUpdate("api", Operation.UPDATE, ({**pod("a", image="v2"), "status": {"phase": "Running"}},)))
    assert "status" not in after
    reconciled = storage.pod_view("a")
    assert reconciled is not None and reconciled["status"] == {"phase": "Running"}


def named(uid: str, name: str, namespace: str = "default") -> Pod:
    out = pod(uid)
    out["metadata"].update(name=name, namespace=namespace)
    return out


def test_a_duplicate_full_name_is_ignored_and_reported_once_naming_both_origins() -> None:
    reports: list[tuple[str, str]] = []
    storage = PodStorage(on_invalid=lambda p, message: reports.append((p["metadata"]["uid"], message)))
    update = SourceUpdate(
        "file",
        Operation.SET,
        (named("a", "web"), named("b", "web"), named("c", "web", namespace="other")),
        origins={"a": "/m/a.yaml", "b": "/m/b.yaml"},
    )
    assert summary(storage.merge(update)) == [("ADD", ["a", "c"])]
    [(uid, message)] = reports
    assert uid == "b"
    # Upstream's words (format.Pod is name_namespace(uid)), then both files.
    assert message == (
        'Error validating pod web_default(b) from file due to duplicate pod name "web", ignoring '
        "(from /m/b.yaml; the pod from /m/a.yaml keeps the name)"
    )
    # The same report again: still ignored, not reported again.
    assert storage.merge(update) == []
    assert len(reports) == 1
    # Once the duplicate is gone and comes back, it is reported again.
    storage.merge(SourceUpdate("file", Operation.SET, (named("a", "web"),)))
    storage.merge(update)
    assert len(reports) == 2


@pytest.mark.parametrize(
    ("origins", "suffix"),
    [
        ({}, ""),
        ({"b": "u items[1]"}, " (from u items[1])"),
        ({"a": "u items[0]"}, " (the pod from u items[0] keeps the name)"),
    ],
)
def test_the_duplicate_message_names_the_origins_the_source_gave(origins: dict[str, str], suffix: str) -> None:
    reports: list[str] = []
    storage = PodStorage(on_invalid=lambda p, message: reports.append(message))
    storage.merge(SourceUpdate("http", Operation.SET, (named("a", "web"), named("b", "web")), origins=origins))
    assert reports == [
        f'Error validating pod web_default(b) from http due to duplicate pod name "web", ignoring{suffix}'
    ]


def test_duplicates_are_per_source() -> None:
    reports: list[str] = []
    storage = PodStorage(on_invalid=lambda p, message: reports.append(message))
    storage.merge(SourceUpdate("file", Operation.SET, (named("a", "web"),)))
    assert summary(storage.merge(SourceUpdate("http", Operation.SET, (named("b", "web"),)))) == [("ADD", ["b"])]
    assert reports == []
    assert sorted(p["metadata"]["uid"] for p in storage.pods_by_full_name("web_default")) == ["a", "b"]
    assert storage.pod_by_uid("b") == storage.pods_of("http")["b"]
    assert storage.pod_by_uid("zz") is None


def test_the_source_annotation_is_the_storing_source_even_when_the_pod_says_otherwise() -> None:
    # A mirror pod copies its static pod's annotations (config.source "file"), yet it comes from the apiserver.
    mirror = named("m", "web")
    mirror["metadata"]["annotations"] = {
        "kubernetes.io/config.source": "file",
        "kubernetes.io/config.seen": "static-time",
        "kubernetes.io/config.mirror": "h1",
    }
    storage = PodStorage(now=lambda: "t1")
    [added] = storage.merge(SourceUpdate("api", Operation.SET, (mirror,)))
    annotations = added.pods[0]["metadata"]["annotations"]
    assert annotations["kubernetes.io/config.source"] == "api"
    assert annotations["kubernetes.io/config.seen"] == "t1"
