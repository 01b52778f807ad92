"""Pod status as users see it on a real node: a container removed behind the agent's back (ContainerStatusUnknown),
init container statuses (ready once done, PodInitializing while they run or fail), readiness gates set by an admin
through the status subresource, and ephemeral containers' statuses.

The tests act as admin through the apiserver and through containerd's CRI (what `crictl` does), and read what
every watch event of the pod showed, not only the last state. Every wait is a condition with a generous deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.clock import SystemClock
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.status.manager import StatusManager
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]

# Upstream's words (pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses, status/generate.go).
VANISHED_MESSAGE = "The container could not be located when the pod was deleted.  The container used to be Running"
GATE = "nodeagent.test/feature-1"
GATE_MISSING = f'corresponding condition of pod readiness gate "{GATE}" does not exist.'
GATE_FALSE = f'the status of pod readiness gate "{GATE}" is not "True", but False'


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-pod-status.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(_delete_config_maps(testbed))
        asyncio.run(clean_up(testbed, settings))


async def _delete_config_maps(testbed: Testbed) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for item in (await admin.list(paths.configmaps(NS)))["items"]:
            if item["metadata"]["name"].startswith("status-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.configmap(NS, item["metadata"]["name"]))


def _name(prefix: str) -> str:
    return f"status-{prefix}-{uuid.uuid4().hex[:5]}"


class Watched:
    """Every version of one pod the apiserver's watch delivers, from before its creation on."""

    def __init__(self, admin: KubeClient, name: str) -> None:
        self.admin, self.name = admin, name
        self.seen: list[Obj] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watched:
        listed = await self.admin.list(paths.pods(NS), field_selector=f"metadata.name={self.name}")
        self._task = asyncio.create_task(self._run(listed["metadata"]["resourceVersion"]))
        return self

    async def _run(self, resource_version: str) -> None:
        stream = self.admin.watch(
            paths.pods(NS), resource_version=resource_version, field_selector=f"metadata.name={self.name}",
            timeout_seconds=600,
        )  # fmt: skip
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                if event.type in ("ADDED", "MODIFIED"):
                    self.seen.append(event.object)

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def statuses(self) -> list[Obj]:
        return [p.get("status") or {} for p in self.seen]


async def create_pod(admin: KubeClient, name: str, containers: list[Obj], **spec: Any) -> Obj:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "containers": containers,
            **spec,
        },
    }
    created: Obj = await admin.create(paths.pods(NS), body)
    return created


async def get_pod(admin: KubeClient, name: str) -> Obj:
    pod: Obj = await admin.get(paths.pod(NS, name))
    return pod


def find(statuses: list[Obj] | None, name: str) -> Obj:
    return next((s for s in statuses or () if s.get("name") == name), {})


def app_status(pod: Obj, name: str) -> Obj:
    return find((pod.get("status") or {}).get("containerStatuses"), name)


def init_status(pod: Obj, name: str) -> Obj:
    return find((pod.get("status") or {}).get("initContainerStatuses"), name)


def condition(pod_or_status: Obj, kind: str) -> Obj:
    status = pod_or_status.get("status", pod_or_status)
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), {})


def state_of(status: Obj) -> tuple[str, Obj]:
    [(kind, body)] = (status.get("state") or {"none": {}}).items()
    return kind, body


def bare_id(status: Obj) -> str:
    return str(status.get("containerID", "")).rpartition("://")[2]


async def wait_for(admin: KubeClient, agent: Agent, name: str, what: str, check: Any, timeout: float = 90) -> Obj:
    async def probe() -> Obj | None:
        pod = await get_pod(admin, name)
        return pod if check(pod) else None

    got: Obj = await eventually(probe, timeout=timeout, what=f"{name}: {what}", agent=agent)
    return got


# --- a container removed behind the agent's back --------------------------------------------------------------------


def _removable(name: str, image: str) -> Obj:
    """A container whose restarts fail while the ConfigMap `name` is away (CreateContainerConfigError), so that what
    the agent reports between a removal and the next start stays long enough to be seen."""
    return {
        "name": "main",
        "image": image,
        "command": ["sleep", "3600"],
        "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": name, "key": "k"}}}],
    }


