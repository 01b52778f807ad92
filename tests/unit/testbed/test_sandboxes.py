"""Removing sandboxes at the end of a test: a container containerd still marks as starting is waited out."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cri.client import CRIClient
from cri.errors import CRIError
from cri.v1 import api_pb2
from nodeagent.testbed import sandboxes
from tests.unit.cri.conftest import client, runtime, socket_dir
from tests.unit.cri.scripted import Fail, ScriptedRuntime

__all__ = ["client", "runtime", "socket_dir"]

pytestmark = pytest.mark.asyncio(loop_scope="session")

STARTING = (
    'failed to remove container "c1": failed to set removing state for container "c1": '
    "container is in starting state, can't be removed"
)


async def test_a_starting_container_is_waited_out(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["RemovePodSandbox"] = Fail(grpc.StatusCode.UNKNOWN, STARTING)
    with pytest.raises(CRIError, match="starting state"):
        await sandboxes.remove_pod_sandbox(client.runtime, "s1", timeout=1.2)
    assert len(runtime.calls_of("RemovePodSandbox")) >= 3  # asked again every 0.5 s until the time was up


async def test_the_removal_succeeds_once_the_start_has_settled(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["RemovePodSandbox"] = Fail(grpc.StatusCode.UNKNOWN, STARTING)

    async def settle() -> None:
        runtime.script["RemovePodSandbox"] = api_pb2.RemovePodSandboxResponse()

    loop = asyncio.get_running_loop()
    loop.call_later(0.7, lambda: loop.create_task(settle()))
    await sandboxes.remove_pod_sandbox(client.runtime, "s1", timeout=10)
    calls = runtime.calls_of("RemovePodSandbox")
    assert len(calls) >= 2
    assert runtime.script["RemovePodSandbox"] == api_pb2.RemovePodSandboxResponse()


async def test_any_other_refusal_is_raised_at_once(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["RemovePodSandbox"] = Fail(grpc.StatusCode.UNKNOWN, "failed to remove network namespace")
    with pytest.raises(CRIError, match="network namespace"):
        await sandboxes.remove_pod_sandbox(client.runtime, "s1", timeout=10)
    assert len(runtime.calls_of("RemovePodSandbox")) == 1


async def test_every_listed_sandbox_is_stopped_then_removed(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["ListPodSandbox"] = api_pb2.ListPodSandboxResponse(
        items=[api_pb2.PodSandbox(id="s1"), api_pb2.PodSandbox(id="s2")]
    )
    await sandboxes.stop_and_remove_all(client.runtime)
    order = [
        (call.rpc, getattr(call.request, "pod_sandbox_id", ""))
        for call in runtime.calls
        if call.rpc != "ListPodSandbox"
    ]
    assert order == [
        ("StopPodSandbox", "s1"),
        ("RemovePodSandbox", "s1"),
        ("StopPodSandbox", "s2"),
        ("RemovePodSandbox", "s2"),
    ]
