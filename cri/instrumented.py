"""Metrics around any `RuntimeService` / `ImageService`, as the kubelet's instrumented services record them.

The wrappers delegate every call unchanged and only observe it, under upstream's metric names and operation names
(pkg/kubelet/kuberuntime/instrumented_services.go), so existing dashboards read a nodeagent node as a kubelet:

    kubelet_runtime_operations_total{operation_type}                 calls, counted when they end
    kubelet_runtime_operations_errors_total{operation_type}          calls that raised
    kubelet_runtime_operations_duration_seconds{operation_type}      histogram, upstream's buckets

One series more, which upstream lacks, says which error it was without changing the upstream series' labels:

    nodeagent_runtime_operations_errors_by_type_total{operation_type, error_type}   error_type: the exception class

A call cancelled by its caller counts as an operation but not as an error: the runtime did not fail. The metrics live
on an injected `CollectorRegistry`, registered once per `RuntimeMetrics`; both wrappers of a node share one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

from cri.service import ImageService, RuntimeService
from cri.v1 import api_pb2

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Upstream's ExponentialBuckets(.005, 2.5, 14): 5 ms up to about 2.7 hours.
DURATION_BUCKETS = tuple(0.005 * 2.5**i for i in range(14))


class RuntimeMetrics:
    """The runtime operation metrics, registered on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.operations = Counter(
            "kubelet_runtime_operations_total",
            "Cumulative number of runtime operations by operation type.",
            ["operation_type"],
            registry=registry,
        )
        self.errors = Counter(
            "kubelet_runtime_operations_errors_total",
            "Cumulative number of runtime operation errors by operation type.",
            ["operation_type"],
            registry=registry,
        )
        self.errors_by_type = Counter(
            "nodeagent_runtime_operations_errors_by_type_total",
            "Cumulative number of runtime operation errors by operation type and error class.",
            ["operation_type", "error_type"],
            registry=registry,
        )
        self.duration = Histogram(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type.",
            ["operation_type"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )

    def observe(self, operation: str, seconds: float) -> None:
        self.operations.labels(operation).inc()
        self.duration.labels(operation).observe(seconds)

    def observe_error(self, operation: str, error: Exception) -> None:
        self.errors.labels(operation).inc()
        self.errors_by_type.labels(operation, type(error).__name__).inc()


class _Recorder:
    """The one place that times a call and counts its outcome."""

    def __init__(self, metrics: RuntimeMetrics, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self.clock = clock

    async def record(self, operation: str, call: Awaitable[_T]) -> _T:
        start = self.clock()
        try:
            return await call
        except Exception as exc:
            self.metrics.observe_error(operation, exc)
            logger.debug("runtime operation %s failed: %s", operation, exc)
            raise
        finally:
            self.metrics.observe(operation, self.clock() - start)

    async def record_stream(self, operation: str, stream: AsyncIterator[_T]) -> AsyncIterator[_T]:
        # The whole stream is one operation, as upstream counts GetContainerEvents when it returns.
        start = self.clock()
        try:
            async for item in stream:
                yield item
        except Exception as exc:
            self.metrics.observe_error(operation, exc)
            logger.debug("runtime operation %s failed: %s", operation, exc)
            raise
        finally:
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()
            self.metrics.observe(operation, self.clock() - start)


class InstrumentedRuntimeService:
    """A `RuntimeService` that records metrics of each call of `inner`."""

    def __init__(
        self, inner: RuntimeService, metrics: RuntimeMetrics, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._inner = inner
        self._rec = _Recorder(metrics, clock)

    async def version(self, api_version: str, *, timeout: float | None = None) -> api_pb2.VersionResponse:
        return await self._rec.record("version", self._inner.version(api_version, timeout=timeout))

    async def run_pod_sandbox(
        self, config: api_pb2.PodSandboxConfig, runtime_handler: str = "", *, timeout: float | None = None
    ) -> str:
        call = self._inner.run_pod_sandbox(config, runtime_handler, timeout=timeout)
        return await self._rec.record("run_podsandbox", call)

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        await self._rec.record("stop_podsandbox", self._inner.stop_pod_sandbox(pod_sandbox_id, timeout=timeout))

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        await self._rec.record("remove_podsandbox", self._inner.remove_pod_sandbox(pod_sandbox_id, timeout=timeout))

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.PodSandboxStatusResponse:
        call = self._inner.pod_sandbox_status(pod_sandbox_id, verbose, timeout=timeout)
        return await self._rec.record("podsandbox_status", call)

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]:
        return await self._rec.record("list_podsandbox", self._inner.list_pod_sandbox(filter, timeout=timeout))

    async def port_forward(
        self, request: api_pb2.PortForwardRequest, *, timeout: float | None = None
    ) -> api_pb2.PortForwardResponse:
        return await self._rec.record("port_forward", self._inner.port_forward(request, timeout=timeout))

    async def update_pod_sandbox_resources(
        self, request: api_pb2.UpdatePodSandboxResourcesRequest, *, timeout: float | None = None
    ) -> api_pb2.UpdatePodSandboxResourcesResponse:
        call = self._inner.update_pod_sandbox_resources(request, timeout=timeout)
        return await self._rec.record("update_podsandbox_resources", call)

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: api_pb2.ContainerConfig,
        sandbox_config: api_pb2.PodSandboxConfig,
        *,
        timeout: float | None = None,
    ) -> str:
        call = self._inner.create_container(pod_sandbox_id, config, sandbox_config, timeout=timeout)
        return await self._rec.record("create_container", call)

    async def start_container(self, container_id: str, *, timeout: float | None = None) -> None:
        await self._rec.record("start_container", self._inner.start_container(container_id, timeout=timeout))

    async def stop_container(self, container_id: str, timeout: int) -> None:
        await self._rec.record("stop_container", self._inner.stop_container(container_id, timeout))

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None:
        await self._rec.record("remove_container", self._inner.remove_container(container_id, timeout=timeout))

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]:
        return await self._rec.record("list_containers", self._inner.list_containers(filter, timeout=timeout))

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse:
        call = self._inner.container_status(container_id, verbose, timeout=timeout)
        return await self._rec.record("container_status", call)

    async def update_container_resources(
        self, container_id: str, resources: api_pb2.ContainerResources, *, timeout: float | None = None
    ) -> None:
        call = self._inner.update_container_resources(container_id, resources, timeout=timeout)
        await self._rec.record("update_container", call)

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        return await self._rec.record("exec_sync", self._inner.exec_sync(container_id, cmd, timeout))

    async def exec(self, request: api_pb2.ExecRequest, *, timeout: float | None = None) -> api_pb2.ExecResponse:
        return await self._rec.record("exec", self._inner.exec(request, timeout=timeout))

    async def attach(self, request: api_pb2.AttachRequest, *, timeout: float | None = None) -> api_pb2.AttachResponse:
        return await self._rec.record("attach", self._inner.attach(request, timeout=timeout))

    async def reopen_container_log(self, container_id: str, *, timeout: float | None = None) -> None:
        call = self._inner.reopen_container_log(container_id, timeout=timeout)
        await self._rec.record("reopen_container_log", call)

    async def checkpoint_container(self, request: api_pb2.CheckpointContainerRequest) -> None:
        await self._rec.record("checkpoint_container", self._inner.checkpoint_container(request))

    def get_container_events(self, *, timeout: float | None = None) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        return self._rec.record_stream("get_container_events", self._inner.get_container_events(timeout=timeout))

    async def container_stats(self, container_id: str, *, timeout: float | None = None) -> api_pb2.ContainerStats:
        return await self._rec.record("container_stats", self._inner.container_stats(container_id, timeout=timeout))

    async def list_container_stats(
        self, filter: api_pb2.ContainerStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.ContainerStats]:
        call = self._inner.list_container_stats(filter, timeout=timeout)
        return await self._rec.record("list_container_stats", call)

    async def pod_sandbox_stats(self, pod_sandbox_id: str, *, timeout: float | None = None) -> api_pb2.PodSandboxStats:
        call = self._inner.pod_sandbox_stats(pod_sandbox_id, timeout=timeout)
        return await self._rec.record("podsandbox_stats", call)

    async def list_pod_sandbox_stats(
        self, filter: api_pb2.PodSandboxStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandboxStats]:
        call = self._inner.list_pod_sandbox_stats(filter, timeout=timeout)
        return await self._rec.record("list_podsandbox_stats", call)

    async def list_metric_descriptors(self, *, timeout: float | None = None) -> list[api_pb2.MetricDescriptor]:
        call = self._inner.list_metric_descriptors(timeout=timeout)
        return await self._rec.record("list_metric_descriptors", call)

    async def list_pod_sandbox_metrics(self, *, timeout: float | None = None) -> list[api_pb2.PodSandboxMetrics]:
        call = self._inner.list_pod_sandbox_metrics(timeout=timeout)
        return await self._rec.record("list_podsandbox_metrics", call)

    async def update_runtime_config(
        self, runtime_config: api_pb2.RuntimeConfig, *, timeout: float | None = None
    ) -> None:
        call = self._inner.update_runtime_config(runtime_config, timeout=timeout)
        await self._rec.record("update_runtime_config", call)

    async def status(self, verbose: bool = False, *, timeout: float | None = None) -> api_pb2.StatusResponse:
        return await self._rec.record("status", self._inner.status(verbose, timeout=timeout))

    async def runtime_config(self, *, timeout: float | None = None) -> api_pb2.RuntimeConfigResponse:
        return await self._rec.record("runtime_config", self._inner.runtime_config(timeout=timeout))


