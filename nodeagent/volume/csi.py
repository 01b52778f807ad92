"""The kubernetes.io/csi volume plugin (upstream pkg/volume/csi): claims bound to CSI PVs, inline CSI ephemeral
volumes and generic ephemeral volumes, staged and published by the node's registered CSI drivers.

Set up, as upstream's operation generator runs it for one pod volume:

    claim → bound PV (`csi` source)            inline `csi` (CSIDriver lists Ephemeral) / `ephemeral` → its claim
        │ attachRequired (CSIDriver; true without one): wait for VolumeAttachment csi-<sha256> attached,
        │ its attachmentMetadata is the publish context                        (MountVolume.WaitForAttach)
        ▼ STAGE_UNSTAGE_VOLUME: NodeStageVolume to plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount,
        │ once per volume on the node                                          (MountVolume.MountDevice)
        ▼ NodePublishVolume to pods/<uid>/volumes/kubernetes.io~csi/<name>/mount, vol_data.json beside it
                                                                               (MountVolume.SetUp)
Tear down: NodeUnpublishVolume, then NodeUnstageVolume once no other pod on the node has the volume published.

A Block claim used in volumeDevices is staged, published and mapped as a device instead (csiblock.py: upstream's
MapVolume). Every published volume comes back to set_up at its pod's resync (requires_remount): a driver whose
CSIDriver has requiresRepublish gets NodePublishVolume again (with fresh tokenRequests tokens), and a claim whose PV
grew is expanded on the node (csiexpand.py). volume_stats feeds the stats provider and, with the CSIVolumeHealth
gate, records VolumeConditionAbnormal on the pod.

Which pod volumes publish which CSI volume is kept here (`_published`), rebuilt at start from the pods' vol_data.json
(`reconstruct`): a restarted agent neither stages nor publishes again what is there, and unstages only after the
last pod's unpublish. One lock per CSI volume orders a pod's stage against another pod's unstage.

Where this differs from upstream: a claim that is not bound yet fails the set up (a FailedMount with upstream's
populator text, retried) rather than the desired-state populator; upstream's kubelet stages a reconstructed volume
once more (idempotently), we do not, as the testbed's driver keeps no mount for the mount table to show.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from csi.capability import FS_TYPE_BLOCK, node_rpc_types, volume_capability
from csi.client import connect
from csi.errors import CSIError, FailedPreconditionError, is_final
from csi.service import NodeService
from csi.v1 import csi_pb2
from nodeagent.clock import Clock
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Forbidden, KubeError, NotFound
from nodeagent.volume import csiblock, csiexpand, csiutil
from nodeagent.volume.csierrors import (
    MAP_BLOCK_VOLUME,
    MAP_POD_DEVICE,
    MOUNT_DEVICE,
    SET_UP,
    SET_UP_DEVICE,
    WAIT_FOR_ATTACH,
    MountOperationError,
)
from nodeagent.volume.csiutil import CSIVolume, DriverInfo, SecretRef, log_prefix
from nodeagent.volume.errors import SetUpError, TearDownError
from nodeagent.volume.fsutil import remove_all_one_filesystem
from nodeagent.volume.mounter import Mounter, mount_at
from nodeagent.volume.ownership import pod_fs_group, pod_fs_group_change_policy, set_volume_ownership
from nodeagent.volume.plugin import Pod, Volume, VolumeHost, pod_name, pod_namespace, pod_uid, volume_name
from nodeagent.volume.token import TokenKey, TokenManager

log = logging.getLogger(__name__)

_RPC = csi_pb2.NodeServiceCapability.RPC
STORAGE_GROUP = "storage.k8s.io"
# How often the wait for the attach-detach controller looks at the VolumeAttachment, and for how long (upstream's
# reconciler re-checks the node's volumesAttached every 100 ms; WaitForAttach gives up after the operation's 10 min,
# which the pod's own 2m3s wait hides).
ATTACH_POLL = 0.5
# The first look again comes sooner: the external attacher usually attaches within about 0.1 s of the
# VolumeAttachment's creation (benchmarks/csi.py), and a flat 0.5 s poll added half a second to every such pod start.
ATTACH_POLL_FIRST = 0.05
# ... and stays that quick for the first seconds, the time an attach takes when the attacher runs (upstream's
# reconciler re-checks every 100 ms throughout, from its cache; this is one GET each time, so it slows down after).
ATTACH_POLL_FAST_FOR = 2.0
ATTACH_TIMEOUT = 600.0
VOLUME_CONDITION_ABNORMAL = "VolumeConditionAbnormal"

# (group, resource, namespace, name) -> the object, or None when it does not exist; other failures raise KubeError.
ClusterGetter = Callable[[str, str, str, str], Awaitable[Mapping[str, Any] | None]]
# (namespace, claim name, merge patch of its status) -> the claim as patched; failures raise KubeError.
ClaimStatusPatcher = Callable[[str, str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
# (pod, type, reason, message): the pod's events.
PodEvents = Callable[[Pod, str, str, str], None]


class DriverRegistry(Protocol):
    """The CSI drivers registered on this node (upstream csiDrivers): the endpoint of one, None when unknown."""

    def endpoint(self, driver: str) -> str | None: ...


class DriverNotFoundError(Exception):
    def __init__(self, driver: str) -> None:
        # Upstream's newCsiDriverClient, word for word.
        super().__init__(f"driver name {driver} not found in the list of registered CSI drivers")


class DriverClients:
    """One NodeService per registered driver endpoint (a driver that re-registers elsewhere gets a new one)."""

    def __init__(self, registry: DriverRegistry, connect: Callable[[str], NodeService]) -> None:
        self._registry = registry
        self._connect = connect
        self._clients: dict[str, NodeService] = {}

    def get(self, driver: str) -> NodeService:
        endpoint = self._registry.endpoint(driver)
        if endpoint is None:
            raise DriverNotFoundError(driver)
        client = self._clients.get(endpoint)
        if client is None:
            client = self._clients[endpoint] = self._connect(endpoint)
        return client


@dataclass(frozen=True)
class _Publication:
    driver: str
    volume_handle: str
    lifecycle_mode: str
    #: the PV's name of a Block volume mapped as a device (csiblock), "" for a filesystem volume.
    block_spec: str = ""

    @property
    def volume(self) -> tuple[str, str]:
        return (self.driver, self.volume_handle)


class CSIPlugin:
    name = csiutil.CSI_PLUGIN_NAME
    # As upstream's RequiresRemount, per driver (its CSIDriver's requiresRepublish): every published volume comes
    # back to set_up at its pod's resync, which calls NodePublishVolume again only for such drivers.
    requires_remount = True
    read_only = False

    def __init__(
        self,
        host: VolumeHost,
        clients: DriverClients,
        *,
        get: ClusterGetter | None,
        node_name: str,
        clock: Clock,
        tokens: TokenManager | None = None,
        patch_claim_status: ClaimStatusPatcher | None = None,
        events: PodEvents | None = None,
        attach_poll: float = ATTACH_POLL,
        attach_timeout: float = ATTACH_TIMEOUT,
    ) -> None:
        self._host = host
        self._tokens = tokens
        self._patch_claim_status = patch_claim_status
        self._events = events
        self._clients = clients
        self._get = get
        self._node_name = node_name
        self._clock = clock
        self._attach_poll = attach_poll
        self._attach_timeout = attach_timeout
        self._published: dict[tuple[str, str], _Publication] = {}
        self._staged: set[tuple[str, str]] = set()
        self._looked_on_disk: set[tuple[str, str]] = set()
        # pod volumes unpublished whose tear down failed later (unstage, directories): the retry skips the unpublish.
        self._unpublished: set[tuple[str, str]] = set()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        # attachable volumes a pod wants or has published: node.status.volumesInUse.
        self._in_use: dict[tuple[str, str], str] = {}
        # drivers whose CSIDriver asked for requiresRepublish when last read, and those read at all.
        self._republish: set[str] = set()
        self._drivers_read: set[str] = set()
        # pod volumes found published at start, not set up since (the first set up says so in the log).
        self._reconstructed: set[tuple[str, str]] = set()
        # the newest pod object of each pod with a volume set up here: what its volume events are about.
        self._pods: dict[str, Pod] = {}

    @property
    def _root(self) -> str:
        return self._host.dirs.root_dir

    def can_support(self, volume: Volume) -> bool:
        return any(volume.get(k) is not None for k in ("csi", "persistentVolumeClaim", "ephemeral"))

    def volumes_in_use(self) -> list[str]:
        """Unique names (kubernetes.io/csi/<driver>^<handle>) of the attachable volumes pods use or are about to."""
        return sorted(set(self._in_use.values()))

    def mount_path(self, uid: str, name: str) -> str:
        return os.path.join(self._volume_dir(uid, name), csiutil.PERSISTENT_MOUNT)

    def _volume_dir(self, uid: str, name: str) -> str:
        return self._host.dirs.volume_dir(uid, self.name, name)

    # --- set up ----------------------------------------------------------------------------------------------

    async def set_up(self, pod: Pod, volume: Volume) -> str:
        uid, name = pod_uid(pod), volume_name(volume)
        key = (uid, name)
        target = self.mount_path(uid, name)
        self._pods[uid] = pod
        published = self._published.get(key)
        if published is not None and published.driver not in self._drivers_read:
            # Found at start: whether its driver wants republishing is known once its CSIDriver is read.
            with contextlib.suppress(SetUpError):
                await self._driver_info(published.driver)
        if published is not None and published.driver not in self._republish:
            # Published before, or found so at start (the volume manager sets a reconstructed volume up once more,
            # at its pod's first sync, and every volume at its pod's resyncs): nothing to call again.
            if key in self._reconstructed:
                self._reconstructed.discard(key)
                log.info("csi volume published already pod_uid=%s volume=%s", uid, name)
            if published.block_spec:
                return csiblock.pod_device_path(self._root, uid, published.block_spec)
            await self._expand(pod, volume, target, published)
            return target
        self._reconstructed.discard(key)
        csi_volume = await self._resolve(pod, volume)
        info = await self._driver_info(csi_volume.driver)
        volume_key = (csi_volume.driver, csi_volume.volume_handle)
        attachable = not csi_volume.ephemeral and info.attach_required
        if attachable:
            self._in_use[key] = csiutil.unique_volume_name(*volume_key)
        try:
            async with self._lock(volume_key):
                await self._set_up_locked(pod, key, csi_volume, info, target)
        except BaseException:
            if key not in self._published:
                self._in_use.pop(key, None)
            raise
        if csi_volume.block:
            return csiblock.pod_device_path(self._root, uid, csi_volume.spec_name)
        if published is not None:
            await self._expand(pod, volume, target, published)
        return target

    # --- node expansion ---------------------------------------------------------------------------------------

    async def _expand(self, pod: Pod, volume: Volume, target: str, publication: _Publication) -> None:
        """Online node expansion of a published claim whose PV grew (csiexpand). Errors are the pod's
        VolumeResizeFailed events, never the set up's: the volume stays as it is and the next resync retries."""
        if self._patch_claim_status is None or publication.lifecycle_mode != csiutil.PERSISTENT:
            return
        namespace, claim = _claim_of(pod, volume)
        try:
            pvc = await self._fetch("", "persistentvolumeclaims", namespace, claim)
            pv_name = str(((pvc or {}).get("spec") or {}).get("volumeName") or "")
            pv = await self._fetch("", "persistentvolumes", "", pv_name) if pv_name else None
        except SetUpError as exc:
            log.debug("csi expansion check failed pod_uid=%s claim=%s/%s error=%s", pod_uid(pod), namespace, claim, exc)
            return
        if pvc is None or pv is None:
            return
        expansion = csiexpand.plan(pvc, pv)
        vol = csiutil.persistent_volume(pv, claim_read_only=_claim_read_only(volume))
        if expansion is None or vol is None:
            return
        if vol.read_only:
            # As upstream: a read-only volume is not expanded, and that is final.
            self._event(pod, "Warning", "FileSystemResizeFailed", csiexpand.read_only_message(vol.spec_name))
            return
        try:
            pvc = await self._patch_claim_status(namespace, claim, csiexpand.in_progress_patch(pvc))
            client = self._clients.get(vol.driver)
            caps = frozenset(node_rpc_types(await client.node_get_capabilities()))
            if _RPC.EXPAND_VOLUME not in caps:
                raise csiexpand.NotSupportedError(f"NodeExpand is not supported by the CSI driver {vol.driver}")
            staging = ""
            if _RPC.STAGE_UNSTAGE_VOLUME in caps:
                staging = csiutil.device_mount_path(self._root, vol.driver, vol.volume_handle)
            await client.node_expand_volume(
                vol.volume_handle,
                target,
                expansion.new_bytes,
                self._capability(vol, caps, pod),
                staging_target_path=staging,
            )
        except (CSIError, DriverNotFoundError, KubeError, csiexpand.NotSupportedError) as exc:
            text = str(exc)
            if isinstance(exc, CSIError):
                text = f"Expander.NodeExpand failed to expand the volume : {csiutil.csi_error_text(exc)}"
            log.warning(
                "csi node expansion failed pod_uid=%s volume=%s error=%s", pod_uid(pod), volume_name(volume), text
            )
            self._event(pod, "Warning", csiexpand.VOLUME_RESIZE_FAILED, csiexpand.failed_message(vol.spec_name, text))
            return
        self._event(
            pod,
            "Normal",
            csiexpand.FILE_SYSTEM_RESIZE_SUCCESSFUL,
            csiexpand.succeeded_message(vol.spec_name, self._node_name),
        )
        log.info(
            "MountVolume.NodeExpandVolume succeeded pod_uid=%s volume=%s new_bytes=%d",
            pod_uid(pod),
            volume_name(volume),
            expansion.new_bytes,
        )
        try:
            await self._patch_claim_status(namespace, claim, csiexpand.finished_patch(pvc, expansion))
        except KubeError as exc:
            text = f"mountVolume.NodeExpandVolume update pvc status failed: {exc}"
            self._event(pod, "Warning", csiexpand.VOLUME_RESIZE_FAILED, csiexpand.failed_message(vol.spec_name, text))

    def _event(self, pod: Pod, type_: str, reason: str, message: str) -> None:
        if self._events is not None:
            self._events(pod, type_, reason, message)

    async def _set_up_locked(
        self, pod: Pod, key: tuple[str, str], vol: CSIVolume, info: DriverInfo, target: str
    ) -> None:
        publish_context: dict[str, str] = {}
        if not vol.ephemeral and info.attach_required:
            publish_context = await self._wait_for_attach(vol)
        step = SET_UP if vol.ephemeral else MOUNT_DEVICE
        try:
            client = self._clients.get(vol.driver)
        except DriverNotFoundError as exc:
            what = (
                "mounter.SetUpAt failed to get CSI client"
                if vol.ephemeral
                else ("attacher.MountDevice failed to create newCsiDriverClient")
            )
            if vol.block:
                what, step = "blockMapper.SetUpDevice failed to get CSI client", SET_UP_DEVICE
            raise MountOperationError(log_prefix(f"{what}: {exc}"), operation=step, spec_name=vol.spec_name) from exc
        if vol.ephemeral:
            self._check_lifecycle_mode(vol, info)
        if vol.block:
            caps = await self._capabilities(client, vol, SET_UP_DEVICE)
            await self._record(vol, target)
            try:
                await self._map_block(
                    client=client, pod=pod, key=key, vol=vol, info=info, caps=caps, context=publish_context
                )
            except MountOperationError as exc:
                exc.uncertain = key not in self._published  # a failed republish leaves the device mapped
                raise
            return
        caps = await self._capabilities(client, vol, step)
        # From here on the driver may hold something of this pod's volume: its vol_data.json comes first, so a tear
        # down always knows what to unpublish and unstage.
        await self._record(vol, target)
        try:
            staging = ""
            if not vol.ephemeral and _RPC.STAGE_UNSTAGE_VOLUME in caps:
                staging = csiutil.device_mount_path(self._root, vol.driver, vol.volume_handle)
                await self._stage(
                    client=client, pod=pod, vol=vol, caps=caps, staging=staging, publish_context=publish_context
                )
            if not vol.ephemeral:
                self._check_lifecycle_mode(vol, info)  # as upstream: in SetUp, after MountDevice
            await self._publish(
                client=client,
                pod=pod,
                key=key,
                vol=vol,
                info=info,
                caps=caps,
                target=target,
                staging=staging,
                publish_context=publish_context,
            )
        except MountOperationError as exc:
            if key in self._published:
                # A republish that failed: the volume stays published as it was (upstream keeps a remount's
                # failure out of the actual state); the next resync tries again.
                exc.uncertain = False
            elif exc.uncertain or (vol.driver, vol.volume_handle) in self._staged:
                # Staged, or a call that may still run: the volume manager keeps it to tear it down (upstream's
                # uncertain mount); the retry stages no more than needed.
                exc.uncertain = True
            else:
                await asyncio.to_thread(_remove_target, target, self._host.mounter)
            raise

    async def _record(self, vol: CSIVolume, target: str) -> None:
        data = csiutil.volume_data(
            spec_name=vol.spec_name,
            volume_handle=vol.volume_handle,
            driver=vol.driver,
            node_name=self._node_name,
            lifecycle_mode=vol.lifecycle_mode,
        )
        if vol.block:
            data[csiblock.VOLUME_MODE_KEY] = csiblock.BLOCK
        parent = os.path.dirname(target)
        try:
            await asyncio.to_thread(_prepare_target, parent, data)
        except OSError as exc:
            raise MountOperationError(
                log_prefix(f'mounter.SetUpAt failed to create dir "{parent}":  {exc}'), spec_name=vol.spec_name
            ) from exc

    @staticmethod
    def _check_lifecycle_mode(vol: CSIVolume, info: DriverInfo) -> None:
        problem = csiutil.lifecycle_mode_error(vol.driver, vol.lifecycle_mode, info)
        if problem is not None:
            raise MountOperationError(
                log_prefix(f"mounter.SetupAt failed to check volume lifecycle mode: {problem}"),
                spec_name=vol.spec_name,
            )

    async def _capabilities(self, client: NodeService, vol: CSIVolume, step: str) -> frozenset[int]:
        try:
            return frozenset(node_rpc_types(await client.node_get_capabilities()))
        except CSIError as exc:
            raise MountOperationError(csiutil.csi_error_text(exc), operation=step, spec_name=vol.spec_name) from exc

    async def _stage(
        self,
        *,
        client: NodeService,
        pod: Pod,
        vol: CSIVolume,
        caps: frozenset[int],
        staging: str,
        publish_context: Mapping[str, str],
    ) -> None:
        volume_key = (vol.driver, vol.volume_handle)
        if volume_key in self._staged:
            return
        # The disk says what happened before a restart, once: after a failure in this process it is no guide.
        first_look = volume_key not in self._looked_on_disk
        self._looked_on_disk.add(volume_key)
        if first_look and await asyncio.to_thread(_staged_on_disk, staging):
            # Staged before a restart (its vol_data.json and globalmount are there): not again.
            log.info("csi volume found staged driver=%s volume_handle=%s", vol.driver, vol.volume_handle)
            self._staged.add(volume_key)
            return
        secrets: dict[str, str] = {}
        if vol.node_stage_secret is not None:
            secrets = await self._secret(vol.node_stage_secret, "NodeStageSecretRef", MOUNT_DEVICE, vol)
        try:
            await asyncio.to_thread(_prepare_staging, staging, vol)
        except OSError as exc:
            raise MountOperationError(
                log_prefix(f'attacher.MountDevice failed to create dir "{staging}":  {exc}'),
                operation=MOUNT_DEVICE,
                spec_name=vol.spec_name,
            ) from exc
        capability = self._capability(vol, caps, pod)
        try:
            await client.node_stage_volume(
                vol.volume_handle,
                staging,
                capability,
                publish_context=publish_context,
                volume_context=vol.volume_attributes,
                secrets=secrets,
            )
        except CSIError as exc:
            final = is_final(exc)
            if final:
                await asyncio.to_thread(_remove_staging, staging, self._host.mounter)
            raise MountOperationError(
                csiutil.csi_error_text(exc), operation=MOUNT_DEVICE, spec_name=vol.spec_name, uncertain=not final
            ) from exc
        self._staged.add(volume_key)
        log.info(
            "MountVolume.MountDevice succeeded driver=%s volume_handle=%s path=%s",
            vol.driver,
            vol.volume_handle,
            staging,
        )

    async def _publish(
        self,
        *,
        client: NodeService,
        pod: Pod,
        key: tuple[str, str],
        vol: CSIVolume,
        info: DriverInfo,
        caps: frozenset[int],
        target: str,
        staging: str,
        publish_context: Mapping[str, str],
    ) -> None:
        secrets, context = await self._publish_inputs(pod, vol, info, SET_UP, ephemeral=vol.ephemeral)
        republish = key in self._published
        try:
            await client.node_publish_volume(
                vol.volume_handle,
                target,
                self._capability(vol, caps, pod),
                staging_target_path=staging,
                readonly=vol.read_only,
                publish_context=publish_context,
                volume_context=context,
                secrets=secrets,
            )
        except CSIError as exc:
            final = is_final(exc)
            if final and not republish:
                # As upstream: a publish that surely failed leaves no target; one that may still run keeps it.
                await asyncio.to_thread(_remove_dir_unless_mounted, target, self._host.mounter)
            if isinstance(exc, FailedPreconditionError):
                # The driver lost what we staged (it restarted): stage again on the retry.
                self._staged.discard((vol.driver, vol.volume_handle))
            raise MountOperationError(
                csiutil.csi_error_text(exc), spec_name=vol.spec_name, uncertain=not final
            ) from exc
        # A driver that mounts nothing at the target (the mock's ephemeral volumes) leaves it to the runtime, which
        # would make the bind source at the container's start; made here, so a restart finds the volume too.
        await asyncio.to_thread(os.makedirs, target, 0o750, exist_ok=True)
        fs_group = pod_fs_group(pod)
        if _RPC.VOLUME_MOUNT_GROUP not in caps and csiutil.supports_fs_group(vol, fs_group, info.fs_group_policy):
            # As upstream's csi_mounter: the pod's fsGroupChangePolicy goes with it (OnRootMismatch may skip).
            await asyncio.to_thread(
                set_volume_ownership,
                target,
                fs_group,
                read_only=vol.read_only,
                change_policy=pod_fs_group_change_policy(pod),
            )
        self._published[key] = _Publication(vol.driver, vol.volume_handle, vol.lifecycle_mode)
        self._unpublished.discard(key)
        log.info(
            "MountVolume.SetUp succeeded pod_uid=%s volume=%s driver=%s volume_handle=%s",
            key[0],
            key[1],
            vol.driver,
            vol.volume_handle,
        )

    # --- block volumes (csiblock) -----------------------------------------------------------------------------

    async def _map_block(
        self,
        *,
        client: NodeService,
        pod: Pod,
        key: tuple[str, str],
        vol: CSIVolume,
        info: DriverInfo,
        caps: frozenset[int],
        context: Mapping[str, str],
    ) -> None:
        """Upstream GenerateMapVolumeFunc for a CSI volume: SetUpDevice (NodeStageVolume to the staging directory,
        once per volume), MapPodDevice (NodePublishVolume to the pod's publish path, where the driver puts the
        device), then the pod's symlink to it. A failure leaves the volume uncertain: the tear down undoes what is
        there."""
        root, uid = self._root, key[0]
        capability = _block_capability(vol, caps)
        try:
            await asyncio.to_thread(_prepare_block, root, vol, self._node_name)
        except OSError as exc:
            raise MountOperationError(
                log_prefix(f"failed to create data dir {csiblock.data_dir(root, vol.spec_name)}:  {exc}"),
                operation=SET_UP_DEVICE,
                spec_name=vol.spec_name,
                uncertain=True,
            ) from exc
        staging = ""
        volume_key = (vol.driver, vol.volume_handle)
        if _RPC.STAGE_UNSTAGE_VOLUME in caps:
            staging = csiblock.staging_path(root, vol.spec_name)
            if volume_key not in self._staged:
                secrets: dict[str, str] = {}
                if vol.node_stage_secret is not None:
                    secrets = await self._secret(vol.node_stage_secret, "NodeStageSecretRef", SET_UP_DEVICE, vol)
                await asyncio.to_thread(os.makedirs, staging, 0o750, exist_ok=True)
                try:
                    await client.node_stage_volume(
                        vol.volume_handle,
                        staging,
                        capability,
                        publish_context=context,
                        volume_context=vol.volume_attributes,
                        secrets=secrets,
                    )
                except CSIError as exc:
                    raise MountOperationError(
                        csiutil.csi_error_text(exc), operation=SET_UP_DEVICE, spec_name=vol.spec_name, uncertain=True
                    ) from exc
                self._staged.add(volume_key)
        publish = csiblock.publish_path(root, vol.spec_name, uid)
        # As upstream's publishVolumeForBlock: the pod's attributes always say a persistent volume.
        secrets, attributes = await self._publish_inputs(pod, vol, info, MAP_POD_DEVICE, ephemeral=False)
        await asyncio.to_thread(os.makedirs, os.path.dirname(publish), 0o750, exist_ok=True)
        try:
            await client.node_publish_volume(
                vol.volume_handle,
                publish,
                capability,
                staging_target_path=staging,
                readonly=vol.read_only,
                publish_context=context,
                volume_context=attributes,
                secrets=secrets,
            )
        except CSIError as exc:
            raise MountOperationError(
                csiutil.csi_error_text(exc), operation=MAP_POD_DEVICE, spec_name=vol.spec_name, uncertain=True
            ) from exc
        link = csiblock.pod_device_path(root, uid, vol.spec_name)
        try:
            await asyncio.to_thread(_symlink, publish, link)
        except OSError as exc:
            raise MountOperationError(
                f"blkUtil.MapDevice failed. devicePath: {publish}, podVolumeMapPath:{os.path.dirname(link)}, "
                f"volumeMapName: {vol.spec_name}, bindMount: false: {exc}",
                operation=MAP_BLOCK_VOLUME,
                spec_name=vol.spec_name,
                uncertain=True,
            ) from exc
        self._published[key] = _Publication(vol.driver, vol.volume_handle, vol.lifecycle_mode, vol.spec_name)
        self._unpublished.discard(key)
        log.info(
            "MapVolume.MapPodDevice succeeded pod_uid=%s volume=%s driver=%s volume_handle=%s device=%s",
            uid,
            key[1],
            vol.driver,
            vol.volume_handle,
            link,
        )

    async def _unmap_block(self, client: NodeService, key: tuple[str, str], publication: _Publication) -> None:
        """Upstream UnmapPodDevice and, for the volume's last pod, TearDownDevice: the pod's symlink, then
        NodeUnpublishVolume of its publish path, then NodeUnstageVolume and the volume's directories."""
        root, spec = self._root, publication.block_spec
        await asyncio.to_thread(_remove_link, csiblock.pod_device_path(root, key[0], spec))
        if key not in self._unpublished:
            try:
                await client.node_unpublish_volume(publication.volume_handle, csiblock.publish_path(root, spec, key[0]))
            except CSIError as exc:
                raise TearDownError(
                    log_prefix(f"blockMapper.unpublishVolumeForBlock failed: {csiutil.csi_error_text(exc)}")
                ) from exc
            self._unpublished.add(key)
        self._published.pop(key, None)
        if any(p.volume == publication.volume for p in self._published.values()):
            return
        staging = csiblock.staging_path(root, spec)
        if await asyncio.to_thread(os.path.lexists, staging):
            try:
                caps = frozenset(node_rpc_types(await client.node_get_capabilities()))
                if _RPC.STAGE_UNSTAGE_VOLUME in caps:
                    await client.node_unstage_volume(publication.volume_handle, staging)
            except CSIError as exc:
                raise TearDownError(
                    log_prefix(f"blockMapper.unstageVolumeForBlock failed: {csiutil.csi_error_text(exc)}")
                ) from exc
        self._staged.discard(publication.volume)
        try:
            await asyncio.to_thread(_clean_block, root, spec, self._host.mounter)
        except OSError as exc:
            # As upstream's TearDownDevice: what a driver left in the publish directory is logged, not retried.
            log.warning("csi block volume directories not removed spec_name=%s error=%s", spec, exc)

    async def _publish_inputs(
        self, pod: Pod, vol: CSIVolume, info: DriverInfo, step: str, *, ephemeral: bool
    ) -> tuple[dict[str, str], dict[str, str]]:
        """What NodePublishVolume is given besides its paths, for a mount (SetUpAt) and a block map
        (publishVolumeForBlock) alike: the NodePublishSecretRef's data (a failure is the `step`'s) and the volume
        context: the volume's attributes, the pod's with podInfoOnMount, its service account tokens with
        tokenRequests."""
        secrets: dict[str, str] = {}
        if vol.node_publish_secret is not None:
            secrets = await self._secret(vol.node_publish_secret, "NodePublishSecretRef", step, vol)
        context = csiutil.merge(
            vol.volume_attributes,
            csiutil.pod_attributes(pod, ephemeral=ephemeral) if info.pod_info_on_mount else None,
            await self._token_attributes(pod, info),
        )
        return secrets, context

    async def _token_attributes(self, pod: Pod, info: DriverInfo) -> dict[str, str] | None:
        """The pod's service account tokens for the driver's tokenRequests, one per audience, through the
        kubelet's token manager (TokenRequest with the node's credential, bound to the pod)."""
        if not info.token_requests:
            return None
        tokens: dict[str, tuple[str, float]] = {}
        try:
            if self._tokens is None:
                raise SetUpError("cannot use TokenManager when kubelet is in standalone mode")
            for audience, expiration in info.token_requests:
                key = TokenKey(
                    service_account=pod_service_account(pod),
                    namespace=pod_namespace(pod),
                    audiences=(audience,) if audience else (),
                    expiration_seconds=expiration or csiutil.TOKEN_REQUEST_DEFAULT_EXPIRATION,
                    pod_name=pod_name(pod),
                    pod_uid=pod_uid(pod),
                )
                token = await self._tokens.get(key)
                tokens[audience] = (token.token, token.expiration)
        except SetUpError as exc:
            # Upstream's words, its typo included.
            raise MountOperationError(
                log_prefix(f"mounter.SetUpAt failed to get service accoount token attributes: {exc}")
            ) from exc
        return csiutil.service_account_tokens(tokens)

    def _capability(self, vol: CSIVolume, caps: frozenset[int], pod: Pod) -> csi_pb2.VolumeCapability:
        fs_group = pod_fs_group(pod) if _RPC.VOLUME_MOUNT_GROUP in caps else None
        return volume_capability(
            vol.access_mode,
            fs_type=vol.fs_type,
            mount_flags=vol.mount_options,
            fs_group=fs_group,
            single_node_multi_writer=_RPC.SINGLE_NODE_MULTI_WRITER in caps,
        )

    # --- the API: claims, drivers, attachments, secrets ------------------------------------------------------

    async def _fetch(
        self, group: str, resource: str, namespace: str, name: str, *, absent_if_forbidden: bool = False
    ) -> Mapping[str, Any] | None:
        if self._get is None:
            raise SetUpError(f"cannot get {resource} {namespace}/{name}: no apiserver (standalone)")
        try:
            return await self._get(group, resource, namespace, name)
        except Forbidden as exc:
            if absent_if_forbidden:
                return None
            raise SetUpError(str(exc)) from exc
        except KubeError as exc:
            raise SetUpError(str(exc)) from exc

    async def _resolve(self, pod: Pod, volume: Volume) -> CSIVolume:
        if volume.get("csi") is not None:
            return csiutil.inline_volume(pod_uid(pod), pod_namespace(pod), volume)
        namespace = pod_namespace(pod)
        if volume.get("ephemeral") is not None:
            claim = csiutil.ephemeral_claim_name(pod_name(pod), volume_name(volume))
            read_only = False
        else:
            source: Mapping[str, Any] = volume.get("persistentVolumeClaim") or {}
            claim = str(source.get("claimName", ""))
            read_only = bool(source.get("readOnly") or False)
        pvc = await self._fetch("", "persistentvolumeclaims", namespace, claim)
        problem = csiutil.claim_error(namespace, claim, pvc)
        if problem is None and pvc is not None and volume.get("ephemeral") is not None:
            problem = csiutil.ephemeral_owner_error(pod, pvc)
        if problem is not None or pvc is None:
            raise SetUpError(problem or "")
        pv_name = str((pvc.get("spec") or {}).get("volumeName") or "")
        pv = await self._fetch("", "persistentvolumes", "", pv_name)
        claim_uid = str((pvc.get("metadata") or {}).get("uid", ""))
        problem = csiutil.bound_pv_error(pv_name, pv, claim_uid, namespace, claim)
        if problem is not None or pv is None:
            raise SetUpError(problem or "")
        mounted, device = csiutil.volume_usage(pod, volume_name(volume))
        problem = csiutil.volume_mode_error(volume_name(volume), pv, mounted=mounted, device=device)
        if problem is not None:
            raise SetUpError(problem)
        csi_volume = csiutil.persistent_volume(pv, claim_read_only=read_only)
        if csi_volume is None:
            raise SetUpError(
                f'persistent volume "{pv_name}" is not a CSI volume: no volume plugin matched on this node'
            )
        if device:
            # A Block PV used as a device: staged, published and mapped as a block device (csiblock).
            return dataclasses.replace(csi_volume, block=True)
        return csi_volume

    async def _driver_info(self, driver: str) -> DriverInfo:
        obj = await self._fetch(STORAGE_GROUP, "csidrivers", "", driver)
        info = csiutil.driver_info(obj)
        self._drivers_read.add(driver)
        if info.requires_republish:
            self._republish.add(driver)
        else:
            self._republish.discard(driver)
        return info

    async def _secret(self, ref: SecretRef, field: str, step: str, vol: CSIVolume) -> dict[str, str]:
        try:
            secret = await self._fetch("", "secrets", ref.namespace, ref.name)
            if secret is None:
                raise SetUpError(f'secrets "{ref.name}" not found')
        except SetUpError as exc:
            text = log_prefix(
                f"failed to find the secret {ref.name} in the namespace {ref.namespace} with error: {exc}"
            )
            raise MountOperationError(
                f"fetching {field} {ref.namespace}/{ref.name} failed: {text}", operation=step, spec_name=vol.spec_name
            ) from exc
        return csiutil.secret_data(secret)

    async def _wait_for_attach(self, vol: CSIVolume) -> dict[str, str]:
        """Until the attach-detach controller's VolumeAttachment is attached (upstream: the reconciler waits for
        node.status.volumesAttached, then WaitForAttach for the VolumeAttachment); its attachmentMetadata."""
        attach_id = csiutil.attachment_name(vol.volume_handle, vol.driver, self._node_name)
        start = self._clock.monotonic()
        deadline = start + self._attach_timeout
        poll = min(ATTACH_POLL_FIRST, self._attach_poll)
        while True:
            # The node authorizer lets a node read only the VolumeAttachments of its graph, which one joins once it
            # exists: before, the answer is 403, not 404. Upstream never asks that early (it waits for
            # node.status.volumesAttached first); here 403 means "not attached yet" (it was a failed set-up and a
            # 0.5 s back-off for every attachable pod in benchmarks/csi.py).
            attachment = await self._fetch(STORAGE_GROUP, "volumeattachments", "", attach_id, absent_if_forbidden=True)
            attached, metadata, error = csiutil.attachment_state(attachment)
            if attached:
                return metadata
            if error:
                raise MountOperationError(error, operation=WAIT_FOR_ATTACH, spec_name=vol.spec_name)
            if self._clock.monotonic() >= deadline:
                raise MountOperationError(
                    f"timed out waiting for external-attacher of {vol.driver} CSI driver to attach volume "
                    f"{vol.volume_handle}",
                    operation=WAIT_FOR_ATTACH,
                    spec_name=vol.spec_name,
                )
            await self._clock.sleep(poll)
            if self._clock.monotonic() - start >= ATTACH_POLL_FAST_FOR:
                poll = min(poll * 2, self._attach_poll)

    # --- tear down -------------------------------------------------------------------------------------------

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        key = (pod_uid, volume_name)
        directory = self._volume_dir(pod_uid, volume_name)
        target = os.path.join(directory, csiutil.PERSISTENT_MOUNT)
        data = await asyncio.to_thread(csiutil.load_volume_data, directory)
        if data is None:
            # Nothing was ever handed to a driver (the set up failed before its vol_data.json): only directories.
            await asyncio.to_thread(_remove_target, target, self._host.mounter)
            self._forget(key)
            return
        publication = _publication(data)
        try:
            client = self._clients.get(publication.driver)
        except DriverNotFoundError as exc:
            raise TearDownError(log_prefix(f"mounter.SetUpAt failed to get CSI client: {exc}")) from exc
        if publication.block_spec:
            async with self._lock(publication.volume):
                await self._unmap_block(client, key, publication)
                await asyncio.to_thread(_remove_target, target, self._host.mounter)
            self._forget(key)
            log.info("UnmapVolume.UnmapDevice succeeded pod_uid=%s volume=%s", pod_uid, volume_name)
            return
        async with self._lock(publication.volume):
            if key not in self._unpublished:  # a retry after a later step failed does not unpublish twice
                try:
                    await client.node_unpublish_volume(publication.volume_handle, target)
                except CSIError as exc:
                    raise TearDownError(
                        log_prefix(f"mounter.TearDownAt failed: {csiutil.csi_error_text(exc)}")
                    ) from exc
                self._unpublished.add(key)
            self._published.pop(key, None)
            others = [k for k, p in self._published.items() if p.volume == publication.volume]
            if publication.lifecycle_mode == csiutil.PERSISTENT and not others:
                await self._unstage(client, publication)
            try:
                await asyncio.to_thread(_remove_target, target, self._host.mounter)
            except OSError as exc:
                raise TearDownError(
                    log_prefix(f"mounter.TearDownAt failed to clean mount dir [{target}]: {exc}")
                ) from exc
        self._forget(key)
        log.info(
            "UnmountVolume.TearDown succeeded pod_uid=%s volume=%s driver=%s volume_handle=%s",
            pod_uid,
            volume_name,
            publication.driver,
            publication.volume_handle,
        )

    async def _unstage(self, client: NodeService, publication: _Publication) -> None:
        staging = csiutil.device_mount_path(self._root, publication.driver, publication.volume_handle)
        if not await asyncio.to_thread(os.path.lexists, os.path.dirname(staging)):
            self._staged.discard(publication.volume)
            return
        try:
            caps = frozenset(node_rpc_types(await client.node_get_capabilities()))
            if _RPC.STAGE_UNSTAGE_VOLUME in caps:
                await client.node_unstage_volume(publication.volume_handle, staging)
        except CSIError as exc:
            raise TearDownError(log_prefix(f"attacher.UnmountDevice failed: {csiutil.csi_error_text(exc)}")) from exc
        self._staged.discard(publication.volume)
        try:
            await asyncio.to_thread(_remove_staging, staging, self._host.mounter)
        except OSError as exc:
            raise TearDownError(log_prefix(f"attacher.UnmountDevice failed to clean [{staging}]: {exc}")) from exc
        log.info(
            "UnmountDevice succeeded driver=%s volume_handle=%s path=%s",
            publication.driver,
            publication.volume_handle,
            staging,
        )

    def _forget(self, key: tuple[str, str]) -> None:
        self._reconstructed.discard(key)
        self._published.pop(key, None)
        if not any(k[0] == key[0] for k in self._published):
            self._pods.pop(key[0], None)
        self._in_use.pop(key, None)
        self._unpublished.discard(key)

    # --- volume stats ----------------------------------------------------------------------------------------

    def measured_volumes(self, pod_uid: str) -> list[str]:
        """The pod's volumes published here: the stats provider asks their driver (upstream metricsCsi) instead of
        walking them."""
        return sorted(name for uid, name in self._published if uid == pod_uid)

    async def volume_stats(
        self, pod_uid: str, volume_name: str, *, volume_health: bool = False
    ) -> csiutil.VolumeStats | None:
        """NodeGetVolumeStats of a published volume (upstream metricsCsi.GetMetrics), for the volume path only, as
        upstream asks. None when there is nothing to report, as upstream's calculator skips such a volume: not
        published here, a driver without GET_VOLUME_STATS (NotSupported), an unregistered driver (a transient
        failure) or a failed call. `volume_health` (the CSIVolumeHealth gate): the driver's volume condition, when
        it has VOLUME_CONDITION."""
        publication = self._published.get((pod_uid, volume_name))
        if publication is None:
            return None
        try:
            client = self._clients.get(publication.driver)
            caps = frozenset(node_rpc_types(await client.node_get_capabilities()))
            if _RPC.GET_VOLUME_STATS not in caps:
                return None
            response = await client.node_get_volume_stats(
                publication.volume_handle, self.mount_path(pod_uid, volume_name)
            )
            stats = csiutil.volume_stats(response, with_condition=volume_health and _RPC.VOLUME_CONDITION in caps)
        except (CSIError, DriverNotFoundError, csiutil.VolumeStatsResponseError) as exc:
            # upstream logs this at V(4) only: a driver that cannot answer is not the pod's problem
            log.debug(
                "csi volume stats failed pod_uid=%s volume=%s driver=%s error=%s",
                pod_uid,
                volume_name,
                publication.driver,
                exc,
            )
            return None
        pod = self._pods.get(pod_uid)
        if stats.abnormal and pod is not None:
            # As upstream's volume stat calculator (CSIVolumeHealth): at every measure that finds it abnormal.
            message = f"Volume {volume_name}: {stats.message or ''}"
            self._event(pod, "Warning", VOLUME_CONDITION_ABNORMAL, message)
        return stats

    # --- restart ---------------------------------------------------------------------------------------------

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        """Blocking (the volume manager runs it in a thread at start, before any pod syncs)."""
        directory = self._volume_dir(pod_uid, volume_name)
        data = csiutil.load_volume_data(directory)
        target = os.path.join(directory, csiutil.PERSISTENT_MOUNT)
        if data is None:
            return None
        publication = _publication(data)
        if publication.block_spec:
            target = csiblock.pod_device_path(self._root, pod_uid, publication.block_spec)
            if not os.path.islink(target):
                return None
        elif not os.path.isdir(target):
            return None
        self._published[(pod_uid, volume_name)] = publication
        self._reconstructed.add((pod_uid, volume_name))
        if publication.lifecycle_mode == csiutil.PERSISTENT:
            staging = csiutil.device_mount_path(self._root, publication.driver, publication.volume_handle)
            if _staged_on_disk(staging):
                self._staged.add(publication.volume)
            # Whether the driver needs attaching is not known without the API: report it in use until torn down,
            # as upstream reports reconstructed attachable volumes.
            self._in_use[(pod_uid, volume_name)] = csiutil.unique_volume_name(*publication.volume)
        return target

    def _lock(self, volume: tuple[str, str]) -> asyncio.Lock:
        lock = self._locks.get(volume)
        if lock is None:
            lock = self._locks[volume] = asyncio.Lock()
        return lock


