"""Pure parts of the kubernetes.io/csi volume plugin (upstream pkg/volume/csi: csi_util.go, csi_plugin.go,
csi_mounter.go, csi_attacher.go): names, paths, vol_data.json, the CSIDriver's settings, a PV's CSI source, the
pod information a driver may ask for, and how a CSI error reads in an event.

On disk, as upstream lays it out under --root-dir:

    plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount       the staging path (NodeStageVolume)
    plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/vol_data.json     what UnmountDevice needs
    pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount                          the target path (NodePublishVolume)
    pods/<uid>/volumes/kubernetes.io~csi/<volume>/vol_data.json                  what TearDown and reconstruction need
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from csi.errors import CSIError
from csi.v1 import csi_pb2

log = logging.getLogger(__name__)

CSI_PLUGIN_NAME = "kubernetes.io/csi"
VOL_DATA_FILE = "vol_data.json"
GLOBAL_MOUNT = "globalmount"
PERSISTENT_MOUNT = "mount"

PERSISTENT = "Persistent"
EPHEMERAL = "Ephemeral"

# fsGroupPolicy values (storage.k8s.io/v1); upstream's default when the CSIDriver does not say.
FS_GROUP_POLICY_NONE = "None"
FS_GROUP_POLICY_FILE = "File"
FS_GROUP_POLICY_RWO_WITH_FSTYPE = "ReadWriteOnceWithFSType"

# The volume_context keys of podInfoOnMount (upstream csi_mounter.go podAttributes).
POD_NAME_KEY = "csi.storage.k8s.io/pod.name"
POD_NAMESPACE_KEY = "csi.storage.k8s.io/pod.namespace"
POD_UID_KEY = "csi.storage.k8s.io/pod.uid"
SERVICE_ACCOUNT_KEY = "csi.storage.k8s.io/serviceAccount.name"
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"

# Upstream's volNameSep: a CSI volume's unique name is kubernetes.io/csi/<driver>^<volumeHandle>.
VOLUME_NAME_SEPARATOR = "^"


def log_prefix(message: str) -> str:
    """Upstream's log(): every error the CSI plugin makes itself starts with the plugin's name."""
    return f"{CSI_PLUGIN_NAME}: {message}"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def device_mount_path(root_dir: str, driver: str, volume_handle: str) -> str:
    """The staging (global mount) path of a persistent volume (upstream makeDeviceMountPath)."""
    return posixpath.join(root_dir, "plugins", CSI_PLUGIN_NAME, driver, sha256_hex(volume_handle), GLOBAL_MOUNT)


def attachment_name(volume_handle: str, driver: str, node_name: str) -> str:
    """The VolumeAttachment the attach-detach controller makes for this volume on this node (getAttachmentName)."""
    return "csi-" + sha256_hex(f"{volume_handle}{driver}{node_name}")


def ephemeral_volume_handle(pod_uid: str, volume_name: str) -> str:
    """The handle of an inline ephemeral volume (upstream makeVolumeHandle: csi-<sha256(podUID+volume name)>)."""
    return "csi-" + sha256_hex(f"{pod_uid}{volume_name}")


def unique_volume_name(driver: str, volume_handle: str) -> str:
    """What node.status.volumesInUse / volumesAttached list for a CSI volume."""
    return f"{CSI_PLUGIN_NAME}/{driver}{VOLUME_NAME_SEPARATOR}{volume_handle}"


# Go's names of the gRPC codes (codes.Code.String()), as they appear in "rpc error: code = X desc = Y".
_GO_CODE_NAMES = {grpc.StatusCode.CANCELLED: "Canceled"}


def go_code_name(code: grpc.StatusCode) -> str:
    return _GO_CODE_NAMES.get(code) or "".join(part.capitalize() for part in code.name.split("_"))


def csi_error_text(exc: CSIError) -> str:
    """A failed CSI call as upstream's events show it: the gRPC status as Go prints it, with the driver's message."""
    if exc.code is None:
        return exc.message
    return f"rpc error: code = {go_code_name(exc.code)} desc = {exc.message}"


# --- vol_data.json ------------------------------------------------------------------------------------------------


def volume_data(
    *, spec_name: str, volume_handle: str, driver: str, node_name: str, lifecycle_mode: str
) -> dict[str, str]:
    """The pod volume's vol_data.json, with upstream's keys (NewMounter)."""
    return {
        "specVolID": spec_name,
        "volumeHandle": volume_handle,
        "driverName": driver,
        "nodeName": node_name,
        "attachmentID": attachment_name(volume_handle, driver, node_name),
        "volumeLifecycleMode": lifecycle_mode,
    }


def device_data(*, volume_handle: str, driver: str) -> dict[str, str]:
    """The staging vol_data.json (MountDevice): what UnmountDevice reads back."""
    return {"volumeHandle": volume_handle, "driverName": driver}


def save_volume_data(directory: str, data: Mapping[str, str]) -> None:
    """Blocking. The whole map as one JSON object (upstream saveVolumeData), replaced atomically so a kill never
    leaves half a file for reconstruction to trip on."""
    path = os.path.join(directory, VOL_DATA_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(dict(data), f)
    os.replace(tmp, path)


def load_volume_data(directory: str) -> dict[str, str] | None:
    """Blocking; None when the file is missing or unreadable (a volume cut short before it was written)."""
    try:
        with open(os.path.join(directory, VOL_DATA_FILE), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()}


# --- the CSIDriver object -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DriverInfo:
    """What the kubelet reads from a CSIDriver object; `DriverInfo()` is what upstream assumes without one."""

    attach_required: bool = True
    pod_info_on_mount: bool = False
    fs_group_policy: str = FS_GROUP_POLICY_RWO_WITH_FSTYPE
    lifecycle_modes: tuple[str, ...] = (PERSISTENT,)
    exists: bool = False
    #: spec.tokenRequests: (audience, expirationSeconds or None) of each token the driver gets at NodePublish.
    token_requests: tuple[tuple[str, int | None], ...] = ()
    #: spec.requiresRepublish: NodePublishVolume again at every remount (the pod's periodic sync).
    requires_republish: bool = False


def driver_info(obj: Mapping[str, Any] | None) -> DriverInfo:
    """Upstream's defaults: attachRequired true, podInfoOnMount false, fsGroupPolicy ReadWriteOnceWithFSType,
    volumeLifecycleModes [Persistent]; no CSIDriver object at all means the same."""
    if obj is None:
        return DriverInfo()
    spec: Mapping[str, Any] = obj.get("spec") or {}
    attach = spec.get("attachRequired")
    modes = spec.get("volumeLifecycleModes") or [PERSISTENT]
    return DriverInfo(
        attach_required=True if attach is None else bool(attach),
        pod_info_on_mount=bool(spec.get("podInfoOnMount") or False),
        fs_group_policy=str(spec.get("fsGroupPolicy") or FS_GROUP_POLICY_RWO_WITH_FSTYPE),
        lifecycle_modes=tuple(str(m) for m in modes),
        exists=True,
        token_requests=tuple(
            (str(r.get("audience") or ""), None if r.get("expirationSeconds") is None else int(r["expirationSeconds"]))
            for r in spec.get("tokenRequests") or ()
        ),
        requires_republish=bool(spec.get("requiresRepublish") or False),
    )


def lifecycle_mode_error(driver: str, mode: str, info: DriverInfo) -> str | None:
    """Upstream supportsVolumeLifecycleMode: None when the driver serves `mode`, else why not. Without a CSIDriver
    object only persistent volumes are served."""
    if not info.exists:
        if mode == PERSISTENT:
            return None
        return f'volume mode "{mode}" not supported by driver {driver} (no CSIDriver object)'
    if mode in info.lifecycle_modes:
        return None
    listed = " ".join(f'"{m}"' for m in info.lifecycle_modes)  # Go's %q of a []string
    return f'volume mode "{mode}" not supported by driver {driver} (only supports [{listed}])'


# --- the volume, as the plugin sees it ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretRef:
    namespace: str
    name: str


@dataclass(frozen=True)
class CSIVolume:
    """One CSI volume of a pod, persistent (a PV's `csi` source) or inline ephemeral (the pod's `csi` source)."""

    #: upstream's spec.Name(): the PV's name, or the pod's volume name for an inline volume; events name it.
    spec_name: str
    driver: str
    volume_handle: str
    lifecycle_mode: str
    read_only: bool = False
    fs_type: str = ""
    access_modes: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()
    volume_attributes: Mapping[str, str] = field(default_factory=dict)
    node_stage_secret: SecretRef | None = None
    node_publish_secret: SecretRef | None = None
    #: a Block PV a container uses as a device (volumeDevices): staged, published and mapped as csiblock says.
    block: bool = False

    @property
    def ephemeral(self) -> bool:
        return self.lifecycle_mode == EPHEMERAL

    @property
    def access_mode(self) -> str:
        """Upstream takes the PV's first access mode, ReadWriteOnce when it has none (and for inline volumes)."""
        return self.access_modes[0] if self.access_modes else "ReadWriteOnce"


