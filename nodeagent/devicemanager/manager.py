"""The device manager (upstream: pkg/kubelet/cm/devicemanager): device plugins register on
`<root-dir>/device-plugins/kubelet.sock`, their devices become the Node's extended resources, and containers that
ask for them get devices at admission and the plugin's answer (devices, mounts, environment, annotations, CDI
devices) in their CRI config.

The flow, as upstream's:
- Register (v1beta1): a wrong API version or a resource name that is not an extended resource is refused with
  upstream's words; otherwise the kubelet dials the plugin's socket, reads its options and follows ListAndWatch.
- ListAndWatch: each answer replaces the resource's device list; healthy devices count in allocatable, every device
  in capacity (`get_capacity`). A plugin whose stream ends has all its devices marked unhealthy; after a grace
  period of 5 minutes without it coming back its resource leaves the Node.
- Admission (`admit`): every container of the pod, init containers first, is given devices (`allocate`): the ones it
  already holds, then devices freed by the pod's finished init containers, then the plugin's preferred ones
  (GetPreferredAllocation, when the plugin asks for it), then any free healthy device; Allocate is called for
  them. A failure refuses the pod: UnexpectedAdmissionError, "Allocate failed due to ..., which is unexpected".
- Container creation (`run_container_options`): PreStartContainer when the plugin asks for it, a second Allocate
  when the container holds no devices (a restarted agent without a checkpoint), then the stored answer.
- The checkpoint (checkpoint.py) is written at each allocation and device update and read at start.

There is no topology manager here: every device counts as having no NUMA affinity, as upstream's with the topology
manager's `none` policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import posixpath
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc

from cri.v1 import api_pb2 as cri_pb2
from nodeagent.config import parse_quantity
from nodeagent.devicemanager.checkpoint import (
    CHECKPOINT_NAME,
    NODE_WITHOUT_TOPOLOGY,
    CheckpointData,
    CheckpointError,
    read_checkpoint,
    write_checkpoint,
)
from nodeagent.devicemanager.endpoint import DIAL_TIMEOUT, PluginCallError, PluginEndpoint
from nodeagent.devicemanager.poddevices import DeviceRunContainerOptions, PodDevices
from nodeagent.devicemanager.v1beta1 import api_pb2, api_pb2_grpc
from nodeagent.grpctarget import dial_context_error
from nodeagent.prober.probe import go_quote
from nodeagent.sources.validation import qualified_name_error
from pleg.status import PodStatus

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]

API_VERSION = "v1beta1"
SUPPORTED_VERSIONS = (API_VERSION,)
DEVICE_PLUGINS_DIR = "device-plugins"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
# How long a resource whose plugin went away stays on the Node (upstream endpointStopGracePeriod).
ENDPOINT_STOP_GRACE_PERIOD = 300.0
# Upstream's admission reason for an allocation failure (cm/admission).
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"


class DeviceManagerError(Exception):
    """An allocation failed; the text is upstream's."""


