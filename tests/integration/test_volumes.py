"""Volumes as users see them: the agent (`nodeagent run`) sets up each volume type on the real testbed, the content
is read from inside the containers (`cat` over CRI ExecSync), and failures show as the events upstream records.

Also: a missing ConfigMap keeps its pod waiting while another pod runs; a ConfigMap update reaches a running pod
(a subPath mount of the same key keeps the old content, as upstream); the ServiceAccount token the projected
volume holds is accepted by the apiserver; a restarted agent neither remounts nor doubles a mount; twenty
deleted pods leave nothing in /proc/mounts or under the root dir; a ConfigMap that outgrows its projected tmpfs
fails the refresh for real (ENOSPC) while the container keeps the old files. Every wait is a condition with a
generous deadline.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import ssl
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
SYNC_FREQUENCY = "5s"
GONE_PODS = 20
#: two housekeeping periods (2 s each) and room for a loaded machine.
HOUSEKEEPING_DEADLINE = 15.0
#: the full-tmpfs test: a 12 MiB pod memory limit sizes the projected tmpfs; 13 copies of 960 KiB do not fit.
FULL_POD_MEMORY = "12Mi"
FULL_BLOB = 960 * 1024
FULL_COPIES = 13


@dataclass
class Running:
    """The agent under test and its config; the restart test replaces the agent."""

    agent: Agent
    config: Path
    log: Path

    def restart(self, testbed: Testbed) -> Agent:
        self.agent = start_agent(testbed, self.log, config=self.config)
        return self.agent


@pytest.fixture(scope="module")
def running(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    config = agent_config(testbed, tmp_path_factory.mktemp("volumes") / "nodeagent.yaml", syncFrequency=SYNC_FREQUENCY)
    log = testbed.layout.logs / "agent-volumes.log"
    holder = Running(start_agent(testbed, log, config=config), config, log)
    try:
        yield holder
    finally:
        stop_agent(holder.agent)
        asyncio.run(_delete_objects(testbed))
        asyncio.run(clean_up(testbed, settings))
        _unmount_leftovers(testbed.layout.kubelet_root)


@pytest.fixture
def agent(running: Running) -> Agent:
    return running.agent


@pytest.fixture(scope="module")
def root(testbed: Testbed) -> Path:
    """The agent's root dir as the mount table spells it."""
    return Path(os.path.realpath(testbed.layout.kubelet_root))


@pytest_asyncio.fixture(loop_scope="session")
async def ready(agent: Agent, admin: KubeClient, settings: Settings) -> AsyncIterator[None]:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    yield
    # Each test's pods go with it, so the next one starts from an empty node.
    for pod in (await admin.list(paths.pods(NS)))["items"]:
        if pod["metadata"]["name"].startswith("vol-"):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)


async def _delete_objects(testbed: Testbed) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for resource in ("configmaps", "secrets"):
            for item in (await admin.list(paths.api_path(resource, namespace=NS)))["items"]:
                if item["metadata"]["name"].startswith("vol-"):
                    with contextlib.suppress(NotFound):
                        await admin.delete(paths.api_path(resource, namespace=NS, name=item["metadata"]["name"]))


def _unmount_leftovers(root: Path) -> None:
    """Whatever a failing test left mounted below the agent's root dir (the testbed's down sweeps too)."""
    real = os.path.realpath(root)
    for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
        point = line.split()[4]
        if point.startswith(real + "/"):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _name(prefix: str) -> str:
    return f"vol-{prefix}-{uuid.uuid4().hex[:5]}"


def busybox(settings: Settings, name: str = "main", **fields: Any) -> Obj:
    return {"name": name, "image": configs.busybox_image(settings), "command": ["sleep", "3600"], **fields}


async def run_pod(admin: KubeClient, name: str, containers: list[Obj], *, token: bool = False, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name, "tier": "test"}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": containers, **spec},
    }
    if not token:
        body["spec"]["automountServiceAccountToken"] = False
    created: Obj = await admin.create(paths.pods(NS), body)
    return created


async def create(admin: KubeClient, resource: str, name: str, **fields: Any) -> Obj:
    body = {"apiVersion": "v1", "metadata": {"name": name, "namespace": NS}, **fields}
    obj: Obj = await admin.create(paths.api_path(resource, namespace=NS), body)
    return obj


async def get_pod(admin: KubeClient, name: str) -> Obj:
    pod: Obj = await admin.get(paths.pod(NS, name))
    return pod


