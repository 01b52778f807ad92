"""Session fixtures over one real testbed (containerd, etcd, apiserver, scheduler, controller-manager, registry).

There is no skip here, in CI or elsewhere: when a part cannot start, every test that needs it fails with the tail
of that part's log (ComponentFailed carries it). `nodeagent testbed install` must have run first.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from cri.client import CRIClient, connect
from nodeagent.kube.client import KubeClient
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    root = Path(tempfile.mkdtemp(prefix="nodeagent-testbed-", dir=os.environ.get("NODEAGENT_TEST_DIR")))
    bed = Testbed(root)
    try:
        asyncio.run(bed.up())
    except Exception as exc:
        asyncio.run(bed.down())
        pytest.fail(f"the testbed did not come up: {exc}", pytrace=False)
    try:
        yield bed
    finally:
        asyncio.run(bed.down())
        if not os.environ.get("NODEAGENT_KEEP_TESTBED"):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(testbed: Testbed) -> Settings:
    return testbed.settings


@pytest_asyncio.fixture(loop_scope="session")
async def admin(testbed: Testbed) -> AsyncIterator[KubeClient]:
    """The admin's API client (system:masters). `testbed up` returns only once pods can be created."""
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as client:
        yield client


@pytest_asyncio.fixture(loop_scope="session")
async def cri_client(testbed: Testbed) -> AsyncIterator[CRIClient]:
    async with connect(f"unix://{testbed.layout.containerd_socket}", timeout=60.0) as client:
        yield client
