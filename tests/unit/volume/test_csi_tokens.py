"""CSIDriver tokenRequests and requiresRepublish (upstream csi_mounter.go podServiceAccountTokenAttrs,
csi_plugin.go RequiresRemount): the pod's service account tokens in the volume context, and NodePublishVolume again
at every remount for a driver that asks for it."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from typing import Any

import grpc
import pytest

from csi.errors import UnknownCSIError
from nodeagent.kube.errors import ApiError
from nodeagent.volume import csiutil
from nodeagent.volume.csi import CSIPlugin, DriverClients
from nodeagent.volume.csierrors import MountOperationError
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.plugin import VolumeHost
from nodeagent.volume.token import TokenManager
from tests.unit.volume.test_csi_plugin import DRIVER, ENDPOINT, NODE, PVC_VOLUME, Env, csidriver, env, pod

__all__ = ["env"]  # the fixture, imported for the tests below

NOW = 1_800_000_000.0
PUBLISH = "/csi.v1.Node/NodePublishVolume"


class Requests:
    """The TokenRequests the node made; answers a token per audience that expires `expirationSeconds` later."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, dict[str, Any]]] = []
        self.error: ApiError | None = None

    async def __call__(self, namespace: str, service_account: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.made.append((namespace, service_account, dict(body)))
        if self.error is not None:
            raise self.error
        spec = body["spec"]
        audience = ",".join(spec.get("audiences") or ["<api>"])
        expires = csiutil.rfc3339(NOW + spec["expirationSeconds"])
        return {"status": {"token": f"token-for-{audience}", "expirationTimestamp": expires}}


def _plugin(env: Env, requests: Requests) -> CSIPlugin:
    env.registry.drivers[DRIVER] = ENDPOINT
    host = VolumeHost(PodDirs(env.root), env.mounter)
    clients = DriverClients(env.registry, lambda endpoint: env.node)
    tokens = TokenManager(requests, now=lambda: NOW, jitter=lambda: 0.0)
    return CSIPlugin(host, clients, get=env.store.get, node_name=NODE, clock=env.clock, tokens=tokens)


def test_service_account_tokens_are_gos_json_of_the_statuses() -> None:
    attrs = csiutil.service_account_tokens({"vault": ("t2", NOW + 600), "": ("t1", NOW + 3600)})
    assert attrs == {
        "csi.storage.k8s.io/serviceAccount.tokens": '{"":{"token":"t1","expirationTimestamp":"2027-01-15T09:00:00Z"},'
        '"vault":{"token":"t2","expirationTimestamp":"2027-01-15T08:10:00Z"}}'
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, ((), False)),
        (
            {"tokenRequests": [{"audience": "vault", "expirationSeconds": 600}, {"audience": ""}]},
            ((("vault", 600), ("", None)), False),
        ),
        ({"requiresRepublish": True}, ((), True)),
    ],
)
def test_driver_info_reads_token_requests_and_republish(spec: dict[str, Any], expected: tuple[Any, bool]) -> None:
    info = csiutil.driver_info({"spec": spec})
    assert (info.token_requests, info.requires_republish) == expected


async def test_tokens_of_the_pods_service_account_reach_the_publish(env: Env) -> None:
    env.store.put(
        "storage.k8s.io",
        "csidrivers",
        "",
        csidriver(tokenRequests=[{"audience": "vault", "expirationSeconds": 600}, {"audience": ""}]),
    )
    requests = Requests()
    await _plugin(env, requests).set_up(pod(), PVC_VOLUME)
    (publish,) = env.node.args("NodePublishVolume")
    tokens = json.loads(publish["volume_context"]["csi.storage.k8s.io/serviceAccount.tokens"])
    assert tokens == {
        "vault": {"token": "token-for-vault", "expirationTimestamp": csiutil.rfc3339(NOW + 600)},
        "": {"token": "token-for-<api>", "expirationTimestamp": csiutil.rfc3339(NOW + 3600)},
    }
    bound = {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u1"}
    assert [(ns, sa, body["spec"]) for ns, sa, body in requests.made] == [
        ("default", "builder", {"expirationSeconds": 600, "boundObjectRef": bound, "audiences": ["vault"]}),
        ("default", "builder", {"expirationSeconds": 3600, "boundObjectRef": bound}),
    ]
    assert "csi.storage.k8s.io/serviceAccount.tokens" not in env.node.args("NodeStageVolume")[0]["volume_context"]


async def test_token_request_refused_fails_set_up_before_the_publish(env: Env) -> None:
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(tokenRequests=[{"audience": "vault"}]))
    requests = Requests()
    requests.error = ApiError(403, "Forbidden", 'serviceaccounts "builder" is forbidden')
    with pytest.raises(MountOperationError) as failure:
        await _plugin(env, requests).set_up(pod(), PVC_VOLUME)
    assert str(failure.value).startswith(
        "kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token attributes: failed to fetch token: "
    )
    assert env.node.args("NodePublishVolume") == []


@pytest.mark.parametrize(("republish", "publishes"), [(True, 3), (False, 1)])
async def test_remount_publishes_again_only_for_requires_republish(env: Env, republish: bool, publishes: int) -> None:
    env.store.put(
        "storage.k8s.io",
        "csidrivers",
        "",
        csidriver(requiresRepublish=republish, tokenRequests=[{"audience": "vault", "expirationSeconds": 600}]),
    )
    plugin = _plugin(env, Requests())
    assert plugin.requires_remount
    for _ in range(3):  # the first set up, then two resyncs
        await plugin.set_up(pod(), PVC_VOLUME)
    assert [m for m in env.node.methods() if m != "NodeGetCapabilities"].count("NodePublishVolume") == publishes
    assert env.node.methods().count("NodeStageVolume") == 1


async def test_failed_republish_keeps_the_volume_published(env: Env) -> None:
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(requiresRepublish=True))
    plugin = _plugin(env, Requests())
    target = await plugin.set_up(pod(), PVC_VOLUME)
    env.node.fail["NodePublishVolume"] = [UnknownCSIError(PUBLISH, grpc.StatusCode.INTERNAL, "driver busy")]
    with pytest.raises(MountOperationError) as failure:
        await plugin.set_up(pod(), PVC_VOLUME)
    assert not failure.value.uncertain
    assert plugin.measured_volumes("u1") == ["data"]
    assert await asyncio.to_thread(os.path.isdir, target)


async def test_reconstructed_volume_of_a_republish_driver_is_republished(env: Env) -> None:
    env.store.put("storage.k8s.io", "csidrivers", "", csidriver(requiresRepublish=True))
    await _plugin(env, Requests()).set_up(pod(), PVC_VOLUME)
    restarted = _plugin(env, Requests())
    assert await asyncio.to_thread(restarted.reconstruct, "u1", "data")
    await restarted.set_up(pod(), PVC_VOLUME)  # its pod's first sync after the restart
    assert env.node.methods().count("NodePublishVolume") == 2
    assert env.node.methods().count("NodeStageVolume") == 1
