"""CSIDriver tokenRequests and requiresRepublish on the real testbed: the e2e suite's CSI mock driver (its call log
is the witness) gets the pod's service account tokens in NodePublishVolume's volume context, as upstream writes
them (csi.storage.k8s.io/serviceAccount.tokens: audience → {token, expirationTimestamp}), made by TokenRequest with
the node's credential and bound to the pod; with requiresRepublish it gets NodePublishVolume again at the pod's
resyncs (syncFrequency 5s here)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, csistack
from nodeagent.testbed.csistack import DriverSpec, DriverStack
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.volume import csiutil
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    running_id,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
PUBLISH, UNPUBLISH = "/csi.v1.Node/NodePublishVolume", "/csi.v1.Node/NodeUnpublishVolume"
DRIVER = DriverSpec(name="tokens.csi-mock.nodeagent.test", attach_required=False)
AUDIENCE = "nodeagent-csi-test"


class Bed:
    def __init__(self, testbed: Testbed, agent: Agent) -> None:
        self.testbed = testbed
        self.agent = agent
        self.stack: DriverStack | None = None

    def publishes(self, volume_id: str) -> list[Obj]:
        return [
            call
            for call in csistack.driver_calls(self.testbed.layout, DRIVER.name)
            if call.get("Method") in (PUBLISH, UNPUBLISH) and (call.get("Request") or {}).get("volume_id") == volume_id
        ]


@pytest.fixture(scope="module")
def bed(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    config = agent_config(testbed, tmp_path_factory.mktemp("csi-tokens") / "nodeagent.yaml", syncFrequency="5s")
    holder = Bed(testbed, start_agent(testbed, testbed.layout.logs / "agent-csi-tokens.log", config=config))
    try:
        yield holder
    finally:
        stop_agent(holder.agent)
        asyncio.run(_delete_objects(testbed))
        csistack.stop_driver(testbed.layout, DRIVER.name)
        asyncio.run(clean_up(testbed, settings))


async def _delete_objects(testbed: Testbed) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for pod in (await admin.list(paths.pods(NS)))["items"]:
            if pod["metadata"]["name"].startswith("csit-"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
        await csistack.delete_csidriver(admin, DRIVER.name)


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=bed.agent)
    if bed.stack is None:
        bed.stack = await csistack.start_driver(bed.testbed.layout, DRIVER)
        await csistack.delete_csidriver(admin, DRIVER.name)
        obj = csistack.csidriver_object(DRIVER)
        obj["spec"]["tokenRequests"] = [{"audience": AUDIENCE, "expirationSeconds": 3600}]
        obj["spec"]["requiresRepublish"] = True
        await admin.create(paths.api_path("csidrivers", group=csistack.STORAGE), obj)
    yield bed


def _claims(token: str) -> Obj:
    payload = token.split(".")[1]
    claims: Obj = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


@pytest.mark.asyncio(loop_scope="session")
async def test_driver_gets_the_pods_tokens_and_is_republished(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    name = f"csit-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "command": ["sleep", "3600"],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "scratch", "csi": {"driver": DRIVER.name}}],
        },
    }
    await admin.create(paths.pods(NS), pod)

    async def running() -> Obj | None:
        got: Obj = await admin.get(paths.pod(NS, name))
        return got if running_id(got, "main") else None

    created: Obj = await eventually(running, timeout=90, what=f"{name} running", agent=bed.agent)
    uid = created["metadata"]["uid"]
    handle = csiutil.ephemeral_volume_handle(uid, "scratch")
    first = bed.publishes(handle)[0]
    tokens = json.loads(first["Request"]["volume_context"][csiutil.SERVICE_ACCOUNT_TOKENS_KEY])
    assert list(tokens) == [AUDIENCE]
    assert set(tokens[AUDIENCE]) == {"token", "expirationTimestamp"}
    claims = _claims(tokens[AUDIENCE]["token"])
    assert claims["aud"] == [AUDIENCE]
    assert claims["sub"] == f"system:serviceaccount:{NS}:default"
    assert claims["kubernetes.io"]["pod"] == {"name": name, "uid": uid}  # bound to the pod
    assert claims["exp"] - claims["iat"] == 3600
    assert csiutil.rfc3339(claims["exp"]) == tokens[AUDIENCE]["expirationTimestamp"]

    async def republished() -> bool:
        return len(bed.publishes(handle)) >= 3

    # requiresRepublish: NodePublishVolume again at the resyncs (every 5 s here), the same target
    await eventually(republished, timeout=40, what="NodePublishVolume again", agent=bed.agent)
    calls = bed.publishes(handle)
    assert {c["Request"]["target_path"] for c in calls} == {first["Request"]["target_path"]}
    assert all(not c.get("Error") for c in calls)
    await admin.delete(paths.pod(NS, name))

    async def unpublished() -> bool:
        return any(c["Method"] == UNPUBLISH for c in bed.publishes(handle))

    await eventually(unpublished, timeout=60, what="NodeUnpublishVolume", agent=bed.agent)
