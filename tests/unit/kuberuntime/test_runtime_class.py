"""RuntimeClass: the cache a list-and-watch keeps, and the runtime manager sending the pod's handler to RunPodSandbox
(upstream pkg/kubelet/runtimeclass and kuberuntime_sandbox.go createPodSandbox), over the scripted CRI runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube.informer import Added, Deleted, Modified, Synced
from nodeagent.kuberuntime.actions import RuntimePodStatus
from nodeagent.kuberuntime.cgroups import PodCgroupError, PodResourceConfig
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager, SyncResult
from nodeagent.kuberuntime.runtime_handlers import RuntimeHandler
from nodeagent.runtimeclass import RuntimeClassManager, RuntimeClassNotFound, UnresolvedRuntimeClasses
from tests.unit.cri.scripted import Fail, ScriptedRuntime

Obj = dict[str, Any]


def runtime_class(name: str, handler: str) -> Obj:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler}


def test_lookup_follows_the_watch() -> None:
    manager = RuntimeClassManager()
    # Before the first list the cache is empty, and a lookup is NotFound, as upstream's lister answers.
    with pytest.raises(RuntimeClassNotFound, match=r'^runtimeclass\.node\.k8s\.io "alt" not found$'):
        manager.lookup_runtime_handler("alt")
    assert manager.lookup_runtime_handler(None) == ""
    assert manager.lookup_runtime_handler("") == ""
    manager.apply(Synced((runtime_class("alt", "test-handler"), runtime_class("old", "runc")), "1"))
    assert manager.synced
    assert manager.lookup_runtime_handler("alt") == "test-handler"
    manager.apply(Added(runtime_class("kata", "kata-qemu")))
    manager.apply(Modified(runtime_class("alt", "runc")))
    manager.apply(Deleted(runtime_class("old", "runc")))
    assert manager.lookup_runtime_handler("kata") == "kata-qemu"
    assert manager.lookup_runtime_handler("alt") == "runc"
    with pytest.raises(RuntimeClassNotFound):
        manager.lookup_runtime_handler("old")
    # A relist replaces everything: what was deleted while the watch was down is gone.
    manager.apply(Synced((runtime_class("kata", "kata-qemu"),), "9"))
    with pytest.raises(RuntimeClassNotFound):
        manager.lookup_runtime_handler("alt")


def test_standalone_gives_the_default_handler_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    resolver = UnresolvedRuntimeClasses()
    with caplog.at_level("WARNING"):
        assert resolver.lookup_runtime_handler("alt") == ""
        assert resolver.lookup_runtime_handler("alt") == ""
    assert [r.getMessage() for r in caplog.records if "runtimeclass not resolved" in r.getMessage()] == [
        "runtimeclass not resolved runtime_class=alt handler=default why=standalone (no apiserver)"
    ]


# --- through the runtime manager -------------------------------------------------------------------------------

Event = tuple[str, str, str]


def _pod(**spec: Any) -> Obj:
    return {
        "metadata": {"name": "web", "namespace": "ns1", "uid": "u-1"},
        # dnsPolicy Default: no MissingClusterDNS event among the ones looked at.
        "spec": {"dnsPolicy": "Default", "containers": [{"name": "app", "image": "busybox:1"}], **spec},
    }


def _script(runtime: ScriptedRuntime) -> None:
    runtime.script["RunPodSandbox"] = api_pb2.RunPodSandboxResponse(pod_sandbox_id="s1")
    runtime.script["ImageStatus"] = api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:1", size=1))
    runtime.script["CreateContainer"] = api_pb2.CreateContainerResponse(container_id="c1")
    runtime.script["PodSandboxStatus"] = api_pb2.PodSandboxStatusResponse(
        status=api_pb2.PodSandboxStatus(
            id="s1",
            created_at=1,
            metadata=api_pb2.PodSandboxMetadata(name="web", namespace="ns1", uid="u-1", attempt=0),
            network=api_pb2.PodSandboxNetworkStatus(ip="198.18.0.5"),
        )
    )


def _manager(
    client: CRIClient, tmp_path: Path, events: list[Event], handlers: tuple[RuntimeHandler, ...] = ()
) -> RuntimeManager:
    classes = RuntimeClassManager()
    classes.apply(Synced((runtime_class("alt", "test-handler"), runtime_class("missing-handler", "nosuch")), "1"))
    return RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="127.0.0.1", pod_log_dir_root=str(tmp_path / "logs")),
        events=lambda pod, type_, reason, message, field_path: events.append((type_, reason, message)),
        runtime_classes=classes,
        runtime_handlers=lambda: handlers,
    )


async def _sync(manager: RuntimeManager, pod: Obj) -> SyncResult:
    return await manager.sync_pod(pod, RuntimePodStatus(uid="u-1", name="web", namespace="ns1"))


@pytest.mark.parametrize(("class_name", "handler"), [(None, ""), ("alt", "test-handler")])
async def test_the_pods_handler_goes_to_run_pod_sandbox(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path, class_name: str | None, handler: str
) -> None:
    _script(runtime)
    events: list[Event] = []
    await _sync(_manager(client, tmp_path, events), _pod(runtimeClassName=class_name))
    [call] = runtime.calls_of("RunPodSandbox")
    assert isinstance(call.request, api_pb2.RunPodSandboxRequest)
    assert call.request.runtime_handler == handler
    assert [e for e in events if e[1] == "FailedCreatePodSandBox"] == []


async def test_a_missing_runtime_class_fails_the_sandbox(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    events: list[Event] = []
    result = await _sync(_manager(client, tmp_path, events), _pod(runtimeClassName="gone"))
    assert runtime.calls_of("RunPodSandbox") == []
    # Tried again after upstream's pod worker back-off (the informer may not have seen a new RuntimeClass yet),
    # not at the next resync.
    assert result.retry_after == 10.0
    assert events == [
        ("Warning", "FailedCreatePodSandBox", 'Failed to create pod sandbox: runtimeclass.node.k8s.io "gone" not found')
    ]


async def test_an_unknown_handler_fails_in_the_runtimes_words(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    # containerd 1.7's answer for a handler its config lacks.
    error = 'failed to get sandbox runtime: no runtime for "nosuch" is configured'
    runtime.script["RunPodSandbox"] = Fail(grpc.StatusCode.UNKNOWN, error)
    events: list[Event] = []
    await _sync(_manager(client, tmp_path, events), _pod(runtimeClassName="missing-handler"))
    [call] = runtime.calls_of("RunPodSandbox")
    assert isinstance(call.request, api_pb2.RunPodSandboxRequest)
    assert call.request.runtime_handler == "nosuch"
    assert events == [
        ("Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: rpc error: code = Unknown desc = {error}")
    ]
    assert runtime.calls_of("CreateContainer") == []


async def test_host_users_false_fails_before_the_runtime_is_asked(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    events: list[Event] = []
    await _sync(_manager(client, tmp_path, events), _pod(hostUsers=False))
    assert runtime.calls_of("RunPodSandbox") == []
    assert events == [
        (
            "Warning",
            "FailedCreatePodSandBox",
            "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces",
        )
    ]


async def test_recursive_read_only_is_asked_of_the_pods_handler(client: CRIClient, tmp_path: Path) -> None:
    handlers = (RuntimeHandler(""), RuntimeHandler("test-handler", supports_recursive_read_only_mounts=True))
    manager = _manager(client, tmp_path, [], handlers)
    assert manager.supports_recursive_read_only(_pod(runtimeClassName="alt"))
    assert not manager.supports_recursive_read_only(_pod())
    assert not manager.supports_recursive_read_only(_pod(runtimeClassName="gone"))


class RecordingPodCgroups:
    """The pod container manager's seam (PodCgroups), recording what the runtime manager asks of it."""

    def __init__(self, fail: str | None = None) -> None:
        self.ensured: list[tuple[str, PodResourceConfig]] = []
        self._fail = fail

    def ensure(self, cgroup: str, config: PodResourceConfig) -> None:
        if self._fail is not None:
            raise PodCgroupError(self._fail)
        self.ensured.append((cgroup, config))

    def read(self, cgroup: str) -> PodResourceConfig:
        return PodResourceConfig()

    def write(self, cgroup: str, config: PodResourceConfig) -> None:
        del cgroup, config

    def memory_usage(self, cgroup: str) -> int:
        return 0

    def destroy(self, cgroup: str) -> None:
        del cgroup


