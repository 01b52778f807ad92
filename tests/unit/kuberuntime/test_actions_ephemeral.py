"""Ephemeral containers (`kubectl debug`, the pod's ephemeralcontainers subresource), as upstream's computePodActions:
started in the pod's current sandbox when they have no status, never restarted, no sandbox change for them; a target
container's PID namespace is joined (NamespaceMode TARGET). Pure decisions by table, then the container config the
runtime manager sends to a scripted CRI runtime on a real socket."""

from __future__ import annotations

from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.actions import (
    ContainerState,
    ContainerStatus,
    ContainerToRemove,
    PodActions,
    RuntimePodStatus,
    SandboxState,
    SandboxStatus,
    compute_pod_actions,
    ephemeral_target_id,
)
from nodeagent.kuberuntime.backoff import Backoff
from nodeagent.kuberuntime.hashing import hash_container
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from tests.unit.cri.scripted import ScriptedRuntime

NOW = 10_000.0
APP: dict[str, Any] = {"name": "app", "image": "busybox:1.36"}
INIT1: dict[str, Any] = {"name": "init1", "image": "busybox:1.36"}
DBG: dict[str, Any] = {"name": "dbg", "image": "busybox:1.36", "command": ["sh"], "targetContainerName": "app"}
R, E, C = ContainerState.RUNNING, ContainerState.EXITED, ContainerState.CREATED
S1 = SandboxStatus(id="s1", state=SandboxState.READY, created_at=1, ip="198.18.0.2", host_network=False)


def pod(*, init: list[dict[str, Any]] | None = None, policy: str = "Always", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": {
            "containers": [APP],
            "initContainers": init or [],
            "ephemeralContainers": [DBG],
            "restartPolicy": policy,
            **spec,
        },
    }


def ctr(name: str, state: ContainerState, exit_code: int = 0) -> ContainerStatus:
    spec = {"app": APP, "init1": INIT1, "dbg": DBG}[name]
    return ContainerStatus(
        id=f"id-{name}", name=name, state=state, exit_code=exit_code, hash=hash_container(spec), pod_sandbox_id="s1"
    )


def status(*containers: ContainerStatus, sandboxes: tuple[SandboxStatus, ...] = (S1,)) -> RuntimePodStatus:
    return RuntimePodStatus(uid="u-1", name="web", namespace="default", sandboxes=sandboxes, containers=containers)


CASES: list[tuple[str, dict[str, Any], RuntimePodStatus, PodActions]] = [
    (
        "added to a running pod: started in its sandbox",
        pod(),
        status(ctr("app", R)),
        PodActions(sandbox_id="s1", ephemeral_containers_to_start=("dbg",)),
    ),
    ("running: nothing", pod(), status(ctr("dbg", R), ctr("app", R)), PodActions(sandbox_id="s1")),
    (
        "exited (even failed, restartPolicy Always): never restarted, the pod stays",
        pod(),
        status(ctr("dbg", E, 1), ctr("app", R)),
        PodActions(sandbox_id="s1"),
    ),
    (
        "while init runs: started at once, as upstream",
        pod(init=[INIT1]),
        status(ctr("init1", R)),
        PodActions(sandbox_id="s1", ephemeral_containers_to_start=("dbg",)),
    ),
    (
        "no sandbox change for it, and none started with a new sandbox",
        pod(),
        status(ctr("app", R), sandboxes=(SandboxStatus(id="s1", state=SandboxState.NOT_READY),)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=1, containers_to_start=("app",)),
    ),
    (
        "left created by a killed agent: it never ran, so removed and started",
        pod(),
        status(ctr("dbg", C), ctr("app", R)),
        PodActions(
            sandbox_id="s1",
            ephemeral_containers_to_start=("dbg",),
            containers_to_remove=(ContainerToRemove("id-dbg", "dbg", "created, never started, superseded"),),
        ),
    ),
    (
        "a running ephemeral container does not keep a finished pod alive",
        pod(policy="Never"),
        status(ctr("dbg", R), ctr("app", E, 0)),
        PodActions(kill_pod=True, sandbox_id="s1"),
    ),
    (
        "a deleted pod starts none",
        pod() | {"metadata": {"name": "web", "namespace": "default", "uid": "u-1", "deletionTimestamp": "x"}},
        status(ctr("app", R)),
        PodActions(kill_pod=True),
    ),
]


