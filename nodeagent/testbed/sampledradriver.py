"""A sample DRA driver for the testbed, written for this project (Python, gRPC): what a DRA driver's kubelet plugin
does, small enough to read, run on the host beside an agent as a user would run a driver.

- Registration: serves pluginregistration's Registration on `<root-dir>/plugins_registry/<driver>-reg.sock` (type
  "DRAPlugin", its driver name, its DRAPlugin endpoint `<root-dir>/plugins/<driver>/dra.sock`, and the services
  "v1.DRAPlugin" and "v1beta1.DRAPlugin"), and logs the kubelet's registration status.
- ResourceSlice: one slice of the node's pool, owned by the Node, devices `dev-0` .. `dev-N-1` (attribute `index`),
  kept present (made again when the kubelet's start-up wipe or anyone else deletes it), with the admin's kubeconfig.
- NodePrepareResources: reads the claim, and for each allocation result of this driver writes a CDI spec
  (`<cdi-dir>/<driver>-<claim uid>.json`, kind `<driver>/device`) that gives the container the environment
  `DRA_<DEVICE>=<claim name>` and `DRA_CLAIM_UID`, a device node `/dev/nodeagent-dra-<device>` (the host's
  /dev/null, a real character device) and a read-only mount of a file holding the claim's name at
  `/run/nodeagent-dra/<device>`; it answers the CDI device IDs `<driver>/device=<claim uid>-<device>`.
- NodeUnprepareResources: removes the claim's spec and files. Both calls are appended to `--record` (JSON lines:
  method, claim namespace/name/uid, `at` and `took_s`: when the call came and the driver's own time for the claim),
  which tests and benchmarks/devices.py read.

Run it as `python3 -m nodeagent.testbed.sampledradriver --root-dir ... --cdi-dir ... --kubeconfig ... --node-name ...`;
SIGTERM stops it and removes its sockets (the ResourceSlice stays, as with upstream's drivers: the kubelet wipes it
when the driver does not come back).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from csi.registration.v1 import api_pb2 as reg_pb2
from csi.registration.v1 import api_pb2_grpc as reg_grpc
from nodeagent.dra.v1 import api_pb2, api_pb2_grpc
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, KubeError, NotFound

log = logging.getLogger("sampledradriver")

DRIVER = "dra.nodeagent.test"
DEVICE_COUNT = 2
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
SLICE_RESYNC = 2.0
CDI_VERSION = "0.5.0"
HOST_DEVICE = "/dev/null"


def slice_name(node_name: str, driver: str) -> str:
    return f"{node_name}-{driver}".replace(".", "-")


def resource_slice(node_name: str, node_uid: str, driver: str, devices: int) -> dict[str, Any]:
    """The node's slice, owned by the Node (it goes when the Node is deleted), as upstream's kubelet plugin helper
    publishes it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node_name, driver),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}],
        },
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}", "attributes": {"index": {"int": i}}} for i in range(devices)],
        },
    }


def env_name(device: str) -> str:
    return "DRA_" + device.upper().replace("-", "_")


def cdi_spec(driver: str, claim: Mapping[str, Any], devices: Sequence[str], files: Path) -> dict[str, Any]:
    """The claim's CDI spec: one CDI device per allocated device."""
    meta = claim.get("metadata") or {}
    uid, name = str(meta.get("uid", "")), str(meta.get("name", ""))
    return {
        "cdiVersion": CDI_VERSION,
        "kind": f"{driver}/device",
        "devices": [
            {
                "name": f"{uid}-{device}",
                "containerEdits": {
                    "env": [f"{env_name(device)}={name}", f"DRA_CLAIM_UID={uid}"],
                    "deviceNodes": [{"path": f"/dev/nodeagent-dra-{device}", "hostPath": HOST_DEVICE}],
                    "mounts": [
                        {
                            "hostPath": str(files / device),
                            "containerPath": f"/run/nodeagent-dra/{device}",
                            "options": ["ro", "bind"],
                        }
                    ],
                },
            }
            for device in devices
        ],
    }


