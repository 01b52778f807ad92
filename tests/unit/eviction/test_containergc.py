"""Container and sandbox GC decisions as upstream's containerGC makes them. Time is passed in."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from eviction.containergc import (
    ContainerGCPolicy,
    ContainerRecord,
    PodState,
    SandboxRecord,
    containers_to_remove,
    sandboxes_to_remove,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)


def c(
    id_: str, uid: str = "p1", name: str = "main", *, at: int = 0, running: bool = False, sandbox: str = "s1"
) -> ContainerRecord:
    return ContainerRecord(
        id=id_, pod_uid=uid, name=name, created=T0 + timedelta(seconds=at), running=running, sandbox_id=sandbox
    )


def s(id_: str, uid: str = "p1", *, at: int = 0, ready: bool = False) -> SandboxRecord:
    return SandboxRecord(id=id_, pod_uid=uid, created=T0 + timedelta(seconds=at), ready=ready)


ACTIVE = {"p1": PodState.ACTIVE, "p2": PodState.ACTIVE}

CONTAINER_CASES = [
    pytest.param(
        [c("d1", at=1), c("d2", at=2), c("d3", at=3), c("run", at=4, running=True)],
        ACTIVE,
        ContainerGCPolicy(),
        True,
        False,
        ["d1", "d2"],
        id="restarted container: the newest dead instance stays, older go oldest first, running untouched",
    ),
    pytest.param(
        [c("a1", name="a", at=1), c("a2", name="a", at=2), c("b1", name="b", at=3)],
        ACTIVE,
        ContainerGCPolicy(),
        True,
        False,
        ["a1"],
        id="units are per container name",
    ),
    pytest.param(
        [c("x1", "gone", at=1), c("x2", "gone", at=2), c("d1", at=1), c("d2", at=2)],
        ACTIVE,
        ContainerGCPolicy(),
        True,
        False,
        ["x1", "x2", "d1"],
        id="a removed pod's containers all go",
    ),
    pytest.param(
        [c("x1", "gone", at=1), c("x2", "gone", at=2)],
        ACTIVE,
        ContainerGCPolicy(),
        False,
        False,
        ["x1"],
        id="sources not ready: an unknown pod is treated as existing",
    ),
    pytest.param(
        [c("j1", "job", at=1), c("j2", "job", at=2)],
        {"job": PodState.TERMINATED},
        ContainerGCPolicy(),
        True,
        False,
        ["j1"],
        id="periodic: a terminated, not deleted pod keeps its last exit",
    ),
    pytest.param(
        [c("j1", "job", at=1), c("j2", "job", at=2)],
        {"job": PodState.TERMINATED},
        ContainerGCPolicy(),
        True,
        True,
        ["j1", "j2"],
        id="eviction manager (evictNonDeletedPods): a terminated pod's containers all go",
    ),
    pytest.param(
        [c("old", at=0), c("young", at=3590), c("younger", at=3595)],
        ACTIVE,
        ContainerGCPolicy(min_age=timedelta(seconds=20)),
        True,
        False,
        [],
        id="min age: the young ones are not evictable, so the old one is the newest evictable",
    ),
    pytest.param(
        [c("d1", at=1), c("d2", at=2), c("d3", at=3)],
        ACTIVE,
        ContainerGCPolicy(max_per_pod_container=-1),
        True,
        False,
        [],
        id="no per-container limit",
    ),
    pytest.param(
        [c("a1", "p1", at=1), c("a2", "p1", at=2), c("a3", "p1", at=5), c("b1", "p2", at=3), c("b2", "p2", at=4)],
        ACTIVE,
        ContainerGCPolicy(max_per_pod_container=-1, max_containers=2),
        True,
        False,
        ["a1", "a2", "b1"],
        id="max containers: an equal share per unit",
    ),
    pytest.param(
        [c("a1", "p1", at=1), c("b1", "p2", at=2), c("c1", "p3", at=3)],
        {"p1": PodState.ACTIVE, "p2": PodState.ACTIVE, "p3": PodState.ACTIVE},
        ContainerGCPolicy(max_per_pod_container=-1, max_containers=1),
        True,
        False,
        ["a1", "b1"],
        id="max containers below the unit count: the oldest anywhere",
    ),
]


@pytest.mark.parametrize(("containers", "known", "policy", "ready", "non_deleted", "expected"), CONTAINER_CASES)
def test_containers_to_remove(
    containers: list[ContainerRecord],
    known: Mapping[str, PodState],
    policy: ContainerGCPolicy,
    ready: bool,
    non_deleted: bool,
    expected: list[str],
) -> None:
    removed = containers_to_remove(
        containers,
        lambda uid: known.get(uid, PodState.REMOVED),
        policy=policy,
        now=NOW,
        all_sources_ready=ready,
        evict_non_deleted=non_deleted,
    )
    assert [r.id for r in removed] == expected


SANDBOX_CASES = [
    pytest.param(
        [s("s1", at=1), s("s2", at=2), s("s3", at=3, ready=True)],
        [],
        ACTIVE,
        False,
        ["s1", "s2"],
        id="a live pod keeps its newest (ready) sandbox; older dead ones go",
    ),
    pytest.param(
        [s("s1", at=1), s("s2", at=2)],
        [],
        ACTIVE,
        False,
        ["s1"],
        id="a live pod keeps its newest sandbox even when dead",
    ),
    pytest.param(
        [s("s1", at=1), s("s2", at=2)],
        [c("d", sandbox="s1")],
        ACTIVE,
        False,
        [],
        id="a sandbox still holding a container is active",
    ),
    pytest.param(
        [s("g1", "gone", at=1), s("g2", "gone", at=2)],
        [],
        ACTIVE,
        False,
        ["g1", "g2"],
        id="a removed pod loses every dead sandbox, the newest too",
    ),
    pytest.param(
        [s("g1", "gone", at=1), s("g2", "gone", at=2, ready=True)],
        [],
        ACTIVE,
        False,
        ["g1"],
        id="never a ready sandbox",
    ),
    pytest.param(
        [s("j1", "job", at=1)],
        [],
        {"job": PodState.TERMINATED},
        False,
        [],
        id="periodic: a terminated pod keeps its sandbox",
    ),
    pytest.param(
        [s("j1", "job", at=1)],
        [],
        {"job": PodState.TERMINATED},
        True,
        ["j1"],
        id="eviction manager: a terminated pod's sandbox goes",
    ),
]


@pytest.mark.parametrize(("sandboxes", "containers", "known", "non_deleted", "expected"), SANDBOX_CASES)
def test_sandboxes_to_remove(
    sandboxes: list[SandboxRecord],
    containers: list[ContainerRecord],
    known: Mapping[str, PodState],
    non_deleted: bool,
    expected: list[str],
) -> None:
    removed = sandboxes_to_remove(
        sandboxes, containers, lambda uid: known.get(uid, PodState.REMOVED), evict_non_deleted=non_deleted
    )
    assert [r.id for r in removed] == expected
