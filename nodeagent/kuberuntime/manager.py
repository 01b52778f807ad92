"""The runtime manager: carries out `compute_pod_actions` over CRI (upstream: kuberuntime_manager.go SyncPod/KillPod).

Given what runs for a pod (the PLEG's cached status, newer than the pod's last sync), decides with the pure
`compute_pod_actions`, and performs the actions in upstream's order: kill the pod if needed, kill single
containers, remove leftovers (never-started containers, old not-ready sandboxes: upstream's GC work, done here at sync
time), create the sandbox, start ephemeral containers, the next init container (or sidecars), then the regular
containers. Each
container that cannot start gets a waiting reason upstream would report (ErrImagePull, ImagePullBackOff,
ErrImageNeverPull, CrashLoopBackOff, CreateContainerConfigError, CreateContainerError, RunContainerError) and an
event. One container's failure does not stop the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from cri.errors import CRIError, NotFoundError
from cri.service import ImageService, RuntimeService
from cri.v1 import api_pb2
from eviction.quantity import format_binary, format_decimal
from nodeagent.kuberuntime import actions as acts
from nodeagent.kuberuntime import labels as kubelabels
from nodeagent.kuberuntime.backoff import Backoff, container_backoff_key
from nodeagent.kuberuntime.cgroups import (
    PodCgroupError,
    PodCgroups,
    PodResourceConfig,
    kill_cgroup_processes,
    pod_resource_config,
    remove_cgroup_tree,
)
from nodeagent.kuberuntime.container_config import (
    image_user_of,
    make_container_config,
    make_environment,
    make_linux_resources,
)
from nodeagent.kuberuntime.errors import CreatePodSandboxConfigError, KubeRuntimeError, rpc_error_text
from nodeagent.kuberuntime.etc_hosts import ETC_HOSTS_PATH, ensure_hosts_file, hosts_mount, wants_hosts_mount
from nodeagent.kuberuntime.hooks import (
    FAILED_POST_START_HOOK,
    FAILED_PRE_STOP_HOOK,
    MINIMUM_GRACE_SECONDS,
    POST_START_HOOK_ERROR,
    POST_START_HOOK_FAILED,
    PRE_STOP_HOOK_FAILED,
    HookError,
    run_post_start,
    run_pre_stop_within_grace,
    stop_grace,
)
from nodeagent.kuberuntime.qos import QOSClass, pod_qos
from nodeagent.kuberuntime.qos_cgroups import QOSCgroups
from nodeagent.kuberuntime.references import ObjectFetcher, lookups_for, pull_auth
from nodeagent.kuberuntime.runtime_handlers import DEFAULT_HANDLER, RuntimeHandler, supports_recursive_read_only_mounts
from nodeagent.kuberuntime.sandbox_config import (
    DEFAULT_SECCOMP_PROFILE_ROOT,
    DNSSettings,
    make_sandbox_config,
    missing_cluster_dns,
    missing_cluster_dns_messages,
    pod_cgroup_parent,
    pod_log_directory,
)
from nodeagent.kuberuntime.service_env import must_wait_for_services, service_env
from nodeagent.kuberuntime.systemd_cgroup_names import container_cgroup, driver_cgroup
from nodeagent.kuberuntime.termination_message import TerminationMessages, create_message_file, remove_pod_dirs
from nodeagent.podconfig.storage import pod_ref as _ref
from nodeagent.podworkers import grace_period
from nodeagent.runtimeclass import RuntimeClassError, RuntimeHandlerResolver, runtime_class_name
from nodeagent.staticpods import is_static_pod
from nodeagent.volume.layout import PodDirs
from pleg import inspect as pleg_inspect
from pleg.status import PodStatus

log = logging.getLogger(__name__)

Pod = dict[str, Any]
EventType = Literal["Normal", "Warning"]
# (pod, type, reason, message, fieldPath): the narrow seam to the event recorder.
EventSink = Callable[[Pod, EventType, str, str, str], None]
# (pod, container, its environment on demand, whether the pod's runtime handler makes recursive read-only mounts)
# -> the container's volume mounts, made by the volume manager (subPath binds included); raises KubeRuntimeError
# (CreateContainerConfigError) as upstream's makeMounts.
ContainerMounts = Callable[
    [Pod, Mapping[str, Any], Callable[[], Sequence[tuple[str, str]]], bool], Awaitable[Sequence[api_pb2.Mount]]
]
# (pod, container) -> the CRI devices of its volumeDevices; raises CreateContainerConfigError.
ContainerDevices = Callable[[Pod, Mapping[str, Any]], Awaitable[Sequence[api_pb2.Device]]]
# Adds what the container's device-plugin devices need to its config (upstream: the container manager's
# GetResources); raises a KubeRuntimeError (CreateContainerConfigError) when it cannot.
ContainerResources = Callable[[Pod, Mapping[str, Any], api_pb2.ContainerConfig], Awaitable[None]]
# Ends and deletes a container's task outside CRI (cri.containerd_tasks.ContainerdTasks.end); raises CRIError.
TaskDeleter = Callable[[str], Awaitable[None]]
# Prepares the pod's dynamic resources (DRA claims) before its sandbox is made: None when done, else the error text
# for the pod's FailedPrepareDynamicResources event (upstream: runtimeHelper.PrepareDynamicResources).
PrepareResources = Callable[[Pod], Awaitable[str | None]]


# (type, reason, message): events about the node itself.
NodeEventSink = Callable[[EventType, str, str], None]


def _no_events(pod: Pod, type_: EventType, reason: str, message: str, field_path: str) -> None:
    del pod, type_, reason, message, field_path


def _no_node_events(type_: EventType, reason: str, message: str) -> None:
    del type_, reason, message


@dataclass(frozen=True)
class NodeContext:
    node_name: str
    host_ip: str
    cgroup_root: str = "/"
    # The kubelet's cgroupDriver: "cgroupfs" (kubepods/burstable/pod<uid>) or "systemd" (kubepods.slice/...).
    cgroup_driver: str = "cgroupfs"
    dns: DNSSettings = field(default_factory=DNSSettings)
    pod_log_dir_root: str = "/var/log/pods"
    memory_capacity: int = 0
    node_allocatable: Mapping[str, str] = field(default_factory=dict)
    # The node's hostname, for what reports it; a hostNetwork sandbox gets none (it shares the node's UTS namespace).
    node_hostname: str = ""
    # The agent's --root-dir: pods/<uid>/containers/<name>/ (termination messages) and later volumes. "" (unit
    # tests): no pod directories and no termination message files, as upstream without a PodContainerDir.
    root_dir: str = ""
    # The node's hosts file, which a hostNetwork pod's managed /etc/hosts copies (upstream reads /etc/hosts).
    node_hosts_file: str = ETC_HOSTS_PATH


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str
    # Seconds until the back-off behind this wait (an image pull's) expires: the pod is synced again right then.
    retry_after: float | None = None


@dataclass(frozen=True)
class SyncResult:
    """What the sync left behind: why containers that should run do not, and the sandbox's IPs."""

    waiting: Mapping[str, Waiting]
    pod_ips: tuple[str, ...]
    # Seconds until the earliest back-off (CrashLoopBackOff, image pull) expires: the pod's next sync is due then,
    # not at the next resync.
    retry_after: float | None = None
    # The sync acted on the runtime (killed, created or started something): the pod is worth relisting at once.
    changed: bool = False
    # The containers this sync started without a problem: their reason to wait from an earlier sync no longer holds
    # (upstream's reason cache forgets a container whose StartContainer succeeded).
    started: frozenset[str] = frozenset()
    # An in-place resize this sync could not actuate: the error upstream puts in PodResizeInProgress (reason Error).
    resize_error: str | None = None
    # This sync resized containers in place: what the runtime reports of them changed without any lifecycle event.
    resized: bool = False


