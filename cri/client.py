"""The gRPC client of a container runtime: `RemoteRuntimeService`, `RemoteImageService`, and `connect`.

As upstream's remote client (k8s.io/cri-client) does:
- every call has a deadline, by default the kubelet's `runtimeRequestTimeout` (2 minutes); RunPodSandbox gets twice
  that, StopContainer and ExecSync their own timeout on top of it, CheckpointContainer the larger of its own and the
  default, while PullImage and GetContainerEvents have none, since a pull may take long and events never end;
- responses are unwrapped, and one the kubelet cannot use (an empty sandbox id, a status without metadata) is refused
  with `InvalidResponseError` rather than passed on;
- gRPC errors become `cri.errors` classes, raised `from` the gRPC error.

Unlike upstream, `exec_sync` returns the `ExecSyncResponse` whatever the exit code: the caller reads `exit_code`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

import grpc

from cri.channel import open_channel
from cri.containerd_tasks import ContainerdTasks
from cri.errors import InvalidResponseError, from_rpc_error
from cri.v1 import api_pb2, api_pb2_grpc

if TYPE_CHECKING:
    from cri.service import ImageService, RuntimeService

logger = logging.getLogger(__name__)

# The kubelet's default --runtime-request-timeout.
DEFAULT_TIMEOUT = 120.0

_RUNTIME = "/runtime.v1.RuntimeService/"
_IMAGE = "/runtime.v1.ImageService/"

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


async def _call(
    method: str, stub: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp], request: _Req, timeout: float | None
) -> _Resp:
    """One unary call with `timeout` (None: no deadline), its gRPC failure mapped to a CRIError."""
    try:
        return await stub(request, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(method, exc) from exc


def _verify_sandbox_status(method: str, status: api_pb2.PodSandboxStatus) -> None:
    if not status.id:
        raise InvalidResponseError(method, None, "status.Id is not set")
    if not status.HasField("metadata"):
        raise InvalidResponseError(method, None, "status.Metadata is not set")
    meta = status.metadata
    if not (meta.name and meta.namespace and meta.uid):
        raise InvalidResponseError(
            method, None, f"metadata.Name, metadata.Namespace or metadata.Uid is not in metadata of sandbox {status.id}"
        )
    if status.created_at == 0:
        raise InvalidResponseError(method, None, "status.CreatedAt is not set")


def _verify_container_status(method: str, status: api_pb2.ContainerStatus) -> None:
    if not status.id:
        raise InvalidResponseError(method, None, "status.Id is not set")
    if not status.HasField("metadata"):
        raise InvalidResponseError(method, None, "status.Metadata is not set")
    if not status.metadata.name:
        raise InvalidResponseError(method, None, f"metadata.Name is not in metadata of container {status.id}")
    if status.created_at == 0:
        raise InvalidResponseError(method, None, "status.CreatedAt is not set")
    if not status.image.image:
        raise InvalidResponseError(method, None, "status.Image is not set")
    if not status.image_ref:
        raise InvalidResponseError(method, None, "status.ImageRef is not set")


class RemoteRuntimeService:
    """`cri.service.RuntimeService` over a grpc.aio channel."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._stub = api_pb2_grpc.RuntimeServiceStub(channel)
        self.timeout = timeout

    def _deadline(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    async def version(self, api_version: str, *, timeout: float | None = None) -> api_pb2.VersionResponse:
        method = _RUNTIME + "Version"
        resp = await _call(
            method, self._stub.Version, api_pb2.VersionRequest(version=api_version), self._deadline(timeout)
        )
        missing = [
            name
            for name, value in (
                ("Version", resp.version),
                ("RuntimeName", resp.runtime_name),
                ("RuntimeApiVersion", resp.runtime_api_version),
                ("RuntimeVersion", resp.runtime_version),
            )
            if not value
        ]
        if missing:
            raise InvalidResponseError(
                method, None, f"not all fields are set in VersionResponse (missing {', '.join(missing)})"
            )
        return resp

    async def run_pod_sandbox(
        self, config: api_pb2.PodSandboxConfig, runtime_handler: str = "", *, timeout: float | None = None
    ) -> str:
        method = _RUNTIME + "RunPodSandbox"
        # As upstream: sandbox creation (network setup, pause image) gets twice the usual time.
        deadline = 2 * self.timeout if timeout is None else timeout
        request = api_pb2.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler)
        resp = await _call(method, self._stub.RunPodSandbox, request, deadline)
        if not resp.pod_sandbox_id:
            raise InvalidResponseError(method, None, f"PodSandboxId is not set for sandbox {config.metadata.name!r}")
        return resp.pod_sandbox_id

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        request = api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id)
        await _call(_RUNTIME + "StopPodSandbox", self._stub.StopPodSandbox, request, self._deadline(timeout))

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        request = api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id)
        await _call(_RUNTIME + "RemovePodSandbox", self._stub.RemovePodSandbox, request, self._deadline(timeout))

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.PodSandboxStatusResponse:
        method = _RUNTIME + "PodSandboxStatus"
        request = api_pb2.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id, verbose=verbose)
        resp = await _call(method, self._stub.PodSandboxStatus, request, self._deadline(timeout))
        if resp.HasField("status"):
            _verify_sandbox_status(method, resp.status)
        return resp

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]:
        request = api_pb2.ListPodSandboxRequest(filter=filter)
        resp = await _call(_RUNTIME + "ListPodSandbox", self._stub.ListPodSandbox, request, self._deadline(timeout))
        return list(resp.items)

    async def port_forward(
        self, request: api_pb2.PortForwardRequest, *, timeout: float | None = None
    ) -> api_pb2.PortForwardResponse:
        method = _RUNTIME + "PortForward"
        resp = await _call(method, self._stub.PortForward, request, self._deadline(timeout))
        if not resp.url:
            raise InvalidResponseError(method, None, "URL is not set")
        return resp

    async def update_pod_sandbox_resources(
        self, request: api_pb2.UpdatePodSandboxResourcesRequest, *, timeout: float | None = None
    ) -> api_pb2.UpdatePodSandboxResourcesResponse:
        method = _RUNTIME + "UpdatePodSandboxResources"
        return await _call(method, self._stub.UpdatePodSandboxResources, request, self._deadline(timeout))

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: api_pb2.ContainerConfig,
        sandbox_config: api_pb2.PodSandboxConfig,
        *,
        timeout: float | None = None,
    ) -> str:
        method = _RUNTIME + "CreateContainer"
        request = api_pb2.CreateContainerRequest(
            pod_sandbox_id=pod_sandbox_id, config=config, sandbox_config=sandbox_config
        )
        resp = await _call(method, self._stub.CreateContainer, request, self._deadline(timeout))
        if not resp.container_id:
            raise InvalidResponseError(method, None, f"ContainerId is not set for container {config.metadata.name!r}")
        return resp.container_id

    async def start_container(self, container_id: str, *, timeout: float | None = None) -> None:
        request = api_pb2.StartContainerRequest(container_id=container_id)
        await _call(_RUNTIME + "StartContainer", self._stub.StartContainer, request, self._deadline(timeout))

    async def stop_container(self, container_id: str, timeout: int) -> None:
        # As upstream: the grace period plus the default, to leave the runtime time to kill after the grace period.
        request = api_pb2.StopContainerRequest(container_id=container_id, timeout=timeout)
        await _call(_RUNTIME + "StopContainer", self._stub.StopContainer, request, self.timeout + timeout)

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None:
        request = api_pb2.RemoveContainerRequest(container_id=container_id)
        await _call(_RUNTIME + "RemoveContainer", self._stub.RemoveContainer, request, self._deadline(timeout))

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]:
        request = api_pb2.ListContainersRequest(filter=filter)
        resp = await _call(_RUNTIME + "ListContainers", self._stub.ListContainers, request, self._deadline(timeout))
        return list(resp.containers)

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse:
        method = _RUNTIME + "ContainerStatus"
        request = api_pb2.ContainerStatusRequest(container_id=container_id, verbose=verbose)
        resp = await _call(method, self._stub.ContainerStatus, request, self._deadline(timeout))
        if resp.HasField("status"):
            _verify_container_status(method, resp.status)
        return resp

    async def update_container_resources(
        self, container_id: str, resources: api_pb2.ContainerResources, *, timeout: float | None = None
    ) -> None:
        request = api_pb2.UpdateContainerResourcesRequest(container_id=container_id)
        if resources.HasField("linux"):
            request.linux.CopyFrom(resources.linux)
        if resources.HasField("windows"):
            request.windows.CopyFrom(resources.windows)
        method = _RUNTIME + "UpdateContainerResources"
        await _call(method, self._stub.UpdateContainerResources, request, self._deadline(timeout))

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        # As upstream: no deadline for a command without timeout, else its timeout plus the default as slack for the
        # runtime to kill the command and clean up.
        deadline = self.timeout + timeout if timeout else None
        request = api_pb2.ExecSyncRequest(container_id=container_id, cmd=cmd, timeout=int(timeout))
        return await _call(_RUNTIME + "ExecSync", self._stub.ExecSync, request, deadline)

    async def exec(self, request: api_pb2.ExecRequest, *, timeout: float | None = None) -> api_pb2.ExecResponse:
        method = _RUNTIME + "Exec"
        resp = await _call(method, self._stub.Exec, request, self._deadline(timeout))
        if not resp.url:
            raise InvalidResponseError(method, None, "URL is not set")
        return resp

    async def attach(self, request: api_pb2.AttachRequest, *, timeout: float | None = None) -> api_pb2.AttachResponse:
        method = _RUNTIME + "Attach"
        resp = await _call(method, self._stub.Attach, request, self._deadline(timeout))
        if not resp.url:
            raise InvalidResponseError(method, None, "URL is not set")
        return resp

    async def reopen_container_log(self, container_id: str, *, timeout: float | None = None) -> None:
        request = api_pb2.ReopenContainerLogRequest(container_id=container_id)
        method = _RUNTIME + "ReopenContainerLog"
        await _call(method, self._stub.ReopenContainerLog, request, self._deadline(timeout))

    async def checkpoint_container(self, request: api_pb2.CheckpointContainerRequest) -> None:
        method = _RUNTIME + "CheckpointContainer"
        if request.timeout < 0:
            raise ValueError("CheckpointContainer requires the timeout value to be > 0")
        # As upstream: a requested timeout longer than the default is used as is; a shorter one becomes the default.
        sent = api_pb2.CheckpointContainerRequest()
        sent.CopyFrom(request)
        if sent.timeout <= int(self.timeout):
            sent.timeout = int(self.timeout)
            deadline = self.timeout
        else:
            deadline = float(sent.timeout)
        await _call(method, self._stub.CheckpointContainer, sent, deadline)

    async def get_container_events(
        self, *, timeout: float | None = None
    ) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        method = _RUNTIME + "GetContainerEvents"
        call = self._stub.GetContainerEvents(api_pb2.GetEventsRequest(), timeout=timeout)
        try:
            async for event in call:
                yield event
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(method, exc) from exc
        finally:
            call.cancel()

    async def container_stats(self, container_id: str, *, timeout: float | None = None) -> api_pb2.ContainerStats:
        request = api_pb2.ContainerStatsRequest(container_id=container_id)
        resp = await _call(_RUNTIME + "ContainerStats", self._stub.ContainerStats, request, self._deadline(timeout))
        return resp.stats

    async def list_container_stats(
        self, filter: api_pb2.ContainerStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.ContainerStats]:
        request = api_pb2.ListContainerStatsRequest(filter=filter)
        method = _RUNTIME + "ListContainerStats"
        resp = await _call(method, self._stub.ListContainerStats, request, self._deadline(timeout))
        return list(resp.stats)

    async def pod_sandbox_stats(self, pod_sandbox_id: str, *, timeout: float | None = None) -> api_pb2.PodSandboxStats:
        request = api_pb2.PodSandboxStatsRequest(pod_sandbox_id=pod_sandbox_id)
        method = _RUNTIME + "PodSandboxStats"
        resp = await _call(method, self._stub.PodSandboxStats, request, self._deadline(timeout))
        return resp.stats

    async def list_pod_sandbox_stats(
        self, filter: api_pb2.PodSandboxStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandboxStats]:
        request = api_pb2.ListPodSandboxStatsRequest(filter=filter)
        method = _RUNTIME + "ListPodSandboxStats"
        resp = await _call(method, self._stub.ListPodSandboxStats, request, self._deadline(timeout))
        return list(resp.stats)

    async def list_metric_descriptors(self, *, timeout: float | None = None) -> list[api_pb2.MetricDescriptor]:
        request = api_pb2.ListMetricDescriptorsRequest()
        method = _RUNTIME + "ListMetricDescriptors"
        resp = await _call(method, self._stub.ListMetricDescriptors, request, self._deadline(timeout))
        return list(resp.descriptors)

    async def list_pod_sandbox_metrics(self, *, timeout: float | None = None) -> list[api_pb2.PodSandboxMetrics]:
        request = api_pb2.ListPodSandboxMetricsRequest()
        method = _RUNTIME + "ListPodSandboxMetrics"
        resp = await _call(method, self._stub.ListPodSandboxMetrics, request, self._deadline(timeout))
        return list(resp.pod_metrics)

    async def update_runtime_config(
        self, runtime_config: api_pb2.RuntimeConfig, *, timeout: float | None = None
    ) -> None:
        request = api_pb2.UpdateRuntimeConfigRequest(runtime_config=runtime_config)
        method = _RUNTIME + "UpdateRuntimeConfig"
        await _call(method, self._stub.UpdateRuntimeConfig, request, self._deadline(timeout))

    async def status(self, verbose: bool = False, *, timeout: float | None = None) -> api_pb2.StatusResponse:
        method = _RUNTIME + "Status"
        resp = await _call(method, self._stub.Status, api_pb2.StatusRequest(verbose=verbose), self._deadline(timeout))
        if len(resp.status.conditions) < 2:
            raise InvalidResponseError(method, None, "RuntimeReady or NetworkReady condition are not set")
        return resp

    async def runtime_config(self, *, timeout: float | None = None) -> api_pb2.RuntimeConfigResponse:
        request = api_pb2.RuntimeConfigRequest()
        return await _call(_RUNTIME + "RuntimeConfig", self._stub.RuntimeConfig, request, self._deadline(timeout))


