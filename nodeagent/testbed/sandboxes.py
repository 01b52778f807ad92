"""Removing every sandbox from the testbed's containerd when a test or a kubelet is done with them."""

from __future__ import annotations

import asyncio
import time

from cri.client import RemoteRuntimeService
from cri.errors import CRIError

STARTING = "in starting state"


async def remove_pod_sandbox(runtime: RemoteRuntimeService, sandbox_id: str, *, timeout: float = 60.0) -> None:
    """RemovePodSandbox, waiting out a container that containerd still marks as starting.

    A StartContainer in flight when its kubelet stopped keeps the container "in starting state" until containerd's
    own start returns, and containerd refuses the removal until then (a CI run of test_critical_pod_preemption).
    Any other refusal, or one that lasts past `timeout` seconds, is raised.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            await runtime.remove_pod_sandbox(sandbox_id)
            return
        except CRIError as exc:
            if STARTING not in exc.message or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


async def stop_and_remove_all(runtime: RemoteRuntimeService) -> None:
    """Stop and remove every sandbox the runtime lists."""
    for sandbox in await runtime.list_pod_sandbox():
        await runtime.stop_pod_sandbox(sandbox.id)
        await remove_pod_sandbox(runtime, sandbox.id)