def cstatus(pod: Obj, name: str = "main") -> Obj:
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status["name"] == name:
            out: Obj = status
            return out
    return {}


def running_id(pod: Obj, name: str = "main") -> str:
    status = cstatus(pod, name)
    if "running" not in (status.get("state") or {}):
        return ""
    return str(status.get("containerID", "")).rpartition("://")[2]


async def wait_running(admin: KubeClient, agent: Agent, name: str, container: str = "main") -> Obj:
    async def running() -> Obj | None:
        pod = await get_pod(admin, name)
        return pod if running_id(pod, container) else None

    got: Obj = await eventually(running, timeout=90, what=f"{name} running", agent=agent)
    return got


async def events(admin: KubeClient, pod: Obj, reason: str) -> list[str]:
    listed = await admin.list(
        paths.events(NS), field_selector=f"involvedObject.uid={pod['metadata']['uid']},reason={reason}"
    )
    return [str(e.get("message", "")) for e in listed["items"]]


async def exec_out(cri: CRIClient, container_id: str, *command: str) -> tuple[int, str]:
    response = await cri.runtime.exec_sync(container_id, list(command), 10)
    return response.exit_code, (response.stdout + response.stderr).decode(errors="replace")


async def cat(cri: CRIClient, container_id: str, path: str) -> str:
    code, out = await exec_out(cri, container_id, "cat", path)
    assert code == 0, f"cat {path}: {out}"
    return out


def mounts_of(uid: str) -> list[str]:
    """Mount points of this pod's directory in the host's mount table."""
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if f"/pods/{uid}/" in line]


# --- every type, end to end ------------------------------------------------------------------------------------


async def test_each_volume_type_end_to_end(
    ready: None,
    agent: Agent,
    admin: KubeClient,
    settings: Settings,
    cri_client: CRIClient,
    tmp_path: Path,
    root: Path,
) -> None:
    name = _name("all")
    cm, secret = f"{name}-cm", f"{name}-secret"
    await create(admin, "configmaps", cm, data={"app.conf": "port=80\n", "other": "o"})
    await create(admin, "secrets", secret, data={"password": base64.b64encode(b"hunter2").decode()})
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    (host_dir / "from-host").write_text("hello from the host")
    volumes = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {
            "name": "cfg",
            "configMap": {"name": cm, "items": [{"key": "app.conf", "path": "conf/app.conf", "mode": 0o600}]},
        },
        {"name": "sec", "secret": {"secretName": secret, "defaultMode": 0o400}},
        {
            "name": "meta",
            "downwardAPI": {
                "items": [
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {
                        "path": "cpu",
                        "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu", "divisor": "1m"},
                    },
                ]
            },
        },
        {
            "name": "proj",
            "projected": {
                "sources": [
                    {"configMap": {"name": cm, "items": [{"key": "other", "path": "other"}]}},
                    {"secret": {"name": secret}},
                    {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                ]
            },
        },
        {"name": "host", "hostPath": {"path": str(host_dir), "type": "Directory"}},
    ]
    main = busybox(
        settings,
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        resources={"limits": {"cpu": "250m", "memory": "64Mi"}},
        volumeMounts=[
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "mem", "mountPath": "/mem"},
            {"name": "cfg", "mountPath": "/cfg"},
            {"name": "sec", "mountPath": "/sec"},
            {"name": "meta", "mountPath": "/meta"},
            {"name": "proj", "mountPath": "/proj"},
            {"name": "host", "mountPath": "/host"},
            {"name": "scratch", "mountPath": "/by-pod", "subPathExpr": "logs/$(POD_NAME)"},
            {"name": "cfg", "mountPath": "/single.conf", "subPath": "conf/app.conf"},
        ],
    )
    pod = await run_pod(admin, name, [main], volumes=volumes)
    cid = running_id(await wait_running(admin, agent, name))
    uid = pod["metadata"]["uid"]

    assert await cat(cri_client, cid, "/cfg/conf/app.conf") == "port=80\n"
    assert await cat(cri_client, cid, "/single.conf") == "port=80\n"
    assert (await exec_out(cri_client, cid, "stat", "-L", "-c", "%a", "/cfg/conf/app.conf"))[1].strip() == "600"
    assert await cat(cri_client, cid, "/sec/password") == "hunter2"
    assert (await exec_out(cri_client, cid, "stat", "-L", "-c", "%a", "/sec/password"))[1].strip() == "400"
    assert await cat(cri_client, cid, "/meta/name") == name
    assert await cat(cri_client, cid, "/meta/labels") == f'app="{name}"\ntier="test"'
    assert await cat(cri_client, cid, "/meta/cpu") == "250"
    assert await cat(cri_client, cid, "/proj/other") == "o"
    assert await cat(cri_client, cid, "/proj/password") == "hunter2"
    assert await cat(cri_client, cid, "/proj/ns") == NS
    assert await cat(cri_client, cid, "/host/from-host") == "hello from the host"
    # Writable where it should be, read-only where upstream forces it.
    assert (await exec_out(cri_client, cid, "sh", "-c", "echo x > /scratch/f && echo y > /host/from-pod"))[0] == 0
    assert (host_dir / "from-pod").read_text() == "y\n"
    assert (await exec_out(cri_client, cid, "sh", "-c", "echo x > /by-pod/f"))[0] == 0
    scratch = root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "scratch"
    assert (scratch / "logs" / name / "f").read_text() == "x\n"
    for read_only in ("/cfg/new", "/sec/new", "/meta/new", "/proj/new"):
        code, out = await exec_out(cri_client, cid, "touch", read_only)
        assert code != 0 and "Read-only file system" in out, (read_only, out)
    # The memory emptyDir and the secret and projected volumes are tmpfs mounts; the first sized by sizeLimit.
    code, out = await exec_out(cri_client, cid, "grep", " /mem ", "/proc/mounts")
    assert code == 0 and out.startswith("tmpfs /mem tmpfs") and "size=16384k" in out, out
    host_mounts = mounts_of(uid)
    assert any(m.endswith("kubernetes.io~empty-dir/mem") for m in host_mounts)
    assert any(m.endswith("kubernetes.io~secret/sec") for m in host_mounts)
    assert any(m.endswith("kubernetes.io~projected/proj") for m in host_mounts)
    assert not any(m.endswith("kubernetes.io~configmap/cfg") for m in host_mounts)


