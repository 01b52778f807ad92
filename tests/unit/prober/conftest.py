"""Fixtures of the prober's unit tests: a scripted CRI runtime on a real socket with the project's CRI client."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from cri.client import CRIClient, connect
from tests.unit.cri.scripted import ScriptedRuntime


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="prober-") as path:
        yield Path(path)


@pytest_asyncio.fixture(loop_scope="session")
async def runtime(socket_dir: Path) -> AsyncIterator[ScriptedRuntime]:
    server = ScriptedRuntime(socket_dir / "runtime.sock")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def client(runtime: ScriptedRuntime) -> AsyncIterator[CRIClient]:
    async with connect(runtime.endpoint, timeout=5.0) as cri:
        yield cri