class Driver(api_pb2_grpc.DRAPluginServicer, reg_grpc.RegistrationServicer):
    def __init__(self, args: argparse.Namespace, client: KubeClient) -> None:
        self.args = args
        self.client = client
        self.endpoint = Path(args.root_dir) / "plugins" / args.driver / "dra.sock"
        self.registration = Path(args.root_dir) / "plugins_registry" / f"{args.driver}-reg.sock"
        self.cdi_dir = Path(args.cdi_dir)
        self.state = Path(args.root_dir) / "plugins" / args.driver / "claims"

    def _record(self, method: str, claim: api_pb2.Claim, started: float) -> None:
        """One line per claim and call, once it is answered: `at` (wall clock) and `took_s` time the driver's own
        work for the claim (from the request's arrival to its answer, the gRPC transport not included)."""
        if self.args.record:
            line = {
                "method": method,
                "namespace": claim.namespace,
                "name": claim.name,
                "uid": claim.uid,
                "at": round(started, 6),
                "took_s": round(time.time() - started, 6),
            }
            with open(self.args.record, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")

    def _spec_path(self, uid: str) -> Path:
        return self.cdi_dir / f"{self.args.driver}-{uid}.json"

    # --- Registration --------------------------------------------------------------------------------------------

    async def GetInfo(self, request: reg_pb2.InfoRequest, context: Any) -> reg_pb2.PluginInfo:
        return reg_pb2.PluginInfo(
            type="DRAPlugin", name=self.args.driver, endpoint=str(self.endpoint), supported_versions=list(SERVICES)
        )

    async def NotifyRegistrationStatus(
        self, request: reg_pb2.RegistrationStatus, context: Any
    ) -> reg_pb2.RegistrationStatusResponse:
        log.info("registration status registered=%s error=%s", request.plugin_registered, request.error)
        return reg_pb2.RegistrationStatusResponse()

    # --- DRAPlugin -----------------------------------------------------------------------------------------------

    async def _prepare(self, claim: api_pb2.Claim) -> api_pb2.NodePrepareResourceResponse:
        try:
            obj = await self.client.get(
                paths.api_path(
                    "resourceclaims", group="resource.k8s.io", version="v1", namespace=claim.namespace, name=claim.name
                )
            )
        except KubeError as exc:
            return api_pb2.NodePrepareResourceResponse(error=f"read claim: {exc}")
        if (obj.get("metadata") or {}).get("uid") != claim.uid:
            return api_pb2.NodePrepareResourceResponse(error="claim UID changed")
        allocation = (obj.get("status") or {}).get("allocation") or {}
        results = [
            r for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == self.args.driver
        ]
        files = self.state / claim.uid
        files.mkdir(parents=True, exist_ok=True)
        for result in results:
            (files / str(result["device"])).write_text(f"{claim.namespace}/{claim.name}\n")
        spec = cdi_spec(self.args.driver, obj, [str(r["device"]) for r in results], files)
        tmp = self._spec_path(claim.uid).with_suffix(".tmp")
        tmp.write_text(json.dumps(spec, indent=2))
        os.replace(tmp, self._spec_path(claim.uid))
        return api_pb2.NodePrepareResourceResponse(
            devices=[
                api_pb2.Device(
                    request_names=[str(r.get("request", ""))],
                    pool_name=str(r.get("pool", "")),
                    device_name=str(r["device"]),
                    cdi_device_ids=[f"{self.args.driver}/device={claim.uid}-{r['device']}"],
                )
                for r in results
            ]
        )

    async def NodePrepareResources(
        self, request: api_pb2.NodePrepareResourcesRequest, context: Any
    ) -> api_pb2.NodePrepareResourcesResponse:
        response = api_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            started = time.time()
            response.claims[claim.uid].CopyFrom(await self._prepare(claim))
            self._record("NodePrepareResources", claim, started)
            log.info("prepared claim=%s/%s uid=%s", claim.namespace, claim.name, claim.uid)
        return response

    async def NodeUnprepareResources(
        self, request: api_pb2.NodeUnprepareResourcesRequest, context: Any
    ) -> api_pb2.NodeUnprepareResourcesResponse:
        response = api_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            started = time.time()
            with contextlib.suppress(FileNotFoundError):
                self._spec_path(claim.uid).unlink()
            shutil.rmtree(self.state / claim.uid, ignore_errors=True)
            self._record("NodeUnprepareResources", claim, started)
            response.claims[claim.uid].CopyFrom(api_pb2.NodeUnprepareResourceResponse())
            log.info("unprepared claim=%s/%s uid=%s", claim.namespace, claim.name, claim.uid)
        return response

    # --- ResourceSlice -------------------------------------------------------------------------------------------

    async def publish(self) -> None:
        path = paths.api_path("resourceslices", group="resource.k8s.io", version="v1")
        name = slice_name(self.args.node_name, self.args.driver)
        while True:
            try:
                await self.client.get(f"{path}/{name}")
            except NotFound:
                try:
                    node = await self.client.get(paths.node(self.args.node_name))
                    uid = str(node["metadata"]["uid"])
                    with contextlib.suppress(AlreadyExists):
                        await self.client.create(
                            path, resource_slice(self.args.node_name, uid, self.args.driver, self.args.devices)
                        )
                        log.info("ResourceSlice published name=%s", name)
                except NotFound:
                    log.info("ResourceSlice waits for the Node node=%s", self.args.node_name)
                except KubeError as exc:
                    log.warning("ResourceSlice not published error=%s", exc)
            except KubeError as exc:
                log.warning("ResourceSlice not read error=%s", exc)
            await asyncio.sleep(SLICE_RESYNC)


def v1beta1_handler(driver: Driver) -> grpc.GenericRpcHandler[Any, Any]:
    """The v1beta1.DRAPlugin service (k8s.io.kubelet.pkg.apis.dra.v1beta1): v1's messages on its method paths."""
    return grpc.method_handlers_generic_handler(
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        {
            "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                driver.NodePrepareResources,
                request_deserializer=api_pb2.NodePrepareResourcesRequest.FromString,
                response_serializer=api_pb2.NodePrepareResourcesResponse.SerializeToString,
            ),
            "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                driver.NodeUnprepareResources,
                request_deserializer=api_pb2.NodeUnprepareResourcesRequest.FromString,
                response_serializer=api_pb2.NodeUnprepareResourcesResponse.SerializeToString,
            ),
        },
    )


