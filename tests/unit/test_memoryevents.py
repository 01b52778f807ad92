"""The memory.events notifier (nodeagent.memoryevents, eviction.memoryevents): the counters parsed and compared in
tables; the notifier over a real inotify watch of a real file in a tmp dir (the kernel's own file-modified event, as
cgroupfs raises it for memory.events): a grown max/oom_kill wakes with the counters that moved, `low` alone does
not, a burst within the hold-off is one held-back report, a removed file disarms and the next update re-arms; and
which notifiers a v2 tree gets."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from pathlib import Path

import pytest

from eviction.memoryevents import describe, moved, notification, parse_memory_events
from nodeagent.config import KubeletConfiguration
from nodeagent.evictionmanager import configured_notifiers
from nodeagent.memoryevents import InotifyModifyWatch, MemoryEventsNotifier, memory_events_notifiers
from nodeagent.memorynotifier import NotifierError
from tests.unit.test_memorynotifier import ALLOCATABLE, HARD, summary

RECORDED = "low 0\nhigh 0\nmax 17\noom 0\noom_kill 0\noom_group_kill 0\n"  # a kubepods.slice on Linux 6.1


def events(low: int = 0, high: int = 0, max_: int = 17, oom: int = 0, oom_kill: int = 0) -> str:
    return f"low {low}\nhigh {high}\nmax {max_}\noom {oom}\noom_kill {oom_kill}\noom_group_kill 0\n"


def test_parse_recorded() -> None:
    assert parse_memory_events(RECORDED) == {
        "low": 0, "high": 0, "max": 17, "oom": 0, "oom_kill": 0, "oom_group_kill": 0
    }  # fmt: skip
    assert parse_memory_events("max x\n\nhigh 2\n") == {"high": 2}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(RECORDED, RECORDED, {}, id="nothing"),
        pytest.param(RECORDED, events(low=5), {}, id="low-does-not-wake"),
        pytest.param(RECORDED, events(max_=20), {"max": 3}, id="max"),
        pytest.param(RECORDED, events(max_=18, oom=1, oom_kill=1), {"max": 1, "oom": 1, "oom_kill": 1}, id="oom"),
        pytest.param(events(high=9), events(high=2), {"high": 2}, id="cgroup-made-anew"),
        pytest.param("", events(max_=1), {"max": 1}, id="from-nothing"),
    ],
)
def test_moved(before: str, after: str, expected: dict[str, int]) -> None:
    assert moved(parse_memory_events(before), parse_memory_events(after)) == expected


def test_message() -> None:
    assert describe({"oom_kill": 1, "max": 12}) == "max+12 oom_kill+1"
    assert notification("pods", {"max": 3}) == "eviction manager: memory.events of the pods cgroup moved: max+3"


async def next_message(messages: asyncio.Queue[str], timeout: float = 5.0) -> str:
    return await asyncio.wait_for(messages.get(), timeout)


def armed(path: Path, holdoff: float = 0.0) -> tuple[MemoryEventsNotifier, asyncio.Queue[str]]:
    messages: asyncio.Queue[str] = asyncio.Queue()
    notifier = MemoryEventsNotifier(str(path), holdoff=holdoff)
    notifier.start(messages.put_nowait)
    notifier.update(summary(), None)
    return notifier, messages


async def test_a_real_modification_wakes_with_what_moved(tmp_path: Path) -> None:
    path = tmp_path / "memory.events"
    path.write_text(RECORDED)
    notifier, messages = armed(path)
    try:
        path.write_text(events(max_=20, oom_kill=1))
        assert await next_message(messages) == notification("pods", {"max": 3, "oom_kill": 1})
        path.write_text(events(low=4, max_=20, oom_kill=1))  # only low: read, nothing reported
        path.write_text(events(low=4, max_=21, oom_kill=1))
        assert await next_message(messages) == notification("pods", {"max": 1})
        assert messages.empty()
    finally:
        notifier.stop()


async def test_a_burst_within_the_holdoff_is_held_back_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "memory.events"
    path.write_text(RECORDED)
    loop = asyncio.get_running_loop()
    reports: list[tuple[float, str]] = []
    notifier = MemoryEventsNotifier(str(path), holdoff=0.3)
    notifier.start(lambda message: reports.append((loop.time(), message)))
    notifier.update(summary(), None)
    try:
        path.write_text(events(max_=18))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if reports:
                break
        assert [m for _, m in reports] == [notification("pods", {"max": 1})]  # the first at once
        for n in range(19, 30):  # 11 more, each a wake-up, all within the hold-off on a quiet machine
            path.write_text(events(max_=n))
            await asyncio.sleep(0.01)
        total = 1
        deadline = loop.time() + 5
        while total < 12 and loop.time() < deadline:
            await asyncio.sleep(0.05)
            total = sum(int(m.rsplit("+", 1)[1]) for _, m in reports)
        assert total == 12, reports  # nothing lost
        times = [t for t, _ in reports]
        assert all(b - a >= 0.29 for a, b in itertools.pairwise(times)), reports  # never closer
        assert len(reports) <= 1 + (times[-1] - times[0]) / 0.29
        await asyncio.sleep(0.4)
        assert sum(int(m.rsplit("+", 1)[1]) for _, m in reports) == 12
    finally:
        notifier.stop()


async def test_a_removed_file_disarms_and_the_next_update_rearms(tmp_path: Path) -> None:
    path = tmp_path / "memory.events"
    path.write_text(RECORDED)
    notifier, messages = armed(path)
    try:
        path.unlink()  # as rmdir of the cgroup: the watch goes with the file
        for _ in range(100):
            await asyncio.sleep(0.01)
            if notifier._watch is None:
                break
        assert notifier._watch is None
        path.write_text(events(max_=30))
        notifier.update(summary(), None)  # re-armed, the new file's counters the baseline
        path.write_text(events(max_=31))
        assert await next_message(messages) == notification("pods", {"max": 1})
    finally:
        notifier.stop()


async def test_update_without_the_file_is_a_notifier_error(tmp_path: Path) -> None:
    notifier = MemoryEventsNotifier(str(tmp_path / "memory.events"))
    notifier.start(lambda message: None)
    with pytest.raises(NotifierError, match=r"watch .*memory\.events"):
        notifier.update(summary(), None)
    notifier.stop()


async def test_stop_closes_the_watch(tmp_path: Path) -> None:
    path = tmp_path / "memory.events"
    path.write_text(RECORDED)
    notifier, messages = armed(path)
    notifier.stop()
    path.write_text(events(max_=99))
    await asyncio.sleep(0.05)
    assert messages.empty()
    notifier.stop()  # twice is fine


def test_inotify_drain_on_a_quiet_file_is_alive(tmp_path: Path) -> None:
    path = tmp_path / "memory.events"
    path.write_text(RECORDED)
    watch = InotifyModifyWatch(str(path))
    try:
        assert watch.drain()
        path.write_text(events(max_=20))
        assert watch.drain()
    finally:
        watch.close()


def test_v2_tree_watches_the_pods_cgroup(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    [found] = memory_events_notifiers([HARD, ALLOCATABLE], cgroup_root="/", cgroup_driver="systemd", mount=tmp_path)
    assert isinstance(found, MemoryEventsNotifier)
    assert found.path == f"{tmp_path}/kubepods.slice/memory.events"
    assert found.description == "memory.events of the pods cgroup"
    assert memory_events_notifiers([], mount=tmp_path) == []


def test_v1_tree_has_no_memory_events(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    assert memory_events_notifiers([HARD, ALLOCATABLE], mount=tmp_path) == []


def test_the_agent_adds_it_on_v2_with_kernel_memcg_notification(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    config = dataclasses.replace(KubeletConfiguration(enforce_node_allocatable=()), kernel_memcg_notification=True)
    found = configured_notifiers(config, mount=tmp_path)
    assert [type(n).__name__ for n in found] == ["PressureThresholdNotifier", "MemoryEventsNotifier"]