def _secret_ref(ref: Mapping[str, Any] | None, default_namespace: str = "") -> SecretRef | None:
    if not ref or not ref.get("name"):
        return None
    return SecretRef(str(ref.get("namespace") or default_namespace), str(ref["name"]))


def persistent_volume(pv: Mapping[str, Any], *, claim_read_only: bool) -> CSIVolume | None:
    """The CSI volume of a bound PV; None when the PV has no `csi` source. readOnly: the pod's claim says so, or the
    PV's source does (upstream: spec.ReadOnly || csiSource.ReadOnly)."""
    spec: Mapping[str, Any] = pv.get("spec") or {}
    source: Mapping[str, Any] | None = spec.get("csi")
    if source is None:
        return None
    return CSIVolume(
        spec_name=str((pv.get("metadata") or {}).get("name", "")),
        driver=str(source.get("driver", "")),
        volume_handle=str(source.get("volumeHandle", "")),
        lifecycle_mode=PERSISTENT,
        read_only=claim_read_only or bool(source.get("readOnly") or False),
        fs_type=str(source.get("fsType") or ""),
        access_modes=tuple(str(m) for m in spec.get("accessModes") or ()),
        mount_options=tuple(str(o) for o in spec.get("mountOptions") or ()),
        volume_attributes={str(k): str(v) for k, v in (source.get("volumeAttributes") or {}).items()},
        node_stage_secret=_secret_ref(source.get("nodeStageSecretRef")),
        node_publish_secret=_secret_ref(source.get("nodePublishSecretRef")),
    )