async def test_fs_group_owns_the_volumes(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = _name("fsgroup")
    cm = f"{name}-cm"
    await create(admin, "configmaps", cm, data={"k": "v"})
    mounts = [{"name": "scratch", "mountPath": "/scratch"}, {"name": "cfg", "mountPath": "/cfg"}]
    await run_pod(
        admin,
        name,
        [busybox(settings, volumeMounts=mounts)],
        volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": cm}}],
        securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
        token=True,
    )
    cid = running_id(await wait_running(admin, agent, name))
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    for path, owner in (("/scratch", "0:2000 2777"), ("/cfg/k", "0:2000 644"), (f"{sa_dir}/token", "0:2000 640")):
        code, out = await exec_out(cri_client, cid, "stat", "-L", "-c", "%u:%g %a", path)
        assert (code, out.strip()) == (0, owner), path
    # The container's user (not root, not the file's owner) reads the token and writes the emptyDir through the
    # group, and what it creates there belongs to the group.
    assert (await exec_out(cri_client, cid, "id", "-G"))[1].split() == ["3000", "2000"]
    assert len(await cat(cri_client, cid, f"{sa_dir}/token")) > 100
    code, out = await exec_out(cri_client, cid, "sh", "-c", "mkdir /scratch/d && stat -c %g /scratch/d")
    assert (code, out.strip()) == (0, "2000")


# --- failures ----------------------------------------------------------------------------------------------------


async def test_missing_config_map_waits_while_another_pod_runs(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    waiting, other = _name("waits"), _name("other")
    missing = f"{waiting}-cm"
    pod = await run_pod(
        admin,
        waiting,
        [busybox(settings, volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}])],
        volumes=[{"name": "cfg", "configMap": {"name": missing}}],
    )
    wanted = f'MountVolume.SetUp failed for volume "cfg" : configmap "{missing}" not found'

    async def failed_mount() -> bool:
        return wanted in await events(admin, pod, "FailedMount")

    await eventually(failed_mount, timeout=60, what="FailedMount event", agent=agent)
    await run_pod(admin, other, [busybox(settings)])
    await wait_running(admin, agent, other)
    got = await get_pod(admin, waiting)
    assert got["status"]["phase"] == "Pending"
    assert cstatus(got)["state"]["waiting"]["reason"] == "ContainerCreating"
    # The ConfigMap appears: the retries find it and the pod starts.
    await create(admin, "configmaps", missing, data={"k": "v"})
    cid = running_id(await wait_running(admin, agent, waiting))
    assert await cat(cri_client, cid, "/cfg/k") == "v"


