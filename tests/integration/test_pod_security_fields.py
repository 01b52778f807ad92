"""Pod fields the node must honour or refuse as the upstream kubelet v1.34.4 does on this testbed (issue 29):

- `runtimeClassName`: the RuntimeClass's handler reaches RunPodSandbox (the testbed's containerd has a second, real
  handler, `test-handler`, and the sandbox reports it); a handler containerd lacks fails the sandbox with
  containerd's words (FailedCreatePodSandBox, the pod stays Pending); a RuntimeClass deleted before the pod reaches
  the node fails it with the lister's NotFound;
- `hostUsers: false`: containerd 1.7.24 reports no user-namespace support, so the sandbox is refused
  (FailedCreatePodSandBox, "can't set `spec.hostUsers: false`, runtime does not support user namespaces");
- `appArmorProfile` (field or deprecated annotation): this kernel has no AppArmor, so the pod is refused at
  admission (phase Failed, reason AppArmor);
- the runtime spec carries upstream's masked /proc paths and the sandbox's RuntimeDefault seccomp.

Before this change the first, second and third ran under the default runc handler, in the host's user namespace,
without AppArmor, and the masked paths were containerd's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.config.quantity import parse_quantity
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    events,
    eventually,
    start_agent,
    stop_agent,
    wait_node_ready,
)

Obj = dict[str, Any]
RUNTIME_CLASSES = paths.api_path("runtimeclasses", group="node.k8s.io")


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-pod-security-fields.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


@pytest_asyncio.fixture(loop_scope="session")
async def ready(agent: Agent, admin: KubeClient, settings: Settings) -> Agent:
    await wait_node_ready(admin, agent, settings.node_name)
    return agent


@contextlib.asynccontextmanager
async def runtime_class(admin: KubeClient, handler: str, overhead: dict[str, str] | None = None) -> AsyncIterator[str]:
    name = f"rc-{uuid.uuid4().hex[:6]}"
    body: Obj = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler}
    if overhead is not None:
        body["overhead"] = {"podFixed": overhead}
    await admin.create(RUNTIME_CLASSES, body)
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(f"{RUNTIME_CLASSES}/{name}")


def sleeper(name: str, settings: Settings, *, node: bool = True, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            **({"nodeName": settings.node_name} if node else {}),
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}],
            **spec,
        },
    }


@contextlib.asynccontextmanager
async def created(admin: KubeClient, pod: Obj) -> AsyncIterator[Obj]:
    made: Obj = await admin.create(paths.pods(NS), pod)
    try:
        yield made
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)


async def sandboxes_of(cri: CRIClient, uid: str) -> list[api_pb2.PodSandbox]:
    return list(
        await cri.runtime.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": uid}))
    )


async def running(admin: KubeClient, agent: Agent, name: str) -> Obj:
    async def check() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    found: Obj = await eventually(check, timeout=60, what=f"{name} runs", agent=agent)
    return found


async def sandbox_failure(admin: KubeClient, agent: Agent, pod: Obj) -> str:
    """The message of the first FailedCreatePodSandBox event about `pod`."""

    async def check() -> str | None:
        found = await events(admin, pod, "FailedCreatePodSandBox")
        return str(found[0]["message"]) if found else None

    message: str = await eventually(check, timeout=60, what="FailedCreatePodSandBox", agent=agent)
    return message


async def assert_still_pending(admin: KubeClient, cri: CRIClient, pod: Obj) -> None:
    await asyncio.sleep(3)  # a few syncs: each one fails again, none runs anything
    now = await admin.get(paths.pod(NS, pod["metadata"]["name"]))
    assert now["status"]["phase"] == "Pending"
    assert await sandboxes_of(cri, pod["metadata"]["uid"]) == []


# --- RuntimeClass ----------------------------------------------------------------------------------------------


async def test_a_runtime_class_runs_the_pod_under_its_handler(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    async with runtime_class(admin, configs.ALT_RUNTIME_HANDLER) as rc:
        name = f"rc-alt-{uuid.uuid4().hex[:5]}"
        async with created(admin, sleeper(name, settings, runtimeClassName=rc)):
            pod = await running(admin, ready, name)
            [sandbox] = await sandboxes_of(cri_client, pod["metadata"]["uid"])
            # What `crictl inspectp` shows as runtimeHandler.
            assert sandbox.runtime_handler == configs.ALT_RUNTIME_HANDLER
            status = await cri_client.runtime.pod_sandbox_status(sandbox.id)
            assert status.status.runtime_handler == configs.ALT_RUNTIME_HANDLER
        # And a pod without one runs under the default handler, as before.
        plain = f"rc-default-{uuid.uuid4().hex[:5]}"
        async with created(admin, sleeper(plain, settings)):
            pod = await running(admin, ready, plain)
            [sandbox] = await sandboxes_of(cri_client, pod["metadata"]["uid"])
            assert sandbox.runtime_handler == ""


async def test_a_handler_containerd_lacks_fails_the_sandbox(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    async with runtime_class(admin, "nosuch") as rc:
        name = f"rc-nosuch-{uuid.uuid4().hex[:5]}"
        async with created(admin, sleeper(name, settings, runtimeClassName=rc)) as pod:
            message = await sandbox_failure(admin, ready, pod)
            # The upstream kubelet's event on this testbed, word for word.
            assert message == (
                "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
                'no runtime for "nosuch" is configured'
            )
            await assert_still_pending(admin, cri_client, pod)


async def test_a_deleted_runtime_class_fails_the_sandbox(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    # The apiserver refuses a pod naming a RuntimeClass that does not exist (create and update), but not a binding:
    # a pod no scheduler takes is created while its RuntimeClass exists, which is then deleted, and the pod bound.
    name = f"rc-gone-{uuid.uuid4().hex[:5]}"
    async with runtime_class(admin, configs.ALT_RUNTIME_HANDLER) as rc:
        pod_body = sleeper(name, settings, node=False, runtimeClassName=rc, schedulerName="nobody")
        async with created(admin, pod_body) as pod:
            await admin.delete(f"{RUNTIME_CLASSES}/{rc}")

            async def gone() -> bool:
                try:
                    await admin.get(f"{RUNTIME_CLASSES}/{rc}")
                except NotFound:
                    return True
                return False

            await eventually(gone, timeout=30, what="the RuntimeClass is gone", agent=ready)
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": NS},
                "target": {"apiVersion": "v1", "kind": "Node", "name": settings.node_name},
            }
            await admin.create(paths.pod(NS, name, "binding"), binding)
            message = await sandbox_failure(admin, ready, pod)
            assert message == f'Failed to create pod sandbox: runtimeclass.node.k8s.io "{rc}" not found'
            await assert_still_pending(admin, cri_client, pod)


def pod_cgroup_value(pid: int, controller: str, file: str) -> int:
    """A value of the pod cgroup (cgroup v1: the parent of the container's cgroup in that controller)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return int((Path("/sys/fs/cgroup") / controller / path.lstrip("/")).parent.joinpath(file).read_text())
    raise AssertionError(f"no {controller} cgroup for pid {pid}")


async def test_a_runtime_class_overhead_counts_in_the_pod_cgroup(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    # The RuntimeClass admission plugin copies podFixed into spec.overhead; upstream's ResourceConfigForPod adds it
    # to the pod cgroup's limits: 100m + 50m of cpu, 32Mi + 16Mi of memory.
    async with runtime_class(admin, configs.ALT_RUNTIME_HANDLER, {"cpu": "50m", "memory": "16Mi"}) as rc:
        name = f"rc-overhead-{uuid.uuid4().hex[:5]}"
        body = sleeper(name, settings, runtimeClassName=rc)
        body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "100m", "memory": "32Mi"}}
        async with created(admin, body) as made:
            assert made["spec"]["overhead"] == {"cpu": "50m", "memory": "16Mi"}
            pod = await running(admin, ready, name)
            [container] = await cri_client.runtime.list_containers(
                api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod["metadata"]["uid"]})
            )
            status = await cri_client.runtime.container_status(container.id, verbose=True)
            pid = int(json.loads(status.info["info"])["pid"])
            assert await asyncio.to_thread(pod_cgroup_value, pid, "cpu", "cpu.cfs_quota_us") == 15000
            assert await asyncio.to_thread(pod_cgroup_value, pid, "memory", "memory.limit_in_bytes") == 48 << 20


