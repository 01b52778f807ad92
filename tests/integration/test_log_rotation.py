"""Container log rotation against the real containerd: a chatty busybox container, the log manager with a small max
size, and the kubelet API's log follower reading across the rotations.

The container numbers its lines, so a lost line shows as a gap: in the files the rotation keeps (the runtime's
rename + ReopenContainerLog must lose nothing) and in what the follower streamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import re
from pathlib import Path

from cri.client import CRIClient
from cri.errors import NotFoundError
from cri.v1 import api_pb2
from nodeagent.clock import SystemClock
from nodeagent.kuberuntime.logrotation import ContainerLogManager
from nodeagent.server.logs import LogOptions, parse_record, read_logs
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from tests.integration.crifixtures import container_config, sandbox_config

MAX_SIZE = 64 * 1024
MAX_FILES = 3
ROTATIONS = 5
# About 110 bytes of content a line, 50 lines every 20 ms: some 250 KB/s, so each 1 s pass finds the log over 64Ki.
CHATTY = (
    "pad=$(printf '%090d' 0); i=0; "
    'while true; do i=$((i+1)); echo "$i $pad"; '
    "if [ $((i % 50)) -eq 0 ]; then usleep 20000; fi; done"
)
ROTATED = re.compile(r"^0\.log\.\d{8}-\d{6}(\.gz)?$")


def _numbers(data: bytes) -> list[int]:
    return [int(line.split(b" ", 1)[0]) for line in data.splitlines() if line]


def _file_numbers(path: Path) -> list[int]:
    """The container's line numbers in one CRI log file (gzip or not)."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    # A line the runtime is still writing is not a line yet.
    raw = raw[: raw.rfind(b"\n") + 1]
    return [int(parse_record(line).content.split(b" ", 1)[0]) for line in raw.splitlines() if line]


def _gaps(numbers: list[int]) -> list[tuple[int, int]]:
    return [(a, b) for a, b in itertools.pairwise(numbers) if b != a + 1]


async def _until(check: object, what: str, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_chatty_container_log_is_rotated_compressed_and_followed(
    cri_client: CRIClient, settings: Settings, tmp_path: Path
) -> None:
    runtime = cri_client.runtime
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    log_dir = tmp_path / "logs"
    config = sandbox_config("logrotation", log_dir)
    sandbox_id = await runtime.run_pod_sandbox(config)
    tasks: list[asyncio.Task[None]] = []
    try:
        container_id = await runtime.create_container(
            sandbox_id, container_config("chatty", image, ["sh", "-c", CHATTY]), config
        )
        await runtime.start_container(container_id)
        log = log_dir / "chatty" / "0.log"
        await _until(log.exists, "the container's log file", 10)

        followed = bytearray()

        async def emit(data: bytes) -> None:
            followed.extend(data)

        async def running() -> bool:
            status = await runtime.container_status(container_id)
            return status.status.state == api_pb2.CONTAINER_RUNNING

        follower = asyncio.create_task(read_logs(str(log), LogOptions(follow=True), emit, running=running))
        tasks.append(follower)

        manager = ContainerLogManager(
            runtime, clock=SystemClock(), max_size=str(MAX_SIZE), max_files=MAX_FILES, monitor_interval=1.0
        )
        rotator = asyncio.create_task(manager.run())
        tasks.append(rotator)

        # Watch the directory while the rotations happen: never more than MAX_FILES files, even mid-rotation.
        most = 0
        seen_gz = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while manager.rotations < ROTATIONS:
            names = [p.name for p in log.parent.iterdir()]
            most = max(most, len(names))
            seen_gz = seen_gz or any(n.endswith(".gz") for n in names)
            assert loop.time() < deadline, f"only {manager.rotations} rotations in 60 s; files {sorted(names)}"
            await asyncio.sleep(0.05)
        # A cancelled run finishes the pass in progress: the files are in their rested shape after it.
        rotator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rotator
        assert most <= MAX_FILES, most
        assert seen_gz

        names = sorted(p.name for p in log.parent.iterdir())
        assert len(names) == MAX_FILES, names
        assert names[0] == "0.log"
        rotated = names[1:]
        assert all(ROTATED.match(n) for n in rotated), rotated
        # The older rotated file compressed, the newest left as the runtime last wrote it.
        assert rotated[0].endswith(".gz") and not rotated[1].endswith(".gz"), rotated

        # The container keeps logging into the fresh file.
        before = _file_numbers(log)
        await _until(lambda: len(_file_numbers(log)) > len(before) + 100, "new lines in the fresh log", 10)
        kept = [log.parent / rotated[0], log.parent / rotated[1], log]
        numbers = [n for path in kept for n in _file_numbers(path)]
        # Nothing lost between the files kept: rename + ReopenContainerLog hand over line by line.
        assert numbers and not _gaps(numbers), _gaps(numbers)[:5]
        assert numbers[0] > 1  # older files were removed
        assert _file_numbers(log)[0] == _file_numbers(log.parent / rotated[1])[-1] + 1

        # The follower: stop the container, so the stream ends once the last file is read.
        await runtime.stop_container(container_id, 0)
        await asyncio.wait_for(follower, 30)
        streamed = _numbers(bytes(followed))
        final = _file_numbers(log)
        assert streamed[0] == 1
        assert streamed[-1] == final[-1]
        assert not _gaps(streamed), f"the follower lost lines across rotation: {_gaps(streamed)[:10]}"
        print(
            f"rotations={manager.rotations} lines={len(streamed)} max_files_seen={most} "
            f"follower_gaps={len(_gaps(streamed))}"
        )
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(NotFoundError):
            await runtime.stop_pod_sandbox(sandbox_id)
        with contextlib.suppress(NotFoundError):
            await runtime.remove_pod_sandbox(sandbox_id)
    assert sandbox_id not in [s.id for s in await runtime.list_pod_sandbox()]
