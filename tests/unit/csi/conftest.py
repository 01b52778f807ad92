"""Fixtures of the csi unit tests: a scripted driver on a real unix socket, and a client connected to it."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from csi.client import CSIClient, connect
from tests.unit.csi.scripted import ScriptedDriver


@pytest.fixture
def csi_socket_dir() -> Iterator[Path]:
    # Not tmp_path: a unix socket path must stay under 108 bytes, and test ids make tmp_path long.
    with tempfile.TemporaryDirectory(prefix="csi-") as path:
        yield Path(path)


@pytest_asyncio.fixture(loop_scope="session")
async def driver(csi_socket_dir: Path) -> AsyncIterator[ScriptedDriver]:
    server = ScriptedDriver(csi_socket_dir / "csi.sock")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def plugin(driver: ScriptedDriver) -> AsyncIterator[CSIClient]:
    async with connect(driver.endpoint, timeout=5.0) as client:
        yield client
