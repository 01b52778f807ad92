"""The fake runtime alone: the contract scenario's outcomes (compared with containerd's in
tests/integration/test_fake_cri_contract.py), the configurable behaviour (exits, OOM, latency, usage) and the
container log files (their records, read back by the agent's own log reader)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from cri.errors import NotFoundError, UnknownCRIError
from cri.fake import Behaviour, FakeCRI
from cri.fake import behaviour as behaviours
from cri.fake import logs as fakelogs
from cri.v1 import api_pb2
from nodeagent.server import logs as reader
from tests.cricontract import (
    container_config,
    read_log_file,
    run_events_scenario,
    run_log_scenario,
    run_scenario,
    sandbox_config,
)

IMAGE = "registry.test/busybox:1.35"


@pytest.fixture
def logs(tmp_path: Path) -> str:
    """The pods' log directory (the request builders make it; the fake writes its containers' log files there)."""
    return str(tmp_path / "logs")


async def test_contract_outcomes(logs: str) -> None:
    fake = FakeCRI("n1")
    transcript = dict(
        (entry[0], entry[1:])
        for entry in await run_scenario(fake.runtime, fake.image, IMAGE, logs, missing_image="registry.test/absent:1")
    )
    expected = {
        "pull_missing": ("NotFoundError",),
        "create_in_unknown_sandbox": ("NotFoundError",),
        "start_twice": ("UnknownCRIError",),
        "stop_again": ("ok",),
        "start_exited": ("UnknownCRIError",),
        "remove_exited": ("ok",),
        "remove_again": ("ok",),
        "status_removed": ("NotFoundError",),
        "stop_unknown": ("ok",),
        "remove_running": ("ok",),
        "remove_sandbox_unknown": ("ok",),
        "sandbox_status_unknown": ("NotFoundError",),
        "stop_sandbox_unknown": ("ok",),
        "sandbox_stopped": ("SANDBOX_NOTREADY",),
        "create_in_stopped_sandbox": ("NotFoundError",),
        "containers_after_sandbox_removed": (0,),
        "list_containers_exited": (["fail", "short"],),
        "list_sandbox_id_prefix": ([True],),
    }
    assert {key: transcript[key] for key in expected} == expected
    assert transcript["exited_1"][0]["reason"] == "Error"
    assert transcript["stopped_kill"][0]["exit_code"] == 137
    assert not fake.runtime.sandboxes and not fake.runtime.containers


async def test_version_names_the_runtime_as_kubemarks_fake_does() -> None:
    # The name types the emulated pods' containerIDs (`fakeRuntime://<id>`), never containerd's.
    version = await FakeCRI("n1").runtime.version("v1")
    assert (version.runtime_name, version.runtime_version, version.runtime_api_version) == (
        "fakeRuntime",
        "0.1.0",
        "v1",
    )


async def test_events_shapes(logs: str) -> None:
    fake = FakeCRI("n1")
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    shapes = await run_events_scenario(fake.runtime, IMAGE, logs)
    assert shapes == [
        ("CONTAINER_CREATED_EVENT", True, True, 0),
        ("CONTAINER_STARTED_EVENT", True, True, 0),
        ("CONTAINER_CREATED_EVENT", False, True, 1),
        ("CONTAINER_STARTED_EVENT", False, True, 1),
        ("CONTAINER_STOPPED_EVENT", False, True, 1),
        ("CONTAINER_DELETED_EVENT", False, True, 0),
        ("CONTAINER_STOPPED_EVENT", True, True, 0),
        ("CONTAINER_DELETED_EVENT", True, False, 0),
    ]


async def _started(fake: FakeCRI, logs: str, annotations: dict[str, str], command: list[str]) -> str:
    config = sandbox_config("p", logs)
    config.annotations.update(annotations)
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    sandbox = await fake.runtime.run_pod_sandbox(config)
    cid = await fake.runtime.create_container(sandbox, container_config("c", IMAGE, command), config)
    await fake.runtime.start_container(cid)
    return cid


@pytest.mark.parametrize(
    ("annotations", "command", "exit_code", "reason"),
    [
        ({behaviours.EXIT_AFTER: "0.01", behaviours.EXIT_CODE: "3"}, ["server"], 3, "Error"),
        ({behaviours.EXIT_AFTER: "0.01"}, ["server"], 0, "Completed"),
        ({behaviours.OOM_AFTER: "0.01"}, ["server"], 137, "OOMKilled"),
        ({}, ["sh", "-c", "exit 7"], 7, "Error"),
        ({}, ["sleep", "0.01"], 0, "Completed"),
    ],
)
async def test_container_fates(
    annotations: dict[str, str], command: list[str], exit_code: int, reason: str, logs: str
) -> None:
    fake = FakeCRI("n1")
    cid = await _started(fake, logs, annotations, command)
    assert (await fake.runtime.container_status(cid)).status.state == api_pb2.CONTAINER_RUNNING
    await asyncio.sleep(0.05)
    status = (await fake.runtime.container_status(cid)).status
    assert (api_pb2.ContainerState.Name(status.state), status.exit_code, status.reason) == (
        "CONTAINER_EXITED",
        exit_code,
        reason,
    )


async def test_server_runs_until_stopped_and_timers_cancel_on_close(logs: str) -> None:
    fake = FakeCRI("n1", behaviour=Behaviour(exit_after=0.01))
    cid = await _started(fake, logs, {}, ["server"])
    await fake.close()
    await asyncio.sleep(0.03)
    assert (await fake.runtime.container_status(cid)).status.state == api_pb2.CONTAINER_RUNNING


async def test_latencies(logs: str) -> None:
    fake = FakeCRI("n1", behaviour=Behaviour(pull_latency=0.05, start_latency=0.05))
    loop = asyncio.get_running_loop()
    began = loop.time()
    await _started(fake, logs, {}, ["server"])
    assert loop.time() - began >= 0.1


async def test_usage_figures(logs: str) -> None:
    clock = [1_000_000_000]
    fake = FakeCRI("n1", now_ns=lambda: clock[0])
    cid = await _started(fake, logs, {behaviours.CPU_MILLICORES: "250", behaviours.MEMORY_BYTES: "1048576"}, ["server"])
    clock[0] += 2_000_000_000
    stats = await fake.runtime.container_stats(cid)
    assert stats.cpu.usage_nano_cores.value == 250_000_000
    assert stats.cpu.usage_core_nano_seconds.value == 500_000_000  # 2 s at a quarter core
    assert stats.memory.working_set_bytes.value == 1 << 20
    (pod,) = await fake.runtime.list_pod_sandbox_stats()
    assert pod.linux.memory.working_set_bytes.value == 1 << 20
    assert [c.attributes.id for c in pod.linux.containers] == [cid]


async def test_addresses_are_unique_and_reused_and_host_network_has_none(logs: str) -> None:
    fake = FakeCRI("n1", pod_network="198.18.0.0/30")
    first = await fake.runtime.run_pod_sandbox(sandbox_config("a", logs))
    second = await fake.runtime.run_pod_sandbox(sandbox_config("b", logs))
    ips = [(await fake.runtime.pod_sandbox_status(s)).status.network.ip for s in (first, second)]
    assert ips == ["198.18.0.1", "198.18.0.2"]
    with pytest.raises(Exception, match="no address left"):
        await fake.runtime.run_pod_sandbox(sandbox_config("c", logs))
    await fake.runtime.stop_pod_sandbox(first)
    third = await fake.runtime.run_pod_sandbox(sandbox_config("d", logs))
    assert (await fake.runtime.pod_sandbox_status(third)).status.network.ip == "198.18.0.1"
    host = sandbox_config("h", logs)
    host.linux.security_context.namespace_options.network = api_pb2.NODE
    hosted = await fake.runtime.run_pod_sandbox(host)
    assert (await fake.runtime.pod_sandbox_status(hosted)).status.network.ip == ""


async def test_ids_differ_between_fakes_and_create_needs_the_image(logs: str) -> None:
    one, two = FakeCRI("n1"), FakeCRI("n2")
    config = sandbox_config("a", logs)
    assert await one.runtime.run_pod_sandbox(config) != await two.runtime.run_pod_sandbox(config)
    # Nor between two lives of one node's fake (a fleet started again after a crash): the API would see the old
    # containers' ids come back.
    again = FakeCRI("n1")
    assert await again.runtime.run_pod_sandbox(config) != (await one.runtime.list_pod_sandbox())[0].id
    sandbox = await one.runtime.run_pod_sandbox(config)
    with pytest.raises(NotFoundError):
        await one.runtime.create_container(sandbox, container_config("c", IMAGE, ["x"]), config)


async def test_list_views_are_fresh_messages_that_follow_the_state(logs: str) -> None:
    # The fake keeps each record's list view and hands out copies: a caller editing its answer changes nothing
    # kept, and a state change shows in the next list.
    fake = FakeCRI("n1")
    cid = await _started(fake, logs, {}, ["server"])
    (listed,) = await fake.runtime.list_containers()
    (sandbox,) = await fake.runtime.list_pod_sandbox()
    assert listed.state == api_pb2.CONTAINER_RUNNING
    listed.labels["edited"] = "yes"
    listed.state = api_pb2.CONTAINER_UNKNOWN
    sandbox.labels["edited"] = "yes"
    (again,) = await fake.runtime.list_containers()
    (sandbox_again,) = await fake.runtime.list_pod_sandbox()
    assert again.state == api_pb2.CONTAINER_RUNNING and "edited" not in again.labels
    assert "edited" not in sandbox_again.labels and sandbox_again.state == api_pb2.SANDBOX_READY
    await fake.runtime.stop_container(cid, 0)
    (stopped,) = await fake.runtime.list_containers()
    assert stopped.state == api_pb2.CONTAINER_EXITED
    await fake.runtime.stop_pod_sandbox(sandbox.id)
    (sandbox_stopped,) = await fake.runtime.list_pod_sandbox()
    assert sandbox_stopped.state == api_pb2.SANDBOX_NOTREADY


# --- container log files ------------------------------------------------------------------------------------------


async def test_log_files_as_containerd_leaves_them(logs: str) -> None:
    # What test_fake_cri_contract.py compares with containerd's, pinned for the fake alone.
    fake = FakeCRI("n1")
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    transcript = await run_log_scenario(fake.runtime, IMAGE, logs)

    def served(records: list[tuple[str, str, str]], text: str) -> dict[str, object]:
        return {"mode": "0o640", "records": records, "served": {"plain": text, "timestamps": text}}

    assert transcript == [
        ("files_after_create", []),
        ("exited", "echo", 0, "Completed", served([("stdout", "F", "hello world")], "hello world\n")),
        ("exited", "shecho", 0, "Completed", served([("stdout", "F", "hi there")], "hi there\n")),
        ("exited", "partial", 0, "Completed", served([("stdout", "P", "no newline")], "no newline")),
        ("exited", "empty", 0, "Completed", served([("stdout", "F", "")], "\n")),
        ("exited", "silent", 0, "Completed", served([], "")),
        ("dir_mode", "0o755"),
        ("never_started_file", False),
        ("file_after_remove", True),
    ]


async def _pod(fake: FakeCRI, logs: str, annotations: dict[str, str]) -> tuple[str, api_pb2.PodSandboxConfig]:
    config = sandbox_config("p", logs)
    config.annotations.update(annotations)
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    return await fake.runtime.run_pod_sandbox(config), config


def _exists(path: str) -> bool:
    return Path(path).exists()


def _bytes(path: str) -> bytes:
    return Path(path).read_bytes()


async def _serve(path: str, options: reader.LogOptions) -> bytes:
    out = bytearray()

    async def emit(chunk: bytes) -> None:
        out.extend(chunk)

    await reader.read_logs(path, options, emit)
    return bytes(out)


async def test_log_annotation_lines_are_read_back_by_the_agents_reader(logs: str) -> None:
    clock = [1_764_508_800_250_000_000]  # 2025-11-30T13:20:00.25Z
    fake = FakeCRI("n1", now_ns=lambda: clock[0])
    cid = await _started(fake, logs, {behaviours.LOG: "first line\nsecond  line"}, ["server"])
    status = (await fake.runtime.container_status(cid)).status
    assert status.state == api_pb2.CONTAINER_RUNNING  # the text changes what it writes, not its fate
    assert _bytes(status.log_path) == (
        b"2025-11-30T13:20:00.25Z stdout F first line\n2025-11-30T13:20:00.25Z stdout F second  line\n"
    )
    assert await _serve(status.log_path, reader.LogOptions()) == b"first line\nsecond  line\n"
    assert await _serve(status.log_path, reader.LogOptions(tail=1)) == b"second  line\n"
    assert await _serve(status.log_path, reader.LogOptions(tail=1, timestamps=True)) == (
        b"2025-11-30T13:20:00.25Z second  line\n"
    )


async def test_the_annotation_wins_over_echo_and_applies_to_every_container_of_the_pod(logs: str) -> None:
    fake = FakeCRI("n1")
    sandbox, config = await _pod(fake, logs, {behaviours.LOG: "from the annotation\n"})
    files = []
    for name, command in (("init", ["echo", "ignored"]), ("main", ["serve"])):
        cid = await fake.runtime.create_container(sandbox, container_config(name, IMAGE, command), config)
        await fake.runtime.start_container(cid)
        files.append((await read_log_file(Path(logs) / f"{name}_0.log"))["records"])
    assert files == [[("stdout", "F", "from the annotation")]] * 2


async def test_an_empty_annotation_writes_an_empty_file_and_a_server_writes_nothing(logs: str) -> None:
    fake = FakeCRI("n1")
    sandbox, config = await _pod(fake, logs, {behaviours.LOG: ""})
    quiet = await fake.runtime.create_container(sandbox, container_config("quiet", IMAGE, ["echo", "x"]), config)
    await fake.runtime.start_container(quiet)
    assert _bytes(f"{logs}/quiet_0.log") == b""
    server = await _started(fake, logs, {}, ["nginx", "-g", "daemon off;"])
    assert _bytes((await fake.runtime.container_status(server)).status.log_path) == b""


async def test_each_attempt_has_its_own_file_so_previous_logs_stay(logs: str) -> None:
    # The agent gives each restart its own path (<container>/<restartCount>.log): the attempts' files sit side by side.
    fake = FakeCRI("n1")
    sandbox, config = await _pod(fake, logs, {})
    for attempt in (0, 1):
        container = container_config("c", IMAGE, ["echo", f"attempt {attempt}"])
        container.log_path = f"c/{attempt}.log"
        await fake.runtime.start_container(await fake.runtime.create_container(sandbox, container, config))
    assert sorted(os.listdir(Path(logs) / "c")) == ["0.log", "1.log"]
    assert await _serve(str(Path(logs) / "c" / "0.log"), reader.LogOptions()) == b"attempt 0\n"
    assert await _serve(str(Path(logs) / "c" / "1.log"), reader.LogOptions()) == b"attempt 1\n"


async def test_no_log_path_no_file(logs: str) -> None:
    fake = FakeCRI("n1")
    sandbox, config = await _pod(fake, logs, {})
    container = container_config("c", IMAGE, ["echo", "x"])
    container.log_path = ""
    await fake.runtime.start_container(await fake.runtime.create_container(sandbox, container, config))
    assert os.listdir(logs) == []


async def test_no_log_directory_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fake = FakeCRI("n1")
    config = sandbox_config("p", str(tmp_path / "unused"))
    config.log_directory = ""
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    sandbox = await fake.runtime.run_pod_sandbox(config)
    cid = await fake.runtime.create_container(sandbox, container_config("c", IMAGE, ["echo", "x"]), config)
    await fake.runtime.start_container(cid)
    assert sorted(os.listdir(tmp_path)) == ["unused"] and not os.listdir(tmp_path / "unused")
    # (the path the status reports, the empty directory joined to the file's name)
    assert (await fake.runtime.container_status(cid)).status.log_path == "/c_0.log"
    assert not _exists("/c_0.log")


async def test_a_log_file_that_cannot_be_opened_fails_the_start_as_containerd(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The pod's log directory's parent is a regular file: the directory cannot be made.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    fake = FakeCRI("n1")
    sandbox, config = await _pod(fake, str(tmp_path / "logs"), {})
    config.log_directory = str(blocker / "pod")
    fake.runtime.sandboxes[sandbox].config.log_directory = str(blocker / "pod")
    cid = await fake.runtime.create_container(sandbox, container_config("c", IMAGE, ["echo", "x"]), config)
    with caplog.at_level(logging.WARNING, logger="cri.fake.runtime"), pytest.raises(UnknownCRIError) as failed:
        await fake.runtime.start_container(cid)
    assert "failed to create container loggers: failed to create and open log file: mkdir" in failed.value.message
    status = (await fake.runtime.container_status(cid)).status
    assert (api_pb2.ContainerState.Name(status.state), status.exit_code, status.reason) == (
        "CONTAINER_EXITED",
        128,
        "StartError",
    )
    assert status.message == failed.value.message and status.started_at == 0 and status.finished_at > 0
    assert f"fake container start failed id={cid[:12]} reason=StartError" in caplog.text
    # The node goes on: the next container, with a log directory it can make, starts.
    running = await _started(fake, str(tmp_path / "logs"), {}, ["serve"])
    assert (await fake.runtime.container_status(running)).status.state == api_pb2.CONTAINER_RUNNING


async def test_a_full_disk_loses_the_output_and_the_container_runs(logs: str, caplog: pytest.LogCaptureFixture) -> None:
    # /dev/full opens and refuses every write with ENOSPC, as a full disk does.
    fake = FakeCRI("n1")
    sandbox, config = await _pod(fake, logs, {})
    config.log_directory = "/dev"
    fake.runtime.sandboxes[sandbox].config.log_directory = "/dev"
    container = container_config("c", IMAGE, ["sleep", "3600"])
    container.log_path = "full"
    fake.runtime.behaviour = Behaviour(log="lost\n")
    cid = await fake.runtime.create_container(sandbox, container, config)
    with caplog.at_level(logging.WARNING, logger="cri.fake.logs"):
        await fake.runtime.start_container(cid)
    assert (await fake.runtime.container_status(cid)).status.state == api_pb2.CONTAINER_RUNNING
    assert f"fake container log write failed id={cid[:12]} path=/dev/full bytes=" in caplog.text
    assert "error=No space left on device" in caplog.text


async def test_reopen_after_a_rotation_starts_a_new_file(logs: str) -> None:
    fake = FakeCRI("n1")
    cid = await _started(fake, logs, {behaviours.LOG: "before"}, ["serve"])
    path = (await fake.runtime.container_status(cid)).status.log_path
    os.rename(path, path + ".20251130-132000")
    await fake.runtime.reopen_container_log(cid)
    assert _bytes(path) == b"" and _bytes(path + ".20251130-132000").endswith(b" stdout F before\n")


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        (["echo", "hello", "world"], "hello world\n"),
        (["/bin/echo", "a"], "a\n"),
        (["echo"], "\n"),
        (["echo", "-n", "x", "y"], "x y"),
        (["echo", "-e", "a\\tb"], None),
        (["sh", "-c", "echo  one   two "], "one two\n"),
        (["sh", "-c", "echo -n part"], "part"),
        (["sh", "-c", "echo $HOME"], None),
        (["sh", "-c", "echo a; sleep 1"], None),
        (["sh", "-c", "echo 'quoted words'"], None),
        (["sh", "-c", "echo a > /tmp/x"], None),
        (["printf", "x"], None),
        ([], None),
    ],
)
def test_echo_output(argv: list[str], printed: str | None) -> None:
    assert behaviours.echo_output(argv) == printed
    assert (behaviours.command_fate(argv) == behaviours.Fate(0.0, 0)) == (printed is not None)


@pytest.mark.parametrize(
    ("now_ns", "stamp"),
    [
        (1_764_508_800_000_000_000, "2025-11-30T13:20:00Z"),
        (1_764_508_800_000_000_001, "2025-11-30T13:20:00.000000001Z"),
        (1_764_508_800_120_000_000, "2025-11-30T13:20:00.12Z"),
    ],
)
def test_timestamps_are_gos_rfc3339nano(now_ns: int, stamp: str) -> None:
    assert fakelogs.timestamp(now_ns) == stamp
    assert reader.format_go_rfc3339nano(stamp.encode()) == stamp.encode()


def test_records_split_long_lines_as_containerd() -> None:
    long = "x" * (fakelogs.MAX_LINE_BYTES + 5)
    data = fakelogs.records(f"{long}\nend", 1_764_508_800_000_000_000)
    assert [line.split(b" ", 3)[2] for line in data.splitlines()] == [b"P", b"F", b"P"]
    assert data.splitlines()[1].endswith(b" F xxxxx")
    assert fakelogs.records("", 0) == b""
