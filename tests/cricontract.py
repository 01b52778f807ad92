"""One CRI scenario, run unchanged against containerd and against `cri.fake`: the fake's contract.

The scenario drives the RuntimeService/ImageService protocols through a pod's life (pull, sandbox, create, start,
exit, stop, remove) and the edge cases the agent relies on (unknown ids, idempotent removes, list filters by id,
state, sandbox and labels), and returns a transcript of normalised observations. Ids, timestamps and addresses are
normalised away; what remains must be equal on both runtimes. The integration test
`tests/integration/test_fake_cri_contract.py` compares the two transcripts; the unit test
`tests/unit/cri/test_fake_contract.py` pins the fake's transcript alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cri.errors import CRIError
from cri.service import ImageService, RuntimeService
from cri.v1 import api_pb2
from nodeagent.server import logs as reader
from tests import remotecommand
from tests.integration import crifixtures as fixtures

Transcript = list[tuple[Any, ...]]


def sandbox_config(name: str, log_dir: str) -> api_pb2.PodSandboxConfig:
    config = fixtures.sandbox_config(name, Path(log_dir))
    config.annotations["example.com/a"] = "1"
    return config


def container_config(name: str, image: str, command: list[str]) -> api_pb2.ContainerConfig:
    config = fixtures.container_config(name, image, command)
    config.log_path = f"{name}_0.log"
    config.annotations["io.kubernetes.container.restartCount"] = "0"
    return config


async def _outcome(call: Awaitable[Any]) -> str:
    """'ok' or the error's class name: what the agent decides by."""
    try:
        await call
    except CRIError as exc:
        return type(exc).__name__
    return "ok"


def _state(value: int) -> str:
    return api_pb2.ContainerState.Name(value)  # type: ignore[arg-type]


def _container(status: api_pb2.ContainerStatus) -> dict[str, Any]:
    return {
        "state": _state(status.state),
        "name": status.metadata.name,
        "exit_code": status.exit_code,
        "reason": status.reason,
        "created": status.created_at > 0,
        "started": status.started_at > 0,
        "finished": status.finished_at > 0,
        "image": status.image.image,
        "image_ref": status.image_ref.rpartition("@")[2].startswith("sha256:"),
        "labels": dict(status.labels),
        "annotations": dict(status.annotations),
        "log_path": status.log_path.rsplit("/", 1)[-1],
    }


async def _wait_exit(runtime: RuntimeService, container_id: str) -> api_pb2.ContainerStatus:
    for _ in range(200):
        status = (await runtime.container_status(container_id)).status
        if status.state == api_pb2.CONTAINER_EXITED:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"container {container_id} did not exit")


async def run_scenario(
    runtime: RuntimeService, image: ImageService, image_name: str, log_dir: str, *, missing_image: str
) -> Transcript:
    """The transcript of one pod's life and the edge cases; leaves nothing behind on the runtime."""
    out: Transcript = []
    out.append(("pull", (await image.pull_image(api_pb2.ImageSpec(image=image_name))).startswith("sha256:")))
    status = await image.image_status(api_pb2.ImageSpec(image=image_name))
    out.append(("image_status", status.HasField("image"), image_name in status.image.repo_tags))
    absent = await image.image_status(api_pb2.ImageSpec(image=missing_image))
    out.append(("image_status_absent", absent.HasField("image")))
    listed = await image.list_images(api_pb2.ImageFilter(image=api_pb2.ImageSpec(image=image_name)))
    # containerd 1.7 ignores the filter: the image is among those listed.
    out.append(("list_images_filter", any(image_name in i.repo_tags for i in listed)))
    out.append(("pull_missing", await _outcome(image.pull_image(api_pb2.ImageSpec(image=missing_image)))))

    config = sandbox_config(f"contract-{uuid.uuid4().hex[:6]}", log_dir)
    sandbox_id = await runtime.run_pod_sandbox(config)
    cleanups: list[Callable[[], Awaitable[None]]] = [lambda: runtime.remove_pod_sandbox(sandbox_id)]
    try:
        await _body(runtime, out, config, sandbox_id, image_name)
    finally:
        for cleanup in cleanups:
            with contextlib.suppress(CRIError):
                await runtime.stop_pod_sandbox(sandbox_id)
                await cleanup()
    out.append(("remove_sandbox_again", await _outcome(runtime.remove_pod_sandbox(sandbox_id))))
    out.append(("sandbox_status_removed", await _outcome(runtime.pod_sandbox_status(sandbox_id))))
    return out


