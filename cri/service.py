"""What the kubelet needs from a container runtime: the `RuntimeService` and `ImageService` protocols.

Modelled on upstream's `internalapi` (k8s.io/cri-api/pkg/apis/services.go): snake_case async methods that take ids
and configs rather than request messages, and unwrap responses the way upstream's remote client does
(`run_pod_sandbox` returns the sandbox id, `list_containers` a list, `container_stats` the stats). Types are the
generated runtime.v1 messages.

Three implementations share these protocols: the gRPC client (`cri.client`), the metrics wrapper
(`cri.instrumented`) and fakes for tests. Each method takes a keyword-only `timeout` in seconds that overrides the
implementation's default for that one call; `stop_container`, `exec_sync` and `checkpoint_container` instead derive
their deadline from their own timeout as upstream does. Failures raise `cri.errors.CRIError` subclasses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from cri.v1 import api_pb2


class RuntimeService(Protocol):
    """Sandboxes, containers, streaming, stats and runtime status (upstream: internalapi.RuntimeService)."""

    # RuntimeVersioner

    async def version(self, api_version: str, *, timeout: float | None = None) -> api_pb2.VersionResponse: ...

    # PodSandboxManager

    async def run_pod_sandbox(
        self, config: api_pb2.PodSandboxConfig, runtime_handler: str = "", *, timeout: float | None = None
    ) -> str:
        """Creates and starts the sandbox; returns its id."""
        ...

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None: ...

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None: ...

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.PodSandboxStatusResponse: ...

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]: ...

    async def port_forward(
        self, request: api_pb2.PortForwardRequest, *, timeout: float | None = None
    ) -> api_pb2.PortForwardResponse: ...

    async def update_pod_sandbox_resources(
        self, request: api_pb2.UpdatePodSandboxResourcesRequest, *, timeout: float | None = None
    ) -> api_pb2.UpdatePodSandboxResourcesResponse: ...

    # ContainerManager

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: api_pb2.ContainerConfig,
        sandbox_config: api_pb2.PodSandboxConfig,
        *,
        timeout: float | None = None,
    ) -> str:
        """Creates the container in the sandbox; returns its id."""
        ...

    async def start_container(self, container_id: str, *, timeout: float | None = None) -> None: ...

    async def stop_container(self, container_id: str, timeout: int) -> None:
        """Stops with a grace period of `timeout` seconds; the call itself may take that long plus the default."""
        ...

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None: ...

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]: ...

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse: ...

    async def update_container_resources(
        self, container_id: str, resources: api_pb2.ContainerResources, *, timeout: float | None = None
    ) -> None: ...

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        """Runs `cmd` to completion; `timeout` seconds bound the command (0: none). A non-zero exit is no error."""
        ...

    async def exec(self, request: api_pb2.ExecRequest, *, timeout: float | None = None) -> api_pb2.ExecResponse: ...

    async def attach(
        self, request: api_pb2.AttachRequest, *, timeout: float | None = None
    ) -> api_pb2.AttachResponse: ...

    async def reopen_container_log(self, container_id: str, *, timeout: float | None = None) -> None: ...

    async def checkpoint_container(self, request: api_pb2.CheckpointContainerRequest) -> None:
        """Checkpoints within max(request.timeout, the default timeout) seconds."""
        ...

    def get_container_events(self, *, timeout: float | None = None) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        """The runtime's stream of container events; no deadline unless `timeout` is given.

        Iterate it inside `contextlib.aclosing(...)` so that leaving the loop ends the call at once.
        """
        ...

    # ContainerStatsManager

    async def container_stats(self, container_id: str, *, timeout: float | None = None) -> api_pb2.ContainerStats: ...

    async def list_container_stats(
        self, filter: api_pb2.ContainerStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.ContainerStats]: ...

    async def pod_sandbox_stats(
        self, pod_sandbox_id: str, *, timeout: float | None = None
    ) -> api_pb2.PodSandboxStats: ...

    async def list_pod_sandbox_stats(
        self, filter: api_pb2.PodSandboxStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandboxStats]: ...

    async def list_metric_descriptors(self, *, timeout: float | None = None) -> list[api_pb2.MetricDescriptor]: ...

    async def list_pod_sandbox_metrics(self, *, timeout: float | None = None) -> list[api_pb2.PodSandboxMetrics]: ...

    # Runtime-wide

    async def update_runtime_config(
        self, runtime_config: api_pb2.RuntimeConfig, *, timeout: float | None = None
    ) -> None: ...

    async def status(self, verbose: bool = False, *, timeout: float | None = None) -> api_pb2.StatusResponse: ...

    async def runtime_config(self, *, timeout: float | None = None) -> api_pb2.RuntimeConfigResponse: ...


class ImageService(Protocol):
    """Image management (upstream: internalapi.ImageManagerService)."""

    async def list_images(
        self, filter: api_pb2.ImageFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Image]: ...

    async def image_status(
        self, image: api_pb2.ImageSpec, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ImageStatusResponse:
        """An absent image is no error: the response then has no `image` field set."""
        ...

    async def pull_image(
        self,
        image: api_pb2.ImageSpec,
        auth: api_pb2.AuthConfig | None = None,
        sandbox_config: api_pb2.PodSandboxConfig | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        """Pulls the image and returns its reference (id or digest). No deadline unless `timeout` is given."""
        ...

    async def remove_image(self, image: api_pb2.ImageSpec, *, timeout: float | None = None) -> None: ...

    async def image_fs_info(self, *, timeout: float | None = None) -> api_pb2.ImageFsInfoResponse: ...


class RuntimeServices(Protocol):
    """Both services of one runtime, as the agent holds them: `cri.client.CRIClient` or an in-process `cri.fake`."""

    @property
    def runtime(self) -> RuntimeService: ...

    @property
    def image(self) -> ImageService: ...