def inline_volume(pod_uid: str, pod_namespace: str, volume: Mapping[str, Any]) -> CSIVolume:
    """An inline ephemeral volume (pod.spec.volumes[].csi): its handle made from the pod and the volume, its
    nodePublishSecretRef in the pod's namespace, no staging."""
    source: Mapping[str, Any] = volume.get("csi") or {}
    name = str(volume.get("name", ""))
    return CSIVolume(
        spec_name=name,
        driver=str(source.get("driver", "")),
        volume_handle=ephemeral_volume_handle(pod_uid, name),
        lifecycle_mode=EPHEMERAL,
        read_only=bool(source.get("readOnly") or False),
        fs_type=str(source.get("fsType") or ""),
        volume_attributes={str(k): str(v) for k, v in (source.get("volumeAttributes") or {}).items()},
        node_publish_secret=_secret_ref(source.get("nodePublishSecretRef"), pod_namespace),
    )


def pod_attributes(pod: Mapping[str, Any], *, ephemeral: bool) -> dict[str, str]:
    """The pod information a podInfoOnMount driver gets in its volume_context."""
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    spec: Mapping[str, Any] = pod.get("spec") or {}
    return {
        POD_NAME_KEY: str(meta.get("name", "")),
        POD_NAMESPACE_KEY: str(meta.get("namespace", "")),
        POD_UID_KEY: str(meta.get("uid", "")),
        SERVICE_ACCOUNT_KEY: str(spec.get("serviceAccountName") or ""),
        EPHEMERAL_KEY: "true" if ephemeral else "false",
    }


SERVICE_ACCOUNT_TOKENS_KEY = "csi.storage.k8s.io/serviceAccount.tokens"
# What the TokenRequest API makes of a request without expirationSeconds.
TOKEN_REQUEST_DEFAULT_EXPIRATION = 3600