async def _body(
    runtime: RuntimeService, out: Transcript, config: api_pb2.PodSandboxConfig, sandbox_id: str, image_name: str
) -> None:
    sandbox = (await runtime.pod_sandbox_status(sandbox_id)).status
    out.append(
        (
            "sandbox_status",
            api_pb2.PodSandboxState.Name(sandbox.state),
            sandbox.metadata.name == config.metadata.name,
            dict(sandbox.labels) == dict(config.labels),
            dict(sandbox.annotations),
            sandbox.id == sandbox_id,
            bool(sandbox.network.ip),
        )
    )
    selector = {"io.kubernetes.pod.uid": config.metadata.uid}
    by_label = await runtime.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector=selector))
    out.append(("list_sandbox_label", [s.id == sandbox_id for s in by_label]))
    by_id = await runtime.list_pod_sandbox(api_pb2.PodSandboxFilter(id=sandbox_id))
    out.append(("list_sandbox_id", [s.id == sandbox_id for s in by_id]))
    by_prefix = await runtime.list_pod_sandbox(api_pb2.PodSandboxFilter(id=sandbox_id[:12]))
    out.append(("list_sandbox_id_prefix", [s.id == sandbox_id for s in by_prefix]))
    not_ready = await runtime.list_pod_sandbox(
        api_pb2.PodSandboxFilter(
            label_selector=selector, state=api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_NOTREADY)
        )
    )
    out.append(("list_sandbox_notready", len(not_ready)))

    short = await runtime.create_container(sandbox_id, container_config("short", image_name, ["true"]), config)
    long = await runtime.create_container(sandbox_id, container_config("long", image_name, ["sleep", "3600"]), config)
    failing = await runtime.create_container(sandbox_id, container_config("fail", image_name, ["false"]), config)
    created = _container((await runtime.container_status(long)).status)
    out.append(("created", created))
    out.append(
        (
            "create_in_unknown_sandbox",
            await _outcome(runtime.create_container("0" * 64, container_config("x", image_name, ["true"]), config)),
        )
    )
    for cid in (short, long, failing):
        await runtime.start_container(cid)
    out.append(("start_twice", await _outcome(runtime.start_container(long))))
    out.append(("exited_0", _container(await _wait_exit(runtime, short))))
    out.append(("exited_1", _container(await _wait_exit(runtime, failing))))
    running = _container((await runtime.container_status(long)).status)
    out.append(("running", running))

    by_sandbox = await runtime.list_containers(api_pb2.ContainerFilter(pod_sandbox_id=sandbox_id))
    out.append(("list_containers_sandbox", sorted(c.metadata.name for c in by_sandbox)))
    by_state = await runtime.list_containers(
        api_pb2.ContainerFilter(
            pod_sandbox_id=sandbox_id, state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_EXITED)
        )
    )
    out.append(("list_containers_exited", sorted(c.metadata.name for c in by_state)))
    by_cid = await runtime.list_containers(api_pb2.ContainerFilter(id=long))
    out.append(("list_containers_id", [c.metadata.name for c in by_cid]))
    by_container_label = await runtime.list_containers(
        api_pb2.ContainerFilter(label_selector={"io.kubernetes.container.name": "fail", **selector})
    )
    # The runtime's containers carry the config's labels only: the pod's labels are the kubelet's to add.
    out.append(("list_containers_label", [c.metadata.name for c in by_container_label]))
    by_name = await runtime.list_containers(
        api_pb2.ContainerFilter(label_selector={"io.kubernetes.container.name": "fail"})
    )
    out.append(("list_containers_name_label", [c.metadata.name for c in by_name if c.pod_sandbox_id == sandbox_id]))

    await runtime.stop_container(long, 0)
    out.append(("stopped_kill", _container((await runtime.container_status(long)).status)))
    out.append(("stop_again", await _outcome(runtime.stop_container(long, 0))))
    out.append(("start_exited", await _outcome(runtime.start_container(long))))
    out.append(("remove_exited", await _outcome(runtime.remove_container(long))))
    out.append(("remove_again", await _outcome(runtime.remove_container(long))))
    out.append(("status_removed", await _outcome(runtime.container_status(long))))
    out.append(("stop_unknown", await _outcome(runtime.stop_container("f" * 64, 0))))

    term = await runtime.create_container(sandbox_id, container_config("term", image_name, ["sleep", "3600"]), config)
    await runtime.start_container(term)
    doomed = await runtime.create_container(
        sandbox_id, container_config("doomed", image_name, ["sleep", "3600"]), config
    )
    await runtime.start_container(doomed)
    out.append(("remove_running", await _outcome(runtime.remove_container(doomed))))
    out.append(("status_removed_running", await _outcome(runtime.container_status(doomed))))
    out.append(("remove_sandbox_unknown", await _outcome(runtime.remove_pod_sandbox("e" * 64))))
    out.append(("sandbox_status_unknown", await _outcome(runtime.pod_sandbox_status("e" * 64))))
    out.append(("stop_sandbox_unknown", await _outcome(runtime.stop_pod_sandbox("e" * 64))))
    await runtime.stop_pod_sandbox(sandbox_id)
    stopped = (await runtime.pod_sandbox_status(sandbox_id)).status
    out.append(("sandbox_stopped", api_pb2.PodSandboxState.Name(stopped.state)))
    out.append(("stopped_by_sandbox", _container((await runtime.container_status(term)).status)))
    out.append(
        (
            "create_in_stopped_sandbox",
            await _outcome(
                runtime.create_container(sandbox_id, container_config("late", image_name, ["true"]), config)
            ),
        )
    )
    out.append(("stop_sandbox_again", await _outcome(runtime.stop_pod_sandbox(sandbox_id))))
    await runtime.remove_pod_sandbox(sandbox_id)
    left = await runtime.list_containers(api_pb2.ContainerFilter(pod_sandbox_id=sandbox_id))
    out.append(("containers_after_sandbox_removed", len(left)))