# --- blocking helpers (run in threads) ------------------------------------------------------------------------------


def _publication(data: Mapping[str, str]) -> _Publication:
    """What a pod volume's vol_data.json says was published."""
    block = data.get(csiblock.VOLUME_MODE_KEY) == csiblock.BLOCK
    return _Publication(
        data.get("driverName", ""),
        data.get("volumeHandle", ""),
        data.get("volumeLifecycleMode") or csiutil.PERSISTENT,
        data.get("specVolID", "") if block else "",
    )


def _block_capability(vol: CSIVolume, caps: frozenset[int]) -> csi_pb2.VolumeCapability:
    return volume_capability(
        vol.access_mode, fs_type=FS_TYPE_BLOCK, single_node_multi_writer=_RPC.SINGLE_NODE_MULTI_WRITER in caps
    )


def _prepare_block(root: str, vol: CSIVolume, node_name: str) -> None:
    # As upstream's NewBlockVolumeMapper: the volume's data directory and its vol_data.json.
    directory = csiblock.data_dir(root, vol.spec_name)
    os.makedirs(directory, 0o750, exist_ok=True)
    csiutil.save_volume_data(
        directory,
        {
            "specVolID": vol.spec_name,
            "volumeHandle": vol.volume_handle,
            "driverName": vol.driver,
            "nodeName": node_name,
            "attachmentID": csiutil.attachment_name(vol.volume_handle, vol.driver, node_name),
        },
    )