async def test_a_missing_claim_waits_with_an_event(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    """persistentVolumeClaim is handled now (the CSI plugin resolves claim -> PV), so a claim that does not exist is a
    set-up that keeps failing: the pod waits in ContainerCreating and, as upstream's WaitForAttachAndMount, the
    FailedMount "Unable to attach or mount volumes" comes when the attach-and-mount wait (2m3s) runs out."""
    name = _name("pvc")
    # nodeName set: the scheduler would wait for the claim; the node must say what it cannot do.
    pod = await run_pod(
        admin,
        name,
        [busybox(settings, volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "nope"}}],
        nodeName=settings.node_name,
    )

    async def unable() -> list[str]:
        return [m for m in await events(admin, pod, "FailedMount") if m.startswith("Unable to attach or mount volumes")]

    messages = await eventually(unable, timeout=200, what="FailedMount for the claim", agent=agent)
    assert messages[0].startswith("Unable to attach or mount volumes: unmounted volumes=[data], "), messages
    got = await get_pod(admin, name)
    assert got["status"]["phase"] == "Pending"
    assert cstatus(got)["state"]["waiting"]["reason"] == "ContainerCreating"


async def test_host_path_type_mismatch(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, tmp_path: Path
) -> None:
    name = _name("hosttype")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    pod = await run_pod(
        admin,
        name,
        [busybox(settings, volumeMounts=[{"name": "h", "mountPath": "/h"}])],
        volumes=[{"name": "h", "hostPath": {"path": str(a_file), "type": "Directory"}}],
    )
    wanted = f'MountVolume.SetUp failed for volume "h" : hostPath type check failed: {a_file} is not a directory'

    async def failed_mount() -> bool:
        return wanted in await events(admin, pod, "FailedMount")

    await eventually(failed_mount, timeout=60, what="hostPath FailedMount", agent=agent)


