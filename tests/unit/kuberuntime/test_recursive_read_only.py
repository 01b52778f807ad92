"""Recursive read-only mounts: upstream's resolveRecursiveReadOnly table (kubelet_pods_test.go's cases and error
texts), makeMounts' CRI Mount field and wrapped error, and the runtime manager's reason, message and event."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.actions import RuntimePodStatus, SandboxState, SandboxStatus
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from nodeagent.kuberuntime.recursive_read_only import RecursiveReadOnlyError, resolve_recursive_read_only
from nodeagent.kuberuntime.runtime_handlers import RuntimeHandler
from nodeagent.volume.container_mounts import PodVolume, make_mounts
from nodeagent.volume.layout import PodDirs
from tests.unit.cri.scripted import ScriptedRuntime
from tests.unit.volume.fakes import FakeMounter

Obj = dict[str, Any]


def vm(**fields: Any) -> Obj:
    return {"name": "data", "mountPath": "/data", **fields}


NOT_SUPPORTED = 'volume "data" requested recursive read-only mode, but it is not supported by the runtime'
NOT_READ_ONLY = 'volume "data" requested recursive read-only mode, but it is not read-only'
WAIT_UNSUPPORTED = f"failed to resolve recursive read-only mode: {NOT_SUPPORTED}"


@pytest.mark.parametrize(
    ("mount", "supported", "expected"),
    [
        (vm(), False, False),
        (vm(), True, False),
        (vm(readOnly=True), True, False),  # no mode: a plain read-only mount
        (vm(readOnly=True, recursiveReadOnly="Disabled"), True, False),
        (vm(recursiveReadOnly="Disabled"), False, False),  # Disabled is never an error
        (vm(readOnly=True, recursiveReadOnly="IfPossible"), False, False),
        (vm(readOnly=True, recursiveReadOnly="IfPossible"), True, True),
        (vm(readOnly=True, recursiveReadOnly="IfPossible", mountPropagation="None"), True, True),
        (vm(readOnly=True, recursiveReadOnly="Enabled"), True, True),
        (vm(readOnly=True, recursiveReadOnly="Enabled"), False, NOT_SUPPORTED),
        (vm(recursiveReadOnly="Enabled"), True, NOT_READ_ONLY),
        (vm(readOnly=False, recursiveReadOnly="IfPossible"), True, NOT_READ_ONLY),
        (vm(recursiveReadOnly="Bogus"), True, NOT_READ_ONLY),  # readOnly is checked before the mode
        (
            vm(readOnly=True, recursiveReadOnly="Enabled", mountPropagation="HostToContainer"),
            True,
            'volume "data" requested recursive read-only mode, but it is not compatible with propagation '
            '"HostToContainer"',
        ),
        (
            vm(readOnly=True, recursiveReadOnly="IfPossible", mountPropagation="Bidirectional"),
            False,
            'volume "data" requested recursive read-only mode, but it is not compatible with propagation '
            '"Bidirectional"',
        ),
        (vm(readOnly=True, recursiveReadOnly="Bogus"), True, 'unknown recursive read-only mode "Bogus"'),
    ],
)
def test_resolve(mount: Obj, supported: bool, expected: bool | str) -> None:
    if isinstance(expected, bool):
        assert resolve_recursive_read_only(mount, supported) is expected
        return
    with pytest.raises(RecursiveReadOnlyError) as caught:
        resolve_recursive_read_only(mount, supported)
    assert str(caught.value) == expected


# --- makeMounts -------------------------------------------------------------------------------------------------


def _make(tmp_path: Path, mounts: list[Obj], *, supported: bool) -> list[api_pb2.Mount]:
    pod = {"metadata": {"uid": "u1", "name": "web", "namespace": "default"}}
    container = {"name": "app", "volumeMounts": mounts}
    return make_mounts(
        pod,
        container,
        {"data": PodVolume("/v/data"), "cfg": PodVolume("/v/cfg", read_only=True)},
        list,
        dirs=PodDirs(str(tmp_path)),
        mounter=FakeMounter(),
        supports_rro=supported,
    )


@pytest.mark.parametrize(
    ("supported", "expected"),
    [(False, [(True, False), (True, False), (True, False)]), (True, [(True, True), (True, True), (True, False)])],
)
def test_make_mounts_sets_the_cri_field(tmp_path: Path, supported: bool, expected: list[tuple[bool, bool]]) -> None:
    mounts = [
        vm(readOnly=True, recursiveReadOnly="IfPossible"),
        vm(name="cfg", mountPath="/cfg", readOnly=True, recursiveReadOnly="IfPossible"),
        # a volume its plugin forces read-only is not recursive unless asked
        vm(name="cfg", mountPath="/cfg2"),
    ]
    got = _make(tmp_path, mounts, supported=supported)
    assert [(m.readonly, m.recursive_read_only) for m in got] == expected


def test_make_mounts_wraps_the_error_as_upstream(tmp_path: Path) -> None:
    with pytest.raises(CreateContainerConfigError) as caught:
        _make(
            tmp_path,
            [vm(readOnly=True), vm(mountPath="/rro", readOnly=True, recursiveReadOnly="Enabled")],
            supported=False,
        )
    assert str(caught.value) == WAIT_UNSUPPORTED
    assert isinstance(caught.value.__cause__, RecursiveReadOnlyError)


# --- through the runtime manager ---------------------------------------------------------------------------------

SANDBOX = SandboxStatus(id="s1", state=SandboxState.READY, attempt=0, created_at=1, ip="198.18.0.5", host_network=False)
DEFAULT_RRO = (RuntimeHandler("", supports_recursive_read_only_mounts=True), RuntimeHandler("runc"))


def _script(runtime: ScriptedRuntime) -> None:
    runtime.script["ImageStatus"] = api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:1", size=1))
    runtime.script["CreateContainer"] = api_pb2.CreateContainerResponse(container_id="new")
    runtime.script["PodSandboxStatus"] = api_pb2.PodSandboxStatusResponse(
        status=api_pb2.PodSandboxStatus(
            id="s1",
            created_at=1,
            metadata=api_pb2.PodSandboxMetadata(name="web", namespace="ns1", uid="u-1", attempt=0),
            network=api_pb2.PodSandboxNetworkStatus(ip="198.18.0.5"),
        )
    )


@pytest.mark.parametrize(
    ("handlers", "mode", "waiting", "created_rro"),
    [
        ((), "Enabled", WAIT_UNSUPPORTED, None),  # containerd 1.7 lists no handlers
        # handlers listed, but not the default one every sandbox runs with
        ((RuntimeHandler("runc", supports_recursive_read_only_mounts=True),), "Enabled", WAIT_UNSUPPORTED, None),
        ((RuntimeHandler(""),), "Enabled", WAIT_UNSUPPORTED, None),
        ((), "IfPossible", None, False),
        (DEFAULT_RRO, "IfPossible", None, True),
        (DEFAULT_RRO, "Enabled", None, True),
    ],
    ids=["no-handlers", "default-not-listed", "default-without", "if-possible", "if-possible-rro", "enabled-rro"],
)
async def test_runtime_manager(
    runtime: ScriptedRuntime,
    client: CRIClient,
    tmp_path: Path,
    handlers: Sequence[RuntimeHandler],
    mode: str,
    waiting: str | None,
    created_rro: bool | None,
) -> None:
    _script(runtime)
    events: list[tuple[str, str, str, str]] = []

    async def container_mounts(
        pod: Obj, container: Mapping[str, Any], env: Callable[[], Sequence[tuple[str, str]]], supports_rro: bool
    ) -> list[api_pb2.Mount]:
        return make_mounts(
            pod,
            container,
            {"data": PodVolume("/v/data")},
            env,
            dirs=PodDirs(str(tmp_path)),
            mounter=FakeMounter(),
            supports_rro=supports_rro,
        )

    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="127.0.0.1", pod_log_dir_root=str(tmp_path / "logs")),
        events=lambda pod, type_, reason, message, field_path: events.append((type_, reason, message, field_path)),
        container_mounts=container_mounts,
        runtime_handlers=lambda: handlers,
    )
    pod = {
        "metadata": {"name": "web", "namespace": "ns1", "uid": "u-1"},
        "spec": {
            "containers": [
                {"name": "app", "image": "busybox:1", "volumeMounts": [vm(readOnly=True, recursiveReadOnly=mode)]},
                {"name": "other", "image": "busybox:1"},
            ]
        },
    }
    status = RuntimePodStatus(uid="u-1", name="web", namespace="ns1", sandboxes=(SANDBOX,), containers=())
    result = await manager.sync_pod(pod, status)
    created = {
        c.request.config.metadata.name: list(c.request.config.mounts)
        for c in runtime.calls_of("CreateContainer")
        if isinstance(c.request, api_pb2.CreateContainerRequest)
    }
    assert "other" in created  # the other container is created whatever happens to this one
    if waiting is not None:
        assert "app" not in created
        assert (result.waiting["app"].reason, result.waiting["app"].message) == ("CreateContainerConfigError", waiting)
        assert ("Warning", "Failed", f"Error: {waiting}", "spec.containers{app}") in events
    else:
        assert "app" not in result.waiting
        [mount] = [m for m in created["app"] if m.container_path == "/data"]
        assert (mount.readonly, mount.recursive_read_only) == (True, created_rro)
