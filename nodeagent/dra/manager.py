"""The DRA manager (upstream pkg/kubelet/cm/dra/manager.go): a pod's ResourceClaims prepared by their drivers before
its sandbox is made, their CDI devices given to the containers that name the claims, and unprepared once the last
pod using a claim on this node has stopped.

prepare_resources(pod), before the sandbox (the runtime manager's hook):
1. a validation pass that changes nothing: every claim of `spec.resourceClaims` is read from the apiserver (the Node
   authorizer lets a node read the claims of its pods), a generated one must be owned by the pod, the pod must be in
   `status.reservedFor`, the claim must be allocated, and every driver of its allocation must have a registered
   plugin. Anything wrong fails the pod's sync with upstream's message and changes no state, so a pod whose driver
   never comes can still be deleted without an unprepare that cannot succeed;
2. the pod is added to each claim's entry in the claim cache, checkpointed;
3. one NodePrepareResources per driver for its claims not yet prepared; each result's devices (with their CDI device
   IDs) are recorded, the claims marked prepared, and the cache checkpointed.
The runtime manager turns a failure into the pod's `FailedPrepareDynamicResources` event ("Failed to prepare dynamic
resources: ...") and the pod waits for its next sync.

cdi_devices(pod, container): the CDI device IDs of the claims (and requests) the container names in
`resources.claims`, for its CreateContainer (`CDI_devices`).

unprepare_resources(pod), when the pod's containers have stopped (SyncTerminatingPod): for each of its claims, the pod
is dropped from the entry; a claim still used by another pod stays prepared; the others get NodeUnprepareResources
from their drivers and leave the cache. A failure (driver gone, gRPC error) is raised: the terminating sync is tried
again. A reconcile loop does the same for pods that are no longer active (e.g. removed while the agent was down).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.dra import claims as claimsmod
from nodeagent.dra.claiminfo import CheckpointError, ClaimInfo, ClaimInfoCache, Device
from nodeagent.dra.plugins import DRAPlugin, DRAPluginManager, PluginError
from nodeagent.dra.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import KubeError

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
# Upstream's reconcilePeriod of the DRA manager.
RECONCILE_PERIOD = 60.0  # upstream 1.34: manager.go reconcilePeriod
FAILED_PREPARE_DYNAMIC_RESOURCES = "FailedPrepareDynamicResources"
# (namespace, name) -> the ResourceClaim from the apiserver; raises KubeError (NotFound and the like).
ClaimReader = Callable[[str, str], Awaitable[Obj]]


class DRAError(Exception):
    """A pod's claims cannot be prepared or unprepared; the message is upstream's."""


def _meta(obj: Obj) -> Obj:
    out: Obj = obj.get("metadata") or {}
    return out


def claim_path(namespace: str, name: str) -> str:
    return paths.api_path("resourceclaims", group="resource.k8s.io", version="v1", namespace=namespace, name=name)


def claim_reader(client: KubeClient) -> ClaimReader:
    """Reads claims with the agent's own credential (the Node authorizer allows the claims of its pods)."""

    async def read(namespace: str, name: str) -> Obj:
        return await client.get(claim_path(namespace, name))

    return read


def go_error_text(exc: KubeError) -> str:
    """An apiserver error as client-go prints it: the Status message (`resourceclaims.resource.k8s.io "x" not
    found`), else the error itself."""
    message = getattr(exc, "message", None)
    return str(message) if message else str(exc)


@dataclass(frozen=True)
class _Checked:
    claim: Obj
    info: ClaimInfo
    plugins: Mapping[str, DRAPlugin]


