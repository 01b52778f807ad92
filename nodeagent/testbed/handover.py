"""Handing a testbed's node from one agent to the next (nodeagent, the upstream kubelet, or nodeagent again with
other settings): what `benchmarks/versus` and the eviction experiment's sweep and comparison do between runs.

- `wait_nothing_running`: once the run's pods are deleted and before its agent stops, no sandbox is ready and no
  container runs, so that the next run starts from the same memory and disk (an agent stopped earlier would leave
  its pods' containers behind for the next one to kill).
- `forget_node`: once the agent stopped, no Node and no Lease, so that the next agent registers from scratch: a
  Node left Ready would pass the next agent's wait for Ready at once, and its pressure conditions would carry over
  (an agent restarted under pressure keeps them, as upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound


class HandoverError(RuntimeError):
    """The runtime still runs containers after their pods were deleted."""


async def wait_nothing_running(cri: CRIClient, timeout: float = 180) -> None:
    """No ready sandbox and no running container: what an agent leaves once its pods are gone (the kubelet removes
    stopped sandboxes later, in its garbage collection)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sandboxes = await cri.runtime.list_pod_sandbox()
        containers = await cri.runtime.list_containers()
        if not any(s.state == api_pb2.SANDBOX_READY for s in sandboxes) and not any(
            c.state == api_pb2.CONTAINER_RUNNING for c in containers
        ):
            return
        await asyncio.sleep(0.5)
    raise HandoverError("containers still run after their pods were deleted")


async def forget_node(admin: KubeClient, node: str) -> None:
    """No Node and no Lease: the next agent registers from scratch."""
    for path in (paths.lease("kube-node-lease", node), paths.node(node)):
        with contextlib.suppress(NotFound):
            await admin.delete(path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            await admin.get(paths.node(node))
        except NotFound:
            return
        await asyncio.sleep(0.1)


__all__ = ["HandoverError", "forget_node", "wait_nothing_running"]
