"""When the Kubelet's sync publishes what (upstream's SyncPod): the status is generated and set FIRST, from the
PLEG's runtime status and the reasons earlier syncs left (the reason cache); what the sync itself does (a sandbox and
its IP, a failed start) shows in the next sync's status. Reasons apply only to a container that would be started
again, a good start forgets its reason, and a sync whose only news is a new reason asks for the next sync at once."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kubelet import Kubelet
from nodeagent.kuberuntime.actions import RuntimePodStatus, from_pod_status
from nodeagent.kuberuntime.manager import SyncResult, Waiting
from nodeagent.podconfig import PodConfig
from nodeagent.podworkers import UpdateType
from pleg.cache import Cache
from pleg.status import ContainerRecord, PodStatus

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LABELS = {"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "u1"}
IP = "198.18.0.9"


def pod(restart_policy: str = "Always", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "default", "uid": "u1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"containers": [{"name": "app", "image": "busybox"}], "restartPolicy": restart_policy}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def container(state: int, exit_code: int = 0) -> ContainerRecord:
    return ContainerRecord(
        "s1",
        api_pb2.ContainerStatus(
            id="c1",
            metadata=api_pb2.ContainerMetadata(name="app"),
            state=state,  # type: ignore[arg-type]
            started_at=1,
            finished_at=2 if state == api_pb2.CONTAINER_EXITED else 0,
            exit_code=exit_code,
            labels={**LABELS, "io.kubernetes.container.name": "app"},
        ),
    )


def cached(*containers: ContainerRecord, sandbox: bool = True) -> PodStatus:
    sandboxes: tuple[api_pb2.PodSandboxStatus, ...] = ()
    if sandbox:
        sandboxes = (
            api_pb2.PodSandboxStatus(
                id="s1", state=api_pb2.SANDBOX_READY, network=api_pb2.PodSandboxNetworkStatus(ip=IP)
            ),
        )
    return PodStatus(
        uid="u1",
        name="web",
        namespace="default",
        ips=(IP,) if sandbox else (),
        sandboxes=sandboxes,
        containers=containers,
    )


@dataclass
class ScriptedRuntime:
    """Answers each sync with the next scripted result."""

    results: list[SyncResult]

    async def sync_pod(self, pod: dict[str, Any], status: RuntimePodStatus, **_: Any) -> SyncResult:
        return self.results.pop(0)

    def runtime_status(self, status: PodStatus) -> RuntimePodStatus:
        return from_pod_status(status)


@dataclass
class Statuses:
    history: list[dict[str, Any]] = field(default_factory=list)

    def set_pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.history.append(status)

    def get_pod_status(self, uid: str) -> dict[str, Any] | None:
        return self.history[-1] if self.history else None

    def remove_orphans(self, known_uids: set[str]) -> None:
        pass


def kubelet(results: Sequence[SyncResult], statuses: Statuses, relists: list[str]) -> Kubelet:
    return Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=ScriptedRuntime(list(results)),  # type: ignore[arg-type]
        status_manager=statuses,
        node=lambda: None,
        pod_cache=Cache(),
        host_ips=("127.0.0.1",),
        request_relist=relists.append,
        wall=lambda: NOW,
    )


def shown(status: dict[str, Any]) -> tuple[str, str, dict[str, Any], str | None]:
    [c] = status["containerStatuses"]
    return status["phase"], status.get("podIP", ""), c["state"], status.get("hostIP")


async def test_the_first_status_is_published_before_the_sandbox_exists() -> None:
    statuses, relists = Statuses(), list[str]()
    failed = Waiting("ErrImagePull", "rpc error: code = NotFound desc = gone", 10.0)
    k = kubelet([SyncResult({"app": failed}, (IP,), 10.0, changed=True)], statuses, relists)
    assert await k.sync_pod(UpdateType.CREATE, pod(), cached(sandbox=False)) is False
    # As upstream: Pending/ContainerCreating with hostIP and no podIP, even though the sync made a sandbox with one.
    assert shown(statuses.history[-1]) == ("Pending", "", {"waiting": {"reason": "ContainerCreating"}}, "127.0.0.1")
    assert len(statuses.history) == 1
    assert relists == ["u1"]
    k._wakeups.pop("u1").cancel()


@pytest.mark.parametrize(
    ("restart_policy", "deleting", "record", "state"),
    [
        # No container yet: the reason shows.
        ("Always", False, None, {"waiting": {"reason": "ErrImagePull", "message": "pull failed"}}),
        # Exited and to be restarted: the reason shows, the run that ended goes to lastState.
        ("Always", False, container(api_pb2.CONTAINER_EXITED, 1), {"waiting": {"reason": "ErrImagePull"}}),
        # Running, or done for its restart policy, or the pod is being deleted: the reason does not apply.
        ("Always", False, container(api_pb2.CONTAINER_RUNNING), {"running": {}}),
        ("Never", False, container(api_pb2.CONTAINER_EXITED, 1), {"terminated": {}}),
        ("Always", True, None, {"waiting": {"reason": "ContainerCreating"}}),
    ],
    ids=["no-container", "exited-restarts", "running", "never-done", "deleting"],
)
async def test_the_next_sync_shows_the_reason_where_it_applies(
    restart_policy: str, deleting: bool, record: ContainerRecord | None, state: dict[str, Any]
) -> None:
    statuses, relists = Statuses(), list[str]()
    failed = Waiting("ErrImagePull", "pull failed", 10.0)
    results = [SyncResult({"app": failed}, (IP,), 10.0, changed=True), SyncResult({"app": failed}, (IP,), 10.0)]
    k = kubelet(results, statuses, relists)
    await k.sync_pod(UpdateType.CREATE, pod(restart_policy), cached(sandbox=False))
    records = (record,) if record is not None else ()
    await k.sync_pod(UpdateType.SYNC, pod(restart_policy, deleting), cached(*records))
    _phase, pod_ip, got, _ = shown(statuses.history[-1])
    assert pod_ip == IP
    assert set(got) == set(state)
    kind = next(iter(state))
    for key, value in state[kind].items():
        assert got[kind][key] == value
    if kind == "waiting" and record is not None:
        assert statuses.history[-1]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1
    wakeup = k._wakeups.pop("u1", None)
    if wakeup is not None:
        wakeup.cancel()


async def test_a_good_start_forgets_the_reason_and_a_new_reason_asks_for_the_next_sync() -> None:
    statuses, relists = Statuses(), list[str]()
    failed = Waiting("CreateContainerConfigError", 'configmap "cm" not found')
    back_off = Waiting("CrashLoopBackOff", "back-off 10s restarting failed container=app pod=web_default(u1)", 10.0)
    results = [
        SyncResult({"app": failed}, (IP,), changed=True),  # the first start fails
        SyncResult({}, (IP,), changed=True, started=frozenset({"app"})),  # then succeeds
        SyncResult({}, (IP,)),  # it runs
        SyncResult({"app": back_off}, (IP,), 10.0),  # it exited; nothing changes but the reason
        SyncResult({"app": back_off}, (IP,), 8.0),  # the same reason: no extra sync
    ]
    k = kubelet(results, statuses, relists)
    resyncs: list[str] = []
    k._resync = resyncs.append  # type: ignore[method-assign,assignment]
    await k.sync_pod(UpdateType.CREATE, pod(), cached(sandbox=False))
    await k.sync_pod(UpdateType.SYNC, pod(), cached())
    assert shown(statuses.history[-1])[2]["waiting"]["reason"] == "CreateContainerConfigError"
    await k.sync_pod(UpdateType.SYNC, pod(), cached(container(api_pb2.CONTAINER_RUNNING)))
    assert "running" in shown(statuses.history[-1])[2]
    assert k._reasons == {}
    await k.sync_pod(UpdateType.SYNC, pod(), cached(container(api_pb2.CONTAINER_EXITED, 1)))
    # Published before the sync decided on the back-off: terminated; the back-off asks for the next sync.
    assert "terminated" in shown(statuses.history[-1])[2]
    await asyncio.sleep(0)
    assert resyncs == ["u1"]
    assert relists == ["u1", "u1", "u1"]
    await k.sync_pod(UpdateType.SYNC, pod(), cached(container(api_pb2.CONTAINER_EXITED, 1)))
    assert shown(statuses.history[-1])[2]["waiting"]["reason"] == "CrashLoopBackOff"
    await asyncio.sleep(0)
    assert resyncs == ["u1"]
    for handle in k._wakeups.values():
        handle.cancel()


async def test_a_terminal_status_is_published_and_the_runtime_is_left_alone() -> None:
    statuses, relists = Statuses(), list[str]()
    k = kubelet([], statuses, relists)  # the runtime would fail the test: it has nothing scripted
    done = await k.sync_pod(UpdateType.SYNC, pod("Never"), cached(container(api_pb2.CONTAINER_EXITED, 1)))
    assert done is True
    assert statuses.history[-1]["phase"] == "Failed"
