"""The sample DRA driver's ResourceSlice and CDI spec (pure), and its DRAPlugin over a real socket under both method
paths (v1 and v1beta1), answering a claim read from a table."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from nodeagent.dra.v1 import api_pb2, api_pb2_grpc
from nodeagent.testbed import sampledradriver as driver


def test_resource_slice_is_the_nodes_pool_owned_by_the_node() -> None:
    body = driver.resource_slice("vm", "node-uid", "dra.example", 2)
    assert body["metadata"]["name"] == "vm-dra-example"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "vm", "uid": "node-uid"}
    ]
    assert body["spec"]["nodeName"] == "vm" and body["spec"]["driver"] == "dra.example"
    assert body["spec"]["pool"] == {"name": "vm", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in body["spec"]["devices"]] == ["dev-0", "dev-1"]


def test_cdi_spec_edits(tmp_path: Path) -> None:
    claim = {"metadata": {"name": "c", "uid": "u"}}
    spec = driver.cdi_spec("dra.example", claim, ["dev-1"], tmp_path)
    assert spec["kind"] == "dra.example/device"
    [device] = spec["devices"]
    assert device["name"] == "u-dev-1"
    edits = device["containerEdits"]
    assert edits["env"] == ["DRA_DEV_1=c", "DRA_CLAIM_UID=u"]
    assert edits["deviceNodes"] == [{"path": "/dev/nodeagent-dra-dev-1", "hostPath": "/dev/null"}]
    assert edits["mounts"][0]["hostPath"] == str(tmp_path / "dev-1")


class FakeClient:
    def __init__(self, claim: dict[str, Any]) -> None:
        self.claim = claim

    async def get(self, path: str) -> dict[str, Any]:
        return self.claim


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="drv-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("package", ["k8s.io.kubelet.pkg.apis.dra.v1", "k8s.io.kubelet.pkg.apis.dra.v1beta1"])
async def test_prepare_and_unprepare_on_both_services(root: Path, package: str) -> None:
    claim = {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "r", "driver": driver.DRIVER, "pool": "vm", "device": "dev-0"}]}
            }
        },
    }
    args = argparse.Namespace(
        root_dir=str(root), cdi_dir=str(root / "cdi"), driver=driver.DRIVER, record=str(root / "calls")
    )
    (root / "cdi").mkdir()
    plugin = driver.Driver(args, FakeClient(claim))  # type: ignore[arg-type]
    server = grpc.aio.server()
    api_pb2_grpc.add_DRAPluginServicer_to_server(plugin, server)
    server.add_generic_rpc_handlers([driver.v1beta1_handler(plugin)])
    server.add_insecure_port(f"unix:{root / 'dra.sock'}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix:{root / 'dra.sock'}") as channel:
            prepare = channel.unary_unary(
                f"/{package}.DRAPlugin/NodePrepareResources",
                request_serializer=api_pb2.NodePrepareResourcesRequest.SerializeToString,
                response_deserializer=api_pb2.NodePrepareResourcesResponse.FromString,
            )
            answer = await prepare(
                api_pb2.NodePrepareResourcesRequest(claims=[api_pb2.Claim(namespace="ns", name="c", uid="u")])
            )
            [device] = answer.claims["u"].devices
            assert list(device.cdi_device_ids) == [f"{driver.DRIVER}/device=u-dev-0"]
            spec = root / "cdi" / f"{driver.DRIVER}-u.json"
            assert json.loads(spec.read_text())["devices"][0]["name"] == "u-dev-0"
            unprepare = channel.unary_unary(
                f"/{package}.DRAPlugin/NodeUnprepareResources",
                request_serializer=api_pb2.NodeUnprepareResourcesRequest.SerializeToString,
                response_deserializer=api_pb2.NodeUnprepareResourcesResponse.FromString,
            )
            await unprepare(
                api_pb2.NodeUnprepareResourcesRequest(claims=[api_pb2.Claim(namespace="ns", name="c", uid="u")])
            )
            assert not spec.exists()
        calls = [json.loads(line)["method"] for line in (root / "calls").read_text().splitlines()]
        assert calls == ["NodePrepareResources", "NodeUnprepareResources"]
    finally:
        await server.stop(None)
