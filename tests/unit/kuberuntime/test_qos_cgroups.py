"""The QoS tiers (kubepods/burstable, kubepods/besteffort) as upstream's QOSContainerManager sizes them, on v1 and v2
trees shaped like the real mounts."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kuberuntime.cgroups import PodCgroupError
from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.qos_cgroups import QOSCgroups, qos_cgroup, qos_cpu_shares


def pod(cpu_request: str | None, *, cpu_limit: str | None = None, memory: str | None = None) -> dict[str, Any]:
    requests = {"cpu": cpu_request} if cpu_request else {}
    limits: dict[str, str] = {}
    if cpu_limit:
        limits["cpu"] = cpu_limit
    if memory:
        requests["memory"] = limits["memory"] = memory
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]}}


@pytest.mark.parametrize(
    ("pods", "burstable"),
    [
        ([], 2),  # MilliCPUToShares(0): the minimum
        ([pod(None)], 2),  # BestEffort pods count for nothing
        ([pod("100m")], 102),
        ([pod("100m"), pod("250m"), pod(None)], 358),  # 350m
        ([pod("1", cpu_limit="1", memory="64Mi")], 2),  # Guaranteed: not in the tier
        ([pod("1", memory="64Mi"), pod("1500m")], 2560),  # Burstable with memory, and without: 2.5 cpu
    ],
)
def test_tier_shares_from_the_active_pods(pods: list[dict[str, Any]], burstable: int) -> None:
    assert qos_cpu_shares(pods) == {QOSClass.BURSTABLE: burstable, QOSClass.BEST_EFFORT: 2}


@pytest.mark.parametrize(
    ("qos", "root", "expected"),
    [
        (QOSClass.BURSTABLE, "/", "/kubepods/burstable"),
        (QOSClass.BEST_EFFORT, "/", "/kubepods/besteffort"),
        (QOSClass.BURSTABLE, "/agent-a", "/agent-a/kubepods/burstable"),
    ],
)
def test_tier_paths(qos: QOSClass, root: str, expected: str) -> None:
    assert qos_cgroup(qos, root) == expected


def test_v2_tiers_get_cpu_weight_with_the_controllers_on(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    active = [pod("100m"), pod("250m")]
    assert QOSCgroups(lambda: active, root=tmp_path).update()[QOSClass.BURSTABLE] == 358
    assert (tmp_path / "kubepods/burstable/cpu.weight").read_text() == "14"  # 1 + (356 * 9999) // 262142
    assert (tmp_path / "kubepods/besteffort/cpu.weight").read_text() == "1"
    for level in (tmp_path, tmp_path / "kubepods"):
        assert (level / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert not (tmp_path / "kubepods/burstable/memory.max").exists()  # QOSReserved is off: no tier memory limit
    # The pods go: the tier goes back to the minimum at the next update.
    active.clear()
    QOSCgroups(lambda: active, root=tmp_path).update()
    assert (tmp_path / "kubepods/burstable/cpu.weight").read_text() == "1"


def test_v1_tiers_get_cpu_shares_under_the_cgroup_root(tmp_path: Path) -> None:
    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    QOSCgroups(lambda: [pod("2")], cgroup_root="/agent-a", root=tmp_path).update()
    assert (tmp_path / "cpu/agent-a/kubepods/burstable/cpu.shares").read_text() == "2048"
    assert (tmp_path / "cpu/agent-a/kubepods/besteffort/cpu.shares").read_text() == "2"
    assert (tmp_path / "memory/agent-a/kubepods/besteffort").is_dir()


def test_a_tier_that_cannot_be_written_is_a_pod_cgroup_error(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "memory").write_text("")  # not a directory: mkdir below it fails
    with pytest.raises(PodCgroupError, match="failed to update QoS cgroup /kubepods/burstable"):
        QOSCgroups(lambda: [], root=tmp_path).update()


async def test_the_active_pods_are_read_on_the_event_loop_not_in_the_writing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod config belongs to the event loop; read from the thread that writes the cgroup files, it changed under
    the iteration ('dictionary changed size during iteration') and the periodic update's exception stopped the agent
    (found by the soak's 100-pod churn, issue 34)."""
    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    readers: list[int] = []
    loop, second = asyncio.get_running_loop(), asyncio.Event()

    def active() -> list[dict[str, Any]]:
        readers.append(threading.get_ident())
        return [pod("1")]

    qos = QOSCgroups(active, root=tmp_path)
    write = qos.update
    writes: list[int] = []

    def update(active_pods: Sequence[dict[str, Any]] | None = None) -> dict[QOSClass, int]:
        # Signalled once the second round's files are written, not when its pods are read: a test that stopped the
        # loop at the read raced the thread's write (the file read back empty, mid-write, in one CI run).
        shares = write(active_pods)
        writes.append(threading.get_ident())
        if len(writes) == 2:
            loop.call_soon_threadsafe(second.set)
        return shares

    monkeypatch.setattr(qos, "update", update)
    assert (await qos.update_async())[QOSClass.BURSTABLE] == 1024
    task = asyncio.create_task(qos.run(period=3600))
    await asyncio.wait_for(second.wait(), 10)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert readers == [threading.get_ident()] * 2
    assert threading.get_ident() not in writes
    assert (tmp_path / "cpu/kubepods/burstable/cpu.shares").read_text() == "1024"