def is_extended_resource_name(name: str) -> bool:
    """As upstream v1helper.IsExtendedResourceName: a domain-prefixed name outside kubernetes.io, not `requests.*`,
    whose quota form `requests.<name>` is a qualified name."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return qualified_name_error("requests." + name) is None


def running_containers(statuses: Iterable[PodStatus]) -> set[tuple[str, str]]:
    """(pod UID, container name) of every running container (upstream's initial containerRunningSet)."""
    return {
        (status.uid, record.status.metadata.name)
        for status in statuses
        for record in status.containers
        if record.status.state == cri_pb2.CONTAINER_RUNNING
    }


def plugin_socket_path(socket_dir: str, endpoint: str) -> str:
    """Where the kubelet dials a plugin that registered `endpoint`: upstream's filepath.Join(socketDir, endpoint),
    which joins and then cleans. So "../x.sock" leaves the directory for its parent, "/tmp/x.sock" stays under it
    (`<dir>/tmp/x.sock`, unlike os.path.join, which would take the absolute path as is), "a/../../x.sock" is the
    parent's x.sock even when no "a" exists, and "" is the directory itself. Upstream checks nothing else: the
    endpoint is not refused, only dialed."""
    joined = posixpath.normpath("/".join(part for part in (socket_dir, endpoint) if part))
    # Go's Clean keeps one leading slash where POSIX normpath keeps two.
    return joined[1:] if joined.startswith("//") else joined


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _pod_name(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _limits(container: Mapping[str, Any]) -> list[tuple[str, int]]:
    limits = (container.get("resources") or {}).get("limits") or {}
    out = []
    for name, value in sorted(limits.items()):
        try:
            out.append((str(name), math.ceil(parse_quantity(str(value)))))
        except (ValueError, ArithmeticError):
            continue
    return out


def _is_restartable_init(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


class _RegistrationServer(api_pb2_grpc.RegistrationServicer):
    def __init__(self, manager: DeviceManager) -> None:
        self._manager = manager

    async def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api_pb2.Empty:
        problem = await self._manager.register(request)
        if problem is not None:
            # Go's fmt.Errorf returned from a handler: code Unknown, the text as the description.
            await context.abort(grpc.StatusCode.UNKNOWN, problem)
        return api_pb2.Empty()


class DeviceManager:
    """See the module docstring. `start()` then the other calls; `stop()` at shutdown."""

    def __init__(
        self,
        root_dir: str,
        *,
        active_pods: Callable[[], Sequence[Pod]] = list,
        sources_ready: Callable[[], bool] = lambda: True,
        monotonic: Callable[[], float] = time.monotonic,
        dial_timeout: float = DIAL_TIMEOUT,
    ) -> None:
        self._dial_timeout = dial_timeout
        self.socket_dir = os.path.join(root_dir, DEVICE_PLUGINS_DIR)
        self.socket_path = os.path.join(self.socket_dir, KUBELET_SOCKET)
        self.checkpoint_path = os.path.join(self.socket_dir, CHECKPOINT_NAME)
        self._active_pods = active_pods
        self._sources_ready = sources_ready
        self._monotonic = monotonic
        self._endpoints: dict[str, PluginEndpoint] = {}
        self._healthy: dict[str, set[str]] = {}
        self._unhealthy: dict[str, set[str]] = {}
        self._all_devices: dict[str, dict[str, api_pb2.Device]] = {}
        self._allocated: dict[str, set[str]] = {}
        self._pod_devices = PodDevices()
        # Devices a pod's finished init containers free for its next containers: pod UID -> resource -> IDs.
        self._reuse: dict[str, dict[str, set[str]]] = {}
        # (pod UID, container name) running when the agent started (upstream containerRunningSet).
        self._running_at_start: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: grpc.aio.Server | None = None
        self._lock = asyncio.Lock()

    # --- lifecycle -------------------------------------------------------------------------------------------

    async def start(self, running_containers: Iterable[tuple[str, str]] = ()) -> None:
        """Reads the checkpoint, clears stale sockets and serves the Registration service."""
        self._running_at_start = set(running_containers)
        self._read_checkpoint()
        os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
        self._cleanup_sockets()
        server = grpc.aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(_RegistrationServer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server
        log.info("device plugin registration server started socket=%s", self.socket_path)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for endpoint in self._endpoints.values():
            await endpoint.close()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        log.info("device plugin registration server stopped socket=%s", self.socket_path)

    def _cleanup_sockets(self) -> None:
        # As upstream CleanupPluginDirectory: every socket but the checkpoint goes; plugins watch for kubelet.sock
        # to be made again and re-register.
        for name in os.listdir(self.socket_dir):
            path = os.path.join(self.socket_dir, name)
            if path == self.checkpoint_path:
                continue
            try:
                mode = os.stat(path).st_mode
                if stat.S_ISSOCK(mode):
                    os.unlink(path)
            except OSError as exc:
                log.error("device plugin dir cleanup failed path=%s error=%s", path, exc)

    # --- registration ----------------------------------------------------------------------------------------

    async def register(self, request: api_pb2.RegisterRequest) -> str | None:
        """Registers a plugin; the error text upstream sends back, or None."""
        resource = request.resource_name
        log.info(
            "device plugin registration resource=%s version=%s endpoint=%s",
            resource,
            request.version,
            go_quote(request.endpoint),
        )
        if request.version not in SUPPORTED_VERSIONS:
            supported = "[" + " ".join(f'"{v}"' for v in SUPPORTED_VERSIONS) + "]"
            problem = (
                f'requested API version "{request.version}" is not supported by kubelet. '
                f"Supported version is {supported}"
            )
            log.error("device plugin registration refused resource=%s error=%s", resource, problem)
            return problem
        if not is_extended_resource_name(resource):
            problem = f'the ResourceName "{resource}" is invalid'
            log.error("device plugin registration refused resource=%s error=%s", resource, problem)
            return problem
        path = plugin_socket_path(self.socket_dir, request.endpoint)
        # As upstream: the endpoint is not checked against the directory; what its gRPC cannot parse as a target
        # (a control character, a bad %-escape) is refused before any dial, the rest is dialed.
        unparsable = dial_context_error(path)
        if unparsable is not None:
            problem = f"failed to dial device plugin: {unparsable}"
            log.error(
                "device plugin connect failed resource=%s endpoint=%s path=%s error=%s",
                resource,
                go_quote(request.endpoint),
                go_quote(path),
                problem,
            )
            return problem
        endpoint = PluginEndpoint(resource, path, on_devices=self._devices_updated, dial_timeout=self._dial_timeout)
        try:
            await endpoint.connect()
        except PluginCallError as exc:
            log.error(
                "device plugin connect failed resource=%s endpoint=%s path=%s error=%s",
                resource,
                go_quote(request.endpoint),
                go_quote(path),
                exc,
            )
            return str(exc)
        previous = self._endpoints.get(resource)
        self._endpoints[resource] = endpoint
        if previous is not None:
            await previous.close()
        task = asyncio.create_task(self._follow(endpoint), name=f"device-plugin-{resource}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        log.info(
            "device plugin connected resource=%s path=%s pre_start=%s preferred_allocation=%s",
            resource,
            go_quote(path),
            endpoint.options.pre_start_required,
            endpoint.options.get_preferred_allocation_available,
        )
        return None

    async def _follow(self, endpoint: PluginEndpoint) -> None:
        try:
            await endpoint.run()
        finally:
            if self._endpoints.get(endpoint.resource) is endpoint:
                self._plugin_disconnected(endpoint)
                await endpoint.close()

    def _plugin_disconnected(self, endpoint: PluginEndpoint) -> None:
        resource = endpoint.resource
        self._unhealthy.setdefault(resource, set()).update(self._healthy.get(resource, set()))
        self._healthy[resource] = set()
        endpoint.stopped_at = self._monotonic()
        log.info(
            "device plugin disconnected resource=%s devices_unhealthy=%d", resource, len(self._unhealthy[resource])
        )

    def _devices_updated(self, resource: str, devices: Sequence[api_pb2.Device]) -> None:
        self._healthy[resource] = {d.ID for d in devices if d.health == HEALTHY}
        self._unhealthy[resource] = {d.ID for d in devices if d.health != HEALTHY}
        self._all_devices[resource] = {d.ID: d for d in devices}
        self._write_checkpoint()
        log.info(
            "device updates processed resource=%s total=%d healthy=%d",
            resource,
            len(devices),
            len(self._healthy[resource]),
        )

    # --- node status -----------------------------------------------------------------------------------------

    def get_capacity(self) -> tuple[dict[str, int], dict[str, int], list[str]]:
        """(capacity, allocatable, resources removed): every device counts in capacity, healthy ones in
        allocatable; a resource whose plugin has been gone for the grace period is dropped (upstream GetCapacity)."""
        capacity: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        deleted: set[str] = set()
        now = self._monotonic()
        for table in (self._healthy, self._unhealthy):
            for resource in list(table):
                endpoint = self._endpoints.get(resource)
                expired = endpoint is None or (
                    endpoint.stopped_at is not None and now - endpoint.stopped_at > ENDPOINT_STOP_GRACE_PERIOD
                )
                if expired:
                    self._endpoints.pop(resource, None)
                    del table[resource]
                    deleted.add(resource)
                    continue
                capacity[resource] = capacity.get(resource, 0) + len(table[resource])
                if table is self._healthy:
                    allocatable[resource] = len(table[resource])
        if deleted:
            log.info("device plugin resources removed resources=%s", ",".join(sorted(deleted)))
            self._write_checkpoint()
        return capacity, allocatable, sorted(deleted)

    # --- the checkpoint --------------------------------------------------------------------------------------

    def _write_checkpoint(self) -> None:
        data = CheckpointData(
            self._pod_devices.to_entries(), {name: sorted(ids) for name, ids in self._healthy.items()}
        )
        try:
            write_checkpoint(self.checkpoint_path, data)
        except OSError as exc:
            log.error("device manager checkpoint write failed path=%s error=%s", self.checkpoint_path, exc)

    def _read_checkpoint(self) -> None:
        try:
            data = read_checkpoint(self.checkpoint_path)
        except CheckpointError as exc:
            # As upstream: go on without it; allocations may not be up to date.
            log.error("device manager checkpoint unreadable, continuing path=%s error=%s", self.checkpoint_path, exc)
            return
        if data is None:
            return
        self._pod_devices.from_entries(data.entries)
        self._allocated = self._pod_devices.devices()
        now = self._monotonic()
        for resource in data.registered:
            # Known, no device healthy, the plugin gone since now: the resource stays on the Node at zero for the
            # grace period, waiting for its plugin to register again (upstream newStoppedEndpointImpl).
            self._healthy[resource] = set()
            self._unhealthy[resource] = set()
            stopped = PluginEndpoint(resource, "", on_devices=self._devices_updated)
            stopped.stopped_at = now
            self._endpoints[resource] = stopped
        log.info(
            "device manager checkpoint read path=%s entries=%d resources=%d",
            self.checkpoint_path,
            len(data.entries),
            len(data.registered),
        )

    # --- allocation ------------------------------------------------------------------------------------------

    def is_device_plugin_resource(self, resource: str) -> bool:
        return resource in self._healthy or resource in self._allocated

    def update_allocated_devices(self, admitting: str = "") -> None:
        """Frees the devices of pods no longer active, once every pod source has been seen (upstream). The pod
        being admitted (`admitting`) counts as active, as it does upstream (the pod manager holds it already)."""
        if not self._sources_ready():
            return
        gone = self._pod_devices.pods() - {_uid(p) for p in self._active_pods()} - {admitting}
        if not gone:
            return
        log.info("device manager freeing pods=%s", ",".join(sorted(gone)))
        self._pod_devices.delete(gone)
        self._allocated = self._pod_devices.devices()

    async def admit(self, pod: Pod) -> tuple[str, str] | None:
        """Allocates devices to every container of `pod`, init containers first (upstream's topology manager admit
        handler with the `none` policy); (reason, message) when one fails."""
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            try:
                await self.allocate(pod, container)
            except DeviceManagerError as exc:
                message = f"Allocate failed due to {exc}, which is unexpected"
                log.info(
                    "pod admission refused pod=%s reason=%s message=%s",
                    _pod_name(pod),
                    UNEXPECTED_ADMISSION_ERROR,
                    message,
                )
                return UNEXPECTED_ADMISSION_ERROR, message
        return None

    async def allocate(self, pod: Pod, container: Mapping[str, Any]) -> None:
        async with self._lock:
            uid = _uid(pod)
            for other in [u for u in self._reuse if u != uid]:
                del self._reuse[other]
            reuse = self._reuse.setdefault(uid, {})
            name = str(container.get("name", ""))
            await self._allocate_container_resources(pod, container, reuse)
            held = self._pod_devices.container_resources(uid, name)
            init = next((c for c in (pod.get("spec") or {}).get("initContainers") or [] if c.get("name") == name), None)
            for resource, ids in held.items():
                if init is not None and not _is_restartable_init(init):
                    reuse.setdefault(resource, set()).update(ids)
                else:
                    reuse.setdefault(resource, set()).difference_update(ids)

    async def _allocate_container_resources(
        self, pod: Pod, container: Mapping[str, Any], reuse: Mapping[str, set[str]]
    ) -> None:
        uid, name = _uid(pod), str(container.get("name", ""))
        updated = False
        changed = False
        for resource, needed in _limits(container):
            if not self.is_device_plugin_resource(resource):
                continue
            if not updated:
                self.update_allocated_devices(uid)
                updated = True
            chosen = await self._devices_to_allocate(uid, name, resource, needed, reuse.get(resource, set()))
            if not chosen:
                continue
            changed = True
            endpoint = self._endpoints.get(resource)
            if endpoint is None:
                self._allocated = self._pod_devices.devices()
                raise DeviceManagerError(f"unknown Device Plugin {resource}")
            ids = sorted(chosen)
            log.info(
                "device allocate request pod=%s container=%s resource=%s devices=%s",
                _pod_name(pod),
                name,
                resource,
                ",".join(ids),
            )
            try:
                response = await endpoint.allocate(ids)
            except PluginCallError as exc:
                self._allocated = self._pod_devices.devices()
                raise DeviceManagerError(str(exc)) from exc
            if not response.container_responses:
                raise DeviceManagerError(f"no containers return in allocation response {str(response).strip()}")
            per_node: dict[int, list[str]] = {}
            known = self._all_devices.get(resource, {})
            for device_id in ids:
                device = known.get(device_id)
                nodes = [n.ID for n in device.topology.nodes] if device is not None else []
                for node in nodes or [NODE_WITHOUT_TOPOLOGY]:
                    per_node.setdefault(node, []).append(device_id)
            self._pod_devices.insert(uid, name, resource, per_node, response.container_responses[0])
        if changed:
            self._write_checkpoint()

    async def _devices_to_allocate(
        self, uid: str, name: str, resource: str, required: int, reusable: set[str]
    ) -> set[str]:
        """The devices to give (upstream devicesToAllocate); empty when there is nothing to do."""
        needed = required
        held = self._pod_devices.container_devices(uid, name, resource)
        if held is not None:
            needed -= len(held)
            if needed != 0:
                raise DeviceManagerError(
                    f'pod "{uid}" container "{name}" changed request for resource "{resource}" '
                    f"from {len(held)} to {required}"
                )
        if not self._sources_ready() and (uid, name) in self._running_at_start:
            # A container that ran before the agent restarted keeps what it has, even before its plugin is back.
            return set()
        healthy = self._healthy.get(resource)
        if healthy is None:
            raise DeviceManagerError(f"cannot allocate unregistered device {resource}")
        if not healthy:
            raise DeviceManagerError(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
        if held is not None and not held <= healthy:
            raise DeviceManagerError(
                f"previously allocated devices are no longer healthy; cannot allocate unhealthy devices {resource}"
            )
        if needed == 0:
            return set()
        allocated: set[str] = set()
        in_use = self._allocated.setdefault(resource, set())

        def take(candidates: Iterable[str]) -> bool:
            nonlocal needed
            for device in sorted(set(candidates) - allocated):
                in_use.add(device)
                allocated.add(device)
                needed -= 1
                if needed == 0:
                    return True
            return False

        if take(reusable):
            return allocated
        available = healthy - in_use
        if len(available) < needed:
            raise DeviceManagerError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {needed}, Available: {len(available)}"
            )
        preferred = await self._preferred(
            uid, name, resource, available=available | allocated, must_include=allocated, size=required
        )
        if take(preferred & available) or take(available):
            return allocated
        raise DeviceManagerError(
            f"unexpectedly allocated less resources than required. Requested: {required}, Got: {required - needed}"
        )

    async def _preferred(
        self, uid: str, name: str, resource: str, *, available: set[str], must_include: set[str], size: int
    ) -> set[str]:
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise DeviceManagerError(f"endpoint not found in cache for a registered resource: {resource}")
        if not endpoint.options.get_preferred_allocation_available:
            return set()
        log.info("device preferred allocation request pod_uid=%s container=%s resource=%s", uid, name, resource)
        try:
            response = await endpoint.get_preferred_allocation(sorted(available), sorted(must_include), size)
        except PluginCallError as exc:
            raise DeviceManagerError(f"device plugin GetPreferredAllocation rpc failed with err: {exc}") from exc
        if response.container_responses:
            return set(response.container_responses[0].deviceIDs)
        return set()

    # --- container creation ----------------------------------------------------------------------------------

    async def run_container_options(self, pod: Pod, container: Mapping[str, Any]) -> DeviceRunContainerOptions | None:
        """What the container's devices add to its CRI config (upstream GetDeviceRunContainerOptions); raises
        DeviceManagerError with upstream's text."""
        uid, name = _uid(pod), str(container.get("name", ""))
        reallocate = False
        for resource, value in _limits(container):
            if value == 0 or not self.is_device_plugin_resource(resource):
                continue
            await self._pre_start_if_needed(uid, name, resource)
            if uid not in {_uid(p) for p in self._active_pods()}:
                continue
            if self._pod_devices.container_devices(uid, name, resource) is None:
                reallocate = True
        if reallocate:
            log.info("device re-allocation needed pod=%s container=%s", _pod_name(pod), name)
            await self.allocate(pod, container)
        return self._pod_devices.run_container_options(uid, name)

    async def _pre_start_if_needed(self, uid: str, name: str, resource: str) -> None:
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise DeviceManagerError(f"endpoint not found in cache for a registered resource: {resource}")
        if not endpoint.options.pre_start_required:
            return
        devices = self._pod_devices.container_devices(uid, name, resource)
        if devices is None:
            raise DeviceManagerError(
                f"no devices found allocated in local cache for pod {uid}, container {name}, resource {resource}"
            )
        log.info("device pre-start request pod_uid=%s container=%s resource=%s", uid, name, resource)
        try:
            await endpoint.pre_start_container(sorted(devices))
        except PluginCallError as exc:
            raise DeviceManagerError(f"device plugin PreStartContainer rpc failed with err: {exc}") from exc

    def sanitize_node(self, pod: Pod, node: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The Node as the predicates should see it for `pod` (upstream UpdatePluginResources and
        sanitizeNodeAllocatable): when the pod holds devices, each resource's allocatable is at least the number of
        devices allocated, so a pod re-admitted after a restart is not refused while its plugin is not back yet."""
        if node is None or not self._pod_devices.has_pod(_uid(pod)):
            return node
        status = dict(node.get("status") or {})
        allocatable = dict(status.get("allocatable") or {})
        changed = False
        for resource, ids in self._allocated.items():
            try:
                have = parse_quantity(str(allocatable[resource])) if resource in allocatable else None
            except (ValueError, ArithmeticError):
                have = None
            if have is not None and have >= len(ids):
                continue
            allocatable[resource] = str(len(ids))
            changed = True
        if not changed:
            return node
        return {**node, "status": {**status, "allocatable": allocatable}}

    # --- readers ---------------------------------------------------------------------------------------------

    def allocatable_devices(self) -> dict[str, dict[str, api_pb2.Device]]:
        """resource -> healthy device ID -> device (for the PodResources API)."""
        return {
            resource: {i: d for i, d in self._all_devices.get(resource, {}).items() if i in healthy}
            for resource, healthy in self._healthy.items()
        }

    def container_devices(self, uid: str, name: str) -> dict[str, set[str]]:
        return self._pod_devices.container_resources(uid, name)

    def container_topology(self, uid: str, name: str) -> dict[str, dict[int, list[str]]]:
        """resource -> NUMA node (-1: none) -> device IDs the container holds."""
        return self._pod_devices.container_topology(uid, name)
