"""The DRA manager and its plugin store against a DRAPlugin served in-process over a unix socket (the real gRPC path,
v1 and v1beta1 method names), with claims from a table instead of the apiserver: what is prepared and unprepared,
when, the CDI devices a container gets, the checkpoint across a restart, and upstream's error texts."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi.registration.handler import HandlerError
from nodeagent.dra.claiminfo import CHECKPOINT_NAME
from nodeagent.dra.manager import DRAError, DRAManager
from nodeagent.dra.plugins import DRAPluginManager, PluginError
from nodeagent.dra.v1 import api_pb2
from nodeagent.kube.errors import KubeError, NotFound

Obj = dict[str, Any]
DRIVER = "d.example"


class FakeDriver:
    """A DRA driver's plugin: answers each claim with one device per allocation result of its driver, or `fail`."""

    def __init__(self, claims: dict[str, Obj]) -> None:
        self.claims = claims
        self.calls: list[tuple[str, list[str]]] = []
        self.fail: dict[str, str] = {}  # claim uid -> error

    def _prepare(self, request: api_pb2.NodePrepareResourcesRequest, context: Any) -> bytes:
        self.calls.append(("prepare", [c.name for c in request.claims]))
        response = api_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            if claim.uid in self.fail:
                response.claims[claim.uid].error = self.fail[claim.uid]
                continue
            obj = self.claims[claim.name]
            for result in obj["status"]["allocation"]["devices"]["results"]:
                if result["driver"] == DRIVER:
                    response.claims[claim.uid].devices.append(
                        api_pb2.Device(
                            request_names=[result["request"]],
                            pool_name=result["pool"],
                            device_name=result["device"],
                            cdi_device_ids=[f"{DRIVER}/dev={claim.uid}-{result['device']}"],
                        )
                    )
        return response.SerializeToString()

    def _unprepare(self, request: api_pb2.NodeUnprepareResourcesRequest, context: Any) -> bytes:
        self.calls.append(("unprepare", [c.name for c in request.claims]))
        response = api_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = self.fail.get(claim.uid, "")
        return response.SerializeToString()

    def handler(self, package: str) -> grpc.GenericRpcHandler[Any, Any]:
        return grpc.method_handlers_generic_handler(
            f"{package}.DRAPlugin",
            {
                "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                    self._prepare, request_deserializer=api_pb2.NodePrepareResourcesRequest.FromString
                ),
                "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                    self._unprepare, request_deserializer=api_pb2.NodeUnprepareResourcesRequest.FromString
                ),
            },
        )


def claim(name: str, uid: str, pod_uids: list[str], *, allocated: bool = True, owner: str | None = None) -> Obj:
    results = [{"request": "gpu", "driver": DRIVER, "pool": "node", "device": f"dev-{name}"}]
    status: Obj = {"reservedFor": [{"resource": "pods", "name": "x", "uid": u} for u in pod_uids]}
    if allocated:
        status["allocation"] = {"devices": {"results": results}}
    refs = [{"uid": owner, "controller": True, "kind": "Pod", "name": "x"}] if owner else []
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": refs}, "status": status}


def pod(name: str, uid: str, claim_names: list[str]) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {
            "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claim_names)],
            "containers": [
                {"name": "main", "resources": {"claims": [{"name": f"c{i}"} for i in range(len(claim_names))]}},
                {"name": "plain"},
            ],
        },
    }