def service_account_tokens(tokens: Mapping[str, tuple[str, float]]) -> dict[str, str]:
    """The volume_context entry of a driver's tokenRequests (upstream podServiceAccountTokenAttrs): audience →
    {token, expirationTimestamp} as Go marshals a map of TokenRequestStatus (keys sorted, compact, RFC 3339)."""
    statuses = {
        audience: {"token": token, "expirationTimestamp": rfc3339(expiration)}
        for audience, (token, expiration) in sorted(tokens.items())
    }
    return {SERVICE_ACCOUNT_TOKENS_KEY: json.dumps(statuses, separators=(",", ":"))}


def rfc3339(wall: float) -> str:
    return datetime.datetime.fromtimestamp(int(wall), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def supports_fs_group(volume: CSIVolume, fs_group: int | None, policy: str) -> bool:
    """Whether the kubelet itself applies the pod's fsGroup to the published volume (upstream supportsFSGroup)."""
    if fs_group is None or policy == FS_GROUP_POLICY_NONE or volume.read_only:
        return False
    if policy == FS_GROUP_POLICY_FILE:
        return True
    if not volume.fs_type:
        return False
    if volume.ephemeral:
        return True  # upstream: an inline volume with an fsType gets it (no access modes to check)
    return any(m in ("ReadWriteOnce", "ReadWriteOncePod") for m in volume.access_modes)


def secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's data as the strings CSI wants (upstream getCredentialsFromSecret)."""
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            continue
    return out


def claim_error(namespace: str, name: str, pvc: Mapping[str, Any] | None) -> str | None:
    """Why a claim cannot be used yet, in upstream's words (desired_state_of_world_populator getPVCExtractPV)."""
    if pvc is None:
        return (
            f"error processing PVC {namespace}/{name}: failed to fetch PVC from API server: "
            f'persistentvolumeclaims "{name}" not found'
        )
    if (pvc.get("metadata") or {}).get("deletionTimestamp"):
        return f"can't start pod because PVC {namespace}/{name} is being deleted"
    phase = str((pvc.get("status") or {}).get("phase") or "")
    volume_name = str((pvc.get("spec") or {}).get("volumeName") or "")
    if phase != "Bound" or not volume_name:
        return (
            f"error processing PVC {namespace}/{name}: PVC {namespace}/{name} has non-bound phase "
            f'("{phase}") or empty pvc.Spec.VolumeName ("{volume_name}")'
        )
    return None


def bound_pv_error(
    pv_name: str, pv: Mapping[str, Any] | None, claim_uid: str, namespace: str, claim: str
) -> str | None:
    """Why a claim's PV cannot be used, in upstream's words (getPVSpec)."""
    prefix = f"error processing PVC {namespace}/{claim}: "
    if pv is None:
        return prefix + f'failed to fetch PV {pv_name} from API server: persistentvolumes "{pv_name}" not found'
    ref = (pv.get("spec") or {}).get("claimRef")
    if not ref:
        return prefix + (
            f"found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        )
    if str(ref.get("uid", "")) != claim_uid:
        return prefix + (
            f"found PV object {pv_name} but its pv.Spec.ClaimRef.UID ({ref.get('uid', '')}) does not point to "
            f"claim.UID ({claim_uid})"
        )
    return None


VOLUME_MODE_FILESYSTEM = "Filesystem"
VOLUME_MODE_BLOCK = "Block"


def volume_usage(pod: Mapping[str, Any], volume_name: str) -> tuple[bool, bool]:
    """(in some container's volumeMounts, in some container's volumeDevices) of the pod's volume, over init, regular
    and ephemeral containers (upstream GetPodVolumeNames)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    mounted = device = False
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            mounted |= any(m.get("name") == volume_name for m in container.get("volumeMounts") or [])
            device |= any(d.get("name") == volume_name for d in container.get("volumeDevices") or [])
    return mounted, device


def volume_mode_error(volume_name: str, pv: Mapping[str, Any], *, mounted: bool, device: bool) -> str | None:
    """Upstream's populator (createVolumeSpec): a claim's PV must be Filesystem where a container mounts it and
    Block where a container uses it as a device; a PV without volumeMode (the apiserver defaults it) cannot say."""
    mode = (pv.get("spec") or {}).get("volumeMode")
    if mode is None:
        return f"cannot get volumeMode for volume: {(pv.get('metadata') or {}).get('name', '')}"
    if mounted and mode != VOLUME_MODE_FILESYSTEM:
        return f"volume {volume_name} has volumeMode {mode}, but is specified in volumeMounts"
    if device and mode != VOLUME_MODE_BLOCK:
        return f"volume {volume_name} has volumeMode {mode}, but is specified in volumeDevices"
    return None


def ephemeral_claim_name(pod_name: str, volume_name: str) -> str:
    """The PVC the ephemeral-volume controller makes for a generic ephemeral volume (ephemeral.VolumeClaimName)."""
    return f"{pod_name}-{volume_name}"


def ephemeral_owner_error(pod: Mapping[str, Any], pvc: Mapping[str, Any]) -> str | None:
    """Upstream VolumeIsForPod: the claim must be controlled by the pod, or it belongs to someone else."""
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    for ref in (pvc.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and str(ref.get("uid", "")) == uid:
            return None
    pvc_meta: Mapping[str, Any] = pvc.get("metadata") or {}
    return (
        f"PVC {pvc_meta.get('namespace', '')}/{pvc_meta.get('name', '')} was not created for pod "
        f"{meta.get('namespace', '')}/{meta.get('name', '')} (pod is not owner)"
    )


def attachment_state(attachment: Mapping[str, Any] | None) -> tuple[bool, dict[str, str], str]:
    """(attached, attachmentMetadata, attachError message) of a VolumeAttachment; an absent one is not attached."""
    if attachment is None:
        return False, {}, ""
    status: Mapping[str, Any] = attachment.get("status") or {}
    error = str(((status.get("attachError") or {}).get("message")) or "")
    metadata = {str(k): str(v) for k, v in (status.get("attachmentMetadata") or {}).items()}
    return bool(status.get("attached") or False), metadata, error


@dataclass(frozen=True)
class VolumeStats:
    """A NodeGetVolumeStats answer as the kubelet's volume metrics read it (upstream csi_client.go
    NodeGetVolumeStats): zeros where the driver gave no usage of a unit; `abnormal`/`message` only when the condition
    is asked for (upstream: the CSIVolumeHealth gate and the driver's VOLUME_CONDITION capability), else None."""

    available_bytes: int = 0
    capacity_bytes: int = 0
    used_bytes: int = 0
    inodes_free: int = 0
    inodes: int = 0
    inodes_used: int = 0
    abnormal: bool | None = None
    message: str | None = None


class VolumeStatsResponseError(ValueError):
    """The driver answered without anything the kubelet can use."""


def volume_stats(response: csi_pb2.NodeGetVolumeStatsResponse, *, with_condition: bool = False) -> VolumeStats:
    """BYTES and INODES usage entries (other units ignored, as upstream); the volume condition when `with_condition`.
    As upstream: no usage and no condition to report is an error ("failed to get usage from response. usage is
    nil")."""
    if not with_condition and not response.usage:
        raise VolumeStatsResponseError("failed to get usage from response. usage is nil")
    stats = VolumeStats()
    for usage in response.usage:
        if usage.unit == csi_pb2.VolumeUsage.BYTES:
            stats = dataclasses.replace(
                stats, available_bytes=usage.available, capacity_bytes=usage.total, used_bytes=usage.used
            )
        elif usage.unit == csi_pb2.VolumeUsage.INODES:
            stats = dataclasses.replace(stats, inodes_free=usage.available, inodes=usage.total, inodes_used=usage.used)
        else:
            # A unit this proto does not name arrives as its number (open enum; Go prints the number too).
            unit = usage.unit
            name = csi_pb2.VolumeUsage.Unit.Name(unit) if unit in csi_pb2.VolumeUsage.Unit.values() else str(unit)
            log.warning("csi unknown unit in VolumeUsage unit=%s", name)
    if not with_condition:
        return stats
    condition = response.volume_condition  # unset: abnormal false, message "" (Go's getters on a nil message)
    return dataclasses.replace(stats, abnormal=condition.abnormal, message=condition.message)


def merge(*maps: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in maps:
        if m:
            out.update(m)
    return out


def sorted_unique(values: Sequence[str]) -> list[str]:
    return sorted(set(values))