class InstrumentedImageService:
    """An `ImageService` that records metrics of each call of `inner`."""

    def __init__(
        self, inner: ImageService, metrics: RuntimeMetrics, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._inner = inner
        self._rec = _Recorder(metrics, clock)

    async def list_images(
        self, filter: api_pb2.ImageFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Image]:
        return await self._rec.record("list_images", self._inner.list_images(filter, timeout=timeout))

    async def image_status(
        self, image: api_pb2.ImageSpec, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ImageStatusResponse:
        return await self._rec.record("image_status", self._inner.image_status(image, verbose, timeout=timeout))

    async def pull_image(
        self,
        image: api_pb2.ImageSpec,
        auth: api_pb2.AuthConfig | None = None,
        sandbox_config: api_pb2.PodSandboxConfig | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        call = self._inner.pull_image(image, auth, sandbox_config, timeout=timeout)
        return await self._rec.record("pull_image", call)

    async def remove_image(self, image: api_pb2.ImageSpec, *, timeout: float | None = None) -> None:
        await self._rec.record("remove_image", self._inner.remove_image(image, timeout=timeout))

    async def image_fs_info(self, *, timeout: float | None = None) -> api_pb2.ImageFsInfoResponse:
        return await self._rec.record("image_fs_info", self._inner.image_fs_info(timeout=timeout))


def instrument(
    runtime: RuntimeService,
    image: ImageService,
    registry: CollectorRegistry,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[InstrumentedRuntimeService, InstrumentedImageService]:
    """Both services wrapped, sharing one set of metrics registered on `registry`."""
    metrics = RuntimeMetrics(registry)
    return InstrumentedRuntimeService(runtime, metrics, clock=clock), InstrumentedImageService(
        image, metrics, clock=clock
    )


if TYPE_CHECKING:
    # mypy proves here that the wrappers implement the protocols they wrap.
    _runtime_conforms: type[RuntimeService] = InstrumentedRuntimeService
    _image_conforms: type[ImageService] = InstrumentedImageService