async def test_escaping_sub_path_is_refused(ready: None, agent: Agent, admin: KubeClient, settings: Settings) -> None:
    name = _name("escape")
    init = {
        "name": "plant",
        "image": configs.busybox_image(settings),
        "command": ["sh", "-c", "ln -s /etc /data/escape && ln -s ../../ /data/up"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    main = busybox(settings, volumeMounts=[{"name": "data", "mountPath": "/x", "subPath": "escape"}])
    pod = await run_pod(admin, name, [main], volumes=[{"name": "data", "emptyDir": {}}], initContainers=[init])
    wanted = 'failed to prepare subPath for volumeMount "data" of container "main"'

    async def refused() -> Obj | None:
        got = await get_pod(admin, name)
        waiting = (cstatus(got).get("state") or {}).get("waiting") or {}
        return got if waiting.get("reason") == "CreateContainerConfigError" else None

    got = await eventually(refused, timeout=90, what="CreateContainerConfigError", agent=agent)
    assert cstatus(got)["state"]["waiting"]["message"] == wanted
    assert f"Error: {wanted}" in await events(admin, pod, "Failed")
    assert not running_id(got)


# --- updates -----------------------------------------------------------------------------------------------------


async def test_config_map_update_reaches_a_running_pod(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = _name("update")
    cm = f"{name}-cm"
    await create(admin, "configmaps", cm, data={"key": "old"})
    main = busybox(
        settings,
        volumeMounts=[
            {"name": "cfg", "mountPath": "/cfg"},
            {"name": "cfg", "mountPath": "/pinned", "subPath": "key"},
            {"name": "meta", "mountPath": "/meta"},
        ],
    )
    labels = {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
    volumes = [{"name": "cfg", "configMap": {"name": cm}}, {"name": "meta", "downwardAPI": {"items": [labels]}}]
    await run_pod(admin, name, [main], volumes=volumes)
    cid = running_id(await wait_running(admin, agent, name))
    assert await cat(cri_client, cid, "/cfg/key") == "old"
    assert await cat(cri_client, cid, "/meta/labels") == f'app="{name}"\ntier="test"'
    await admin.patch(paths.pod(NS, name), {"metadata": {"labels": {"tier": "changed"}}}, patch_type="merge")
    await admin.replace(
        paths.api_path("configmaps", namespace=NS, name=cm),
        {"apiVersion": "v1", "metadata": {"name": cm, "namespace": NS}, "data": {"key": "new"}},
    )

    async def updated() -> bool:
        return await cat(cri_client, cid, "/cfg/key") == "new"

    # The sync period (5 s here) plus the object cache's TTL (5 s), with room.
    await eventually(updated, timeout=45, what="the update inside the pod", agent=agent)
    # A subPath mount keeps what it was bound to, as upstream.
    assert await cat(cri_client, cid, "/pinned") == "old"

    async def relabelled() -> bool:
        return await cat(cri_client, cid, "/meta/labels") == f'app="{name}"\ntier="changed"'

    # Labels change in place, on the sync the pod update brings.
    await eventually(relabelled, timeout=30, what="the new label inside the pod", agent=agent)


# --- the service account token -----------------------------------------------------------------------------------


async def test_service_account_token_works_against_the_apiserver(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = _name("token")
    pod = await run_pod(admin, name, [busybox(settings)], token=True)
    volumes = [v["name"] for v in pod["spec"]["volumes"]]
    assert any(v.startswith("kube-api-access-") for v in volumes), volumes
    cid = running_id(await wait_running(admin, agent, name))
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    token = await cat(cri_client, cid, f"{sa_dir}/token")
    ca = await cat(cri_client, cid, f"{sa_dir}/ca.crt")
    assert await cat(cri_client, cid, f"{sa_dir}/namespace") == NS
    assert ca.startswith("-----BEGIN CERTIFICATE-----")

    # The token, from the test process, with the CA the pod got: the apiserver accepts it.
    with tempfile.NamedTemporaryFile("w", suffix=".crt") as ca_file:
        ca_file.write(ca)
        ca_file.flush()
        context = ssl.create_default_context(cafile=ca_file.name)
        async with httpx.AsyncClient(verify=context, timeout=10) as http:
            answer = await http.get(f"{settings.apiserver_url}/api", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["kind"] == "APIVersions"

    review = await admin.create(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )
    status = review["status"]
    assert status["authenticated"] is True, status
    assert status["user"]["username"] == f"system:serviceaccount:{NS}:default"
    # Bound to this pod, as the TokenRequest asked.
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == [name]
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]


# --- restart and clean up ----------------------------------------------------------------------------------------


def _volume_pod(settings: Settings, cm: str) -> tuple[list[Obj], list[Obj]]:
    volumes = [
        {"name": "mem", "emptyDir": {"medium": "Memory"}},
        {"name": "cfg", "configMap": {"name": cm}},
    ]
    mounts = [{"name": "mem", "mountPath": "/mem"}, {"name": "cfg", "mountPath": "/cfg"}]
    return [busybox(settings, volumeMounts=mounts)], volumes


async def test_restart_neither_remounts_nor_doubles(
    ready: None,
    running: Running,
    testbed: Testbed,
    admin: KubeClient,
    settings: Settings,
    cri_client: CRIClient,
) -> None:
    agent = running.agent
    cm = _name("restart-cm")
    await create(admin, "configmaps", cm, data={"k": "v"})
    names = [_name("restart") for _ in range(3)]
    pods = []
    for name in names:
        containers, volumes = _volume_pod(settings, cm)
        pods.append(await run_pod(admin, name, containers, volumes=volumes, token=True))
    before = {name: running_id(await wait_running(admin, agent, name)) for name in names}
    mounts_before = {p["metadata"]["uid"]: sorted(mounts_of(p["metadata"]["uid"])) for p in pods}
    for uid, mounts in mounts_before.items():
        # The memory emptyDir and the token's projected volume.
        assert len(mounts) == 2, (uid, mounts)
    for cid in before.values():
        assert (await exec_out(cri_client, cid, "sh", "-c", "echo kept > /mem/f"))[0] == 0

    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(10)
    agent = running.restart(testbed)
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready again", agent=agent)

    async def all_running_again() -> bool:
        got = [await get_pod(admin, name) for name in names]
        return all(running_id(p) for p in got)

    await eventually(all_running_again, timeout=60, what="pods running after the restart", agent=agent)
    await asyncio.sleep(3 * 5)  # a few resyncs (5 s each): each remounts the configMap, none may double a mount
    for name, cid in before.items():
        pod = await get_pod(admin, name)
        assert running_id(pod) == cid, "a container was restarted"
        assert cstatus(pod)["restartCount"] == 0
        assert await cat(cri_client, cid, "/mem/f") == "kept\n"
        assert await cat(cri_client, cid, "/cfg/k") == "v"
    for uid, mounts in mounts_before.items():
        assert sorted(mounts_of(uid)) == mounts


async def test_kill_during_ten_creations_leaks_and_doubles_nothing(
    ready: None, running: Running, testbed: Testbed, admin: KubeClient, settings: Settings, root: Path
) -> None:
    cm = _name("kill-cm")
    await create(admin, "configmaps", cm, data={"k": "v"})
    names = [_name("kill") for _ in range(10)]
    uids = []
    for name in names:
        containers, volumes = _volume_pod(settings, cm)
        uids.append((await run_pod(admin, name, containers, volumes=volumes, token=True))["metadata"]["uid"])

    async def some_set_up() -> bool:
        return any(mounts_of(uid) for uid in uids)

    # Killed while the volumes are being set up and the containers created.
    await eventually(some_set_up, timeout=60, what="the first volumes set up", agent=running.agent)
    running.agent.proc.send_signal(signal.SIGKILL)
    running.agent.proc.wait(10)
    agent = running.restart(testbed)

    async def all_running() -> bool:
        return all([running_id(await get_pod(admin, name)) for name in names])

    await eventually(all_running, timeout=120, what="every pod running after the restart", agent=agent)
    for uid in uids:
        # The memory emptyDir and the projected token volume, each mounted once.
        points = mounts_of(uid)
        assert len(points) == 2 and len(set(points)) == 2, (uid, points)
    for name in names:
        await admin.delete(paths.pod(NS, name))

    async def nothing_left() -> bool:
        return not any(mounts_of(uid) or (root / "pods" / uid).exists() for uid in uids)

    await eventually(nothing_left, timeout=120, what="no mount or directory left", agent=agent)


async def test_deleted_pods_leave_nothing_behind(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, root: Path
) -> None:
    """Twenty pods with a tmpfs emptyDir, a configMap and the projected token volume, deleted at once: each pod's
    mounts are gone by the time the agent lets the pod go from the apiserver (it unmounts first), and a housekeeping
    pass later nothing under the root dir names any of them."""
    cm = _name("gone-cm")
    await create(admin, "configmaps", cm, data={"k": "v"})
    names = [_name("gone") for _ in range(GONE_PODS)]
    uids = []
    for name in names:
        containers, volumes = _volume_pod(settings, cm)
        uids.append((await run_pod(admin, name, containers, volumes=volumes, token=True))["metadata"]["uid"])
    for name in names:
        await wait_running(admin, agent, name)
    for uid in uids:
        points = mounts_of(uid)
        assert any(p.endswith("kubernetes.io~empty-dir/mem") for p in points), points
        assert any("kubernetes.io~projected/kube-api-access-" in p for p in points), points
        assert (root / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "cfg" / "k").exists()
    for name in names:
        await admin.delete(paths.pod(NS, name))

    by_name = dict(zip(names, uids, strict=True))
    mounted_when_gone: dict[str, list[str]] = {}

    async def all_gone_from_the_api() -> bool:
        listed = {p["metadata"]["name"] for p in (await admin.list(paths.pods(NS)))["items"]}
        for name in set(names) - listed:
            # Checked as soon as the pod is seen gone: the agent tears the volumes down before its final delete.
            mounted_when_gone.setdefault(name, mounts_of(by_name[name]))
        return not set(names) & listed

    # How fast twenty pods terminate is not what this test is about: a generous deadline.
    await eventually(all_gone_from_the_api, timeout=180, what="the pods gone from the apiserver", agent=agent)
    assert {n: m for n, m in mounted_when_gone.items() if m} == {}

    def left_under_root() -> list[str]:
        left = [m for uid in uids for m in mounts_of(uid)]
        for dirpath, dirnames, filenames in os.walk(root):
            left += [os.path.join(dirpath, n) for n in [*dirnames, *filenames] if any(uid in n for uid in uids)]
        return left

    async def nothing_left() -> bool:
        return not await asyncio.to_thread(left_under_root)

    # The pod directories go at the first housekeeping pass (every 2 s) after the pods left the agent's sources.
    await eventually(nothing_left, timeout=HOUSEKEEPING_DEADLINE, what="no mount or file of the pods left", agent=agent)


# --- a full tmpfs during a refresh ---------------------------------------------------------------------------


async def test_update_that_does_not_fit_keeps_the_old_content(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient, root: Path
) -> None:
    """A projected volume is a tmpfs sized to the pod's memory limit (as upstream's wrapped memory emptyDir). Its
    ConfigMap grows so that the next version does not fit beside the current one: the write fails for real
    (ENOSPC), the container keeps reading the old files, whole, and the failed version leaves nothing behind.
    Once the ConfigMap fits again, the update goes through."""
    name = _name("full")
    cm = f"{name}-cm"
    await create(admin, "configmaps", cm, data={"blob": "old"})
    # The same key under FULL_COPIES paths: one object update changes them all at once, so the new version is
    # FULL_COPIES x FULL_BLOB bytes, more than the tmpfs holds.
    sources = [{"configMap": {"name": cm, "items": [{"key": "blob", "path": f"b{i}"}]}} for i in range(FULL_COPIES)]
    main = busybox(
        settings,
        resources={"limits": {"memory": FULL_POD_MEMORY}},
        volumeMounts=[{"name": "big", "mountPath": "/big"}],
    )
    pod = await run_pod(admin, name, [main], volumes=[{"name": "big", "projected": {"sources": sources}}])
    cid = running_id(await wait_running(admin, agent, name))
    uid = pod["metadata"]["uid"]
    volume_dir = root / "pods" / uid / "volumes" / "kubernetes.io~projected" / "big"
    code, out = await exec_out(cri_client, cid, "grep", " /big ", "/proc/mounts")
    assert code == 0 and out.startswith("tmpfs /big tmpfs") and "size=12288k" in out, out
    files = [f"/big/b{i}" for i in range(FULL_COPIES)]
    assert [await cat(cri_client, cid, f) for f in files] == ["old"] * FULL_COPIES
    versions_before = _versions(volume_dir)
    assert len(versions_before) == 1

    await _replace_config_map(admin, cm, "x" * FULL_BLOB)
    prefix = 'MountVolume.SetUp failed for volume "big" : write '
    suffix = ": no space left on device"

    async def full() -> list[str]:
        return [m for m in await events(admin, pod, "FailedMount") if m.startswith(prefix) and m.endswith(suffix)]

    # The sync period (5 s here) plus the object cache's TTL (5 s), with room.
    messages = await eventually(full, timeout=60, what="FailedMount for the full tmpfs", agent=agent)
    # The message names the file of the version being written, as upstream's does.
    assert f"{volume_dir}/.." in messages[0], messages[0]
    # Every file whole and old, from inside the container, whenever it looks (`..data` never moved).
    for _ in range(3):
        assert [await cat(cri_client, cid, f) for f in files] == ["old"] * FULL_COPIES
        await asyncio.sleep(1)

    def clean() -> bool:
        st = os.statvfs(volume_dir)
        return _versions(volume_dir) == versions_before and st.f_bfree * st.f_frsize > (FULL_COPIES - 1) * FULL_BLOB

    async def nothing_left() -> bool:
        return await asyncio.to_thread(clean)

    # On the node, between two retries (each writes for a few milliseconds): the one version it was, and the failed
    # one's files and space given back. A writer that leaked would never get here.
    await eventually(nothing_left, timeout=15, what="no trace of the failed version", agent=agent)
    got = await get_pod(admin, name)
    assert running_id(got) == cid and cstatus(got)["restartCount"] == 0

    await _replace_config_map(admin, cm, "new")

    async def updated() -> bool:
        return [await cat(cri_client, cid, f) for f in files] == ["new"] * FULL_COPIES

    # The failed remount retries with back-off (0.5 s doubling): room for a few of its steps.
    await eventually(updated, timeout=90, what="the update that fits inside the pod", agent=agent)
    assert len(_versions(volume_dir)) == 1


async def _replace_config_map(admin: KubeClient, name: str, blob: str) -> None:
    await admin.replace(
        paths.api_path("configmaps", namespace=NS, name=name),
        {"apiVersion": "v1", "metadata": {"name": name, "namespace": NS}, "data": {"blob": blob}},
    )


def _versions(volume_dir: Path) -> list[str]:
    """The atomic writer's timestamped directories (`..2026_...`), not its `..data` link."""
    return sorted(n for n in os.listdir(volume_dir) if n.startswith("..") and not n.startswith("..data"))