async def serve(args: argparse.Namespace) -> None:
    async with KubeClient.from_kubeconfig(Path(args.kubeconfig)) as client:
        driver = Driver(args, client)
        driver.endpoint.parent.mkdir(parents=True, exist_ok=True)
        driver.registration.parent.mkdir(parents=True, exist_ok=True)
        driver.cdi_dir.mkdir(parents=True, exist_ok=True)
        for socket in (driver.endpoint, driver.registration):
            with contextlib.suppress(FileNotFoundError):
                socket.unlink()
        plugin = grpc.aio.server()
        api_pb2_grpc.add_DRAPluginServicer_to_server(driver, plugin)
        # The same methods under v1beta1's package: both services it names are served.
        plugin.add_generic_rpc_handlers([v1beta1_handler(driver)])
        plugin.add_insecure_port(f"unix:{driver.endpoint}")
        await plugin.start()
        registration = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(driver, registration)
        registration.add_insecure_port(f"unix:{driver.registration}")
        await registration.start()
        log.info("serving driver=%s endpoint=%s registration=%s", args.driver, driver.endpoint, driver.registration)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        publisher = asyncio.create_task(driver.publish(), name="resourceslice")
        await stop.wait()
        publisher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await publisher
        await registration.stop(None)
        await plugin.stop(None)
        for socket in (driver.endpoint, driver.registration):
            with contextlib.suppress(FileNotFoundError):
                socket.unlink()
        log.info("stopped driver=%s", args.driver)


def start(
    *, root_dir: Path, cdi_dir: Path, kubeconfig: Path, node_name: str, log_path: Path, record: Path
) -> subprocess.Popen[bytes]:
    """Runs the driver as a process for the agent of `root_dir`; stop it with SIGTERM."""
    argv = [
        sys.executable, "-m", "nodeagent.testbed.sampledradriver",
        "--root-dir", str(root_dir), "--cdi-dir", str(cdi_dir), "--kubeconfig", str(kubeconfig),
        "--node-name", node_name, "--record", str(record),
    ]  # fmt: skip
    with log_path.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root-dir", required=True, help="the agent's --root-dir")
    parser.add_argument("--cdi-dir", required=True, help="a directory in containerd's cdi_spec_dirs")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--driver", default=DRIVER)
    parser.add_argument("--devices", type=int, default=DEVICE_COUNT)
    parser.add_argument("--record", default="", help="append each call here (JSON lines)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