EventShape = tuple[str, bool, bool, int]


def event_shape(event: api_pb2.ContainerEventResponse, sandbox_id: str) -> EventShape:
    return (
        api_pb2.ContainerEventType.Name(event.container_event_type),
        event.container_id == sandbox_id,
        event.HasField("pod_sandbox_status"),
        len(event.containers_statuses),
    )


async def run_events_scenario(
    runtime: RuntimeService,
    image_name: str,
    log_dir: str,
    *,
    while_running: Callable[[api_pb2.PodSandboxConfig], Awaitable[None]] | None = None,
) -> list[EventShape]:
    """The GetContainerEvents a one-container pod's life sends, as shapes (type, of the sandbox?, with the sandbox's
    status?, how many container statuses). `while_running` is called once the container runs."""
    events: asyncio.Queue[api_pb2.ContainerEventResponse] = asyncio.Queue()

    async def follow() -> None:
        async with contextlib.aclosing(runtime.get_container_events()) as stream:  # type: ignore[type-var]
            async for event in stream:
                events.put_nowait(event)

    follower = asyncio.create_task(follow())
    try:
        # containerd 1.7 hands the first events to handlers of streams closed earlier: flush them with throwaway
        # sandboxes until this stream receives one of its own.
        for _ in range(20):
            flush_id = await runtime.run_pod_sandbox(sandbox_config("flush", log_dir))
            await runtime.stop_pod_sandbox(flush_id)
            await runtime.remove_pod_sandbox(flush_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(events.get(), 2)
                break
        await asyncio.sleep(1)
        while not events.empty():
            events.get_nowait()
        config = sandbox_config("events", log_dir)
        sb = await runtime.run_pod_sandbox(config)
        container = container_config("main", image_name, ["sleep", "3600"])
        container.labels.update(config.labels)
        cid = await runtime.create_container(sb, container, config)
        await runtime.start_container(cid)
        if while_running is not None:
            await while_running(config)
        await runtime.stop_container(cid, 0)
        await runtime.remove_container(cid)
        await runtime.stop_pod_sandbox(sb)
        await runtime.remove_pod_sandbox(sb)
        shapes: list[EventShape] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while loop.time() < deadline and (not shapes or shapes[-1][:2] != ("CONTAINER_DELETED_EVENT", True)):
            with contextlib.suppress(TimeoutError):
                event = await asyncio.wait_for(events.get(), 1)
                if event.container_id in (sb, cid):
                    shapes.append(event_shape(event, sb))
        return shapes
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)


# --- container log files ---------------------------------------------------------------------------------------