class DRAManager:
    def __init__(
        self,
        read_claim: ClaimReader | None,
        state_dir: str,
        plugins: DRAPluginManager,
        *,
        active_pods: Callable[[], Sequence[Obj]] = list,
        sources_ready: Callable[[], bool] = lambda: False,
        could_have_running_containers: Callable[[str], bool] = lambda uid: False,
        reconcile_period: float = RECONCILE_PERIOD,
    ) -> None:
        self._read = read_claim
        self.plugins = plugins
        try:
            self._cache = ClaimInfoCache(state_dir)
        except CheckpointError as exc:
            raise DRAError(f"create ResourceClaim cache: {exc}") from exc
        self._active_pods = active_pods
        self._sources_ready = sources_ready
        self._could_run = could_have_running_containers
        self._reconcile_period = reconcile_period
        self._lock = asyncio.Lock()

    # --- prepare ------------------------------------------------------------------------------------------------

    async def prepare_resources(self, pod: Obj) -> None:
        """Raises DRAError ("prepare dynamic resources: ...") when the pod must wait."""
        if not claimsmod.pod_claims(pod):
            return
        try:
            await self._prepare(pod)
        except (DRAError, claimsmod.ClaimError, PluginError, CheckpointError) as exc:
            raise DRAError(f"prepare dynamic resources: {exc}") from exc

    async def _read_claim(self, namespace: str, name: str) -> Obj:
        if self._read is None:
            raise DRAError(f"fetch ResourceClaim {name}: no apiserver")
        try:
            return await self._read(namespace, name)
        except KubeError as exc:
            raise DRAError(f"fetch ResourceClaim {name}: {go_error_text(exc)}") from exc

    async def _check(self, pod: Obj) -> list[_Checked]:
        """Upstream's validation pass: nothing in the cache changes."""
        meta = _meta(pod)
        checked: list[_Checked] = []
        for pod_claim in claimsmod.pod_claims(pod):
            name = claimsmod.claim_name(pod, pod_claim)
            if name.name is None:
                continue
            claim = await self._read_claim(str(meta.get("namespace", "")), name.name)
            if name.must_check_owner:
                claimsmod.is_for_pod(pod, claim)
            if not claimsmod.is_reserved_for_pod(pod, claim):
                raise DRAError(
                    f"pod {meta.get('name', '')} ({meta.get('uid', '')}) is not allowed to use ResourceClaim "
                    f"{name.name} ({_meta(claim).get('uid', '')})"
                )
            drivers = claimsmod.allocated_drivers(claim)
            if drivers is None:
                raise DRAError(f"ResourceClaim {_meta(claim).get('name', '')}: not allocated")
            info = ClaimInfo(
                claim_uid=str(_meta(claim).get("uid", "")),
                claim_name=str(_meta(claim).get("name", "")),
                namespace=str(_meta(claim).get("namespace", "")),
                drivers={driver: [] for driver in drivers},
            )
            found = {driver: self.plugins.get_plugin(driver) for driver in drivers}
            checked.append(_Checked(claim, info, found))
        return checked

    async def _prepare(self, pod: Obj) -> None:
        uid = str(_meta(pod).get("uid", ""))
        checked = await self._check(pod)
        async with self._lock:
            batches: dict[str, tuple[DRAPlugin, list[api_pb2.Claim]]] = {}
            to_prepare: dict[str, ClaimInfo] = {}
            for item in checked:
                info = self._cache.get(item.info.claim_name, item.info.namespace)
                if info is None:
                    info = item.info
                    self._cache.add(info)
                elif info.claim_uid != item.info.claim_uid:
                    raise DRAError(
                        f"old ResourceClaim with same name {info.claim_name} and different UID {info.claim_uid} "
                        "still exists (previous pod force-deleted?!)"
                    )
                info.pod_uids.add(uid)
                # Before the driver is called: a pod deleted before its prepare finished is still unprepared.
                self._cache.sync()
                if info.prepared:
                    continue
                to_prepare[info.claim_uid] = info
                request = api_pb2.Claim(namespace=info.namespace, uid=info.claim_uid, name=info.claim_name)
                for driver in info.drivers:
                    plugin = item.plugins[driver]
                    batches.setdefault(driver, (plugin, []))[1].append(request)
            for driver, (plugin, requests) in batches.items():
                await self._prepare_batch(driver, plugin, requests, to_prepare)
            for info in to_prepare.values():
                info.prepared = True
            try:
                self._cache.sync()
            except CheckpointError as exc:
                raise DRAError(f"checkpoint ResourceClaim state: {exc}") from exc

    async def _prepare_batch(
        self, driver: str, plugin: DRAPlugin, requests: list[api_pb2.Claim], infos: Mapping[str, ClaimInfo]
    ) -> None:
        log.info("NodePrepareResources driver=%s claims=%s", driver, ",".join(r.name for r in requests))
        try:
            response = await plugin.node_prepare_resources(api_pb2.NodePrepareResourcesRequest(claims=requests))
        except PluginError as exc:
            raise DRAError(f"NodePrepareResources: {exc}") from exc
        by_uid = {request.uid: request for request in requests}
        for claim_uid, result in response.claims.items():
            request = by_uid.get(claim_uid)
            if request is None:
                raise DRAError(f"NodePrepareResources returned result for unknown claim UID {claim_uid}")
            if result.error:
                raise DRAError(f"NodePrepareResources failed for ResourceClaim {request.name}: {result.error}")
            infos[claim_uid].drivers[driver] = [
                Device(
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    request_names=tuple(device.request_names),
                    cdi_device_ids=tuple(device.cdi_device_ids),
                )
                for device in result.devices
            ]
        unfinished = len(requests) - len(response.claims)
        if unfinished:
            raise DRAError(f"NodePrepareResources skipped {unfinished} ResourceClaims")

    # --- containers ----------------------------------------------------------------------------------------------

    def cdi_devices(self, pod: Obj, container: Obj) -> list[str]:
        """The CDI device IDs for a container's CreateContainer; DRAError when a claim it names is not prepared."""
        try:
            wanted = claimsmod.container_claim_requests(pod, container)
        except claimsmod.ClaimError as exc:
            raise DRAError(str(exc)) from exc
        namespace = str(_meta(pod).get("namespace", ""))
        out: list[str] = []
        for name, request in wanted:
            info = self._cache.get(name, namespace)
            if info is None:
                raise DRAError(f"internal error: unable to get claim info for ResourceClaim {name}")
            out.extend(info.cdi_devices(request))
        return out

    def container_claim_infos(self, pod: Obj, container: Obj) -> list[ClaimInfo]:
        """The cache's entries of the claims a container names, once per `resources.claims` entry (upstream's
        GetContainerClaimInfos, for the PodResources API)."""
        try:
            wanted = claimsmod.container_claim_requests(pod, container)
        except claimsmod.ClaimError as exc:
            raise DRAError(str(exc)) from exc
        namespace = str(_meta(pod).get("namespace", ""))
        out: list[ClaimInfo] = []
        for name, _ in wanted:
            info = self._cache.get(name, namespace)
            if info is None:
                raise DRAError(f"unable to get information for ResourceClaim {name}")
            out.append(info)
        return out

    # --- unprepare -----------------------------------------------------------------------------------------------

    async def unprepare_resources(self, pod: Obj) -> None:
        """Idempotent; raises DRAError ("unprepare dynamic resources: ...") when it must be tried again."""
        uid = str(_meta(pod).get("uid", ""))
        namespace = str(_meta(pod).get("namespace", ""))
        # The claims the spec names, as upstream 1.34 (a claim this pod never got into the cache is skipped).
        names: list[str] = []
        try:
            for pod_claim in claimsmod.pod_claims(pod):
                name = claimsmod.claim_name(pod, pod_claim).name
                if name is not None:
                    names.append(name)
        except claimsmod.ClaimError as exc:
            raise DRAError(f"unprepare dynamic resources: {exc}") from exc
        try:
            await self._unprepare(uid, namespace, names)
        except (DRAError, PluginError, CheckpointError) as exc:
            raise DRAError(f"unprepare dynamic resources: {exc}") from exc

    async def _unprepare(self, pod_uid: str, namespace: str, names: Sequence[str]) -> None:
        async with self._lock:
            batches: dict[str, list[api_pb2.Claim]] = {}
            done: list[ClaimInfo] = []
            for name in names:
                info = self._cache.get(name, namespace)
                if info is None:
                    continue
                if len(info.pod_uids) > 1:
                    info.pod_uids.discard(pod_uid)
                    continue
                done.append(info)
                request = api_pb2.Claim(namespace=info.namespace, uid=info.claim_uid, name=info.claim_name)
                for driver in info.drivers:
                    batches.setdefault(driver, []).append(request)
            for driver, requests in batches.items():
                plugin = self.plugins.get_plugin(driver)
                log.info("NodeUnprepareResources driver=%s claims=%s", driver, ",".join(r.name for r in requests))
                try:
                    response = await plugin.node_unprepare_resources(
                        api_pb2.NodeUnprepareResourcesRequest(claims=requests)
                    )
                except PluginError as exc:
                    raise DRAError(f"NodeUnprepareResources: {exc}") from exc
                claim_names = {request.uid: request.name for request in requests}
                for claim_uid, result in response.claims.items():
                    if claim_uid not in claim_names:
                        raise DRAError(f"NodeUnprepareResources returned result for unknown claim UID {claim_uid}")
                    if result.error:
                        raise DRAError(
                            f"NodeUnprepareResources failed for ResourceClaim {claim_names[claim_uid]}: {result.error}"
                        )
                unfinished = len(requests) - len(response.claims)
                if unfinished:
                    raise DRAError(f"NodeUnprepareResources skipped {unfinished} ResourceClaims")
            for info in done:
                self._cache.delete(info.claim_name, info.namespace)
            try:
                self._cache.sync()
            except CheckpointError as exc:
                raise DRAError(f"checkpoint ResourceClaim state: {exc}") from exc

    def pod_might_need_to_unprepare_resources(self, pod_uid: str) -> bool:
        return self._cache.has_pod_reference(pod_uid)

    def claims(self) -> list[ClaimInfo]:
        """The cache's entries (for PodResources and tests)."""
        return list(self._cache)

    # --- reconcile -----------------------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Unprepares the claims of pods that are no longer active (once the sources are ready), as upstream's
        reconcileLoop; a pod whose containers may still run is left to its terminating sync."""
        if not self._sources_ready():
            return
        active = {str(_meta(pod).get("uid", "")) for pod in self._active_pods()}
        inactive: dict[tuple[str, str], list[str]] = {}
        for info in self._cache:
            for uid in info.pod_uids:
                # Not active but maybe still running (an eviction's kill under way): its terminating sync
                # unprepares once the containers stopped.
                if uid not in active and not self._could_run(uid):
                    inactive.setdefault((uid, info.namespace), []).append(info.claim_name)
        for (uid, namespace), names in inactive.items():
            try:
                await self._unprepare(uid, namespace, names)
            except (DRAError, PluginError, CheckpointError) as exc:
                log.info("unpreparing pod resources in reconcile loop failed, will retry pod_uid=%s error=%s", uid, exc)

    async def run(self) -> None:
        """The plugin manager's wiping and the reconcile loop, until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.plugins.run(), name="dra-plugins")
            while True:
                await asyncio.sleep(self._reconcile_period)
                await self.reconcile()
