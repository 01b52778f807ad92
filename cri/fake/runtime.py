"""An in-process CRI RuntimeService with containerd 1.7's semantics and no processes (hollow nodes, unit tests).

The state machine, ids, list filters, error classes and event shapes follow containerd, as
`tests/cricontract.py` records them on both (the integration test `test_fake_cri_contract` compares the two):
- RunPodSandbox gives a READY sandbox with an address from the fake's pod network (none with host networking);
  StopPodSandbox kills its containers (exit 137) and makes it NOTREADY; RemovePodSandbox removes it with its
  containers. Stop and remove of an unknown sandbox succeed; its status is NotFound.
- CreateContainer needs a READY sandbox (NotFound otherwise); StartContainer needs a CREATED container (Unknown
  otherwise); StopContainer of an exited or unknown container succeeds; RemoveContainer removes a running one too
  (forcibly, as containerd 1.7) and succeeds for an unknown one.
- List filters: id (or a unique prefix of it), state, pod sandbox id and label selector.
What a started container does (exit, crash, OOM, after how long), what it writes to its log file (`cri.fake.logs`,
once, at StartContainer) and how long the calls take come from `cri.fake.behaviour`. A log file that cannot be
opened fails StartContainer as containerd does (the container exited with 128, reason StartError). Exec gives a
URL on the fake's streaming server (`cri.fake.streaming`) when it has one, else Unimplemented; attach, port-forward
and checkpointing answer Unimplemented.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import NoReturn

import grpc

from cri.errors import NotFoundError, UnimplementedError, UnknownCRIError
from cri.fake import behaviour as behaviours
from cri.fake import logs
from cri.fake.behaviour import DEFAULT_BEHAVIOUR, Behaviour
from cri.fake.events import EventStream
from cri.fake.images import FakeImageService
from cri.fake.state import (
    Container,
    Ids,
    Sandbox,
    container_status,
    container_view,
    repo_digest,
    sandbox_status,
    sandbox_view,
)
from cri.fake.stats import container_stats, sandbox_stats
from cri.fake.streaming import ExecCall, StreamingError, StreamingServer
from cri.v1 import api_pb2

log = logging.getLogger(__name__)

# As kubemark's hollow nodes (cri-api's FakeRuntimeService): the agent types containerIDs with this name
# (`fakeRuntime://<id>`) and the Node reports `fakeRuntime://0.1.0`, so an emulated pod or node says what it is.
RUNTIME_NAME = "fakeRuntime"
RUNTIME_VERSION = "0.1.0"
SERVICE = "/runtime.v1.RuntimeService/"
START_ERROR_EXIT_CODE = 128  # containerd's errorStartExitCode


def _not_found(method: str, what: str, object_id: str) -> NotFoundError:
    return NotFoundError(SERVICE + method, grpc.StatusCode.NOT_FOUND, f"{what} {object_id!r}: not found")


def _unknown(method: str, message: str) -> UnknownCRIError:
    return UnknownCRIError(SERVICE + method, grpc.StatusCode.UNKNOWN, message)


def _unimplemented(method: str) -> UnimplementedError:
    return UnimplementedError(SERVICE + method, grpc.StatusCode.UNIMPLEMENTED, "not implemented by the fake runtime")


def _invalid(method: str, message: str) -> UnknownCRIError:
    return UnknownCRIError(SERVICE + method, grpc.StatusCode.INVALID_ARGUMENT, message)


def _selected(labels: Mapping[str, str], selector: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class FakeRuntimeService:
    """One runtime's sandboxes and containers. `name` seeds the ids; `pod_network` is where sandbox addresses come
    from; `now_ns` is the clock of timestamps; `images` is the image service whose pulls containers refer to."""

    def __init__(
        self,
        name: str,
        *,
        images: FakeImageService,
        behaviour: Behaviour = DEFAULT_BEHAVIOUR,
        pod_network: str = "198.18.0.0/24",
        now_ns: Callable[[], int] = time.time_ns,
        streaming: StreamingServer | None = None,
    ) -> None:
        self.name = name
        self.streaming = streaming
        self.behaviour = behaviour
        self.images = images
        self._now_ns = now_ns
        self._ids = Ids(name)
        self._network = ipaddress.ip_network(pod_network)
        self._free_ips = (str(ip) for ip in self._network.hosts())
        self._released: list[str] = []
        self.sandboxes: dict[str, Sandbox] = {}
        self.containers: dict[str, Container] = {}
        self.events = EventStream(now_ns)
        self.applied_config = api_pb2.RuntimeConfig()

    # --- helpers ---------------------------------------------------------------------------------------------

    def _next_ip(self) -> str:
        if self._released:
            return self._released.pop()
        try:
            return next(self._free_ips)
        except StopIteration:
            raise _unknown("RunPodSandbox", f"no address left in the fake pod network {self._network}") from None

    def _resolve(self, table: dict[str, Sandbox] | dict[str, Container], object_id: str) -> str | None:
        """containerd's truncated-id lookup: the id or the unique id it prefixes."""
        if object_id in table:
            return object_id
        matches = [key for key in table if key.startswith(object_id)] if object_id else []
        return matches[0] if len(matches) == 1 else None

    def _sandbox(self, method: str, sandbox_id: str) -> Sandbox:
        key = self._resolve(self.sandboxes, sandbox_id)
        if key is None:
            raise _not_found(method, "an error occurred when try to find sandbox", sandbox_id)
        return self.sandboxes[key]

    def _container(self, method: str, container_id: str) -> Container:
        key = self._resolve(self.containers, container_id)
        if key is None:
            raise _not_found(method, "an error occurred when try to find container", container_id)
        return self.containers[key]

    def _in_sandbox(self, sandbox_id: str) -> list[Container]:
        return [c for c in self.containers.values() if c.sandbox_id == sandbox_id]

    def _emit(self, object_id: str, sandbox_id: str, kind: int) -> None:
        sandbox = self.sandboxes.get(sandbox_id)
        self.events.emit(
            object_id,
            kind,
            sandbox_status(sandbox) if sandbox is not None else None,
            [container_status(c) for c in self._in_sandbox(sandbox_id)] if sandbox is not None else (),
        )

    def _exit(self, container: Container, exit_code: int, reason: str) -> None:
        if container.state != api_pb2.CONTAINER_RUNNING:
            return
        if container.exit_timer is not None:
            container.exit_timer.cancel()
            container.exit_timer = None
        container.state = api_pb2.CONTAINER_EXITED
        container.exit_code = exit_code
        container.reason = reason
        container.finished_at = self._now_ns()
        self._emit(container.id, container.sandbox_id, api_pb2.CONTAINER_STOPPED_EVENT)

    # --- RuntimeVersioner -------------------------------------------------------------------------------------

    async def version(self, api_version: str, *, timeout: float | None = None) -> api_pb2.VersionResponse:
        return api_pb2.VersionResponse(
            version="0.1.0", runtime_name=RUNTIME_NAME, runtime_version=RUNTIME_VERSION, runtime_api_version="v1"
        )

    # --- PodSandboxManager --------------------------------------------------------------------------------------

    async def run_pod_sandbox(
        self, config: api_pb2.PodSandboxConfig, runtime_handler: str = "", *, timeout: float | None = None
    ) -> str:
        pod = behaviours.for_pod(self.behaviour, config.annotations)
        if pod.sandbox_latency:
            await asyncio.sleep(pod.sandbox_latency)
        host_network = config.linux.security_context.namespace_options.network == api_pb2.NODE
        sandbox_id = self._ids.next()
        sandbox = Sandbox(
            sandbox_id,
            api_pb2.PodSandboxConfig(),
            self._now_ns(),
            "" if host_network else self._next_ip(),
            runtime_handler,
        )
        sandbox.config.CopyFrom(config)
        self.sandboxes[sandbox_id] = sandbox
        self._emit(sandbox_id, sandbox_id, api_pb2.CONTAINER_CREATED_EVENT)
        self._emit(sandbox_id, sandbox_id, api_pb2.CONTAINER_STARTED_EVENT)
        return sandbox_id

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        key = self._resolve(self.sandboxes, pod_sandbox_id)
        if key is None:
            return  # as containerd: stopping what is not there succeeds
        for container in self._in_sandbox(key):
            self._exit(container, 137, "Error")
        sandbox = self.sandboxes[key]
        if sandbox.state == api_pb2.SANDBOX_READY:
            sandbox.state = api_pb2.SANDBOX_NOTREADY
            if sandbox.ip:
                self._released.append(sandbox.ip)
            self._emit(key, key, api_pb2.CONTAINER_STOPPED_EVENT)

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None:
        key = self._resolve(self.sandboxes, pod_sandbox_id)
        if key is None:
            return
        await self.stop_pod_sandbox(key)
        for container in self._in_sandbox(key):
            await self.remove_container(container.id)
        del self.sandboxes[key]
        self._emit(key, key, api_pb2.CONTAINER_DELETED_EVENT)

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.PodSandboxStatusResponse:
        sandbox = self._sandbox("PodSandboxStatus", pod_sandbox_id)
        return api_pb2.PodSandboxStatusResponse(
            status=sandbox_status(sandbox),
            containers_statuses=[container_status(c) for c in self._in_sandbox(sandbox.id)],
            timestamp=self._now_ns(),
        )

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]:
        found = list(self.sandboxes.values())
        if filter is not None:
            if filter.id:
                key = self._resolve(self.sandboxes, filter.id)
                found = [self.sandboxes[key]] if key is not None else []
            if filter.HasField("state"):
                found = [s for s in found if s.state == filter.state.state]
            selector = dict(filter.label_selector)
            found = [s for s in found if _selected(s.config.labels, selector)]
        return [sandbox_view(s) for s in found]

    async def port_forward(
        self, request: api_pb2.PortForwardRequest, *, timeout: float | None = None
    ) -> api_pb2.PortForwardResponse:
        raise _unimplemented("PortForward")

    async def update_pod_sandbox_resources(
        self, request: api_pb2.UpdatePodSandboxResourcesRequest, *, timeout: float | None = None
    ) -> api_pb2.UpdatePodSandboxResourcesResponse:
        self._sandbox("UpdatePodSandboxResources", request.pod_sandbox_id)
        return api_pb2.UpdatePodSandboxResourcesResponse()

    # --- ContainerManager ----------------------------------------------------------------------------------------

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: api_pb2.ContainerConfig,
        sandbox_config: api_pb2.PodSandboxConfig,
        *,
        timeout: float | None = None,
    ) -> str:
        sandbox = self._sandbox("CreateContainer", pod_sandbox_id)
        if sandbox.state != api_pb2.SANDBOX_READY:
            # containerd looks for the sandbox's task, which a stopped sandbox no longer has.
            raise _not_found(
                "CreateContainer", "failed to get sandbox container task: no running task found", sandbox.id
            )
        image = await self.images.resolve(config.image.image)
        if image is None:
            raise _not_found("CreateContainer", "failed to get image", config.image.image)
        container_id = self._ids.next()
        log_path = f"{sandbox.config.log_directory.rstrip('/')}/{config.log_path}" if config.log_path else ""
        container = Container(
            container_id,
            sandbox.id,
            api_pb2.ContainerConfig(),
            repo_digest(config.image.image),
            self._now_ns(),
            log_path,
        )
        container.config.CopyFrom(config)
        self.containers[container_id] = container
        self._emit(container_id, sandbox.id, api_pb2.CONTAINER_CREATED_EVENT)
        return container_id

    async def start_container(self, container_id: str, *, timeout: float | None = None) -> None:
        container = self._container("StartContainer", container_id)
        if container.state != api_pb2.CONTAINER_CREATED:
            state = api_pb2.ContainerState.Name(container.state)  # type: ignore[arg-type]
            raise _unknown("StartContainer", f"container {container.id!r} is in {state} state")
        pod = behaviours.for_pod(self.behaviour, self.sandboxes[container.sandbox_id].config.annotations)
        if pod.start_latency:
            await asyncio.sleep(pod.start_latency)
            if self.containers.get(container.id) is not container or container.state != api_pb2.CONTAINER_CREATED:
                raise _unknown("StartContainer", f"container {container.id!r} was stopped or removed while starting")
        argv = [*container.config.command, *container.config.args]
        now = self._now_ns()
        # Without a sandbox log directory the path would be relative to the process (containerd's cwd): nothing is
        # written then (the kubelet always gives one).
        if container.log_path and self.sandboxes[container.sandbox_id].config.log_directory:
            # On the loop's default executor: making the directory and the file costs the kernel 0.5-1 ms on an
            # ext4 disk (docs/fleet.md, "Container logs on emulated nodes"), which the event loop of a fleet does
            # not wait for; it pays about 0.13 ms to hand the write over.
            write = functools.partial(
                logs.write_log,
                container.log_path,
                logs.records(behaviours.output(pod, argv), now),
                container_id=container.id,
            )
            try:
                await asyncio.get_running_loop().run_in_executor(None, write)
            except OSError as exc:
                self._start_error(container, exc)
            if self.containers.get(container.id) is not container or container.state != api_pb2.CONTAINER_CREATED:
                raise _unknown("StartContainer", f"container {container.id!r} was stopped or removed while starting")
        container.state = api_pb2.CONTAINER_RUNNING
        container.started_at = now
        container.cpu_millicores, container.memory_bytes = pod.cpu_millicores, pod.memory_bytes
        self._emit(container.id, container.sandbox_id, api_pb2.CONTAINER_STARTED_EVENT)
        fate = behaviours.fate(pod, argv)
        if fate.after is not None:
            container.exit_timer = asyncio.get_running_loop().call_later(
                fate.after, self._exit, container, fate.exit_code, fate.reason
            )

    def _start_error(self, container: Container, exc: OSError) -> NoReturn:
        """As containerd when its task cannot get its IO: the start fails and the container is left exited with
        128 and reason StartError, its message the error."""
        # Go's words for the failed call: `open <file>: ...` or, when the directory could not be made, `mkdir ...`.
        where = f"open {container.log_path}" if exc.filename in (None, container.log_path) else f"mkdir {exc.filename}"
        message = (
            "failed to create containerd task: failed to create container loggers: failed to create and open log "
            f"file: {where}: {(exc.strerror or str(exc)).lower()}"
        )
        container.state = api_pb2.CONTAINER_EXITED
        container.finished_at = self._now_ns()
        container.exit_code, container.reason, container.message = START_ERROR_EXIT_CODE, "StartError", message
        log.warning(
            "fake container start failed id=%s reason=StartError path=%s error=%s",
            container.id[:12],
            container.log_path,
            exc.strerror or exc,
        )
        raise _unknown("StartContainer", message) from exc

    async def stop_container(self, container_id: str, timeout: int) -> None:
        key = self._resolve(self.containers, container_id)
        if key is None:
            return  # as containerd: stopping what is not there succeeds
        # Nothing runs to honour SIGTERM: the container dies as if killed, at once.
        self._exit(self.containers[key], 137, "Error")

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None:
        key = self._resolve(self.containers, container_id)
        if key is None:
            return
        container = self.containers[key]
        self._exit(container, 137, "Error")  # containerd 1.7 removes a running container forcibly
        del self.containers[key]
        self._emit(key, container.sandbox_id, api_pb2.CONTAINER_DELETED_EVENT)

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]:
        found = list(self.containers.values())
        if filter is not None:
            if filter.id:
                key = self._resolve(self.containers, filter.id)
                found = [self.containers[key]] if key is not None else []
            if filter.pod_sandbox_id:
                sandbox = self._resolve(self.sandboxes, filter.pod_sandbox_id)
                found = [c for c in found if c.sandbox_id == sandbox]
            if filter.HasField("state"):
                found = [c for c in found if c.state == filter.state.state]
            selector = dict(filter.label_selector)
            found = [c for c in found if _selected(c.config.labels, selector)]
        return [container_view(c) for c in found]

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse:
        return api_pb2.ContainerStatusResponse(
            status=container_status(self._container("ContainerStatus", container_id))
        )

    async def update_container_resources(
        self, container_id: str, resources: api_pb2.ContainerResources, *, timeout: float | None = None
    ) -> None:
        container = self._container("UpdateContainerResources", container_id)
        container.config.linux.resources.CopyFrom(resources.linux)

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        container = self._container("ExecSync", container_id)
        if container.state != api_pb2.CONTAINER_RUNNING:
            state = api_pb2.ContainerState.Name(container.state)  # type: ignore[arg-type]
            raise _unknown("ExecSync", f"container {container.id!r} is in {state} state")
        known = behaviours.command_fate(cmd)
        return api_pb2.ExecSyncResponse(exit_code=known.exit_code if known is not None else 0)

    async def exec(self, request: api_pb2.ExecRequest, *, timeout: float | None = None) -> api_pb2.ExecResponse:
        """containerd's Exec: the container must be running, then the streaming server's checks of the request
        (InvalidArgument; an empty command passes, as on containerd 1.7), then a one-time URL on the fake's
        streaming server (Unimplemented without one)."""
        container = self._container("Exec", request.container_id)
        if container.state != api_pb2.CONTAINER_RUNNING:
            state = api_pb2.ContainerState.Name(container.state)  # type: ignore[arg-type]
            raise _unknown("Exec", f"container is in {state} state")
        if request.tty and request.stderr:
            raise _invalid("Exec", "tty and stderr cannot both be true")
        if not (request.stdin or request.stdout or request.stderr):
            raise _invalid("Exec", "one of stdin, stdout, or stderr must be set")
        if self.streaming is None:
            raise _unimplemented("Exec")
        call = ExecCall(
            container_id=container.id,
            cmd=tuple(request.cmd),
            stdin=request.stdin,
            stdout=request.stdout,
            stderr=request.stderr,
            tty=request.tty,
            running=lambda: container.state == api_pb2.CONTAINER_RUNNING,
        )
        try:
            return api_pb2.ExecResponse(url=self.streaming.exec_url(call))
        except StreamingError as exc:
            raise _unknown("Exec", str(exc)) from exc

    async def attach(self, request: api_pb2.AttachRequest, *, timeout: float | None = None) -> api_pb2.AttachResponse:
        raise _unimplemented("Attach")

    async def reopen_container_log(self, container_id: str, *, timeout: float | None = None) -> None:
        container = self._container("ReopenContainerLog", container_id)
        if container.log_path and container.state == api_pb2.CONTAINER_RUNNING:
            # After a rotation (the file renamed away) the container writes on in a new file at its path.
            try:
                os.close(logs.open_log(container.log_path))
            except OSError as exc:
                raise _unknown("ReopenContainerLog", f"failed to create and open log file: {exc}") from exc

    async def checkpoint_container(self, request: api_pb2.CheckpointContainerRequest) -> None:
        raise _unimplemented("CheckpointContainer")

    async def get_container_events(
        self, *, timeout: float | None = None
    ) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        async for event in self.events.subscribe():
            yield event

    # --- ContainerStatsManager --------------------------------------------------------------------------------------

    async def container_stats(self, container_id: str, *, timeout: float | None = None) -> api_pb2.ContainerStats:
        return container_stats(self._container("ContainerStats", container_id), self._now_ns())

    async def list_container_stats(
        self, filter: api_pb2.ContainerStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.ContainerStats]:
        found = list(self.containers.values())
        if filter is not None:
            if filter.id:
                found = [c for c in found if c.id == self._resolve(self.containers, filter.id)]
            if filter.pod_sandbox_id:
                found = [c for c in found if c.sandbox_id == self._resolve(self.sandboxes, filter.pod_sandbox_id)]
            found = [c for c in found if _selected(c.config.labels, dict(filter.label_selector))]
        now = self._now_ns()
        return [container_stats(c, now) for c in found if c.state == api_pb2.CONTAINER_RUNNING]

    async def pod_sandbox_stats(self, pod_sandbox_id: str, *, timeout: float | None = None) -> api_pb2.PodSandboxStats:
        sandbox = self._sandbox("PodSandboxStats", pod_sandbox_id)
        return sandbox_stats(sandbox, self._in_sandbox(sandbox.id), self._now_ns())

    async def list_pod_sandbox_stats(
        self, filter: api_pb2.PodSandboxStatsFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandboxStats]:
        found = [s for s in self.sandboxes.values() if s.state == api_pb2.SANDBOX_READY]
        if filter is not None:
            if filter.id:
                found = [s for s in found if s.id == self._resolve(self.sandboxes, filter.id)]
            found = [s for s in found if _selected(s.config.labels, dict(filter.label_selector))]
        now = self._now_ns()
        return [sandbox_stats(s, self._in_sandbox(s.id), now) for s in found]

    async def list_metric_descriptors(self, *, timeout: float | None = None) -> list[api_pb2.MetricDescriptor]:
        return []

    async def list_pod_sandbox_metrics(self, *, timeout: float | None = None) -> list[api_pb2.PodSandboxMetrics]:
        return []

    # --- Runtime-wide -------------------------------------------------------------------------------------------

    async def update_runtime_config(
        self, runtime_config: api_pb2.RuntimeConfig, *, timeout: float | None = None
    ) -> None:
        self.applied_config.CopyFrom(runtime_config)

    async def status(self, verbose: bool = False, *, timeout: float | None = None) -> api_pb2.StatusResponse:
        return api_pb2.StatusResponse(
            status=api_pb2.RuntimeStatus(
                conditions=[
                    api_pb2.RuntimeCondition(type="RuntimeReady", status=True),
                    api_pb2.RuntimeCondition(type="NetworkReady", status=True),
                ]
            ),
            runtime_handlers=[
                api_pb2.RuntimeHandler(name="", features=api_pb2.RuntimeHandlerFeatures()),
                api_pb2.RuntimeHandler(name="runc", features=api_pb2.RuntimeHandlerFeatures()),
            ],
        )

    async def runtime_config(self, *, timeout: float | None = None) -> api_pb2.RuntimeConfigResponse:
        return api_pb2.RuntimeConfigResponse(linux=api_pb2.LinuxRuntimeConfiguration(cgroup_driver=api_pb2.CGROUPFS))

    def close(self) -> None:
        """Cancels the exit timers (a fleet's node stopping)."""
        for container in self.containers.values():
            if container.exit_timer is not None:
                container.exit_timer.cancel()
                container.exit_timer = None
