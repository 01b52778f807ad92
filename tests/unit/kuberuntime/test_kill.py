"""The grace a killed container gets (upstream killContainer): the preStop hook within the container's own grace,
then StopContainer with what is left, at least 2 s, unless the kill carries an override, which StopContainer gets
as it is. Pure by table, then through RuntimeManager against a scripted CRI runtime on a real socket."""

from __future__ import annotations

from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.actions import (
    ContainerState,
    ContainerStatus,
    RuntimePodStatus,
    SandboxState,
    SandboxStatus,
)
from nodeagent.kuberuntime.hashing import hash_container
from nodeagent.kuberuntime.hooks import stop_grace
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from tests.unit.cri.scripted import ScriptedRuntime


@pytest.mark.parametrize(
    ("grace", "hook_seconds", "override", "expected"),
    [
        (30, 0, None, 30),
        (30, 12, None, 18),  # the hook's time comes out of the grace
        (30, 29, None, 2),  # never below the minimum
        (1, 0, None, 2),  # the minimum holds without a hook too (a probe's terminationGracePeriodSeconds: 1)
        (0, 0, None, 2),
        (30, 29, 30, 30),  # an override is StopContainer's grace, whatever the hook took
        (30, 0, 0, 0),  # and is not raised to the minimum
        (30, 0, 1, 1),
    ],
    ids=[
        "whole-grace",
        "less-hook-time",
        "hook-took-nearly-all",
        "short-grace-no-hook",
        "zero-grace-no-hook",
        "override-ignores-hook-time",
        "override-zero",
        "override-below-minimum",
    ],
)
def test_stop_grace(grace: int, hook_seconds: int, override: int | None, expected: int) -> None:
    assert stop_grace(grace, hook_seconds=hook_seconds, override=override) == expected


HOOK: dict[str, Any] = {"preStop": {"exec": {"command": ["true"]}}}
SANDBOX = SandboxStatus(id="s1", state=SandboxState.READY, attempt=0, created_at=1, ip="10.0.0.2", host_network=False)


def _pod(*, grace: int | None = None, probe_grace: int | None = None, hook: bool = False) -> dict[str, Any]:
    app: dict[str, Any] = {"name": "app", "image": "busybox:1.36", "livenessProbe": {"exec": {"command": ["true"]}}}
    if probe_grace is not None:
        app["livenessProbe"]["terminationGracePeriodSeconds"] = probe_grace
    if hook:
        app["lifecycle"] = HOOK
    # Always: a failed liveness probe kills (and restarts) the container alone, not the whole pod.
    spec: dict[str, Any] = {"containers": [app], "restartPolicy": "Always"}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": "web", "namespace": "default", "uid": "u-1"}, "spec": spec}


def _status(pod: dict[str, Any]) -> RuntimePodStatus:
    app = pod["spec"]["containers"][0]
    running = ContainerStatus(id="c1", name="app", state=ContainerState.RUNNING, hash=hash_container(app))
    return RuntimePodStatus(uid="u-1", name="web", namespace="default", sandboxes=(SANDBOX,), containers=(running,))


def _manager(client: CRIClient) -> RuntimeManager:
    return RuntimeManager(client.runtime, client.image, NodeContext(node_name="n1", host_ip="10.0.0.1"))


def _stop_timeouts(runtime: ScriptedRuntime) -> list[int]:
    out = []
    for call in runtime.calls_of("StopContainer"):
        assert isinstance(call.request, api_pb2.StopContainerRequest)
        out.append(call.request.timeout)
    return out


def _hook_timeouts(runtime: ScriptedRuntime) -> list[int]:
    out = []
    for call in runtime.calls_of("ExecSync"):
        assert isinstance(call.request, api_pb2.ExecSyncRequest)
        out.append(call.request.timeout)
    return out


@pytest.mark.parametrize(
    ("pod_", "grace_period", "stop", "hook"),
    [
        # The pod workers' grace for a terminating pod is an override: StopContainer gets it as it is; the hook runs
        # within the container's own grace.
        (_pod(grace=30, hook=True), 5, [5], [30]),
        (_pod(grace=1), 1, [1], []),
        # Housekeeping's kill of an unknown pod: override 0, no spec, so no hook.
        (None, 0, [0], []),
        # No override (SyncPod's own kill of the whole pod): the pod's grace, at least 2 s, hook or not.
        (_pod(grace=1), None, [2], []),
        (_pod(grace=0, hook=True), None, [2], []),  # no grace left: the hook does not run
        (_pod(grace=40, hook=True), None, [40], [40]),
    ],
    ids=[
        "override-with-hook",
        "override-short",
        "housekeeping",
        "no-override-short-grace",
        "no-override-zero-grace",
        "no-override-with-hook",
    ],
)
async def test_kill_pod_grace(
    runtime: ScriptedRuntime,
    client: CRIClient,
    pod_: dict[str, Any] | None,
    grace_period: int | None,
    stop: list[int],
    hook: list[int],
) -> None:
    status = _status(pod_ if pod_ is not None else _pod())
    await _manager(client).kill_pod(pod_, status, grace_period=grace_period)
    assert _stop_timeouts(runtime) == stop
    assert _hook_timeouts(runtime) == hook


@pytest.mark.parametrize(
    ("pod_", "stop"),
    [
        # A failed liveness probe's own terminationGracePeriodSeconds, raised to the 2 s minimum without a hook.
        (_pod(grace=30, probe_grace=1), [2]),
        (_pod(grace=30, probe_grace=0), [2]),
        (_pod(grace=30, probe_grace=7), [7]),
        (_pod(grace=1), [2]),  # the pod's own grace, the same
    ],
    ids=["probe-grace-1", "probe-grace-0", "probe-grace-7", "pod-grace-1"],
)
async def test_a_liveness_kill_gets_at_least_the_minimum(
    runtime: ScriptedRuntime, client: CRIClient, pod_: dict[str, Any], stop: list[int]
) -> None:
    manager = _manager(client)
    result = await manager.sync_pod(pod_, _status(pod_), liveness_failed=frozenset({"c1"}))
    assert result.changed
    assert _stop_timeouts(runtime) == stop
