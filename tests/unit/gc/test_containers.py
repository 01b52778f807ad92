"""The container GC manager over a fake runtime: what a pass removes (containers, their logs, sandboxes), the
eviction manager's variant, failures, and the periodic loop with its event. Time is a fake clock."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from cri.v1 import api_pb2
from eviction.containergc import PodState
from nodeagent.gc import ContainerGCManager
from tests.unit.fakeclock import FakeClock
from tests.unit.gc.fakes import FakeRuntime, container, sandbox

STATES = {"live": PodState.ACTIVE, "job": PodState.TERMINATED}


def manager(fake: FakeRuntime, events: list[tuple[str, str, str]] | None = None) -> ContainerGCManager:
    return ContainerGCManager(
        fake,
        pod_state=lambda uid: STATES.get(uid, PodState.REMOVED),
        sources_ready=lambda: True,
        clock=FakeClock(3600),
        record_node_event=lambda t, r, m: (events if events is not None else []).append((t, r, m)),
        unremovable=lambda cid: cid == "stuck",
    )


def restarted(fake: FakeRuntime, tmp_path: Path) -> None:
    """A live pod whose container ran four times (the last still running), a finished Job's pod, a deleted pod."""
    for n in range(3):
        fake.add(container(f"dead{n}", "live", "main", created=n, sandbox="live-s2", attempt=n))
        log = tmp_path / f"{n}.log"
        log.write_text("x")
        fake.log_paths[f"dead{n}"] = str(log)
    fake.add(
        container("running", "live", "main", created=3, state=api_pb2.CONTAINER_RUNNING, sandbox="live-s2", attempt=3),
        sandbox("live-s1", "live", created=0),
        sandbox("live-s2", "live", created=1, ready=True),
        container("job-c", "job", "main", created=0, sandbox="job-s"),
        sandbox("job-s", "job", created=0),
        container("gone-c", "gone", "main", created=0, sandbox="gone-s"),
        sandbox("gone-s", "gone", created=0),
    )


async def test_a_pass_keeps_the_most_recent_dead_container_and_removes_what_deleted_pods_left(tmp_path: Path) -> None:
    fake = FakeRuntime()
    restarted(fake, tmp_path)
    await manager(fake).garbage_collect()
    assert fake.removed == ["gone-c", "dead0", "dead1", "live-s1", "gone-s"]
    assert set(fake.containers) == {"dead2", "running", "job-c"}
    assert set(fake.sandboxes) == {"live-s2", "job-s"}
    # Their logs went with them; the kept instance's log stays.
    assert sorted(os.listdir(tmp_path)) == ["2.log"]
    # A sandbox is stopped before it is removed.
    assert fake.stopped == ["live-s1", "gone-s"]


async def test_the_eviction_managers_pass_also_removes_terminated_pods(tmp_path: Path) -> None:
    fake = FakeRuntime()
    restarted(fake, tmp_path)
    await manager(fake).delete_all_unused_containers()
    assert set(fake.containers) == {"dead2", "running"}
    assert set(fake.sandboxes) == {"live-s2"}


async def test_unknown_state_is_stopped_first_and_failures_do_not_stop_the_pass() -> None:
    fake = FakeRuntime().add(
        container("u0", "gone", "main", created=0, state=api_pb2.CONTAINER_UNKNOWN, sandbox="s"),
        container("busy", "gone", "other", created=0, sandbox="s"),
        container("stuck", "gone", "third", created=0, sandbox="s"),
        container("c1", "gone", "fourth", created=0, sandbox="s"),
        sandbox("s", "gone", created=0),
    )
    fake.fail_remove.add("busy")
    await manager(fake).garbage_collect()
    assert fake.stopped == ["u0"]
    assert fake.removed == ["u0", "c1"]
    # "busy" and "stuck" (known unremovable: never tried) are still there, so their sandbox stays too.
    assert set(fake.containers) == {"busy", "stuck"}
    assert set(fake.sandboxes) == {"s"}


async def test_containers_without_the_kubelets_labels_are_not_ours() -> None:
    foreign = api_pb2.Container(id="other", state=api_pb2.CONTAINER_EXITED, labels={})
    fake = FakeRuntime().add(foreign, api_pb2.PodSandbox(id="other-s", labels={}))
    await manager(fake).garbage_collect()
    assert fake.removed == []


async def test_run_records_container_gc_failed() -> None:
    fake = FakeRuntime()
    fake.fail_list = True
    events: list[tuple[str, str, str]] = []
    gc = manager(fake, events)
    clock = gc._clock
    assert isinstance(clock, FakeClock)
    task = asyncio.create_task(gc.run(period=60))
    try:
        await clock.advance(0)
        assert events == [("Warning", "ContainerGCFailed", "failed to list containers: " + str(_list_error()))]
        fake.fail_list = False
        await clock.advance(60)
        assert len(events) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _list_error() -> Exception:
    try:
        FakeRuntime(fail_list=True)._listing()
    except Exception as exc:
        return exc
    raise AssertionError("no error")
