"""`volumeMounts[].recursiveReadOnly` on the real testbed, as upstream v1.34's kubelet treats it.

containerd 1.7 lists no runtime handlers in CRI Status, so recursive read-only mounts are unsupported there: a pod
asking `Enabled` gets CreateContainerConfigError with upstream's message and a Failed event while its other container
and other pods run; `IfPossible` runs with a plain read-only mount, and the test shows that it is plain (a mount
below it stays writable inside the container, which a recursive one would not allow). `Enabled` without readOnly
never reaches the node: the apiserver refuses it. The container statuses carry `volumeMounts` as upstream writes
them, and the Node's status says what the runtime reported. Every wait is a condition with a generous deadline.

The test imports nothing of the feature itself, so it also runs against an agent without it (where it fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Invalid, NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    cstatus,
    events,
    eventually,
    running_id,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

Obj = dict[str, Any]
PREFIX = "rro-"
NOT_SUPPORTED = (
    'failed to resolve recursive read-only mode: volume "data" requested recursive read-only mode, '
    "but it is not supported by the runtime"
)


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-recursive-read-only.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


@pytest_asyncio.fixture(loop_scope="session")
async def ready(agent: Agent, admin: KubeClient, settings: Settings) -> AsyncIterator[None]:
    await wait_node_ready(admin, agent, settings.node_name)
    yield
    for pod in (await admin.list(paths.pods(NS)))["items"]:
        if pod["metadata"]["name"].startswith(PREFIX):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)


def _name(prefix: str) -> str:
    return f"{PREFIX}{prefix}-{uuid.uuid4().hex[:5]}"


def busybox(settings: Settings, name: str, mounts: list[Obj]) -> Obj:
    return {
        "name": name,
        "image": configs.busybox_image(settings),
        "command": ["sleep", "3600"],
        "volumeMounts": mounts,
    }


def pod_body(name: str, containers: list[Obj], volumes: list[Obj]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": containers,
            "volumes": volumes,
        },
    }


async def exec_out(cri: CRIClient, container_id: str, *command: str) -> tuple[int, str]:
    response = await cri.runtime.exec_sync(container_id, list(command), 10)
    return response.exit_code, (response.stdout + response.stderr).decode(errors="replace")


async def test_the_node_reports_what_the_runtime_lists(
    ready: None, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    status = await cri_client.runtime.status()
    handlers = list(status.runtime_handlers)
    # The premise of the tests below: containerd 1.7 lists no handler, so none supports recursive read-only mounts.
    assert not any(h.name == "" and h.features.recursive_read_only_mounts for h in handlers), handlers
    node = await admin.get(paths.node(settings.node_name))
    expected = [
        {
            "name": h.name,
            "features": {
                "recursiveReadOnlyMounts": h.features.recursive_read_only_mounts,
                "userNamespaces": h.features.user_namespaces,
            },
        }
        for h in handlers
    ]
    # omitempty: no handlers, no field (upstream's setter writes an empty list, which the API drops).
    assert node["status"].get("runtimeHandlers", []) == expected


async def test_enabled_fails_the_container_while_the_rest_runs(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = _name("enabled")
    rro = {"name": "data", "mountPath": "/data", "readOnly": True, "recursiveReadOnly": "Enabled"}
    containers = [
        busybox(settings, "rro", [rro]),
        busybox(settings, "plain", [{"name": "data", "mountPath": "/data"}]),
    ]
    pod = await admin.create(paths.pods(NS), pod_body(name, containers, [{"name": "data", "emptyDir": {}}]))
    # Another pod on the node, which must run whatever happens to the first.
    other_name = _name("other")
    await admin.create(paths.pods(NS), pod_body(other_name, [busybox(settings, "main", [])], []))

    async def refused_and_plain_running() -> Obj | None:
        got: Obj = await admin.get(paths.pod(NS, name))
        waiting = (cstatus(got, "rro").get("state") or {}).get("waiting") or {}
        ok = waiting.get("reason") == "CreateContainerConfigError" and running_id(got, "plain")
        return got if ok else None

    got = await eventually(refused_and_plain_running, timeout=90, what="rro refused, plain running", agent=agent)
    assert cstatus(got, "rro")["state"]["waiting"]["message"] == NOT_SUPPORTED
    assert not running_id(got, "rro")
    # The status lists the spec's mounts; a mode the runtime cannot honour shows as Disabled.
    assert cstatus(got, "rro")["volumeMounts"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True, "recursiveReadOnly": "Disabled"}
    ]

    async def running_with_mounts() -> Obj | None:
        # A running container's list is the one written while it waited, carried over by the next status.
        current: Obj = await admin.get(paths.pod(NS, name))
        return current if cstatus(current, "plain").get("volumeMounts") else None

    current = await eventually(running_with_mounts, timeout=60, what="plain's volumeMounts", agent=agent)
    assert running_id(current, "plain")
    assert cstatus(current, "plain")["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]

    # Each retry repeats the same event (folded into its count by the recorder).
    failed = await events(admin, pod, "Failed")
    assert {(e["type"], e["message"], e["involvedObject"].get("fieldPath")) for e in failed} == {
        ("Warning", f"Error: {NOT_SUPPORTED}", "spec.containers{rro}")
    }
    # Nothing of "rro" was ever created in the runtime.
    created = await cri_client.runtime.list_containers()
    mine = [c for c in created if c.labels.get("io.kubernetes.pod.uid") == pod["metadata"]["uid"]]
    assert sorted(c.metadata.name for c in mine) == ["plain"]

    await wait_running(admin, agent, other_name, "main", timeout=60)


@pytest.fixture
def host_dir_with_submount(tmp_path: Path) -> Iterator[Path]:
    """A host directory with a tmpfs mounted below it: a plain read-only bind leaves the tmpfs writable."""
    top = tmp_path / "host"
    (top / "sub").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "rro-test", str(top / "sub")], check=True)
    try:
        yield top
    finally:
        subprocess.run(["umount", "-l", str(top / "sub")], check=False)


async def test_if_possible_runs_with_a_plain_read_only_mount(
    ready: None,
    agent: Agent,
    admin: KubeClient,
    settings: Settings,
    cri_client: CRIClient,
    host_dir_with_submount: Path,
) -> None:
    name = _name("ifpossible")
    mounts: list[Obj] = [
        {"name": "host", "mountPath": "/host", "readOnly": True, "recursiveReadOnly": "IfPossible"},
        {"name": "host", "mountPath": "/host-rw"},
    ]
    volumes: list[Obj] = [{"name": "host", "hostPath": {"path": str(host_dir_with_submount), "type": "Directory"}}]
    await admin.create(paths.pods(NS), pod_body(name, [busybox(settings, "main", mounts)], volumes))

    async def running_with_mounts() -> Obj | None:
        got: Obj = await admin.get(paths.pod(NS, name))
        return got if running_id(got, "main") and cstatus(got, "main").get("volumeMounts") else None

    got = await eventually(running_with_mounts, timeout=90, what=f"{name} running with volumeMounts", agent=agent)
    # IfPossible on a runtime without support: a plain read-only mount, shown as Disabled.
    assert cstatus(got, "main")["volumeMounts"] == [
        {"name": "host", "mountPath": "/host", "readOnly": True, "recursiveReadOnly": "Disabled"},
        {"name": "host", "mountPath": "/host-rw"},
    ]
    container_id = running_id(got, "main")
    code, out = await exec_out(cri_client, container_id, "touch", "/host/top")
    assert code != 0 and "Read-only file system" in out, out
    # Plain, not recursive: the tmpfs below the read-only mount is still writable.
    code, out = await exec_out(cri_client, container_id, "touch", "/host/sub/below")
    assert code == 0, out
    assert (host_dir_with_submount / "sub" / "below").exists()
    code, out = await exec_out(cri_client, container_id, "touch", "/host-rw/written")
    assert code == 0, out
    assert (host_dir_with_submount / "written").exists()


@pytest.mark.parametrize(
    ("mount", "detail"),
    [
        ({"recursiveReadOnly": "Enabled"}, "may only be specified when readOnly is true"),
        (
            {"readOnly": True, "recursiveReadOnly": "Enabled", "mountPropagation": "HostToContainer"},
            "may only be specified when mountPropagation is None or not specified",
        ),
    ],
)
async def test_the_apiserver_refuses_what_cannot_be_honoured(
    ready: None, admin: KubeClient, settings: Settings, mount: Obj, detail: str
) -> None:
    # Such a pod never reaches a node (the kubelet's own check, with upstream's text, is covered by the unit tests).
    body = pod_body(
        _name("invalid"),
        [busybox(settings, "main", [{"name": "data", "mountPath": "/data", **mount}])],
        [{"name": "data", "emptyDir": {}}],
    )
    with pytest.raises(Invalid) as caught:
        await admin.create(paths.pods(NS), body)
    # (upstream's validation names the field without the mount's index)
    assert f"spec.containers[0].volumeMounts.recursiveReadOnly: Forbidden: {detail}" in caught.value.message