# Upstream's pod worker backOffPeriod: a sync that failed (here: the sandbox could not be made, say a RuntimeClass the
# informer has not seen yet) is tried again after it, not at the next resync. Upstream adds up to 50% jitter.
SYNC_ERROR_BACKOFF = 10.0

# containerd's answer to a RemoveContainer while another caller's removal of the container is under way (the soak's
# terminated-pod syncs racing the container GC), and how many 0.1 s steps to wait for that removal to end.
REMOVING = "already in removing state"
REMOVING_WAIT_STEPS = 30


def _sync_error_retry(retry_after: float | None) -> float:
    return SYNC_ERROR_BACKOFF if retry_after is None else min(retry_after, SYNC_ERROR_BACKOFF)


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    out: Mapping[str, Any] = pod.get("metadata") or {}
    return out


def _uid(pod: Mapping[str, Any]) -> str:
    return str(_meta(pod).get("uid", ""))


def _field_path(pod: Mapping[str, Any], name: str) -> str:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate((pod.get("spec") or {}).get(key) or []):
            if container.get("name") == name:
                return f"spec.{key}{{{name}}}" if i >= 0 else ""
    return ""


def _container_spec(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    spec = pod.get("spec") or {}
    every = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for container in [*every, *(spec.get("ephemeralContainers") or [])]:
        if container.get("name") == name:
            out: Mapping[str, Any] = container
            return out
    return None


def pull_policy(container: Mapping[str, Any]) -> str:
    """Upstream's defaulting: Always for `:latest` or no tag, else IfNotPresent."""
    policy = container.get("imagePullPolicy")
    if policy:
        return str(policy)
    image = str(container.get("image", ""))
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


class ImagePullFailed(Exception):
    def __init__(self, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after  # when the image back-off lets the next pull happen


class UnremovableContainer(CRIError):
    """containerd keeps a task for a container it calls Created, so RemoveContainer can never succeed."""

    def __init__(self, container_id: str) -> None:
        super().__init__(
            "/runtime.v1.RuntimeService/RemoveContainer", None, f"containerd keeps the task of {container_id}"
        )


class ResourceRecord(Protocol):
    """The allocation manager's actuated resources (what the runtime was last told, per container)."""

    def get_actuated(self, uid: str, name: str) -> dict[str, Any] | None: ...

    def set_actuated(self, uid: str, name: str, resources: Mapping[str, Any]) -> None: ...


class ResizeError(Exception):
    """An in-place resize could not be actuated; the message is what PodResizeInProgress shows (reason Error)."""


def resources_json(values: acts.ResourceValues) -> dict[str, Any]:
    """ResourceValues as v1.ResourceRequirements JSON (the actuated record), unset values left out."""
    out: dict[str, Any] = {}
    for part, cpu, memory in (
        ("limits", values.cpu_limit, values.memory_limit),
        ("requests", values.cpu_request, values.memory_request),
    ):
        entry = {}
        if cpu:
            entry["cpu"] = format_decimal(cpu // 1000) if cpu % 1000 == 0 else f"{cpu}m"
        if memory:
            entry["memory"] = format_binary(memory)
        if entry:
            out[part] = entry
    return out


def format_pod(pod: Mapping[str, Any]) -> str:
    """Upstream format.Pod: name_namespace(uid)."""
    meta = _meta(pod)
    return f"{meta.get('name', '')}_{meta.get('namespace', '')}({meta.get('uid', '')})"


class ServiceLister(Protocol):
    """The cluster's Services as the runtime manager reads them (nodeagent.kube.servicestore.ServiceStore)."""

    @property
    def synced(self) -> bool: ...

    def list(self) -> list[dict[str, Any]]: ...


class RuntimeManager:
    def __init__(
        self,
        runtime: RuntimeService,
        images: ImageService,
        node: NodeContext,
        *,
        events: EventSink = _no_events,
        node_events: NodeEventSink = _no_node_events,
        wall_clock: Callable[[], float] = time.time,
        crash_backoff: Backoff | None = None,
        image_backoff: Backoff | None = None,
        fetch_object: ObjectFetcher | None = None,
        container_mounts: ContainerMounts | None = None,
        container_devices: ContainerDevices | None = None,
        container_resources: ContainerResources | None = None,
        prepare_resources: PrepareResources | None = None,
        services: ServiceLister | None = None,
        runtime_handlers: Callable[[], Sequence[RuntimeHandler]] = tuple,
        runtime_classes: RuntimeHandlerResolver | None = None,
        resources: ResourceRecord | None = None,
        pod_cgroups: PodCgroups | None = None,
        qos_cgroups: QOSCgroups | None = None,
        task_deleter: TaskDeleter | None = None,
    ) -> None:
        self._runtime = runtime
        self._images = images
        self._node = node
        self._events = events
        self._node_events = node_events
        self._now = wall_clock
        self.crash_backoff = crash_backoff or Backoff(clock=wall_clock)
        self.image_backoff = image_backoff or Backoff(clock=wall_clock)
        self._fetch = fetch_object
        # Containers created before this (wall time) were created by an earlier agent (see interrupted starts).
        self._started_at = wall_clock()
        self._container_mounts = container_mounts
        self._container_devices = container_devices
        self._container_resources = container_resources
        self._prepare_resources = prepare_resources
        self._services = services
        self._runtime_handlers = runtime_handlers
        # The pods' RuntimeClass → runtime handler (nodeagent.runtimeclass); None: every pod gets the default.
        self._runtime_classes = runtime_classes
        # In-place resize: the actuated resources (None: no resize, as before it existed) and the pod cgroups
        # (None: left to runc, unsized).
        self._resources = resources
        self._pod_cgroups = pod_cgroups
        # The QoS tiers, sized before a new pod cgroup is made (None: left as they are).
        self._qos_cgroups = qos_cgroups
        # Containers containerd will not let go of (see _remove_container): never tried again.
        self.unremovable: set[str] = set()
        # containerd's own task API (cri.containerd_tasks), the way out for such a container; None: no such API.
        self._task_deleter = task_deleter
        self._kept_sandboxes: set[str] = set()
        self._termination_messages = TerminationMessages()
        # (pod UID, image) -> the last failed pull's error, for the back-off's message (upstream prevPullErrMsg).
        self._pull_errors: dict[tuple[str, str], str] = {}

    # --- reading what runs ---------------------------------------------------------------------------------

    async def list_pods(self, skip: Collection[str] = ()) -> dict[str, acts.RuntimePodStatus]:
        """Every pod that carries the kubelet's labels, by UID (housekeeping and adoption after a restart), but
        those whose UID is in `skip`: housekeeping wants only the pods it does not know, and converting every
        known one every 2 s was most of an emulated node's cost per pod (py-spy, 2026-11-30)."""
        sandboxes = await self._runtime.list_pod_sandbox()
        containers = await self._runtime.list_containers()
        if skip:
            sandboxes = [s for s in sandboxes if s.labels.get(kubelabels.POD_UID_LABEL) not in skip]
            containers = [c for c in containers if c.labels.get(kubelabels.POD_UID_LABEL) not in skip]
        return acts.group_by_pod(sandboxes, containers)

    async def get_pod_status(self, uid: str) -> acts.RuntimePodStatus:
        """Straight from the runtime, bypassing the PLEG's cache: only where upstream also reads it directly
        (after killing a pod, to check that nothing runs any more)."""
        return self.runtime_status(await pleg_inspect.get_pod_status(self._runtime, uid))

    def runtime_status(self, status: PodStatus) -> acts.RuntimePodStatus:
        """The agent's view of a status the PLEG cached, each exited container with its termination message (read
        once per container, as upstream's convertToKubeContainerStatus would on every read)."""
        return self._termination_messages.apply(status, acts.from_pod_status(status))

    def runtime_handler(self, pod: Mapping[str, Any]) -> str:
        """The runtime handler of the pod's RuntimeClass (upstream LookupRuntimeHandler); raises
        CreatePodSandboxConfigError with the lookup's words (a missing RuntimeClass is the API's NotFound)."""
        if self._runtime_classes is None:
            return DEFAULT_HANDLER
        try:
            return self._runtime_classes.lookup_runtime_handler(runtime_class_name(pod))
        except RuntimeClassError as exc:
            raise CreatePodSandboxConfigError(str(exc)) from exc

    def supports_recursive_read_only(self, pod: Mapping[str, Any]) -> bool:
        """Upstream runtimeClassSupportsRecursiveReadOnlyMounts: whether the handler the pod runs with makes
        recursive read-only mounts; a RuntimeClass that cannot be looked up makes none (and a log line)."""
        try:
            handler = self.runtime_handler(pod)
        except CreatePodSandboxConfigError as exc:
            log.error("runtime handler lookup failed pod=%s error=%s", _ref(pod), exc)
            return False
        return supports_recursive_read_only_mounts(handler, self._runtime_handlers())

    # --- syncing -------------------------------------------------------------------------------------------

    async def sync_pod(
        self,
        pod: Pod,
        status: acts.RuntimePodStatus,
        *,
        liveness_failed: frozenset[str] = frozenset(),
        startup_failed: frozenset[str] = frozenset(),
        startup_passed: frozenset[str] | None = None,
    ) -> SyncResult:
        """Make the runtime match the pod, deciding from `status` (the cache's, newer than the last sync), as
        upstream's SyncPod. The runtime is not read again afterwards: the PLEG reports what the actions did."""
        uid = _uid(pod)
        # A start an earlier agent was killed during never ran: decided on (and counted) as a created container.
        status = acts.interrupted_starts_as_created(status, created_before=self._started_at)
        record = self._resources
        plan = acts.compute_pod_actions(
            pod,
            status,
            now=self._now(),
            backoff=self.crash_backoff,
            liveness_failed=liveness_failed,
            startup_failed=startup_failed,
            startup_passed=startup_passed,
            actuated=(lambda name: record.get_actuated(uid, name)) if record is not None else None,
        )
        waiting: dict[str, Waiting] = {w.name: Waiting(w.reason, w.message) for w in plan.backoff}
        retry_after = min((w.remaining for w in plan.backoff), default=None)
        for wait in plan.backoff:
            self._events(
                pod,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {wait.name} in pod "
                f"{_meta(pod).get('name')}_{_meta(pod).get('namespace')}({uid})",
                _field_path(pod, wait.name),
            )
        changed = plan.kill_pod or plan.create_sandbox or bool(plan.containers_to_kill)
        changed = changed or bool(plan.init_containers_to_start or plan.containers_to_start)
        changed = changed or bool(plan.ephemeral_containers_to_start or plan.containers_to_remove)
        changed = changed or bool(plan.sandboxes_to_remove) or bool(plan.containers_to_update)
        if plan.kill_pod:
            # As upstream's SyncPod: no override, each container stops within its own grace.
            await self.kill_pod(pod, status, grace_period=None)
        else:
            ips = _sandbox_ips(status)
            for kill in plan.containers_to_kill:
                self._events(pod, "Normal", "Killing", kill.message, _field_path(pod, kill.name))
                await self._kill_container(pod, kill.name, kill.container_id, ips, grace=_kill_grace(pod, kill))
        # Before anything is created: a never-started instance holds the runtime name its successor will take.
        removed = await self._remove_leftovers(pod, plan)
        # One that could not be removed may still be starting (containerd reports a container CREATED while its
        # StartContainer, begun by an agent since killed, is under way): its successor waits for the next sync, soon.
        held = {
            c.name
            for c in plan.containers_to_remove
            if c.container_id not in removed and c.container_id not in self.unremovable
        }
        if held:
            retry_after = min(retry_after, 1.0) if retry_after is not None else 1.0
        sandbox_id = plan.sandbox_id
        attempt = plan.attempt
        if plan.create_sandbox and self._pod_cgroups is not None:
            # As upstream's SyncPod (pcm.EnsureExists) before the sandbox: the pod cgroup made and sized as
            # ResourceConfigForPod, the pod's overhead (RuntimeClass) included; runc adopts it as the parent.
            cgroup = self._pod_cgroup(uid, pod_qos(pod))
            if self._qos_cgroups is not None:
                # As upstream's SyncPod before a new pod cgroup (UpdateQOSCgroups): a failure is only logged.
                try:
                    await self._qos_cgroups.update_async()
                except PodCgroupError as exc:
                    log.warning("qos cgroups update failed pod=%s uid=%s error=%s", _ref(pod), uid, exc)
            try:
                await asyncio.to_thread(self._pod_cgroups.ensure, cgroup, pod_resource_config(pod))
            except PodCgroupError as exc:
                message = f"unable to ensure pod container exists: {exc}"
                self._events(pod, "Warning", "FailedCreatePodContainer", message, "")
                log.warning("pod cgroup failed pod=%s uid=%s error=%s", _ref(pod), uid, exc)
                return SyncResult(waiting, (), _sync_error_retry(retry_after), changed)
        if plan.create_sandbox and self._prepare_resources is not None:
            # As upstream's SyncPod: the pod's claims are prepared before its sandbox; a failure is the pod's event
            # and nothing is created (the next sync tries again).
            failure = await self._prepare_resources(pod)
            if failure is not None:
                self._events(
                    pod,
                    "Warning",
                    "FailedPrepareDynamicResources",
                    f"Failed to prepare dynamic resources: {failure}",
                    "",
                )
                log.warning("prepare dynamic resources failed pod=%s uid=%s error=%s", _ref(pod), uid, failure)
                return SyncResult(waiting, (), _sync_error_retry(retry_after), changed)
        if plan.create_sandbox:
            try:
                sandbox_id = await self._create_sandbox(pod, attempt)
            except (CRIError, KubeRuntimeError) as exc:
                # As upstream: "Failed to create pod sandbox: " + the error as Go prints it (a CRI error as
                # "rpc error: code = ... desc = ...").
                text = str(exc)
                if isinstance(exc, CRIError):
                    text = rpc_error_text(exc.code.name if exc.code is not None else None, exc.message)
                self._events(pod, "Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {text}", "")
                log.warning("sandbox create failed pod=%s uid=%s error=%s", _ref(pod), uid, exc)
                return SyncResult(waiting, (), _sync_error_retry(retry_after), changed)
        if not sandbox_id:
            return SyncResult(waiting, (), retry_after, changed)
        sandbox_status = await self._runtime.pod_sandbox_status(sandbox_id)
        ips = tuple(ip for ip in [sandbox_status.status.network.ip] if ip) + tuple(
            p.ip for p in sandbox_status.status.network.additional_ips
        )
        try:
            sandbox_config = self._sandbox_config(pod, sandbox_status.status.metadata.attempt)
        except KubeRuntimeError as exc:
            # As upstream's SyncPod, which builds the sandbox config again before starting containers (its
            # RuntimeClass may be gone by now): nothing is started, the next sync tries again.
            message = f"Failed to generate sandbox config for pod {_ref(pod)}: {exc}"
            self._events(pod, "Warning", "FailedCreatePodSandBox", message, "")
            log.warning("sandbox config failed pod=%s uid=%s error=%s", _ref(pod), uid, exc)
            return SyncResult(waiting, ips, _sync_error_retry(retry_after), changed)
        started: set[str] = set()
        resize_error: str | None = None
        resize_due = bool(plan.containers_to_update) or plan.update_pod_resources
        resized = resize_due and self._resources is not None
        # As upstream's SyncPod: ephemeral containers first, so that a failing init container does not block them;
        # an in-place resize (step 7) right before the regular containers start (step 8).
        firsts = [*plan.ephemeral_containers_to_start, *plan.init_containers_to_start]
        for name in [*firsts, None, *plan.containers_to_start]:
            if name is None:
                if resize_due and self._resources is not None:
                    try:
                        await self._resize_pod(pod, plan, status)
                    except ResizeError as exc:
                        resize_error = str(exc)
                        log.warning("pod resize failed pod=%s uid=%s error=%s", _ref(pod), uid, exc)
                continue
            if name in held:
                continue
            problem = await self._start_container(
                pod,
                name,
                status=status,
                sandbox_id=sandbox_id,
                sandbox_config=sandbox_config,
                ips=ips,
                removed=removed,
            )
            if problem is not None:
                waiting[name] = problem
            else:
                started.add(name)
        # An image pull back-off wakes the pod when it expires, as the crash-loop back-off does.
        retry_after = min(
            (t for t in (retry_after, *(w.retry_after for w in waiting.values())) if t is not None), default=None
        )
        return SyncResult(waiting, ips, retry_after, changed, frozenset(started), resize_error, resized)

    # --- in-place resize -------------------------------------------------------------------------------------------

    async def _resize_pod(self, pod: Pod, plan: acts.PodActions, status: acts.RuntimePodStatus) -> None:
        """Upstream doPodResizeAction: per resource (memory, then cpu), the pod cgroup grows before the containers
        and shrinks after them; a memory limit is never set below what is in use (validateMemoryResizeAction). Any
        error stops here: the next sync takes it up again."""
        uid = _uid(pod)
        config = pod_resource_config(pod)
        cgroup = self._pod_cgroup(uid, pod_qos(pod))
        current = PodResourceConfig()
        if self._pod_cgroups is not None:
            try:
                current = await asyncio.to_thread(self._pod_cgroups.read, cgroup)
            except PodCgroupError as exc:
                log.warning("pod cgroup unreadable pod=%s uid=%s error=%s", _ref(pod), uid, exc)
                raise ResizeError(f"unable to get pod cgroup memory config for pod {format_pod(pod)!r}") from exc
        memory_due = bool(plan.containers_to_update.get("memory")) or plan.update_pod_resources
        cpu_due = bool(plan.containers_to_update.get("cpu")) or plan.update_pod_resources
        if memory_due:
            await self._validate_memory_resize(pod, plan, current, config)
            desired = config.memory if config.memory is not None else current.memory
            await self._resize_resource(
                pod,
                plan,
                "memory",
                cgroup,
                limit_now=current.memory,
                limit_new=desired,
                request_now=None,
                request_new=None,
                config=config,
            )
        if cpu_due:
            desired_quota = config.cpu_quota if config.cpu_quota is not None else current.cpu_quota
            await self._resize_resource(
                pod,
                plan,
                "cpu",
                cgroup,
                limit_now=current.cpu_quota,
                limit_new=desired_quota,
                request_now=current.cpu_shares,
                request_new=config.cpu_shares,
                config=config,
            )

    async def _resize_resource(
        self,
        pod: Pod,
        plan: acts.PodActions,
        resource: str,
        cgroup: str,
        *,
        limit_now: int | None,
        limit_new: int | None,
        request_now: int | None,
        request_new: int | None,
        config: PodResourceConfig,
    ) -> None:
        """Upstream's resizeContainers: limits grow before requests and shrink after them."""

        def grows(new: int | None, now: int | None) -> bool:
            return new is not None and now is not None and new > now

        def shrinks(new: int | None, now: int | None) -> bool:
            return new is not None and now is not None and new < now

        if grows(limit_new, limit_now):
            await self._set_pod_cgroup(pod, cgroup, resource, config, limit=True)
        if grows(request_new, request_now):
            await self._set_pod_cgroup(pod, cgroup, resource, config, limit=False)
        for update in plan.containers_to_update.get(resource, ()):
            await self._update_container(pod, update, resource)
        if shrinks(request_new, request_now):
            await self._set_pod_cgroup(pod, cgroup, resource, config, limit=False)
        if shrinks(limit_new, limit_now):
            await self._set_pod_cgroup(pod, cgroup, resource, config, limit=True)

    async def _set_pod_cgroup(
        self, pod: Pod, cgroup: str, resource: str, config: PodResourceConfig, *, limit: bool
    ) -> None:
        if self._pod_cgroups is None:
            return
        if resource == "cpu":
            part = (
                PodResourceConfig(cpu_quota=config.cpu_quota, cpu_period=config.cpu_period)
                if limit
                else PodResourceConfig(cpu_shares=config.cpu_shares)
            )
        elif limit:
            part = PodResourceConfig(memory=config.memory)
        else:
            return  # memory requests are not written to cgroups
        try:
            await asyncio.to_thread(self._pod_cgroups.write, cgroup, part)
        except PodCgroupError as exc:
            raise ResizeError(str(exc)) from exc
        log.info("pod cgroup resized pod=%s cgroup=%s resource=%s limit=%s", _ref(pod), cgroup, resource, limit)

    async def _update_container(self, pod: Pod, update: acts.ContainerToUpdate, resource: str) -> None:
        """Upstream updatePodContainerResources for one container: the resource being resized takes its desired
        values, the other keeps what was last actuated; the record follows a call the runtime accepted."""
        desired, current = update.desired, update.current
        if resource == "memory":
            values = acts.ResourceValues(
                current.cpu_request, current.cpu_limit, desired.memory_request, desired.memory_limit
            )
        else:
            values = acts.ResourceValues(
                desired.cpu_request, desired.cpu_limit, current.memory_request, current.memory_limit
            )
        resources = resources_json(values)
        container = {"name": update.name, "resources": resources}
        linux = make_linux_resources(container, qos=pod_qos(pod), memory_capacity=self._node.memory_capacity, pod=pod)
        try:
            await self._runtime.update_container_resources(update.container_id, api_pb2.ContainerResources(linux=linux))
        except CRIError as exc:
            raise ResizeError(rpc_error_text(exc.code.name if exc.code is not None else None, exc.message)) from exc
        assert self._resources is not None
        self._resources.set_actuated(_uid(pod), update.name, resources)
        log.info(
            "container resources updated pod=%s container=%s id=%s resource=%s cpu_quota=%d memory_limit=%d",
            _ref(pod),
            update.name,
            update.container_id[:12],
            resource,
            linux.cpu_quota,
            linux.memory_limit_in_bytes,
        )

    async def _validate_memory_resize(
        self, pod: Pod, plan: acts.PodActions, current: PodResourceConfig, config: PodResourceConfig
    ) -> None:
        """Upstream validateMemoryResizeAction: no memory limit (the pod's or a container's) set at or below what
        is in use now."""
        pod_shrinks = config.memory is not None and (current.memory is None or config.memory < current.memory)
        shrinking = {
            u.name: u.desired.memory_limit
            for u in plan.containers_to_update.get("memory", ())
            if u.desired.memory_limit
            and (not u.current.memory_limit or u.desired.memory_limit < u.current.memory_limit)
        }
        if not pod_shrinks and not shrinking:
            return
        errors: list[str] = []
        if pod_shrinks and config.memory is not None and self._pod_cgroups is not None:
            cgroup = self._pod_cgroup(_uid(pod), pod_qos(pod))
            try:
                usage = await asyncio.to_thread(self._pod_cgroups.memory_usage, cgroup)
            except PodCgroupError as exc:
                raise ResizeError(f"unable to read memory usage for pod {format_pod(pod)!r}") from exc
            if usage >= config.memory:
                errors.append(f"attempting to set pod memory limit ({config.memory}) below current usage ({usage})")
        for update in plan.containers_to_update.get("memory", ()):
            if update.name not in shrinking:
                continue
            try:
                stats = await self._runtime.container_stats(update.container_id)
            except CRIError as exc:
                raise ResizeError(f"unable to read memory usage for pod {format_pod(pod)!r}") from exc
            if not stats.HasField("memory") or not stats.memory.HasField("usage_bytes"):
                errors.append(f"missing container {update.name!r} memory usage")
                continue
            used = stats.memory.usage_bytes.value
            if used >= shrinking[update.name]:
                # Upstream prints the pod's usage here, not the container's; the container's is the one compared.
                errors.append(
                    f'attempting to set container "{update.name}" memory limit ({shrinking[update.name]}) below '
                    f"current usage ({used})"
                )
        if errors:
            joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            raise ResizeError(f"cannot decrease memory limits: {joined}")

    async def _remove_leftovers(self, pod: Pod, plan: acts.PodActions) -> frozenset[str]:
        """Remove what the plan found left over (never-started instances, old not-ready sandboxes); the ids of the
        containers now gone. A failure is logged and left to the next sync."""
        removed: set[str] = set()
        for c in plan.containers_to_remove:
            try:
                await self._remove_container(_uid(pod), c.container_id)
            except UnremovableContainer:
                continue  # logged once, when found
            except CRIError as exc:
                log.warning(
                    "container remove failed pod=%s container=%s id=%s error=%s",
                    _ref(pod),
                    c.name,
                    c.container_id[:12],
                    exc,
                )
                continue
            removed.add(c.container_id)
            log.info(
                "container removed pod=%s container=%s id=%s why=%s", _ref(pod), c.name, c.container_id[:12], c.why
            )
        for sandbox_id in plan.sandboxes_to_remove:
            try:
                # Stopping tears the network down (CNI DEL, netns) before the sandbox's record goes.
                with contextlib.suppress(NotFoundError):
                    await self._runtime.stop_pod_sandbox(sandbox_id)
                with contextlib.suppress(NotFoundError):
                    await self._runtime.remove_pod_sandbox(sandbox_id)
            except CRIError as exc:
                log.warning("sandbox remove failed pod=%s sandbox=%s error=%s", _ref(pod), sandbox_id[:12], exc)
                continue
            log.info("old sandbox removed pod=%s uid=%s sandbox=%s", _ref(pod), _uid(pod), sandbox_id[:12])
        return frozenset(removed)

    def _restart_count_from_logs(self, pod: Pod, name: str) -> int:
        """Upstream's calcRestartCountByLogDir: the container has no instance left, its log files still count."""
        meta = _meta(pod)
        pod_dir = pod_log_directory(
            str(meta.get("namespace", "")), str(meta.get("name", "")), _uid(pod), root=self._node.pod_log_dir_root
        )
        try:
            names = [e.name for e in os.scandir(os.path.join(pod_dir, name)) if not e.is_dir()]
        except OSError:  # no directory: never ran here (upstream: 0, and a failed read also gives 0)
            return 0
        return acts.restart_count_from_log_files(names)

    def _pod_cgroup(self, uid: str, qos: QOSClass) -> str:
        """The pod's cgroup in the driver's form (upstream GetPodContainerName's second half): what the pod cgroup
        manager makes and the runtime gets as cgroup_parent."""
        return driver_cgroup(pod_cgroup_parent(uid, qos, self._node.cgroup_root), self._node.cgroup_driver)

    def _sandbox_config(self, pod: Pod, attempt: int) -> api_pb2.PodSandboxConfig:
        cgroup_parent = self._pod_cgroup(_uid(pod), pod_qos(pod))
        return make_sandbox_config(
            pod,
            attempt=attempt,
            cgroup_parent=cgroup_parent,
            dns=self._node.dns,
            pod_log_dir_root=self._node.pod_log_dir_root,
            runtime_handler=self.runtime_handler(pod),
            runtime_handlers=self._runtime_handlers(),
        )

    async def _create_sandbox(self, pod: Pod, attempt: int) -> str:
        if missing_cluster_dns(pod, self._node.dns):
            # As upstream's GetPodDNS, on the node and on the pod. Upstream records them each time it builds the
            # sandbox config (every sync); once per sandbox here, so a sync does not cost two event writes.
            node_message, pod_message = missing_cluster_dns_messages(pod)
            self._node_events("Warning", "MissingClusterDNS", node_message)
            self._events(pod, "Warning", "MissingClusterDNS", pod_message, "")
        config = self._sandbox_config(pod, attempt)
        handler = self.runtime_handler(pod)
        sandbox_id = await self._runtime.run_pod_sandbox(config, handler)
        log.info(
            "sandbox created pod=%s uid=%s sandbox=%s attempt=%d runtime_handler=%s",
            _ref(pod),
            _uid(pod),
            sandbox_id[:12],
            attempt,
            handler or "<default>",
        )
        return sandbox_id

    async def _ensure_image(
        self, pod: Pod, container: Mapping[str, Any], sandbox: api_pb2.PodSandboxConfig
    ) -> tuple[str, str]:
        """The image's reference, pulled if need be (upstream EnsureImageExists), and its user as the image status
        reports it (upstream getImageUser, for runAsNonRoot and the default user)."""
        image = str(container.get("image", ""))
        name = str(container.get("name", ""))
        field_path = _field_path(pod, name)
        policy = pull_policy(container)
        spec = api_pb2.ImageSpec(image=image)
        present = await self._images.image_status(spec)
        if present.HasField("image") and present.image.id and policy != "Always":
            self._events(pod, "Normal", "Pulled", f'Container image "{image}" already present on machine', field_path)
            return present.image.id, image_user_of(present.image)
        if policy == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            self._events(pod, "Warning", "ErrImageNeverPull", message, field_path)
            raise ImagePullFailed("ErrImageNeverPull", message)
        key = (_uid(pod), image)
        waiting, remaining = self.image_backoff.in_backoff(key)
        if waiting:
            message = f'Back-off pulling image "{image}"'
            self._events(pod, "Normal", "BackOff", message, field_path)
            # As upstream's pullImage: the status's message carries the error of the pull that failed.
            previous = self._pull_errors.get(key)
            raise ImagePullFailed(
                "ImagePullBackOff", f"{message}: {previous}" if previous else message, retry_after=remaining
            )
        self._pull_errors.pop(key, None)
        self._events(pod, "Normal", "Pulling", f'Pulling image "{image}"', field_path)
        started = time.monotonic()
        try:
            auth = await pull_auth(self._fetch, pod, image)
            ref = await self._images.pull_image(spec, auth, sandbox)
        except CRIError as exc:
            delay = self.image_backoff.next(key)
            log.info("image pull failed pod=%s image=%s retry_in=%.0fs error=%s", _ref(pod), image, delay, exc.message)
            # As upstream: the message is the puller's error as gRPC prints it (evalCRIPullErr), kept for the
            # back-off's message.
            text = rpc_error_text(exc.code.name if exc.code is not None else None, exc.message)
            self._events(pod, "Warning", "Failed", f'Failed to pull image "{image}": {text}', field_path)
            self._pull_errors[key] = f"ErrImagePull: {text}"
            raise ImagePullFailed("ErrImagePull", text, retry_after=delay) from exc
        self.image_backoff.reset(key)
        self._events(
            pod,
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {time.monotonic() - started:.3f}s',
            field_path,
        )
        pulled = await self._images.image_status(spec)
        return ref, image_user_of(pulled.image if pulled.HasField("image") else None)

    async def _start_container(
        self,
        pod: Pod,
        name: str,
        *,
        status: acts.RuntimePodStatus,
        sandbox_id: str,
        sandbox_config: api_pb2.PodSandboxConfig,
        ips: Sequence[str],
        removed: frozenset[str] = frozenset(),
    ) -> Waiting | None:
        container = _container_spec(pod, name)
        if container is None:
            return None
        field_path = _field_path(pod, name)
        try:
            image_ref, image_user = await self._ensure_image(pod, container, sandbox_config)
        except ImagePullFailed as exc:
            # As upstream's startContainer: every image failure is also a Failed event naming its reason.
            self._events(pod, "Warning", "Failed", f"Error: {exc.reason}", field_path)
            return Waiting(exc.reason, exc.message, exc.retry_after)
        # The newest instance that is still there (a removed one never ran).
        previous = next((c for c in status.containers if c.name == name and c.id not in removed), None)
        from_logs = 0 if previous is not None else await asyncio.to_thread(self._restart_count_from_logs, pod, name)
        restart_count = acts.next_restart_count(status, name, removed=removed, from_logs=from_logs)
        try:
            target_id = acts.ephemeral_target_id(pod, name, status)
        except LookupError as exc:
            self._events(pod, "Warning", "Failed", f"Error: {exc}", field_path)
            return Waiting("CreateContainerConfigError", str(exc))
        config_maps, secrets = await lookups_for(self._fetch, str(_meta(pod).get("namespace", "")), container)
        services_env: dict[str, str] = {}
        if self._services is not None:
            if must_wait_for_services(static=is_static_pod(pod), synced=self._services.synced):
                message = "services have not yet been read at least once, cannot construct envvars"
                self._events(pod, "Warning", "Failed", f"Error: {message}", field_path)
                return Waiting("CreateContainerConfigError", message)
            links = (pod.get("spec") or {}).get("enableServiceLinks")
            services_env = service_env(
                self._services.list(),
                str(_meta(pod).get("namespace", "")),
                enable_service_links=links is None or bool(links),
            )

        def environment() -> Sequence[tuple[str, str]]:  # for subPathExpr, only when a mount has one
            return make_environment(
                pod,
                container,
                service_env=services_env,
                node_name=self._node.node_name,
                host_ip=self._node.host_ip,
                pod_ips=ips,
                node_allocatable=self._node.node_allocatable,
                get_config_map=config_maps,
                get_secret=secrets,
            )

        try:
            volume_mounts: Sequence[api_pb2.Mount] = ()
            if self._container_mounts is not None:
                volume_mounts = await self._container_mounts(
                    pod, container, environment, self.supports_recursive_read_only(pod)
                )
            config = make_container_config(
                pod,
                container,
                restart_count=restart_count,
                pod_ips=ips,
                node_name=self._node.node_name,
                host_ip=self._node.host_ip,
                service_env=services_env,
                image_ref=image_ref,
                memory_capacity=self._node.memory_capacity,
                node_allocatable=self._node.node_allocatable,
                get_config_map=config_maps,
                get_secret=secrets,
                image_user=image_user,
                volume_mounts=volume_mounts,
                seccomp_profile_root=os.path.join(self._node.root_dir, "seccomp")
                if self._node.root_dir
                else DEFAULT_SECCOMP_PROFILE_ROOT,
            )
            if self._container_resources is not None:
                await self._container_resources(pod, container, config)
            if self._container_devices is not None:
                # As upstream makeBlockVolumes: the container's volumeDevices, its mapped Block volumes.
                config.devices.extend(await self._container_devices(pod, container))
            if self._node.root_dir and wants_hosts_mount(pod, container, ips):
                # As upstream makeMounts: the pod's managed /etc/hosts, after the volume mounts and the environment
                # (and so not written when they fail), rewritten for each container about to be created.
                hosts_path = PodDirs(self._node.root_dir).etc_hosts(_uid(pod))
                await asyncio.to_thread(
                    ensure_hosts_file,
                    hosts_path,
                    pod,
                    ips,
                    cluster_domain=self._node.dns.cluster_domain,
                    node_hosts_path=self._node.node_hosts_file,
                )
                config.mounts.append(hosts_mount(hosts_path))
        except KubeRuntimeError as exc:
            self._events(pod, "Warning", "Failed", f"Error: {exc}", field_path)
            return Waiting(exc.reason, str(exc))
        namespaces = config.linux.security_context.namespace_options
        if target_id is not None and namespaces.pid == api_pb2.CONTAINER:
            # As upstream: an ephemeral container with a target joins that container's PID namespace (a pod-wide or
            # host PID namespace is shared already).
            namespaces.pid = api_pb2.TARGET
            namespaces.target_id = target_id
        if self._node.root_dir:
            # As upstream makeMounts: each instance gets its own termination message file, mounted last.
            mount = await asyncio.to_thread(create_message_file, self._node.root_dir, _uid(pod), container)
            if mount is not None:
                config.mounts.append(mount)
        if self._resources is not None and container.get("image") and name not in _ephemeral_names(pod):
            # As upstream's startContainer: what the container is created with is what is actuated.
            actuated = resources_json(acts.resource_values(container.get("resources")))
            self._resources.set_actuated(_uid(pod), name, actuated)
        try:
            container_id = await self._runtime.create_container(sandbox_id, config, sandbox_config)
        except CRIError as exc:
            self._events(pod, "Warning", "Failed", f"Error: {exc.message}", field_path)
            return Waiting("CreateContainerError", exc.message)
        self._events(pod, "Normal", "Created", f"Created container: {name}", field_path)
        if previous is not None and previous.state is acts.ContainerState.EXITED:
            # A restart after an exit: the next one waits longer (CrashLoopBackOff).
            self.crash_backoff.next(container_backoff_key(_uid(pod), container))
        try:
            await self._runtime.start_container(container_id)
        except CRIError as exc:
            self._events(pod, "Warning", "Failed", f"Error: {exc.message}", field_path)
            return Waiting("RunContainerError", exc.message)
        self._events(pod, "Normal", "Started", f"Started container {name}", field_path)
        log.info(
            "container started pod=%s container=%s id=%s restart=%d", _ref(pod), name, container_id[:12], restart_count
        )
        return await self._post_start(pod, container, container_id, ips)

    async def _post_start(
        self, pod: Pod, container: Mapping[str, Any], container_id: str, ips: Sequence[str]
    ) -> Waiting | None:
        """The postStart hook right after the start (upstream startContainer step 4): on failure the container is
        killed within the pod's grace and waits with PostStartHookError and the hook's message."""
        name = str(container.get("name", ""))
        try:
            await run_post_start(self._runtime, pod, container, container_id, ips)
        except HookError as exc:
            log.warning(
                "postStart hook failed pod=%s container=%s id=%s error=%s", _ref(pod), name, container_id[:12], exc
            )
            field_path = _field_path(pod, name)
            # As upstream, the events leave the hook's message out: a command's output may hold secrets.
            self._events(pod, "Warning", FAILED_POST_START_HOOK, POST_START_HOOK_FAILED, field_path)
            self._events(pod, "Normal", "Killing", FAILED_POST_START_HOOK, field_path)
            await self._kill_container(pod, name, container_id, ips, grace=_grace(pod))
            return Waiting(POST_START_HOOK_ERROR, exc.message)
        return None

    # --- killing -------------------------------------------------------------------------------------------

    async def _stop_container(self, container_id: str, grace: int) -> None:
        with contextlib.suppress(NotFoundError):  # idempotent, as CRI demands
            await self._runtime.stop_container(container_id, grace)

    async def _kill_container(
        self,
        pod: Pod | None,
        name: str,
        container_id: str,
        ips: Sequence[str],
        *,
        grace: int,
        override: int | None = None,
    ) -> None:
        """The preStop hook within the container's own `grace`, then StopContainer (upstream killContainer): with the
        grace the hook left, at least 2 s, or exactly the `override` when there is one."""
        spec = _container_spec(pod, name) if pod is not None else None
        hook_seconds, hook_error = await run_pre_stop_within_grace(
            self._runtime, spec, container_id, ips, grace, pod=pod
        )
        if hook_error is not None and pod is not None:
            log.warning(
                "preStop hook failed pod=%s container=%s id=%s error=%s", _ref(pod), name, container_id[:12], hook_error
            )
            # As upstream, the event leaves the hook's message out: a command's output may hold secrets.
            self._events(pod, "Warning", FAILED_PRE_STOP_HOOK, PRE_STOP_HOOK_FAILED, _field_path(pod, name))
        await self._stop_container(container_id, stop_grace(grace, hook_seconds=hook_seconds, override=override))

    async def kill_pod(self, pod: Pod | None, status: acts.RuntimePodStatus, *, grace_period: int | None) -> None:
        """Stop every container (in parallel: preStop hook, then StopContainer), then sandboxes.

        `grace_period` is upstream's gracePeriodOverride (the pod workers' grace for a terminating pod): StopContainer
        gets exactly it. None: each container gets its own grace less what its hook took, at least 2 s.
        """
        running = [c for c in status.containers if c.state is acts.ContainerState.RUNNING]
        for c in running:
            if pod is not None:
                self._events(pod, "Normal", "Killing", f"Stopping container {c.name}", _field_path(pod, c.name))
        ips = _sandbox_ips(status)
        # Without the pod (housekeeping of an unknown pod) there is no spec and so no hook: the grace only matters
        # without an override, and then it is upstream's default for a pod it knows nothing of.
        own = _grace(pod) if pod is not None else MINIMUM_GRACE_SECONDS
        await asyncio.gather(
            *(self._kill_container(pod, c.name, c.id, ips, grace=own, override=grace_period) for c in running)
        )
        for sandbox in status.sandboxes:
            with contextlib.suppress(NotFoundError):  # idempotent, as CRI demands
                await self._runtime.stop_pod_sandbox(sandbox.id)

    async def _remove_container(self, uid: str, container_id: str) -> None:
        """RemoveContainer, idempotent. containerd refuses it ("cannot delete running task") for a container its
        record calls Created while its task runs: a StartContainer cut off by a killed agent. Then, as upstream's pod
        cgroup cleanup, what runs in the container's cgroup is killed and the removal tried again."""
        if container_id in self.unremovable:
            raise UnremovableContainer(container_id)
        try:
            with contextlib.suppress(NotFoundError):  # idempotent, as CRI demands
                await self._runtime.remove_container(container_id)
            return
        except CRIError as exc:
            if REMOVING in exc.message:
                await self._removed_by_another(container_id, exc)
                return
            if "running task" not in exc.message:
                raise
            last = exc
        killed = 0
        for qos in QOSClass:
            cgroup = container_cgroup(self._pod_cgroup(uid, qos), container_id, self._node.cgroup_driver)
            killed += await asyncio.to_thread(kill_cgroup_processes, cgroup)
        log.warning("container task left running killed id=%s processes=%d", container_id[:12], killed)
        for _ in range(20):  # containerd sees the task exit shortly after
            await asyncio.sleep(0.1)
            try:
                with contextlib.suppress(NotFoundError):
                    await self._runtime.remove_container(container_id)
                return
            except CRIError as exc:
                last = exc
        # containerd keeps the task of a container it never marked started, and CRI has no call that deletes it
        # (RemoveContainer refuses while any task exists; containerd issue 11037). containerd's own task API does.
        if self._task_deleter is not None:
            try:
                await self._task_deleter(container_id)
                with contextlib.suppress(NotFoundError):
                    await self._runtime.remove_container(container_id)
                log.warning("container task deleted through containerd's task API id=%s", container_id[:12])
                return
            except CRIError as exc:
                last = exc
        # Else the record stays until containerd is restarted. Its processes are dead; the pod goes on without it (a
        # successor takes the next attempt's name, as upstream).
        self.unremovable.add(container_id)
        log.warning(
            "container cannot be removed: containerd keeps its task id=%s error=%s", container_id[:12], last.message
        )
        raise UnremovableContainer(container_id) from last

    async def _removed_by_another(self, container_id: str, refused: CRIError) -> None:
        """containerd refused the removal because another caller (the container GC, a terminated pod's sync) is
        removing the container: wait, briefly, for it to be gone, as a removal of our own would have."""
        for _ in range(REMOVING_WAIT_STEPS):
            try:
                await self._runtime.container_status(container_id)
            except NotFoundError:
                log.info("container removed by another caller id=%s", container_id[:12])
                return
            await asyncio.sleep(0.1)
        raise refused

    async def destroy_pod_cgroup(self, uid: str) -> None:
        """The pod's cgroup removed, whatever its QoS tier (upstream's pod container manager Destroy, which
        SyncTerminatedPod calls once the pod's containers are stopped and its volumes unmounted)."""
        for qos in QOSClass:
            cgroup = self._pod_cgroup(uid, qos)
            if self._pod_cgroups is not None:
                # With systemd the pod slice is stopped, which removes its cgroup.
                try:
                    await asyncio.to_thread(self._pod_cgroups.destroy, cgroup)
                except PodCgroupError as exc:
                    log.warning("pod cgroup not removed uid=%s cgroup=%s error=%s", uid, cgroup, exc)
            else:
                await asyncio.to_thread(remove_cgroup_tree, cgroup)

    async def remove_pod(self, status: acts.RuntimePodStatus) -> None:
        """Remove every container and sandbox of a terminated pod (after kill_pod)."""
        for c in status.containers:
            with contextlib.suppress(UnremovableContainer):  # logged where found; the pod is gone all the same
                await self._remove_container(status.uid, c.id)
        for sandbox in status.sandboxes:
            try:
                with contextlib.suppress(NotFoundError):  # idempotent, as CRI demands
                    await self._runtime.remove_pod_sandbox(sandbox.id)
            except CRIError as exc:
                if not any(c.id in self.unremovable for c in status.containers):
                    raise
                # Stopped (network torn down) but its record holds the unremovable container's.
                if sandbox.id not in self._kept_sandboxes:
                    self._kept_sandboxes.add(sandbox.id)
                    log.warning("sandbox kept for an unremovable container sandbox=%s error=%s", sandbox.id[:12], exc)
        # As the kubelet's pod cleanup: the pod cgroup (gone already unless the pod ended without a terminated
        # sync) and the log directory go with it.
        await self.destroy_pod_cgroup(status.uid)
        if status.name and status.namespace:
            log_dir = pod_log_directory(status.namespace, status.name, status.uid, root=self._node.pod_log_dir_root)
            await asyncio.to_thread(shutil.rmtree, log_dir, True)
        # The termination message files, and the pod directory if nothing else is left in it.
        self._termination_messages.forget(status.uid)
        for key in [k for k in self._pull_errors if k[0] == status.uid]:
            del self._pull_errors[key]
        if self._node.root_dir and status.uid:
            await asyncio.to_thread(remove_pod_dirs, self._node.root_dir, status.uid)


def _ephemeral_names(pod: Mapping[str, Any]) -> set[str]:
    return {str(c.get("name", "")) for c in (pod.get("spec") or {}).get("ephemeralContainers") or ()}


def _grace(pod: Mapping[str, Any]) -> int:
    return grace_period(dict(pod), None)


def _kill_grace(pod: Mapping[str, Any], kill: acts.ContainerToKill) -> int:
    """A deletion's grace wins; else a failed probe's own grace; else the pod's (upstream setTerminationGracePeriod)."""
    if kill.grace_period is not None and _meta(pod).get("deletionGracePeriodSeconds") is None:
        return kill.grace_period
    return _grace(pod)


def _sandbox_ips(status: acts.RuntimePodStatus) -> tuple[str, ...]:
    for sandbox in status.sandboxes:
        if sandbox.ip:
            return (sandbox.ip, *sandbox.additional_ips)
    return ()
