"""An image pull back-off says when it expires (SyncResult.retry_after), so the Kubelet syncs the pod right then, as
it does for a crash-loop back-off: 10 s after the first failed pull, 20 s after the second, and meanwhile the pod
waits with ImagePullBackOff without pulling. Against the scripted CRI runtime on a real socket, on a fake clock."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from nodeagent.kubelet import Kubelet
from nodeagent.kuberuntime.actions import RuntimePodStatus, SandboxState, SandboxStatus
from nodeagent.kuberuntime.backoff import Backoff
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager, SyncResult, Waiting
from nodeagent.podconfig import PodConfig
from pleg.cache import Cache
from tests.unit.cri.scripted import Fail, ScriptedRuntime
from tests.unit.fakeclock import FakeClock

POD: dict[str, Any] = {
    "metadata": {"name": "bad", "namespace": "default", "uid": "u-1"},
    "spec": {"containers": [{"name": "app", "image": "registry.test/missing:1"}], "restartPolicy": "Always"},
}
SANDBOX = SandboxStatus(id="s1", state=SandboxState.READY, attempt=0, created_at=1, ip="198.18.0.2", host_network=False)
STATUS = RuntimePodStatus(uid="u-1", name="bad", namespace="default", sandboxes=(SANDBOX,), containers=())


async def test_the_pull_back_off_is_the_pods_retry_time(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["PullImage"] = Fail(grpc.StatusCode.NOT_FOUND, "registry.test/missing:1: not found")
    clock = FakeClock()
    wall = lambda: clock.t  # noqa: E731
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="127.0.0.1"),
        wall_clock=wall,
        crash_backoff=Backoff(clock=wall),
        image_backoff=Backoff(clock=wall),
    )
    # (seconds to advance before the sync, reason, retry_after, pulls so far)
    steps = [
        (0, "ErrImagePull", 10.0, 1),
        (4, "ImagePullBackOff", 6.0, 1),  # in back-off: no pull, back in 6 s
        (6, "ErrImagePull", 20.0, 2),  # expired: pulled again, the back-off doubles
        (19, "ImagePullBackOff", 1.0, 2),
        (1, "ErrImagePull", 40.0, 3),
    ]
    for advance, reason, retry_after, pulls in steps:
        await clock.advance(advance)
        result = await manager.sync_pod(POD, STATUS)
        assert result.waiting["app"].reason == reason
        assert result.retry_after == pytest.approx(retry_after)
        assert len(runtime.calls_of("PullImage")) == pulls


@pytest.mark.parametrize(
    ("result", "delay", "timer"),
    [
        (SyncResult({"app": Waiting("ErrImagePull", "x", 10.0)}, (), 10.0), 10.0, True),
        (SyncResult({"app": Waiting("ImagePullBackOff", "x", 6.0)}, (), 6.0), 6.0, True),
        (SyncResult({"app": Waiting("ImagePullBackOff", "x", 300.0)}, (), 300.0), 60.0, True),  # capped at resync
        # A wait without a back-off (a missing ConfigMap) is looked at again soon, as before.
        (SyncResult({"app": Waiting("CreateContainerConfigError", "x")}, ()), 2.0, False),
        (SyncResult({}, ()), 60.0, False),
    ],
    ids=["pull-failed", "in-back-off", "long-back-off", "other-wait", "nothing-waits"],
)
async def test_the_kubelet_wakes_the_pod_when_the_back_off_expires(
    result: SyncResult, delay: float, timer: bool
) -> None:
    clock = FakeClock(100)
    kubelet = Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=None,  # type: ignore[arg-type]
        status_manager=None,  # type: ignore[arg-type]
        node=lambda: None,
        pod_cache=Cache(),
        monotonic=clock.monotonic,
        wall=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    )
    kubelet._schedule("u-1", result)
    assert kubelet._next_sync["u-1"] == pytest.approx(100 + delay)
    wakeup = kubelet._wakeups.pop("u-1", None)
    assert (wakeup is not None) is timer
    if wakeup is not None:
        assert wakeup.when() - asyncio.get_running_loop().time() == pytest.approx(delay, abs=0.1)
        wakeup.cancel()


async def test_pull_failure_messages_and_events_are_upstreams(runtime: ScriptedRuntime, client: CRIClient) -> None:
    """As upstream's image manager: ErrImagePull carries the pull's gRPC error as Go prints it, the back-off's message
    adds the failed pull's, and each failure is also a Failed event "Error: <reason>"."""
    runtime.script["PullImage"] = Fail(grpc.StatusCode.NOT_FOUND, "registry.test/missing:1: not found")
    clock = FakeClock()
    wall = lambda: clock.t  # noqa: E731
    events: list[tuple[str, str, str]] = []
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="127.0.0.1"),
        events=lambda pod, type_, reason, message, field_path: events.append((type_, reason, message)),
        wall_clock=wall,
        image_backoff=Backoff(clock=wall),
    )
    error = "rpc error: code = NotFound desc = registry.test/missing:1: not found"
    image = '"registry.test/missing:1"'
    steps = [
        (
            0,
            Waiting("ErrImagePull", error),
            [
                ("Normal", "Pulling", f"Pulling image {image}"),
                ("Warning", "Failed", f"Failed to pull image {image}: {error}"),
                ("Warning", "Failed", "Error: ErrImagePull"),
            ],
        ),
        (
            4,
            Waiting("ImagePullBackOff", f"Back-off pulling image {image}: ErrImagePull: {error}"),
            [
                ("Normal", "BackOff", f"Back-off pulling image {image}"),
                ("Warning", "Failed", "Error: ImagePullBackOff"),
            ],
        ),
    ]
    for advance, waiting, recorded in steps:
        await clock.advance(advance)
        events.clear()
        result = await manager.sync_pod(POD, STATUS)
        assert (result.waiting["app"].reason, result.waiting["app"].message) == (waiting.reason, waiting.message)
        assert result.started == frozenset()
        assert events == recorded