class Harness:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.claims: dict[str, Obj] = {}
        self.driver = FakeDriver(self.claims)
        self.server: grpc.aio.Server | None = None
        self.endpoint = str(root / "dra.sock")
        self.plugins = DRAPluginManager()
        self.active: list[Obj] = []
        self.running: set[str] = set()

    async def serve(self, package: str = "k8s.io.kubelet.pkg.apis.dra.v1") -> None:
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers([self.driver.handler(package)])
        self.server.add_insecure_port(f"unix:{self.endpoint}")
        await self.server.start()

    async def read(self, namespace: str, name: str) -> Obj:
        if name not in self.claims:
            raise NotFound(404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found')
        return self.claims[name]

    def manager(self) -> DRAManager:
        return DRAManager(
            self.read,
            str(self.root),
            self.plugins,
            active_pods=lambda: self.active,
            sources_ready=lambda: True,
            could_have_running_containers=lambda uid: uid in self.running,
        )

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
        await self.plugins.deregister_plugin(DRIVER, self.endpoint)


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def harness(root: Path) -> AsyncIterator[Harness]:
    h = Harness(root)
    await h.serve()
    await h.plugins.register_plugin(DRIVER, h.endpoint, ["v1.DRAPlugin"])
    yield h
    await h.close()


async def test_prepare_then_cdi_devices_then_unprepare(harness: Harness) -> None:
    harness.claims["a"] = claim("a", "ua", ["p1"])
    manager = harness.manager()
    p1 = pod("p1", "p1", ["a"])
    await manager.prepare_resources(p1)
    assert harness.driver.calls == [("prepare", ["a"])]
    assert manager.cdi_devices(p1, p1["spec"]["containers"][0]) == [f"{DRIVER}/dev=ua-dev-a"]
    assert manager.cdi_devices(p1, p1["spec"]["containers"][1]) == []
    assert [i.claim_name for i in manager.container_claim_infos(p1, p1["spec"]["containers"][0])] == ["a"]
    assert manager.container_claim_infos(p1, p1["spec"]["containers"][1]) == []
    # Prepared once: a second sync of the pod does not call the driver again.
    await manager.prepare_resources(p1)
    assert harness.driver.calls == [("prepare", ["a"])]
    assert manager.pod_might_need_to_unprepare_resources("p1")
    await manager.unprepare_resources(p1)
    assert harness.driver.calls == [("prepare", ["a"]), ("unprepare", ["a"])]
    assert manager.claims() == []
    # Idempotent.
    await manager.unprepare_resources(p1)
    assert len(harness.driver.calls) == 2


async def test_a_shared_claim_is_unprepared_with_its_last_pod(harness: Harness) -> None:
    harness.claims["a"] = claim("a", "ua", ["p1", "p2"])
    manager = harness.manager()
    p1, p2 = pod("p1", "p1", ["a"]), pod("p2", "p2", ["a"])
    await manager.prepare_resources(p1)
    await manager.prepare_resources(p2)
    await manager.unprepare_resources(p1)
    assert harness.driver.calls == [("prepare", ["a"])]
    await manager.unprepare_resources(p2)
    assert harness.driver.calls == [("prepare", ["a"]), ("unprepare", ["a"])]


async def test_a_restarted_manager_keeps_the_claims(harness: Harness) -> None:
    harness.claims["a"] = claim("a", "ua", ["p1"])
    p1 = pod("p1", "p1", ["a"])
    await harness.manager().prepare_resources(p1)
    assert (harness.root / CHECKPOINT_NAME).is_file()
    again = harness.manager()
    # The container made again gets the same devices before any new prepare ...
    assert again.cdi_devices(p1, p1["spec"]["containers"][0]) == [f"{DRIVER}/dev=ua-dev-a"]
    # ... and the pod's deletion reaches the driver.
    await again.unprepare_resources(p1)
    assert harness.driver.calls == [("prepare", ["a"]), ("unprepare", ["a"])]


async def test_reconcile_unprepares_pods_no_longer_active(harness: Harness) -> None:
    harness.claims["a"] = claim("a", "ua", ["p1"])
    manager = harness.manager()
    p1 = pod("p1", "p1", ["a"])
    await manager.prepare_resources(p1)
    harness.active.append(p1)
    await manager.reconcile()
    assert len(harness.driver.calls) == 1
    harness.active.clear()
    harness.running.add("p1")  # not active, but its containers may still run: left to its terminating sync
    await manager.reconcile()
    assert len(harness.driver.calls) == 1
    harness.running.clear()
    await manager.reconcile()
    assert harness.driver.calls[-1] == ("unprepare", ["a"])


@pytest.mark.parametrize(
    ("the_claim", "message"),
    [
        pytest.param(None, 'fetch ResourceClaim a: resourceclaims.resource.k8s.io "a" not found', id="missing"),
        pytest.param(
            claim("a", "ua", ["someone-else"]),
            "pod p1 (p1) is not allowed to use ResourceClaim a (ua)",
            id="not-reserved",
        ),
        pytest.param(claim("a", "ua", ["p1"], allocated=False), "ResourceClaim a: not allocated", id="not-allocated"),
    ],
)
async def test_prepare_failures_change_nothing(harness: Harness, the_claim: Obj | None, message: str) -> None:
    if the_claim is not None:
        harness.claims["a"] = the_claim
    manager = harness.manager()
    with pytest.raises(DRAError) as caught:
        await manager.prepare_resources(pod("p1", "p1", ["a"]))
    assert str(caught.value) == f"prepare dynamic resources: {message}"
    assert manager.claims() == [] and harness.driver.calls == []


async def test_a_driver_without_plugin_is_upstreams_error(harness: Harness) -> None:
    other = claim("a", "ua", ["p1"])
    other["status"]["allocation"]["devices"]["results"][0]["driver"] = "absent.example"
    harness.claims["a"] = other
    manager = harness.manager()
    with pytest.raises(DRAError) as caught:
        await manager.prepare_resources(pod("p1", "p1", ["a"]))
    assert str(caught.value) == "prepare dynamic resources: DRA driver absent.example is not registered"
    assert manager.claims() == []
    # Nothing was prepared, so the pod's end needs no driver.
    await manager.unprepare_resources(pod("p1", "p1", ["a"]))


async def test_a_generated_claim_must_be_owned_by_the_pod(harness: Harness) -> None:
    harness.claims["p1-g"] = claim("p1-g", "ug", ["p1"], owner="other")
    the_pod = pod("p1", "p1", [])
    the_pod["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "t"}]
    the_pod["status"] = {"resourceClaimStatuses": [{"name": "g", "resourceClaimName": "p1-g"}]}
    with pytest.raises(DRAError) as caught:
        await harness.manager().prepare_resources(the_pod)
    assert str(caught.value) == (
        "prepare dynamic resources: ResourceClaim ns/p1-g was not created for pod ns/p1 (pod is not owner)"
    )
    harness.claims["p1-g"] = claim("p1-g", "ug", ["p1"], owner="p1")
    await harness.manager().prepare_resources(the_pod)
    assert harness.driver.calls == [("prepare", ["p1-g"])]


async def test_a_claim_error_of_the_driver_fails_the_pod_and_is_prepared_next_time(harness: Harness) -> None:
    harness.claims["a"] = claim("a", "ua", ["p1"])
    harness.driver.fail["ua"] = "device busy"
    manager = harness.manager()
    p1 = pod("p1", "p1", ["a"])
    with pytest.raises(DRAError) as caught:
        await manager.prepare_resources(p1)
    assert (
        str(caught.value) == "prepare dynamic resources: NodePrepareResources failed for ResourceClaim a: device busy"
    )
    # The pod is in the cache (so that its deletion unprepares), the claim not prepared: the next sync calls again.
    assert manager.pod_might_need_to_unprepare_resources("p1")
    del harness.driver.fail["ua"]
    await manager.prepare_resources(p1)
    assert harness.driver.calls == [("prepare", ["a"]), ("prepare", ["a"])]


async def test_a_dead_plugin_is_a_grpc_error(harness: Harness) -> None:
    harness.claims["a"] = claim("a", "ua", ["p1"])
    assert harness.server is not None
    await harness.server.stop(None)
    with pytest.raises(DRAError) as caught:
        await harness.manager().prepare_resources(pod("p1", "p1", ["a"]))
    assert str(caught.value).startswith(
        "prepare dynamic resources: NodePrepareResources: rpc error: code = Unavailable"
    )


async def test_v1beta1_service(root: Path) -> None:
    h = Harness(root)
    await h.serve("k8s.io.kubelet.pkg.apis.dra.v1beta1")
    try:
        await h.plugins.register_plugin(DRIVER, h.endpoint, ["v1beta1.DRAPlugin"])
        h.claims["a"] = claim("a", "ua", ["p1"])
        await h.manager().prepare_resources(pod("p1", "p1", ["a"]))
        assert h.driver.calls == [("prepare", ["a"])]
    finally:
        await h.close()


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        pytest.param([], "empty list of supported gRPC services (aka supported versions)", id="empty"),
        pytest.param(
            ["v1alpha4.Node", "1.0.0"],
            'none of services supported by the plugin (["v1alpha4.Node" "1.0.0"]) are supported by the kubelet '
            '(["v1.DRAPlugin" "v1beta1.DRAPlugin"])',
            id="unknown",
        ),
    ],
)
async def test_registration_refuses_unknown_services(versions: list[str], message: str) -> None:
    plugins = DRAPluginManager()
    expected = f"invalid supported gRPC versions of DRA driver plugin d at endpoint /e: {message}"
    for call in (plugins.validate_plugin, plugins.register_plugin):
        with pytest.raises(HandlerError) as caught:
            await call("d", "/e", versions)
        assert str(caught.value) == expected
    assert plugins.registered() == {}


