"""CSIDriver tokenRequests and requiresRepublish on the real testbed: the e2e suite's CSI mock driver (its call log
is the witness) gets the pod's service account tokens in NodePublishVolume's volume context, as upstream writes
them (csi.storage.k8s.io/serviceAccount.tokens: audience → {token, expirationTimestamp}), made by TokenRequest with
the node's credential and bound to the pod; with requiresRepublish it gets NodePublishVolume again at the pod's
resyncs (syncFrequency 5s here)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import csistack
from nodeagent.testbed.csistack import DriverSpec
from nodeagent.testbed.layout import Settings
from nodeagent.volume import csiutil
from tests.integration import csikit
from tests.integration.agentproc import NS, eventually
from tests.integration.csikit import PUBLISH, UNPUBLISH, Bed, Obj

DRIVER = DriverSpec(name="tokens.csi-mock.nodeagent.test", attach_required=False)
AUDIENCE = "nodeagent-csi-test"
PREFIX = "csit"


bed = csikit.module_bed("csi-tokens", prefix=PREFIX, drivers=(DRIVER,), syncFrequency="5s")


def _csidriver(spec: DriverSpec) -> Obj:
    obj = csistack.csidriver_object(spec)
    obj["spec"]["tokenRequests"] = [{"audience": AUDIENCE, "expirationSeconds": 3600}]
    obj["spec"]["requiresRepublish"] = True
    return obj


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    yield await csikit.start_drivers(bed, admin, settings, DRIVER, csidriver=_csidriver)


def _publishes(bed: Bed, volume_id: str) -> list[Obj]:
    return bed.driver_calls(DRIVER.name, volume_id, PUBLISH, UNPUBLISH)


def _claims(token: str) -> Obj:
    payload = token.split(".")[1]
    claims: Obj = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


@pytest.mark.asyncio(loop_scope="session")
async def test_driver_gets_the_pods_tokens_and_is_republished(
    ready: Bed, admin: KubeClient, settings: Settings
) -> None:
    bed = ready
    name = csikit.name(PREFIX, "pod")
    volume = {"name": "scratch", "csi": {"driver": DRIVER.name}}
    await admin.create(paths.pods(NS), csikit.volume_pod(settings, name, volume))
    created = await csikit.running(admin, bed.agent, name)
    uid = created["metadata"]["uid"]
    handle = csiutil.ephemeral_volume_handle(uid, "scratch")
    first = _publishes(bed, handle)[0]
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
        return len(_publishes(bed, handle)) >= 3

    # requiresRepublish: NodePublishVolume again at the resyncs (every 5 s here), the same target
    await eventually(republished, timeout=40, what="NodePublishVolume again", agent=bed.agent)
    calls = _publishes(bed, handle)
    assert {c["Request"]["target_path"] for c in calls} == {first["Request"]["target_path"]}
    assert all(not c.get("Error") for c in calls)
    await admin.delete(paths.pod(NS, name))

    async def unpublished() -> bool:
        return any(c["Method"] == UNPUBLISH for c in _publishes(bed, handle))

    await eventually(unpublished, timeout=60, what="NodeUnpublishVolume", agent=bed.agent)
