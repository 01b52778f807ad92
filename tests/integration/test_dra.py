"""Dynamic Resource Allocation on the real testbed, with the project's sample DRA driver
(nodeagent/testbed/sampledradriver.py, `dra.nodeagent.test`) run on the host beside the agent: it registers through
plugin registration and publishes the node's ResourceSlice; a pod with a ResourceClaimTemplate of a DeviceClass is
scheduled here (the scheduler's DRA plugin allocates and reserves the claim), the agent calls NodePrepareResources
before its sandbox and passes the CDI device to containerd (enable_cdi), so the container sees the environment, the
device node and the mount of the driver's CDI spec. A restarted agent keeps the claim (its checkpoint) and unprepares
it when the pod is deleted. A claim of a driver that has no plugin on the node gets upstream's
FailedPrepareDynamicResources and the pod never starts; deleted, it goes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.podresources.v1 import api_pb2 as podresources_pb2
from nodeagent.podresources.v1 import api_pb2_grpc as podresources_grpc
from nodeagent.testbed import configs
from nodeagent.testbed import sampledradriver as driver
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    events,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
ABSENT_DRIVER = "absent.nodeagent.test"
SUFFIX = uuid.uuid4().hex[:5]
CLASS = f"nodeagent-test-{SUFFIX}"
ABSENT_CLASS = f"nodeagent-absent-{SUFFIX}"
TEMPLATE = f"one-device-{SUFFIX}"
ABSENT_TEMPLATE = f"absent-device-{SUFFIX}"


def _resource(resource: str, namespace: str | None = None, name: str | None = None) -> str:
    return paths.api_path(resource, group="resource.k8s.io", version="v1", namespace=namespace, name=name)


class Running:
    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed
        self.agent: Agent | None = None
        self.driver: subprocess.Popen[bytes] | None = None
        self.record = testbed.layout.logs / f"dra-calls-{SUFFIX}.jsonl"

    def start_agent(self) -> Agent:
        self.agent = start_agent(self.testbed, self.testbed.layout.logs / "agent-dra.log")
        return self.agent

    def stop_agent(self) -> None:
        if self.agent is not None:
            stop_agent(self.agent)

    def start_driver(self, node_name: str) -> None:
        lay = self.testbed.layout
        self.driver = driver.start(
            root_dir=lay.kubelet_root,
            cdi_dir=lay.cdi_spec_dir,
            kubeconfig=lay.admin_kubeconfig,
            node_name=node_name,
            log_path=lay.logs / "sample-dra-driver.log",
            record=self.record,
        )

    def stop_driver(self) -> None:
        if self.driver is not None and self.driver.poll() is None:
            self.driver.send_signal(signal.SIGTERM)
            try:
                self.driver.wait(10)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait(5)

    def calls(self) -> list[Obj]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]


def device_class(name: str, driver_name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver_name}"'}}]},
    }


def claim_template(name: str, class_name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": class_name}}]}}},
    }


def claim_pod(name: str, template: str, settings: Settings) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "automountServiceAccountToken": False,
            # Not 0: the apiserver would drop the pod at once on delete, without waiting for the agent.
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "accel", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "command": ["sleep", "3600"],
                    "resources": {"claims": [{"name": "accel"}]},
                },
                # Names no claim: gets no device (upstream passes CDI devices only to the containers that ask).
                {"name": "plain", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]},
            ],
        },
    }


@pytest.fixture(scope="module")
def running(testbed: Testbed, settings: Settings) -> Iterator[Running]:
    parts = Running(testbed)
    parts.start_agent()
    try:
        yield parts
    finally:
        parts.stop_driver()
        parts.stop_agent()
        asyncio.run(_delete_objects(testbed))
        asyncio.run(clean_up(testbed, settings))
        for spec in testbed.layout.cdi_spec_dir.glob(f"{driver.DRIVER}-*.json"):
            spec.unlink()
        parts.record.unlink(missing_ok=True)


async def _delete_objects(testbed: Testbed) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for template in (TEMPLATE, ABSENT_TEMPLATE):
            with contextlib.suppress(NotFound):
                await admin.delete(_resource("resourceclaimtemplates", NS, template))
        for name in (CLASS, ABSENT_CLASS):
            with contextlib.suppress(NotFound):
                await admin.delete(_resource("deviceclasses", name=name))
        for name in (f"absent-{SUFFIX}", driver.slice_name(testbed.settings.node_name, driver.DRIVER)):
            with contextlib.suppress(NotFound):
                await admin.delete(_resource("resourceslices", name=name))


async def _exec(cri: CRIClient, uid: str, container: str, script: str) -> str:
    selector = api_pb2.ContainerFilter(
        label_selector={"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": container},
        state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING),
    )
    [found] = await cri.runtime.list_containers(selector)
    answer = await cri.runtime.exec_sync(found.id, ["sh", "-c", script], timeout=10)
    return answer.stdout.decode() + answer.stderr.decode()


async def _dynamic_resources(running: Running, name: str) -> dict[str, list[Any]]:
    socket = running.testbed.layout.kubelet_root / "pod-resources" / "kubelet.sock"
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        listed = await podresources_grpc.PodResourcesListerStub(channel).List(
            podresources_pb2.ListPodResourcesRequest()
        )
    [pod] = [p for p in listed.pod_resources if (p.namespace, p.name) == (NS, name)]
    return {
        c.name: [
            (
                d.claim_namespace,
                d.claim_name,
                [
                    (r.driver_name, r.pool_name, r.device_name, [x.name for x in r.cdi_devices])
                    for r in d.claim_resources
                ],
            )
            for d in c.dynamic_resources
        ]
        for c in pod.containers
    }


async def _running(admin: KubeClient, name: str) -> Obj | None:
    pod: Obj = await admin.get(paths.pod(NS, name))
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return pod if len(statuses) == 2 and all("running" in (s.get("state") or {}) for s in statuses) else None


async def _gone(admin: KubeClient, name: str) -> bool:
    try:
        await admin.get(paths.pod(NS, name))
    except NotFound:
        return True
    return False


async def test_a_claim_is_prepared_its_cdi_device_injected_and_unprepared(
    running: Running, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    agent = running.agent
    assert agent is not None
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    running.start_driver(settings.node_name)
    await admin.create(_resource("deviceclasses"), device_class(CLASS, driver.DRIVER))
    await admin.create(_resource("resourceclaimtemplates", NS), claim_template(TEMPLATE, CLASS))

    log = agent.log

    async def registered(times: int) -> bool:
        # The agents of this module write one log: the n-th agent has registered the driver when it says so n times.
        return log.read_text().count(f"DRA plugin registered driver={driver.DRIVER}") >= times

    await eventually(lambda: registered(1), timeout=30, what="the driver registered", agent=agent)

    name = f"dra-{SUFFIX}"
    await admin.create(paths.pods(NS), claim_pod(name, TEMPLATE, settings))
    pod = await eventually(lambda: _running(admin, name), timeout=60, what=f"{name} runs", agent=agent)
    uid = pod["metadata"]["uid"]
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = await admin.get(_resource("resourceclaims", NS, status["resourceClaimName"]))
    [result] = claim["status"]["allocation"]["devices"]["results"]
    device = result["device"]
    assert result["driver"] == driver.DRIVER
    claim_name, claim_uid = claim["metadata"]["name"], claim["metadata"]["uid"]

    seen = await _exec(
        cri_client, uid, "main", f"echo ${driver.env_name(device)}; ls /dev/nodeagent-dra-*; cat /run/nodeagent-dra/*"
    )
    assert seen.split() == [claim_name, f"/dev/nodeagent-dra-{device}", f"{NS}/{claim_name}"], seen
    plain = await _exec(cri_client, uid, "plain", "env | grep -c ^DRA_; ls /dev/nodeagent-dra-* 2>/dev/null | wc -l")
    assert plain.split() == ["0", "0"], plain
    assert [c["method"] for c in running.calls()] == ["NodePrepareResources"]
    # The PodResources API names the claim's device for the container that asked, none for the other.
    cdi = [f"{driver.DRIVER}/device={claim_uid}-{device}"]
    assert await _dynamic_resources(running, name) == {
        "main": [(NS, claim_name, [(driver.DRIVER, settings.node_name, device, cdi)])],
        "plain": [],
    }

    # The agent restarts: the claim stays in its checkpoint, so the pod's deletion still unprepares it.
    running.stop_agent()
    agent = running.start_agent()
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready again", agent=agent)
    await eventually(lambda: registered(2), timeout=30, what="the driver registered again", agent=agent)
    # A graceful delete: the agent removes the pod from the API once it is terminated, after the unprepare.
    await admin.delete(paths.pod(NS, name))
    await eventually(lambda: _gone(admin, name), timeout=60, what=f"{name} deleted", agent=agent)
    calls = running.calls()
    assert [c["method"] for c in calls] == ["NodePrepareResources", "NodeUnprepareResources"], calls
    assert {c["uid"] for c in calls} == {claim_uid}
    assert not (running.testbed.layout.cdi_spec_dir / f"{driver.DRIVER}-{claim_uid}.json").exists()


async def test_a_claim_of_a_driver_without_plugin_fails_as_upstream(
    running: Running, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    agent = running.agent
    assert agent is not None
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    node = await admin.get(paths.node(settings.node_name))
    # The devices of a driver whose kubelet plugin never came: the scheduler allocates them all the same.
    await admin.create(
        _resource("resourceslices"),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"absent-{SUFFIX}",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": settings.node_name, "uid": node["metadata"]["uid"]}
                ],
            },
            "spec": {
                "driver": ABSENT_DRIVER,
                "nodeName": settings.node_name,
                "pool": {"name": settings.node_name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "dev-0"}],
            },
        },
    )
    await admin.create(_resource("deviceclasses"), device_class(ABSENT_CLASS, ABSENT_DRIVER))
    await admin.create(_resource("resourceclaimtemplates", NS), claim_template(ABSENT_TEMPLATE, ABSENT_CLASS))
    name = f"dra-absent-{SUFFIX}"
    pod = await admin.create(paths.pods(NS), claim_pod(name, ABSENT_TEMPLATE, settings))

    async def failed() -> list[Obj]:
        return await events(admin, pod, "FailedPrepareDynamicResources")

    [event] = await eventually(failed, timeout=60, what="FailedPrepareDynamicResources", agent=agent)
    assert event["type"] == "Warning"
    assert event["message"] == (
        f"Failed to prepare dynamic resources: prepare dynamic resources: DRA driver {ABSENT_DRIVER} is not registered"
    )
    # Nothing was started, and the pod waits (Pending) rather than running without its device.
    sandboxes = await cri_client.runtime.list_pod_sandbox(
        api_pb2.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": pod["metadata"]["uid"]})
    )
    assert list(sandboxes) == []
    assert (await admin.get(paths.pod(NS, name)))["status"]["phase"] == "Pending"
    # Nothing was prepared, so nothing blocks its deletion by the agent.
    await admin.delete(paths.pod(NS, name))
    await eventually(lambda: _gone(admin, name), timeout=60, what=f"{name} deleted", agent=agent)