# name, command, log path (relative to the sandbox's log directory: a nested one makes the runtime create its
# directory, as the agent's `<container>/<restartCount>.log` does), started?
LOG_CONTAINERS: list[tuple[str, list[str], str, bool]] = [
    ("echo", ["echo", "hello", "world"], "echo/0.log", True),
    ("shecho", ["sh", "-c", "echo hi   there"], "shecho_0.log", True),
    ("partial", ["echo", "-n", "no newline"], "partial_0.log", True),
    ("empty", ["echo"], "empty_0.log", True),
    ("silent", ["true"], "silent_0.log", True),
    ("never", ["echo", "unseen"], "never/0.log", False),
]


async def read_log_file(path: Path) -> dict[str, Any]:
    """A log file as records (stream, tag, content), whether every timestamp parses (RFC3339 with a zone), its
    mode, and what the agent's own reader (`nodeagent/server/logs.py`) serves from it: plain, and with timestamps
    (each line's time checked to parse, then cut off)."""
    data, mode = _contents(path)
    records = [reader.parse_record(line) for line in data.split(b"\n")[:-1]]
    served: dict[str, str] = {}
    for kind, options in (("plain", reader.LogOptions()), ("timestamps", reader.LogOptions(timestamps=True))):
        out = bytearray()

        async def emit(chunk: bytes, out: bytearray = out) -> None:
            out.extend(chunk)

        await reader.read_logs(str(path), options, emit)
        served[kind] = out.decode()
    stamped = served["timestamps"].splitlines(keepends=True)
    for line in stamped:
        reader.parse_cri_time(line.split(" ", 1)[0])
    served["timestamps"] = "".join(line.split(" ", 1)[1] for line in stamped)
    for record in records:
        reader.parse_cri_time(record.raw_time.decode())
    return {
        "mode": oct(mode),
        "records": [(r.stream, "P" if r.partial else "F", r.content.decode()) for r in records],
        "served": served,
    }


