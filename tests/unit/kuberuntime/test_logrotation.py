"""Container log rotation: the pure decisions in tables, the file operations on real files, and the manager
against the scripted CRI runtime (a real gRPC server) whose ReopenContainerLog creates the fresh file as containerd
does."""

from __future__ import annotations

import asyncio
import datetime
import gzip
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.config.kubelet_config import defaults
from nodeagent.kuberuntime.logrotation import (
    ContainerLogManager,
    LogRotatePolicy,
    LogRotationError,
    RotationPlan,
    all_logs,
    compress_log,
    filter_unused_logs,
    needs_rotation,
    new_policy,
    parse_max_size,
    plan_rotation,
    rotated_name,
)
from tests.unit.cri.scripted import Fail, ScriptedRuntime
from tests.unit.fakeclock import FakeClock

NOW = datetime.datetime(2026, 3, 4, 5, 6, 7)
STAMP = "20260304-050607"
L = "/p/c/0.log"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10Mi", 10 * 1024 * 1024),
        ("64Ki", 65536),
        ("1G", 1_000_000_000),
        ("100", 100),
        ("0", 0),
        ("-1", -1),
        ("1.5Ki", 1536),
    ],
)
def test_parse_max_size(text: str, expected: int) -> None:
    assert parse_max_size(text) == expected