@pytest.mark.parametrize(("pod_", "runtime", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ephemeral_actions(pod_: dict[str, Any], runtime: RuntimePodStatus, expected: PodActions) -> None:
    assert compute_pod_actions(pod_, runtime, now=NOW, backoff=Backoff()) == expected


def test_ephemeral_target_id() -> None:
    assert ephemeral_target_id(pod(), "dbg", status(ctr("app", R))) == "id-app"
    assert ephemeral_target_id(pod(), "app", status(ctr("app", R))) is None  # not an ephemeral container
    untargeted = pod()
    untargeted["spec"]["ephemeralContainers"] = [{k: v for k, v in DBG.items() if k != "targetContainerName"}]
    assert ephemeral_target_id(untargeted, "dbg", status(ctr("app", R))) is None
    with pytest.raises(LookupError, match="unable to find target container app"):
        ephemeral_target_id(pod(), "dbg", status())


# --- through the runtime manager -------------------------------------------------------------------------------


def _manager(client: CRIClient, events: list[tuple[str, str, str, str]]) -> RuntimeManager:
    def record(pod_: Any, type_: str, reason: str, message: str, field_path: str) -> None:
        events.append((type_, reason, message, field_path))

    return RuntimeManager(client.runtime, client.image, NodeContext(node_name="n1", host_ip="127.0.0.1"), events=record)


def _created(runtime: ScriptedRuntime) -> list[api_pb2.ContainerConfig]:
    out = []
    for call in runtime.calls_of("CreateContainer"):
        assert isinstance(call.request, api_pb2.CreateContainerRequest)
        assert call.request.pod_sandbox_id == "s1"
        out.append(call.request.config)
    return out


@pytest.mark.parametrize(
    ("spec", "pid", "target"),
    [
        ({}, api_pb2.TARGET, "id-app"),  # the target's PID namespace
        ({"shareProcessNamespace": True}, api_pb2.POD, ""),  # already shared pod-wide: left as it is, as upstream
    ],
)
async def test_ephemeral_container_config(
    runtime: ScriptedRuntime, client: CRIClient, spec: dict[str, Any], pid: int, target: str
) -> None:
    runtime.script["ImageStatus"] = api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:1", size=1))
    runtime.script["CreateContainer"] = api_pb2.CreateContainerResponse(container_id="new")
    events: list[tuple[str, str, str, str]] = []
    result = await _manager(client, events).sync_pod(pod(**spec), status(ctr("app", R)))
    assert result.waiting == {}
    [config] = _created(runtime)
    assert config.metadata.name == "dbg"
    assert config.labels["io.kubernetes.container.name"] == "dbg"
    assert config.labels["io.kubernetes.pod.uid"] == "u-1"
    namespaces = config.linux.security_context.namespace_options
    assert (namespaces.pid, namespaces.target_id) == (pid, target)
    assert ("Normal", "Started", "Started container dbg", "spec.ephemeralContainers{dbg}") in events
    assert [c.rpc for c in runtime.calls if c.rpc in ("StartContainer", "StopContainer")] == ["StartContainer"]


async def test_missing_target_is_a_config_error(runtime: ScriptedRuntime, client: CRIClient) -> None:
    runtime.script["ImageStatus"] = api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:1", size=1))
    the_pod = pod()
    the_pod["spec"]["ephemeralContainers"] = [DBG | {"targetContainerName": "nope"}]
    events: list[tuple[str, str, str, str]] = []
    result = await _manager(client, events).sync_pod(the_pod, status(ctr("app", R)))
    waiting = result.waiting["dbg"]
    assert (waiting.reason, waiting.message) == ("CreateContainerConfigError", "unable to find target container nope")
    assert (
        "Warning",
        "Failed",
        "Error: unable to find target container nope",
        "spec.ephemeralContainers{dbg}",
    ) in events
    assert runtime.calls_of("CreateContainer") == []


async def test_killing_the_pod_kills_its_ephemeral_containers(runtime: ScriptedRuntime, client: CRIClient) -> None:
    events: list[tuple[str, str, str, str]] = []
    the_pod = pod()
    the_pod["spec"]["terminationGracePeriodSeconds"] = 1
    await _manager(client, events).kill_pod(the_pod, status(ctr("dbg", R), ctr("app", R)), grace_period=1)
    stopped = set()
    for call in runtime.calls_of("StopContainer"):
        assert isinstance(call.request, api_pb2.StopContainerRequest)
        stopped.add(call.request.container_id)
    assert stopped == {"id-dbg", "id-app"}
    assert ("Normal", "Killing", "Stopping container dbg", "spec.ephemeralContainers{dbg}") in events