def _contents(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mode & 0o777


def _written(path: Path, want_bytes: bool) -> bool:
    return path.exists() and (not want_bytes or path.stat().st_size > 0)


def _dir_mode(path: Path) -> int:
    return path.parent.stat().st_mode & 0o777


def _existing(paths: dict[str, Path]) -> list[str]:
    return sorted(name for name, path in paths.items() if path.exists())


async def _wait_written(path: Path, want_bytes: bool) -> None:
    """containerd writes a process's output after the exit is reported, a moment later: wait for it (the fake has
    written it at start)."""
    for _ in range(100):
        if _written(path, want_bytes):
            return
        await asyncio.sleep(0.05)


async def run_log_scenario(runtime: RuntimeService, image_name: str, log_dir: str) -> Transcript:
    """The log files of LOG_CONTAINERS: none before StartContainer, then each one's records and what the agent's
    reader serves, the exit, and the file kept after RemoveContainer (the kubelet removes it, not the runtime).
    The image must be pulled already."""
    out: Transcript = []
    config = sandbox_config(f"logs-{uuid.uuid4().hex[:6]}", log_dir)
    sandbox_id = await runtime.run_pod_sandbox(config)
    try:
        ids: dict[str, str] = {}
        for name, command, log_path, _ in LOG_CONTAINERS:
            container = container_config(name, image_name, command)
            container.log_path = log_path
            ids[name] = await runtime.create_container(sandbox_id, container, config)
        paths = {name: Path(log_dir) / log_path for name, _, log_path, _ in LOG_CONTAINERS}
        out.append(("files_after_create", _existing(paths)))
        for name, _, _, started in LOG_CONTAINERS:
            if started:
                await runtime.start_container(ids[name])
        for name, _, _, started in LOG_CONTAINERS:
            if not started:
                continue
            status = await _wait_exit(runtime, ids[name])
            await _wait_written(paths[name], name != "silent")
            out.append(("exited", name, status.exit_code, status.reason, await read_log_file(paths[name])))
        out.append(("dir_mode", oct(_dir_mode(paths["echo"]))))
        out.append(("never_started_file", _existing({"never": paths["never"]}) == ["never"]))
        await runtime.remove_container(ids["echo"])
        out.append(("file_after_remove", _existing({"echo": paths["echo"]}) == ["echo"]))
    finally:
        with contextlib.suppress(CRIError):
            await runtime.stop_pod_sandbox(sandbox_id)
            await runtime.remove_pod_sandbox(sandbox_id)
    return out


# Exec cases: name, command, stdin, channels (stdout, stderr, tty), the protocols offered.
EXEC_CASES: list[tuple[str, list[str], bytes | None, tuple[bool, bool, bool], tuple[str, ...]]] = [
    ("echo", ["echo", "hello", "exec"], None, (True, False, False), remotecommand.PROTOCOLS),
    ("exit_3", ["sh", "-c", "exit 3"], None, (True, True, False), remotecommand.PROTOCOLS),
    ("false", ["false"], None, (True, True, False), remotecommand.PROTOCOLS),
    ("cat_stdin", ["cat"], b"line one\nline two\n", (True, False, False), remotecommand.PROTOCOLS),
    ("tty", ["echo", "on", "a", "tty"], None, (True, False, True), remotecommand.PROTOCOLS),
    ("v3_exit_2", ["sh", "-c", "exit 2"], None, (True, True, False), ("v3.channel.k8s.io",)),
    ("v3_echo", ["echo", "v3"], None, (True, False, False), ("v3.channel.k8s.io",)),
    ("v2_exit_4", ["sh", "-c", "exit 4"], None, (True, True, False), ("v2.channel.k8s.io",)),
    ("v1_echo", ["echo", "v1"], None, (True, False, False), ("channel.k8s.io",)),
    ("no_protocol_in_common", ["true"], None, (True, False, False), ("v9.channel.k8s.io",)),
]


def _exec_request(container_id: str, cmd: list[str], stdin: bool, channels: tuple[bool, bool, bool]) -> Any:
    stdout, stderr, tty = channels
    return api_pb2.ExecRequest(container_id=container_id, cmd=cmd, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)


async def run_exec_scenario(runtime: RuntimeService, image_name: str, log_dir: str) -> Transcript:
    """CRI Exec and the streaming session at its URL, spoken to as client-go's remotecommand does
    (`tests/remotecommand.py`): the output, the error stream's Status, the negotiated protocol, a refused one, a
    URL used twice, and Exec's own refusals (no command, tty with stderr, no stream, an exited container). The image
    must be pulled already."""
    out: Transcript = []
    config = sandbox_config(f"exec-{uuid.uuid4().hex[:6]}", log_dir)
    sandbox_id = await runtime.run_pod_sandbox(config)
    try:
        running = await runtime.create_container(
            sandbox_id, container_config("sleeper", image_name, ["sleep", "600"]), config
        )
        await runtime.start_container(running)
        exited = await runtime.create_container(sandbox_id, container_config("done", image_name, ["true"]), config)
        await runtime.start_container(exited)
        await _wait_exit(runtime, exited)
        for name, cmd, stdin, channels, protocols in EXEC_CASES:
            url = (await runtime.exec(_exec_request(running, cmd, stdin is not None, channels))).url
            result = await remotecommand.exec_stream(
                url, stdin=stdin, stdout=channels[0], stderr=channels[1], tty=channels[2], protocols=protocols
            )
            out.append(
                (
                    "exec",
                    name,
                    result.status_code,
                    result.protocol,
                    result.stdout,
                    result.stderr,
                    result.status() if result.protocol.startswith("v4") else result.error,
                    result.refusal,
                    result.headers.get("x-accepted-stream-protocol-versions"),
                )
            )
        url = (await runtime.exec(_exec_request(running, ["true"], False, (True, False, False)))).url
        first = await remotecommand.exec_stream(url)
        again = await remotecommand.exec_stream(url)
        out.append(("exec_url_twice", first.status_code, again.status_code))
        refusals = {
            "no_command": _exec_request(running, [], False, (True, False, False)),
            "tty_and_stderr": _exec_request(running, ["true"], False, (True, True, True)),
            "no_stream": _exec_request(running, ["true"], False, (False, False, False)),
            "exited_container": _exec_request(exited, ["true"], False, (True, False, False)),
            "unknown_container": _exec_request("0" * 64, ["true"], False, (True, False, False)),
        }
        for name, request in refusals.items():
            try:
                await runtime.exec(request)
                out.append(("exec_refused", name, "ok"))
            except CRIError as exc:
                out.append(("exec_refused", name, type(exc).__name__, exc.code.name if exc.code else None))
    finally:
        with contextlib.suppress(CRIError):
            await runtime.stop_pod_sandbox(sandbox_id)
            await runtime.remove_pod_sandbox(sandbox_id)
    return out
