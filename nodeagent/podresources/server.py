"""The PodResources API v1 (upstream pkg/kubelet/apis/podresources, server_v1.go) on
`<root-dir>/pod-resources/kubelet.sock`: which devices each container of the node's pods holds (List, Get) and
which devices the node can allocate (GetAllocatableResources).

As upstream v1.34 with its default gates: List covers the active pods (KubeletPodResourcesListUseActivePods), Get is
served (KubeletPodResourcesGet, beta) and answers any pod the agent knows by namespace and name, and the containers
listed are the app containers and the restartable init containers (sidecars). Each device is one ContainerDevices
entry, with its NUMA node as topology when the plugin gave one. `cpu_ids` and `memory` are always empty: nodeagent
has no CPU manager nor memory manager (upstream's `none` policies report nothing either). `dynamic_resources`
(KubeletPodResourcesDynamicResources, beta and on in v1.34) lists the DRA claims a container names, with each
prepared device's driver, pool, name and CDI devices, from the DRA manager's claim cache. Upstream's rate limit on
the socket is not applied.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from nodeagent.devicemanager import DeviceManager
from nodeagent.devicemanager.checkpoint import NODE_WITHOUT_TOPOLOGY
from nodeagent.dra import DRAError, DRAManager
from nodeagent.podresources.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]
POD_RESOURCES_DIR = "pod-resources"
SOCKET_NAME = "kubelet.sock"


def _listed_containers(pod: Pod) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return [*sidecars, *(spec.get("containers") or [])]


def _device_entries(resource: str, per_node: Mapping[int, Sequence[str]]) -> list[api_pb2.ContainerDevices]:
    out = []
    for node, ids in sorted(per_node.items()):
        for device_id in sorted(ids):
            topology = (
                None if node == NODE_WITHOUT_TOPOLOGY else api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=node)])
            )
            out.append(api_pb2.ContainerDevices(resource_name=resource, device_ids=[device_id], topology=topology))
    return out


class PodResourcesServer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(
        self,
        root_dir: str,
        devices: DeviceManager,
        *,
        active_pods: Callable[[], Sequence[Pod]],
        all_pods: Callable[[], Sequence[Pod]],
        dra: DRAManager | None = None,
    ) -> None:
        self.socket_path = os.path.join(root_dir, POD_RESOURCES_DIR, SOCKET_NAME)
        self._devices = devices
        self._active_pods = active_pods
        self._all_pods = all_pods
        self._dra = dra
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        os.makedirs(os.path.dirname(self.socket_path), mode=0o750, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # a previous agent's; as upstream's CreateListener
            os.unlink(self.socket_path)
        server = grpc.aio.server()
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server
        log.info("pod resources server started socket=%s", self.socket_path)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    def _pod_resources(self, pod: Pod) -> api_pb2.PodResources:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        containers = []
        for container in _listed_containers(pod):
            name = str(container.get("name", ""))
            devices = [
                entry
                for resource, per_node in self._devices.container_topology(uid, name).items()
                for entry in _device_entries(resource, per_node)
            ]
            containers.append(
                api_pb2.ContainerResources(
                    name=name, devices=devices, dynamic_resources=self._dynamic_resources(pod, container)
                )
            )
        return api_pb2.PodResources(
            name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")), containers=containers
        )

    def _dynamic_resources(self, pod: Pod, container: Mapping[str, Any]) -> list[api_pb2.DynamicResource]:
        """Upstream's GetDynamicResources: an error is logged and gives none."""
        if self._dra is None:
            return []
        try:
            infos = self._dra.container_claim_infos(pod, container)
        except DRAError as exc:
            log.error("unable to get container claim info state error=%s", exc)
            return []
        out = []
        for info in infos:
            resources = []
            for driver, devices in info.drivers.items():
                # As upstream (container_manager_linux.go): the CDI device list grows across a driver's devices, so
                # each entry also names the CDI devices of the driver's devices before it.
                cdi: list[api_pb2.CDIDevice] = []
                for device in devices:
                    cdi.extend(api_pb2.CDIDevice(name=name) for name in device.cdi_device_ids)
                    resources.append(
                        api_pb2.ClaimResource(
                            cdi_devices=list(cdi),
                            driver_name=driver,
                            pool_name=device.pool_name,
                            device_name=device.device_name,
                        )
                    )
            out.append(
                api_pb2.DynamicResource(
                    claim_name=info.claim_name, claim_namespace=info.namespace, claim_resources=resources
                )
            )
        return out

    async def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api_pb2.ListPodResourcesResponse:
        self._devices.update_allocated_devices()
        return api_pb2.ListPodResourcesResponse(pod_resources=[self._pod_resources(p) for p in self._active_pods()])

    async def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api_pb2.AllocatableResourcesResponse:
        devices = []
        for resource, by_id in sorted(self._devices.allocatable_devices().items()):
            for device_id, device in sorted(by_id.items()):
                nodes = [n.ID for n in device.topology.nodes] or [NODE_WITHOUT_TOPOLOGY]
                for node in nodes:
                    devices.extend(_device_entries(resource, {node: [device_id]}))
        return api_pb2.AllocatableResourcesResponse(devices=devices)

    async def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api_pb2.GetPodResourcesResponse:
        for pod in self._all_pods():
            meta = pod.get("metadata") or {}
            if meta.get("name") == request.pod_name and meta.get("namespace") == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=self._pod_resources(pod))
        await context.abort(
            grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
        )
        raise AssertionError("unreachable: abort raises")
