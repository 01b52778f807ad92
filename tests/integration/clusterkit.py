"""A kubeadm cluster of nodeagent nodes for one test: brought down (kubeadm reset on every node) even when the test
fails, its progress printed, its directory (kubeadm's, each kubelet's and containerd's logs) kept only when
NODEAGENT_KEEP_TESTBED is set, as a testbed's."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from nodeagent.cluster.cluster import Cluster


@contextlib.asynccontextmanager
async def temporary_cluster(prefix: str) -> AsyncIterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix=prefix))
    lines: list[str] = []
    made = Cluster(root, progress=lambda line: lines.append(f"{time.monotonic():.1f} {line}"))
    try:
        yield made
    finally:
        await made.down()
        print("\n".join(lines))
        if not os.environ.get("NODEAGENT_KEEP_TESTBED"):
            shutil.rmtree(root, ignore_errors=True)