@pytest.mark.parametrize(("text", "fragment"), [("10MB", "failed to parse"), ("1.5", "invalid max log size")])
def test_parse_max_size_refuses(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_max_size(text)


def test_policy_needs_two_files_at_least() -> None:
    with pytest.raises(ValueError, match="invalid MaxFiles 1, must be > 1"):
        new_policy("10Mi", 1)
    assert new_policy("10Mi", 2) == LogRotatePolicy(max_size=10 * 1024 * 1024, max_files=2)


@pytest.mark.parametrize(
    ("size", "max_size", "expected"),
    [(99, 100, False), (100, 100, True), (101, 100, True), (10**9, -1, False), (0, 0, True)],
)
def test_needs_rotation(size: int, max_size: int, expected: bool) -> None:
    assert needs_rotation(size, LogRotatePolicy(max_size=max_size, max_files=5)) is expected


@pytest.mark.parametrize(
    ("names", "in_use", "unused"),
    [
        ([], [], []),
        ([f"{L}.1", f"{L}.2.gz"], [f"{L}.1", f"{L}.2.gz"], []),
        # a compression that did not finish
        ([f"{L}.1", f"{L}.1.gz.tmp"], [f"{L}.1"], [f"{L}.1.gz.tmp"]),
        # a compression that finished but did not remove its source
        ([f"{L}.1", f"{L}.1.gz"], [f"{L}.1.gz"], [f"{L}.1"]),
        ([f"{L}.tmp", f"{L}.3"], [f"{L}.3"], [f"{L}.tmp"]),
    ],
)
def test_filter_unused_logs(names: list[str], in_use: list[str], unused: list[str]) -> None:
    assert filter_unused_logs(names) == (in_use, unused)


def test_all_logs_are_in_use_rotated_oldest_first_then_current() -> None:
    rotated = [f"{L}.20260102-000000", f"{L}.20260101-000000.gz", f"{L}.20260102-000000.gz", f"{L}.x.tmp"]
    assert all_logs(L, rotated) == [f"{L}.20260101-000000.gz", f"{L}.20260102-000000.gz", L]


def test_rotated_name_uses_go_layout() -> None:
    assert rotated_name(L, NOW) == f"{L}.{STAMP}"
    assert rotated_name(L, datetime.datetime(2026, 12, 31, 23, 59, 59, 999999)) == f"{L}.20261231-235959"


@pytest.mark.parametrize(
    ("rotated", "max_files", "remove", "compress"),
    [
        ([], 5, [], []),
        # the newest rotated file gets compressed now that another is coming
        ([f"{L}.20260101-000000"], 5, [], [f"{L}.20260101-000000"]),
        # max 3 files: one rotated kept (plus the one made now and the fresh log)
        (
            [f"{L}.20260101-000000.gz", f"{L}.20260102-000000"],
            3,
            [f"{L}.20260101-000000.gz"],
            [f"{L}.20260102-000000"],
        ),
        # max 2 files: every rotated file goes
        (
            [f"{L}.20260101-000000.gz", f"{L}.20260102-000000"],
            2,
            [f"{L}.20260101-000000.gz", f"{L}.20260102-000000"],
            [],
        ),
        # oldest go first, whatever order the directory listed them in
        (
            [f"{L}.20260103-000000", f"{L}.20260101-000000.gz", f"{L}.20260102-000000.gz"],
            4,
            [f"{L}.20260101-000000.gz"],
            [f"{L}.20260103-000000"],
        ),
        # leftovers go before counting: a .tmp, and a source whose .gz exists
        (
            [f"{L}.20260101-000000", f"{L}.20260101-000000.gz", f"{L}.20260102-000000.gz.tmp"],
            5,
            [f"{L}.20260101-000000", f"{L}.20260102-000000.gz.tmp"],
            [],
        ),
        # a leftover does not count towards max files
        ([f"{L}.1.tmp", f"{L}.20260101-000000.gz"], 3, [f"{L}.1.tmp"], []),
    ],
)
def test_plan_rotation(rotated: list[str], max_files: int, remove: list[str], compress: list[str]) -> None:
    assert plan_rotation(L, rotated, max_files, NOW) == RotationPlan(
        log=L, remove=tuple(remove), compress=tuple(compress), rotated=f"{L}.{STAMP}"
    )


@pytest.mark.parametrize("taken", [f"{L}.{STAMP}", f"{L}.{STAMP}.gz"])
def test_plan_rotation_waits_when_this_second_is_taken(taken: str) -> None:
    assert plan_rotation(L, [taken], 5, NOW) is None


def test_compress_log_keeps_content_and_mode(tmp_path: Path) -> None:
    rotated = tmp_path / "0.log.20260101-000000"
    content = b"2026-01-01T00:00:00.000000000Z stdout F hello\n" * 1000
    rotated.write_bytes(content)
    rotated.chmod(0o640)
    compress_log(str(rotated))
    zipped = tmp_path / "0.log.20260101-000000.gz"
    assert sorted(p.name for p in tmp_path.iterdir()) == [zipped.name]
    assert gzip.decompress(zipped.read_bytes()) == content
    assert zipped.stat().st_mode & 0o777 == 0o640


# The manager against the scripted runtime.


def _listing(*states: tuple[str, api_pb2.ContainerState.ValueType]) -> api_pb2.ListContainersResponse:
    return api_pb2.ListContainersResponse(containers=[api_pb2.Container(id=i, state=s) for i, s in states])


def _statuses(paths: dict[str, Path]) -> Callable[[Message], object]:
    async def answer(request: Message) -> Message:
        assert isinstance(request, api_pb2.ContainerStatusRequest)
        return api_pb2.ContainerStatusResponse(
            status=api_pb2.ContainerStatus(
                id=request.container_id,
                metadata=api_pb2.ContainerMetadata(name="main"),
                created_at=1,
                image=api_pb2.ImageSpec(image="busybox"),
                image_ref="sha256:0",
                log_path=str(paths[request.container_id]),
            )
        )

    return answer


def _reopener(paths: dict[str, Path]) -> Callable[[Message], object]:
    """As containerd: a fresh file at the log path."""

    async def answer(request: Message) -> Message:
        assert isinstance(request, api_pb2.ReopenContainerLogRequest)
        paths[request.container_id].touch()
        return api_pb2.ReopenContainerLogResponse()

    return answer


def _manager(client: CRIClient, clock: FakeClock, **kwargs: object) -> ContainerLogManager:
    options: dict[str, object] = {"max_size": "100", "max_files": 3, "monitor_interval": 10.0}
    options.update(kwargs)
    return ContainerLogManager(client.runtime, clock=clock, **options)  # type: ignore[arg-type]


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _stamp(clock: FakeClock) -> str:
    return clock.wall().astimezone().strftime("%Y%m%d-%H%M%S")


async def test_a_full_log_is_renamed_and_reopened_a_small_one_is_left(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    big, small = tmp_path / "big" / "0.log", tmp_path / "small" / "0.log"
    for path, size in ((big, 100), (small, 99)):
        path.parent.mkdir()
        path.write_bytes(b"x" * size)
    paths = {"big": big, "small": small}
    runtime.script["ListContainers"] = _listing(
        ("big", api_pb2.CONTAINER_RUNNING), ("small", api_pb2.CONTAINER_RUNNING)
    )
    runtime.script["ContainerStatus"] = _statuses(paths)
    runtime.script["ReopenContainerLog"] = _reopener(paths)
    clock = FakeClock()
    manager = _manager(client, clock)
    await manager.rotate_logs()
    [listing] = runtime.calls_of("ListContainers")
    assert isinstance(listing.request, api_pb2.ListContainersRequest)
    assert listing.request.filter.state.state == api_pb2.CONTAINER_RUNNING
    assert [c.request.container_id for c in runtime.calls_of("ReopenContainerLog")] == ["big"]  # type: ignore[attr-defined]
    assert _names(big.parent) == ["0.log", f"0.log.{_stamp(clock)}"]
    assert big.stat().st_size == 0
    assert (big.parent / f"0.log.{_stamp(clock)}").read_bytes() == b"x" * 100
    assert _names(small.parent) == ["0.log"]
    assert manager.rotations == 1


async def test_a_container_not_running_is_skipped(client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"x" * 500)
    runtime.script["ListContainers"] = _listing(("gone", api_pb2.CONTAINER_EXITED))
    runtime.script["ContainerStatus"] = _statuses({"gone": path})
    await _manager(client, FakeClock()).rotate_logs()
    assert runtime.calls_of("ContainerStatus") == []
    assert _names(tmp_path) == ["0.log"]


async def test_three_rotations_keep_max_files_compressing_the_older(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "0.log"
    paths = {"c": path}
    runtime.script["ListContainers"] = _listing(("c", api_pb2.CONTAINER_RUNNING))
    runtime.script["ContainerStatus"] = _statuses(paths)
    runtime.script["ReopenContainerLog"] = _reopener(paths)
    clock = FakeClock()
    manager = _manager(client, clock)
    stamps = []
    for round_ in range(3):
        path.write_bytes(f"round {round_}\n".encode() * 20)
        stamps.append(_stamp(clock))
        await manager.rotate_logs()
        await clock.advance(10)
    assert _names(tmp_path) == ["0.log", f"0.log.{stamps[1]}.gz", f"0.log.{stamps[2]}"]
    assert gzip.decompress((tmp_path / f"0.log.{stamps[1]}.gz").read_bytes()) == b"round 1\n" * 20
    assert (tmp_path / f"0.log.{stamps[2]}").read_bytes() == b"round 2\n" * 20
    assert manager.rotations == 3


async def test_a_failed_reopen_renames_the_log_back(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"x" * 200)
    runtime.script["ContainerStatus"] = _statuses({"c": path})
    runtime.script["ReopenContainerLog"] = Fail(grpc.StatusCode.UNKNOWN, "no such container")
    manager = _manager(client, FakeClock())
    with pytest.raises(LogRotationError, match="failed to reopen container log c"):
        await manager.rotate_container("c")
    assert _names(tmp_path) == ["0.log"]
    assert path.read_bytes() == b"x" * 200
    assert manager.rotations == 0


async def test_a_failure_in_one_container_does_not_stop_the_pass(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    ok, bad = tmp_path / "ok.log", tmp_path / "bad.log"
    ok.write_bytes(b"x" * 200)
    bad.write_bytes(b"x" * 200)
    paths = {"ok": ok, "bad": bad}
    runtime.script["ListContainers"] = _listing(("bad", api_pb2.CONTAINER_RUNNING), ("ok", api_pb2.CONTAINER_RUNNING))
    runtime.script["ContainerStatus"] = _statuses(paths)
    reopen = _reopener(paths)

    async def answer(request: Message) -> object:
        assert isinstance(request, api_pb2.ReopenContainerLogRequest)
        if request.container_id == "bad":
            raise RuntimeError("boom")  # the scripted server answers UNKNOWN
        return await reopen(request)  # type: ignore[misc]

    runtime.script["ReopenContainerLog"] = answer
    clock = FakeClock()
    manager = _manager(client, clock)
    await manager.rotate_logs()
    assert manager.rotations == 1
    assert _names(tmp_path) == ["bad.log", "ok.log", f"ok.log.{_stamp(clock)}"]


async def test_a_missing_log_is_reopened(client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    paths = {"c": path}
    runtime.script["ContainerStatus"] = _statuses(paths)
    runtime.script["ReopenContainerLog"] = _reopener(paths)
    assert await _manager(client, FakeClock()).rotate_container("c") is False
    assert len(runtime.calls_of("ReopenContainerLog")) == 1
    assert _names(tmp_path) == ["0.log"]


async def test_a_taken_name_postpones_the_rotation(client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    paths = {"c": path}
    runtime.script["ContainerStatus"] = _statuses(paths)
    runtime.script["ReopenContainerLog"] = _reopener(paths)
    clock = FakeClock()
    manager = _manager(client, clock)
    path.write_bytes(b"first\n" * 50)
    assert await manager.rotate_container("c") is True
    path.write_bytes(b"second\n" * 50)
    assert await manager.rotate_container("c") is True  # same second: nothing happens yet
    assert manager.rotations == 1
    assert (tmp_path / f"0.log.{_stamp(clock)}").read_bytes() == b"first\n" * 50
    await clock.advance(1)
    assert await manager.rotate_container("c") is True
    assert manager.rotations == 2
    assert (tmp_path / f"0.log.{_stamp(clock)}").read_bytes() == b"second\n" * 50


async def test_leftovers_of_an_interrupted_rotation_are_removed(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "0.log"
    paths = {"c": path}
    runtime.script["ContainerStatus"] = _statuses(paths)
    runtime.script["ReopenContainerLog"] = _reopener(paths)
    (tmp_path / "0.log.20250101-000000").write_bytes(b"a")
    (tmp_path / "0.log.20250101-000000.gz").write_bytes(gzip.compress(b"a"))
    (tmp_path / "0.log.20250102-000000.gz.tmp").write_bytes(b"partial")
    path.write_bytes(b"x" * 100)
    clock = FakeClock()
    await _manager(client, clock, max_files=5).rotate_container("c")
    assert _names(tmp_path) == ["0.log", "0.log.20250101-000000.gz", f"0.log.{_stamp(clock)}"]


async def test_workers_bound_the_containers_handled_at_once(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    paths = {f"c{i}": tmp_path / f"c{i}.log" for i in range(6)}
    for p in paths.values():
        p.write_bytes(b"small")
    runtime.script["ListContainers"] = _listing(*((i, api_pb2.CONTAINER_RUNNING) for i in paths))
    statuses = _statuses(paths)
    busy = 0
    most = 0

    async def answer(request: Message) -> object:
        nonlocal busy, most
        busy += 1
        most = max(most, busy)
        await asyncio.sleep(0.02)
        busy -= 1
        return await statuses(request)  # type: ignore[misc]

    runtime.script["ContainerStatus"] = answer
    await _manager(client, FakeClock(), max_workers=2).rotate_logs()
    assert len(runtime.calls_of("ContainerStatus")) == 6
    assert most == 2


async def test_run_passes_every_interval(client: CRIClient, runtime: ScriptedRuntime) -> None:
    runtime.script["ListContainers"] = _listing()
    clock = FakeClock()
    task = asyncio.create_task(_manager(client, clock, monitor_interval=10.0).run())
    try:
        for _ in range(1000):  # the clock moves only once the manager sleeps after its first pass
            if runtime.calls_of("ListContainers") and clock.sleepers:
                break
            await asyncio.sleep(0.01)
        assert len(runtime.calls_of("ListContainers")) == 1
        await clock.advance(9)
        await asyncio.sleep(0.05)
        assert len(runtime.calls_of("ListContainers")) == 1
        await clock.advance(1)
        for _ in range(1000):
            if len(runtime.calls_of("ListContainers")) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(runtime.calls_of("ListContainers")) == 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_run_survives_a_failed_listing(client: CRIClient, runtime: ScriptedRuntime) -> None:
    runtime.script["ListContainers"] = Fail(grpc.StatusCode.UNAVAILABLE, "down")
    clock = FakeClock()
    task = asyncio.create_task(_manager(client, clock).run())
    try:
        # The failed listing is answered over real gRPC: under load that takes a while, and the clock is advanced
        # only once the manager has gone to sleep after it (advancing earlier would wake nobody).
        for _ in range(1000):
            if runtime.calls_of("ListContainers") and clock.sleepers:
                break
            await asyncio.sleep(0.01)
        await clock.advance(10)
        for _ in range(1000):
            if len(runtime.calls_of("ListContainers")) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(runtime.calls_of("ListContainers")) == 2
        assert not task.done()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_disabled_rotation_only_waits(client: CRIClient, runtime: ScriptedRuntime) -> None:
    manager = _manager(client, FakeClock(), max_size="-1")
    assert not manager.enabled
    task = asyncio.create_task(manager.run())
    await asyncio.sleep(0.05)
    assert not task.done()
    assert runtime.calls_of("ListContainers") == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_clean_removes_every_log_of_the_container(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "0.log"
    for name in ("0.log", "0.log.20260101-000000.gz", "0.log.20260102-000000", "1.log"):
        (tmp_path / name).write_bytes(b"x")
    runtime.script["ContainerStatus"] = _statuses({"c": path})
    await _manager(client, FakeClock()).clean("c")
    assert _names(tmp_path) == ["1.log"]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_files": 1}, "invalid MaxFiles 1"),
        ({"max_workers": 0}, "invalid max workers 0"),
        ({"monitor_interval": 0.0}, "invalid monitor interval"),
        ({"max_size": "ten"}, "failed to parse container log max size"),
    ],
)
async def test_manager_refuses_bad_settings(client: CRIClient, kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        _manager(client, FakeClock(), **kwargs)


def test_config_fields_default_as_upstream() -> None:
    config = defaults()
    assert (config.container_log_max_size, config.container_log_max_files) == ("10Mi", 5)
    assert config.container_log_max_workers == 1
    assert config.container_log_monitor_interval == datetime.timedelta(seconds=10)


async def test_a_cancelled_run_finishes_the_rotation_in_progress(
    client: CRIClient, runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"x" * 200)
    paths = {"c": path}
    runtime.script["ListContainers"] = _listing(("c", api_pb2.CONTAINER_RUNNING))
    runtime.script["ContainerStatus"] = _statuses(paths)
    reopen = _reopener(paths)
    reopening = asyncio.Event()

    async def slow_reopen(request: Message) -> object:
        reopening.set()
        await asyncio.sleep(0.1)
        return await reopen(request)  # type: ignore[misc]

    runtime.script["ReopenContainerLog"] = slow_reopen
    manager = _manager(client, FakeClock())
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(reopening.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Renamed and reopened: the runtime writes to a fresh file, not to the rotated one.
    assert manager.rotations == 1
    assert path.exists() and path.stat().st_size == 0
