"""Fixtures of the device manager's tests: a short root dir (unix socket paths are limited) and a harness that
starts managers and fake plugins in it and stops them all at the end."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.unit.devicemanager.test_manager import Clock, Harness


@pytest.fixture
def root() -> Iterator[Path]:
    # Short: a unix socket path has at most 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="dm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def harness(root: Path) -> AsyncIterator[Harness]:
    h = Harness(root, Clock())
    yield h
    await h.close()