def _config_map(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def _remove_through_cri(cri_client: CRIClient, container_id: str) -> None:
    """What `crictl rm -f` does to a running container."""
    await cri_client.runtime.stop_container(container_id, 0)
    await cri_client.runtime.remove_container(container_id)


def _running(p: Obj) -> bool:
    return state_of(app_status(p, "main"))[0] == "running"


def _reason(p: Obj) -> str:
    return str(state_of(app_status(p, "main"))[1].get("reason", ""))


async def _runs_again(
    admin: KubeClient, agent: Agent, cri_client: CRIClient, name: str, old_id: str, restart_count: int
) -> Obj:
    """The ConfigMap comes back: a new instance runs, counted from the log files the old one left (upstream's
    calcRestartCountByLogDir), with only itself to report."""
    await admin.create(paths.configmaps(NS), _config_map(name))
    pod = await wait_for(
        admin, agent, name, "running again", lambda p: _running(p) and bare_id(app_status(p, "main")) != old_id
    )
    status = app_status(pod, "main")
    assert status["restartCount"] == restart_count
    assert status["lastState"] == {}
    assert pod["status"]["phase"] == "Running"
    [created] = await cri_client.runtime.list_containers(api_filter(pod_uid=pod["metadata"]["uid"], name="main"))
    assert created.annotations["io.kubernetes.container.restartCount"] == str(restart_count)
    assert created.id == bare_id(status)
    return pod


def _only_rising(watched: Watched) -> None:
    counts = [find(s.get("containerStatuses"), "main").get("restartCount", 0) for s in watched.statuses()]
    assert counts == sorted(counts), f"the restart count only rises: {counts}"
    ran = False
    for status in watched.statuses():
        ran = ran or state_of(find(status.get("containerStatuses"), "main"))[0] == "running"
        if ran:
            assert status["phase"] == "Running", f"once it ran, the pod never shows Pending: {status}"


async def test_a_container_removed_while_the_agent_was_down_is_reported_container_status_unknown(
    agent: Agent, admin: KubeClient, settings: Settings, testbed: Testbed, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("gone")
    await admin.create(paths.configmaps(NS), _config_map(name))
    async with Watched(admin, name) as watched:
        await create_pod(admin, name, [_removable(name, configs.busybox_image(settings))])
        pod = await wait_for(admin, agent, name, "running", _running)
        first_id = bare_id(app_status(pod, "main"))
        assert app_status(pod, "main")["restartCount"] == 0

        # Behind the agent's back: it is down while the container goes, so it never sees the container end.
        stop_agent(agent)
        await admin.delete(paths.configmap(NS, name))
        await _remove_through_cri(cri_client, first_id)
        agent.proc = start_agent(testbed, agent.log).proc

        pod = await wait_for(admin, agent, name, "CreateContainerConfigError after the removal", lambda p: (
            _reason(p) == "CreateContainerConfigError"
        ))  # fmt: skip
        status = app_status(pod, "main")
        assert status["lastState"] == {
            "terminated": {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": VANISHED_MESSAGE,
                "startedAt": None,
                "finishedAt": None,
            }
        }
        assert status["restartCount"] == 1  # the run nobody saw end counts, as upstream
        assert pod["status"]["phase"] == "Running"  # it ran: the pod does not fall back to Pending
        assert condition(pod, "Ready")["status"] == "False"

        await _runs_again(admin, agent, cri_client, name, first_id, restart_count=1)
    _only_rising(watched)


async def test_a_container_removed_through_cri_while_the_agent_watches(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = _name("rmf")
    await admin.create(paths.configmaps(NS), _config_map(name))
    async with Watched(admin, name) as watched:
        await create_pod(admin, name, [_removable(name, configs.busybox_image(settings))])
        pod = await wait_for(admin, agent, name, "running", _running)
        first_id = bare_id(app_status(pod, "main"))

        await admin.delete(paths.configmap(NS, name))
        await _remove_through_cri(cri_client, first_id)
        # The runtime told of the stop before the removal (an evented PLEG hears both), so, as upstream, the end
        # it saw is reported; had it seen only the removal, the end would be ContainerStatusUnknown.
        pod = await wait_for(admin, agent, name, "waiting to restart", lambda p: (
            _reason(p) == "CreateContainerConfigError"
        ))  # fmt: skip
        last = app_status(pod, "main")["lastState"]["terminated"]
        assert last["exitCode"] == 137
        assert (last["reason"], last.get("message")) in (("Error", None), ("ContainerStatusUnknown", VANISHED_MESSAGE))
        assert pod["status"]["phase"] == "Running"

        await _runs_again(admin, agent, cri_client, name, first_id, restart_count=1)
    _only_rising(watched)


def api_filter(*, pod_uid: str, name: str) -> api_pb2.ContainerFilter:
    return api_pb2.ContainerFilter(
        label_selector={"io.kubernetes.pod.uid": pod_uid, "io.kubernetes.container.name": name}
    )


# --- init containers ------------------------------------------------------------------------------------------------


async def test_init_containers_are_ready_once_done_and_the_app_waits_as_pod_initializing(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = _name("init")
    busybox = configs.busybox_image(settings)
    init = [
        {"name": "first", "image": busybox, "command": ["true"]},
        # Sleeps until the test lets it finish: the pod stays initializing for as long as the test looks.
        {"name": "second", "image": busybox, "command": ["sh", "-c", "until [ -f /tmp/go ]; do sleep 0.2; done"]},
    ]
    app = [{"name": "app", "image": busybox, "command": ["sleep", "3600"]}]
    async with Watched(admin, name) as watched:
        await create_pod(admin, name, app, initContainers=init)
        pod = await wait_for(
            admin, agent, name, "second init running", lambda p: state_of(init_status(p, "second"))[0] == "running"
        )
        first, second = init_status(pod, "first"), init_status(pod, "second")
        assert state_of(first) == ("terminated", first["state"]["terminated"])
        assert first["state"]["terminated"]["exitCode"] == 0
        assert (first["ready"], first["started"]) == (True, False)  # done: ready, as upstream's prober says
        assert (second["ready"], second["started"]) == (False, True)
        assert state_of(app_status(pod, "app"))[1] == {"reason": "PodInitializing"}
        assert pod["status"]["phase"] == "Pending"
        initialized = condition(pod, "Initialized")
        assert (initialized["status"], initialized["reason"], initialized["message"]) == (
            "False",
            "ContainersNotInitialized",
            "containers with incomplete status: [second]",
        )

        assert (await cri_client.runtime.exec_sync(bare_id(second), ["touch", "/tmp/go"], 10)).exit_code == 0
        pod = await wait_for(
            admin, agent, name, "app running", lambda p: state_of(app_status(p, "app"))[0] == "running"
        )
        for status in pod["status"]["initContainerStatuses"]:
            assert status["state"]["terminated"]["exitCode"] == 0
            assert status["ready"] is True, status
        assert condition(pod, "Initialized")["status"] == "True"
        assert pod["status"]["phase"] == "Running"

    seen = watched.statuses()
    assert any(s.get("containerStatuses") for s in seen)
    for status in seen:
        app_state = find(status.get("containerStatuses"), "app")
        if app_state and state_of(app_state)[0] == "waiting":
            assert state_of(app_state)[1].get("reason") == "PodInitializing", status
            assert app_state["restartCount"] == 0
        for init_state in status.get("initContainerStatuses") or ():
            kind, body = state_of(init_state)
            if kind == "waiting":
                assert body.get("reason") == "PodInitializing", status  # never ContainerCreating
            if kind == "terminated" and body.get("exitCode") == 0:
                assert init_state["ready"] is True, status


async def test_a_failing_init_container_keeps_the_others_pod_initializing(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("initfail")
    busybox = configs.busybox_image(settings)
    init = [
        {"name": "init1", "image": busybox, "command": ["false"]},
        {"name": "init2", "image": busybox, "command": ["true"]},
    ]
    app = [{"name": "run1", "image": busybox, "command": ["sleep", "3600"]}]
    async with Watched(admin, name) as watched:
        await create_pod(admin, name, app, initContainers=init)

        def restarted(p: Obj) -> bool:
            status = init_status(p, "init1")
            return status.get("restartCount", 0) >= 1 and bool((status.get("lastState") or {}).get("terminated"))

        pod = await wait_for(admin, agent, name, "init1 failed and restarted", restarted)
        assert pod["status"]["phase"] == "Pending"
        initialized = condition(pod, "Initialized")
        assert (initialized["status"], initialized["reason"], initialized["message"]) == (
            "False",
            "ContainersNotInitialized",
            "containers with incomplete status: [init1 init2]",
        )

    for status in watched.statuses():
        for app_state in status.get("containerStatuses") or ():
            assert state_of(app_state) == ("waiting", {"reason": "PodInitializing"}), status
            assert app_state["restartCount"] == 0
        second = find(status.get("initContainerStatuses"), "init2")
        if second:
            assert state_of(second) == ("waiting", {"reason": "PodInitializing"}), status
        first = find(status.get("initContainerStatuses"), "init1")
        if first and state_of(first)[0] == "terminated":
            assert first["state"]["terminated"]["exitCode"] != 0 and first["ready"] is False


# --- readiness gates ------------------------------------------------------------------------------------------------


async def _set_gate(admin: KubeClient, name: str, value: str) -> None:
    # As the e2e framework and controllers do: a strategic merge patch of the status subresource.
    patch = {"status": {"conditions": [{"type": GATE, "status": value}]}}
    await admin.patch(paths.pod(NS, name), patch, patch_type="strategic", subresource="status")


async def test_a_pod_is_ready_only_while_its_readiness_gate_is_true(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("gate")
    main = {"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}
    await create_pod(admin, name, [main], readinessGates=[{"conditionType": GATE}])

    def ready_is(value: str, message: str | None = None) -> Any:
        def check(p: Obj) -> bool:
            ready = condition(p, "Ready")
            return ready.get("status") == value and (message is None or ready.get("message") == message)

        return check

    pod = await wait_for(
        admin,
        agent,
        name,
        "running, not Ready for want of the gate",
        lambda p: condition(p, "ContainersReady").get("status") == "True" and ready_is("False", GATE_MISSING)(p),
    )
    assert condition(pod, "Ready")["reason"] == "ReadinessGatesNotReady"

    await _set_gate(admin, name, "True")
    pod = await wait_for(admin, agent, name, "Ready once the gate is True", ready_is("True"), timeout=30)
    assert condition(pod, GATE)["status"] == "True"  # the agent's own patch left the admin's condition alone

    await _set_gate(admin, name, "False")
    pod = await wait_for(admin, agent, name, "not Ready once the gate is False", ready_is("False", GATE_FALSE), 30)
    assert condition(pod, "Ready")["reason"] == "ReadinessGatesNotReady"
    assert condition(pod, GATE)["status"] == "False"
    assert condition(pod, "ContainersReady")["status"] == "True"

    # Status updates that have nothing to do with the gate leave it as the admin set it.
    await _set_gate(admin, name, "True")
    pod = await wait_for(admin, agent, name, "Ready again", ready_is("True"), timeout=30)
    assert condition(pod, GATE)["status"] == "True"


# --- ephemeral containers -------------------------------------------------------------------------------------------


async def test_an_ephemeral_containers_status_is_reported_apart(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("debug")
    busybox = configs.busybox_image(settings)
    await create_pod(admin, name, [{"name": "main", "image": busybox, "command": ["sleep", "3600"]}])
    pod = await wait_for(admin, agent, name, "Ready", lambda p: condition(p, "Ready").get("status") == "True")
    main_id = bare_id(app_status(pod, "main"))

    # What `kubectl debug -it --target=main` sends.
    debugger = {"name": "debugger", "image": busybox, "command": ["sleep", "3600"], "targetContainerName": "main"}
    patch = {"spec": {"ephemeralContainers": [debugger]}}
    await admin.patch(paths.pod(NS, name), patch, patch_type="strategic", subresource="ephemeralcontainers")

    def debugger_running(p: Obj) -> bool:
        status = find((p.get("status") or {}).get("ephemeralContainerStatuses"), "debugger")
        return state_of(status)[0] == "running" if status else False

    pod = await wait_for(admin, agent, name, "debugger running", debugger_running)
    [status] = pod["status"]["ephemeralContainerStatuses"]
    assert status["ready"] is False and "started" not in status  # no probes: as upstream
    assert status["restartCount"] == 0 and status["containerID"].startswith("containerd://")
    assert [c["name"] for c in pod["status"]["containerStatuses"]] == ["main"]
    assert bare_id(app_status(pod, "main")) == main_id  # the pod's own containers are untouched
    assert condition(pod, "Ready")["status"] == "True"
    assert pod["status"]["phase"] == "Running"


# --- the status patch against the real apiserver's strategic merge ---------------------------------------------------


async def test_the_status_patch_merges_as_the_apiserver_does(admin: KubeClient) -> None:
    """The status manager's strategic merge patches, applied by the real apiserver: a changed pod IP replaces the
    old one, a kubelet condition loses the fields it dropped or goes away whole, a condition the kubelet does not own
    stays as its owner set it. The pod is bound to a node nobody runs, so only this test writes its status."""
    name = _name("patch")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": f"nowhere-{uuid.uuid4().hex[:5]}",
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    created = await admin.create(paths.pods(NS), body)
    try:
        manager = StatusManager(admin, clock=SystemClock())

        def status(ip: str, ready: Obj, *extra: Obj) -> Obj:
            return {
                **created["status"],
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "conditions": [ready, *extra],
            }

        not_ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "m"}
        scheduled = {"type": "PodReadyToStartContainers", "status": "True"}
        manager.set_pod_status(created, status("198.18.0.5", not_ready, scheduled))
        await manager.sync_once()
        await _set_gate(admin, name, "True")  # its owner sets it after the kubelet's last look

        manager.set_pod_status(created, status("198.18.0.6", {"type": "Ready", "status": "True"}))
        await manager.sync_once()
        got = (await get_pod(admin, name))["status"]
        assert got["podIP"] == "198.18.0.6"
        assert got["podIPs"] == [{"ip": "198.18.0.6"}]
        ready = condition(got, "Ready")
        assert (ready["status"], ready.get("reason"), ready.get("message")) == ("True", None, None)
        assert condition(got, "PodReadyToStartContainers") == {}  # gone from the kubelet's status: deleted
        assert condition(got, GATE)["status"] == "True"
        assert manager.patches_sent == 2
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