async def test_the_pod_cgroup_is_sized_with_the_overhead_before_the_sandbox(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    cgroups = RecordingPodCgroups()
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="127.0.0.1", pod_log_dir_root=str(tmp_path / "logs"), cgroup_root="/na"),
        pod_cgroups=cgroups,
    )
    pod = _pod(overhead={"cpu": "50m", "memory": "16Mi"})
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "100m", "memory": "32Mi"},
        "requests": {"cpu": "100m", "memory": "32Mi"},
    }
    await _sync(manager, pod)
    # Guaranteed: the pod cgroup sits under kubepods; limits and requests with the overhead on top.
    [(cgroup, config)] = cgroups.ensured
    assert cgroup == "/na/kubepods/podu-1"
    assert (config.cpu_quota, config.memory) == (15000, 48 << 20)
    assert config.cpu_shares == 153
    assert len(runtime.calls_of("RunPodSandbox")) == 1


async def test_with_the_systemd_driver_the_pod_slice_is_the_sandboxs_cgroup_parent(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    # As upstream's GetPodContainerName with cgroupDriver: systemd: the expanded slice path, which containerd
    # (SystemdCgroup = true) cuts to its last slice for runc.
    _script(runtime)
    cgroups = RecordingPodCgroups()
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(
            node_name="n1", host_ip="127.0.0.1", pod_log_dir_root=str(tmp_path / "logs"), cgroup_driver="systemd"
        ),
        pod_cgroups=cgroups,
    )
    await _sync(manager, _pod())
    slice_path = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_1.slice"
    assert [cgroup for cgroup, _ in cgroups.ensured] == [slice_path]
    [call] = runtime.calls_of("RunPodSandbox")
    assert call.request.config.linux.cgroup_parent == slice_path


async def test_a_pod_cgroup_that_cannot_be_made_stops_the_sync(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    events: list[Event] = []
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="127.0.0.1", pod_log_dir_root=str(tmp_path / "logs")),
        events=lambda pod, type_, reason, message, field_path: events.append((type_, reason, message)),
        pod_cgroups=RecordingPodCgroups(fail="failed to create pod cgroup /kubepods/besteffort/podu-1: Read-only"),
    )
    result = await _sync(manager, _pod())
    assert runtime.calls_of("RunPodSandbox") == []
    assert events == [
        (
            "Warning",
            "FailedCreatePodContainer",
            "unable to ensure pod container exists: failed to create pod cgroup /kubepods/besteffort/podu-1: Read-only",
        )
    ]
    assert result.retry_after == 10.0