class RemoteImageService:
    """`cri.service.ImageService` over a grpc.aio channel."""

    def __init__(self, channel: grpc.aio.Channel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._stub = api_pb2_grpc.ImageServiceStub(channel)
        self.timeout = timeout

    def _deadline(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    async def list_images(
        self, filter: api_pb2.ImageFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Image]:
        request = api_pb2.ListImagesRequest(filter=filter)
        resp = await _call(_IMAGE + "ListImages", self._stub.ListImages, request, self._deadline(timeout))
        return list(resp.images)

    async def image_status(
        self, image: api_pb2.ImageSpec, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ImageStatusResponse:
        method = _IMAGE + "ImageStatus"
        request = api_pb2.ImageStatusRequest(image=image, verbose=verbose)
        resp = await _call(method, self._stub.ImageStatus, request, self._deadline(timeout))
        if resp.HasField("image") and (not resp.image.id or resp.image.size == 0):
            raise InvalidResponseError(method, None, f"Id or size of image {image.image!r} is not set")
        return resp

    async def pull_image(
        self,
        image: api_pb2.ImageSpec,
        auth: api_pb2.AuthConfig | None = None,
        sandbox_config: api_pb2.PodSandboxConfig | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        method = _IMAGE + "PullImage"
        request = api_pb2.PullImageRequest(image=image, auth=auth, sandbox_config=sandbox_config)
        # No default deadline, as upstream: large images take long, and the kubelet bounds pulls elsewhere.
        resp = await _call(method, self._stub.PullImage, request, timeout)
        if not resp.image_ref:
            raise InvalidResponseError(method, None, f"imageRef of image {image.image!r} is not set")
        return resp.image_ref

    async def remove_image(self, image: api_pb2.ImageSpec, *, timeout: float | None = None) -> None:
        request = api_pb2.RemoveImageRequest(image=image)
        await _call(_IMAGE + "RemoveImage", self._stub.RemoveImage, request, self._deadline(timeout))

    async def image_fs_info(self, *, timeout: float | None = None) -> api_pb2.ImageFsInfoResponse:
        request = api_pb2.ImageFsInfoRequest()
        return await _call(_IMAGE + "ImageFsInfo", self._stub.ImageFsInfo, request, self._deadline(timeout))


class CRIClient:
    """Both services of one runtime, over one channel (or two, with a separate image endpoint).

    An async context manager: leaving it closes the channels.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        image_channel: grpc.aio.Channel | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._channels = [channel] if image_channel is None else [channel, image_channel]
        self.runtime = RemoteRuntimeService(channel, timeout=timeout)
        self.image = RemoteImageService(image_channel or channel, timeout=timeout)
        # containerd's own Kill/Delete of a task, on the runtime's socket; only a containerd answers them.
        self.containerd_tasks = ContainerdTasks(channel)

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def connect(endpoint: str, *, image_endpoint: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> CRIClient:
    """A client of the runtime at `endpoint` (`unix:///path` or `/path`), used as `async with connect(...) as cri:`.

    `image_endpoint` is the kubelet's --image-service-endpoint (default: the runtime's). `timeout` is the default
    deadline of each call in seconds (the kubelet's --runtime-request-timeout). Nothing is dialled until the first
    call; call from a running event loop.
    """
    channel = open_channel(endpoint)
    image_channel = open_channel(image_endpoint) if image_endpoint and image_endpoint != endpoint else None
    logger.debug("CRI client for %s (images: %s), timeout %ss", endpoint, image_endpoint or endpoint, timeout)
    return CRIClient(channel, image_channel=image_channel, timeout=timeout)


if TYPE_CHECKING:
    # mypy proves here that the clients implement the protocols.
    _runtime_conforms: type[RuntimeService] = RemoteRuntimeService
    _image_conforms: type[ImageService] = RemoteImageService