def _symlink(source: str, link: str) -> None:
    """The pod's symlink to the published device, replaced if it is there (upstream MapDevice without bind mount)."""
    os.makedirs(os.path.dirname(link), 0o750, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(link)
    os.symlink(source, link)


def _remove_link(link: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(link)
    with contextlib.suppress(OSError):  # other block volumes of the pod keep it
        os.rmdir(os.path.dirname(link))


def _clean_block(root: str, spec_name: str, mounter: Mounter) -> None:
    """Upstream cleanupOrphanDeviceFiles: the publish directory (empty by now), the staging directory and the
    volume's own directory with its data/vol_data.json. Each is tried (upstream stops at the first failure); the
    first failure is raised."""
    failures: list[OSError] = []
    for path in (csiblock.publish_dir(root, spec_name), csiblock.staging_path(root, spec_name)):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            failures.append(exc)
    remove_all_one_filesystem(csiblock.volume_plugin_dir(root, spec_name), mounter)
    if failures:
        raise failures[0]


def _staged_on_disk(staging: str) -> bool:
    return os.path.isdir(staging) and csiutil.load_volume_data(os.path.dirname(staging)) is not None


def _prepare_staging(staging: str, vol: CSIVolume) -> None:
    # As upstream's MountDevice: the directory and the vol_data.json UnmountDevice needs, before NodeStage.
    os.makedirs(staging, 0o750, exist_ok=True)
    csiutil.save_volume_data(
        os.path.dirname(staging), csiutil.device_data(volume_handle=vol.volume_handle, driver=vol.driver)
    )


def _prepare_target(parent: str, data: Mapping[str, str]) -> None:
    # As upstream: the volume directory and its vol_data.json; the driver makes the target itself.
    os.makedirs(parent, 0o750, exist_ok=True)
    csiutil.save_volume_data(parent, data)


def _remove_dir_unless_mounted(path: str, mounter: Mounter) -> bool:
    """Remove an empty directory that nothing is mounted on; False when something is (left for the retry)."""
    if mount_at(mounter.mounts(), os.path.realpath(path)) is not None:
        return False
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)
    return True


def _remove_target(target: str, mounter: Mounter) -> None:
    """Upstream removeMountDir: the target when not mounted, then vol_data.json and the volume directory.

    Unlike upstream's os.Remove, a target that is no mount point is removed with what it holds: a driver that
    mounts nothing there (the mock's ephemeral volumes) leaves the containers' files in the directory the runtime
    or we made, and refusing would retry the whole tear down for ever. Nothing below a mount is touched."""
    if mount_at(mounter.mounts(), os.path.realpath(target)) is not None:
        raise OSError(f"{target} is still mounted")
    remove_all_one_filesystem(target, mounter)
    parent = os.path.dirname(target)
    for path in (os.path.join(parent, csiutil.VOL_DATA_FILE), os.path.join(parent, csiutil.VOL_DATA_FILE + ".tmp")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(parent)


def _remove_staging(staging: str, mounter: Mounter) -> None:
    """The globalmount directory when not mounted, its vol_data.json and the per-volume directory."""
    if not _remove_dir_unless_mounted(staging, mounter):
        raise OSError(f"{staging} is still mounted")
    parent = os.path.dirname(staging)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(parent, csiutil.VOL_DATA_FILE))
    with contextlib.suppress(OSError):  # gone already, or not empty (another file of the driver's): harmless
        os.rmdir(parent)


class NoDrivers:
    """A registry with no driver in it (standalone, or before plugin registration runs): every CSI volume waits
    with upstream's "not found in the list of registered CSI drivers"."""

    def endpoint(self, driver: str) -> str | None:
        del driver
        return None


def _claim_of(pod: Pod, volume: Volume) -> tuple[str, str]:
    """(namespace, claim name) of a claim volume or a generic ephemeral one."""
    if volume.get("ephemeral") is not None:
        return pod_namespace(pod), csiutil.ephemeral_claim_name(pod_name(pod), volume_name(volume))
    return pod_namespace(pod), str((volume.get("persistentVolumeClaim") or {}).get("claimName", ""))


def _claim_read_only(volume: Volume) -> bool:
    return bool((volume.get("persistentVolumeClaim") or {}).get("readOnly") or False)


def claim_status_patcher(client: KubeClient) -> ClaimStatusPatcher:
    """Merge patches of a claim's status with the node's credential (NodeRestriction lets a node change its
    capacity, conditions and allocatedResourceStatuses)."""

    async def patch(namespace: str, name: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        path = paths.api_path("persistentvolumeclaims", namespace=namespace, name=name)
        return await client.patch(path, dict(body), patch_type="merge", subresource="status")

    return patch


def pod_service_account(pod: Pod) -> str:
    spec: Mapping[str, Any] = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def cluster_getter(client: KubeClient) -> ClusterGetter:
    """GETs with the node's credential (the Node authorizer lets it read its pods' claims, their PVs and secrets,
    CSIDrivers and VolumeAttachments)."""

    async def get(group: str, resource: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        path = paths.api_path(resource, group=group, namespace=namespace or None, name=name)
        try:
            return await client.get(path)
        except NotFound:
            return None

    return get


def connect_node(endpoint: str) -> NodeService:
    return connect(endpoint).node