async def test_a_runtime_class_overhead_counts_at_admission(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    node = await admin.get(paths.node(settings.node_name))
    allocatable_milli = math.ceil(parse_quantity(str(node["status"]["allocatable"]["cpu"])) * 1000)
    # The pod itself asks for 10m: only the overhead makes it too big for the node.
    async with runtime_class(admin, configs.ALT_RUNTIME_HANDLER, {"cpu": f"{allocatable_milli}m"}) as rc:
        name = f"rc-big-{uuid.uuid4().hex[:5]}"
        body = sleeper(name, settings, runtimeClassName=rc)
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "10m"}}
        async with created(admin, body) as pod:

            async def failed() -> Obj | None:
                now: Obj = await admin.get(paths.pod(NS, name))
                return now if (now.get("status") or {}).get("phase") == "Failed" else None

            now = await eventually(failed, timeout=60, what=f"{name} is refused", agent=ready)
            assert now["status"]["reason"] == "OutOfcpu"
            assert now["status"]["message"].startswith(
                f"Node didn't have enough resource: cpu, requested: {allocatable_milli + 10}, "
            )
            assert await sandboxes_of(cri_client, pod["metadata"]["uid"]) == []


# --- user namespaces -------------------------------------------------------------------------------------------


async def test_host_users_false_is_refused(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = f"userns-{uuid.uuid4().hex[:5]}"
    async with created(admin, sleeper(name, settings, hostUsers=False)) as pod:
        message = await sandbox_failure(admin, ready, pod)
        assert message == (
            "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        )
        await assert_still_pending(admin, cri_client, pod)


# --- AppArmor --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "profile"),
    [
        ("pod", {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}),
        ("container", {}),
        ("annotation", {}),
    ],
)
async def test_apparmor_is_refused_at_admission_on_a_host_without_it(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient, where: str, profile: Obj
) -> None:
    name = f"apparmor-{where}-{uuid.uuid4().hex[:5]}"
    body = sleeper(name, settings, **profile)
    if where == "container":
        body["spec"]["containers"][0]["securityContext"] = {"appArmorProfile": {"type": "RuntimeDefault"}}
    if where == "annotation":
        body["metadata"]["annotations"] = {"container.apparmor.security.beta.kubernetes.io/main": "runtime/default"}
    async with created(admin, body) as pod:

        async def failed() -> Obj | None:
            now: Obj = await admin.get(paths.pod(NS, name))
            return now if (now.get("status") or {}).get("phase") == "Failed" else None

        now = await eventually(failed, timeout=60, what=f"{name} is refused", agent=ready)
        message = "Cannot enforce AppArmor: AppArmor is not enabled on the host"
        assert (now["status"]["reason"], now["status"]["message"]) == ("AppArmor", message)
        assert [e["message"] for e in await events(admin, pod, "AppArmor")] == [message]
        assert await sandboxes_of(cri_client, pod["metadata"]["uid"]) == []


# --- what the runtime spec says ---------------------------------------------------------------------------------


async def test_the_runtime_spec_has_upstreams_masked_paths_and_sandbox_seccomp(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = f"spec-{uuid.uuid4().hex[:5]}"
    async with created(admin, sleeper(name, settings)):
        pod = await running(admin, ready, name)
        uid = pod["metadata"]["uid"]
        [container] = await cri_client.runtime.list_containers(
            api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": uid})
        )
        status = await cri_client.runtime.container_status(container.id, verbose=True)
        spec = json.loads(status.info["info"])["runtimeSpec"]
        masked = spec["linux"]["maskedPaths"]
        # Upstream's list (pkg/securitycontext) has /proc/interrupts; containerd 1.7's own default does not.
        assert "/proc/interrupts" in masked and "/proc/kcore" in masked
        assert set(spec["linux"]["readonlyPaths"]) == {
            "/proc/bus",
            "/proc/fs",
            "/proc/irq",
            "/proc/sys",
            "/proc/sysrq-trigger",
        }
        [sandbox] = await sandboxes_of(cri_client, uid)
        sandbox_status = await cri_client.runtime.pod_sandbox_status(sandbox.id, verbose=True)
        sandbox_spec = json.loads(sandbox_status.info["info"])["runtimeSpec"]
        # The pause container runs under the runtime's default seccomp profile, as upstream asks.
        assert sandbox_spec["linux"].get("seccomp") is not None


async def test_a_localhost_seccomp_profile_is_read_under_the_root_dir(
    ready: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient, testbed: Testbed
) -> None:
    # As upstream: localhostProfile is relative to <root-dir>/seccomp (it was /var/lib/kubelet/seccomp, where the
    # testbed's agent keeps nothing: the container could not be created).
    profiles = testbed.layout.kubelet_root / "seccomp"
    profiles.mkdir(parents=True, exist_ok=True)
    profile = profiles / f"deny-mkdir-{uuid.uuid4().hex[:5]}.json"
    deny = {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}
    profile.write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [deny]}))
    name = f"seccomp-{uuid.uuid4().hex[:5]}"
    body = sleeper(
        name, settings, securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": profile.name}}
    )
    try:
        async with created(admin, body):
            pod = await running(admin, ready, name)
            [container] = await cri_client.runtime.list_containers(
                api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod["metadata"]["uid"]})
            )
            status = await cri_client.runtime.exec_sync(
                container.id, ["grep", "Seccomp:", "/proc/1/status"], timeout=10
            )
            assert status.stdout.decode().split() == ["Seccomp:", "2"]  # a filter is in force
            made = await cri_client.runtime.exec_sync(container.id, ["mkdir", "/tmp/refused"], timeout=10)
            assert made.exit_code != 0, made.stdout
    finally:
        profile.unlink(missing_ok=True)