async def test_plugins_of_a_driver() -> None:
    plugins = DRAPluginManager()
    with pytest.raises(PluginError, match=r"^DRA driver name is empty$"):
        plugins.get_plugin("")
    await plugins.register_plugin("d", "/one", ["v1beta1.DRAPlugin", "v1.DRAPlugin"])
    with pytest.raises(HandlerError, match=r"^endpoint /one already registered for DRA driver plugin d$"):
        await plugins.register_plugin("d", "/one", ["v1.DRAPlugin"])
    await plugins.register_plugin("d", "/two", ["v1.DRAPlugin"])
    # The plugin's first supported service is used; the latest plugin is called.
    assert plugins.get_plugin("d").endpoint == "/two"
    await plugins.deregister_plugin("d", "/two")
    assert (plugins.get_plugin("d").endpoint, plugins.get_plugin("d").service) == ("/one", "v1beta1.DRAPlugin")
    await plugins.deregister_plugin("d", "/one")
    with pytest.raises(PluginError, match=r"^DRA driver d is not registered$"):
        plugins.get_plugin("d")


async def test_resource_slices_are_wiped_at_start_and_after_the_last_plugin_left() -> None:
    wiped: list[str] = []
    failures = [KubeError("apiserver down")]
    delays: list[float] = []
    proceed = asyncio.Event()

    async def wipe(driver: str) -> None:
        if failures:
            raise failures.pop()
        wiped.append(driver)

    async def sleep(delay: float) -> None:
        delays.append(delay)
        if delay == 30.0:
            await proceed.wait()

    plugins = DRAPluginManager(wipe, sleep=sleep)
    task = asyncio.create_task(plugins.run())
    for _ in range(20):
        await asyncio.sleep(0)
    assert wiped == [""] and delays == [1.0]  # retried after a failure, 1 s
    await plugins.register_plugin("d", "/one", ["v1.DRAPlugin"])
    await plugins.deregister_plugin("d", "/one")
    # A plugin back within the delay cancels the wipe.
    await plugins.register_plugin("d", "/one", ["v1.DRAPlugin"])
    for _ in range(5):
        await asyncio.sleep(0)
    proceed.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert wiped == [""]
    proceed.clear()
    await plugins.deregister_plugin("d", "/one")
    for _ in range(5):
        await asyncio.sleep(0)
    proceed.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert wiped == ["", "d"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- endpoints outside the plugins directory (upstream v1.34.4, seen on the testbed: docs/devices.md) --------------


async def test_any_endpoint_is_registered_and_dialed_at_once() -> None:
    # Upstream checks no directory: an absolute path elsewhere, or one relative to the kubelet's working directory,
    # is registered, and its gRPC connection is started at registration (conn.Connect()), before any call.
    directory = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    dialed = asyncio.Event()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dialed.set()
        writer.close()

    server = await asyncio.start_unix_server(accepted, path=str(directory / "elsewhere.sock"))
    plugins = DRAPluginManager()
    try:
        await plugins.register_plugin("d", str(directory / "elsewhere.sock"), ["v1.DRAPlugin"])
        await plugins.register_plugin("d", "../relative.sock", ["v1.DRAPlugin"])
        await asyncio.wait_for(dialed.wait(), 5.0)
        assert plugins.registered() == {"d": [str(directory / "elsewhere.sock"), "../relative.sock"]}
    finally:
        for endpoint in (str(directory / "elsewhere.sock"), "../relative.sock"):
            await plugins.deregister_plugin("d", endpoint)
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("/r/.x\x00junk", 'parse "dns:///unix:/r/.x\\x00junk": net/url: invalid control character in URL'),
        ("/r/x%zz.sock", 'parse "dns:///unix:/r/x%zz.sock": invalid URL escape "%zz"'),
    ],
)
async def test_an_endpoint_grpc_go_cannot_parse_is_refused(endpoint: str, why: str) -> None:
    plugins = DRAPluginManager()
    await plugins.validate_plugin("d", endpoint, ["v1.DRAPlugin"])  # as upstream: only the services are validated
    with pytest.raises(HandlerError) as caught:
        await plugins.register_plugin("d", endpoint, ["v1.DRAPlugin"])
    assert str(caught.value) == f"create gRPC connection to DRA driver d plugin at endpoint {endpoint}: {why}"
    assert plugins.registered() == {}
