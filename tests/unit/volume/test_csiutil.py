"""The pure parts of the kubernetes.io/csi plugin: names, paths, CSIDriver defaults, fsGroup, error texts."""

from __future__ import annotations

import hashlib
from typing import Any

import grpc
import pytest

from csi.errors import CSIError, RequestError, UnknownCSIError
from nodeagent.volume import csiutil
from nodeagent.volume.csiutil import CSIVolume, DriverInfo


def test_names_and_paths_follow_upstream() -> None:
    sha = hashlib.sha256(b"vol-1").hexdigest()
    assert csiutil.device_mount_path("/var/lib/kubelet", "d.example.com", "vol-1") == (
        f"/var/lib/kubelet/plugins/kubernetes.io/csi/d.example.com/{sha}/globalmount"
    )
    assert csiutil.attachment_name("vol-1", "d", "n") == "csi-" + hashlib.sha256(b"vol-1dn").hexdigest()
    assert csiutil.ephemeral_volume_handle("uid", "vol") == "csi-" + hashlib.sha256(b"uidvol").hexdigest()
    assert csiutil.unique_volume_name("d", "vol-1") == "kubernetes.io/csi/d^vol-1"


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (grpc.StatusCode.INTERNAL, "Internal"),
        (grpc.StatusCode.CANCELLED, "Canceled"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "DeadlineExceeded"),
        (grpc.StatusCode.FAILED_PRECONDITION, "FailedPrecondition"),
        (grpc.StatusCode.NOT_FOUND, "NotFound"),
        (grpc.StatusCode.UNAVAILABLE, "Unavailable"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "ResourceExhausted"),
    ],
)
def test_go_code_names(code: grpc.StatusCode, name: str) -> None:
    assert csiutil.go_code_name(code) == name


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (
            UnknownCSIError("/csi.v1.Node/NodeStageVolume", grpc.StatusCode.INTERNAL, "boom"),
            "rpc error: code = Internal desc = boom",
        ),
        (RequestError("/csi.v1.Node/NodeStageVolume", None, "missing volume id"), "missing volume id"),
    ],
)
def test_csi_error_text(error: CSIError, text: str) -> None:
    assert csiutil.csi_error_text(error) == text


@pytest.mark.parametrize(
    ("obj", "info"),
    [
        (
            None,
            DriverInfo(attach_required=True, pod_info_on_mount=False, lifecycle_modes=("Persistent",), exists=False),
        ),
        ({"spec": {}}, DriverInfo(exists=True)),
        (
            {
                "spec": {
                    "attachRequired": False,
                    "podInfoOnMount": True,
                    "fsGroupPolicy": "File",
                    "volumeLifecycleModes": ["Ephemeral"],
                }
            },
            DriverInfo(False, True, "File", ("Ephemeral",), True),
        ),
    ],
)
def test_driver_info_defaults(obj: dict[str, Any] | None, info: DriverInfo) -> None:
    assert csiutil.driver_info(obj) == info


def _vol(**kw: Any) -> CSIVolume:
    base: dict[str, Any] = {
        "spec_name": "pv",
        "driver": "d",
        "volume_handle": "h",
        "lifecycle_mode": "Persistent",
        "fs_type": "ext4",
        "access_modes": ("ReadWriteOnce",),
    }
    base.update(kw)
    return CSIVolume(**base)


@pytest.mark.parametrize(
    ("volume", "fs_group", "policy", "applies"),
    [
        (_vol(), 1000, "ReadWriteOnceWithFSType", True),
        (_vol(), None, "ReadWriteOnceWithFSType", False),
        (_vol(), 1000, "None", False),
        (_vol(read_only=True), 1000, "File", False),
        (_vol(fs_type=""), 1000, "ReadWriteOnceWithFSType", False),
        (_vol(fs_type=""), 1000, "File", True),
        (_vol(access_modes=("ReadWriteMany",)), 1000, "ReadWriteOnceWithFSType", False),
        (_vol(access_modes=("ReadWriteOncePod",)), 1000, "ReadWriteOnceWithFSType", True),
        (_vol(lifecycle_mode="Ephemeral", access_modes=()), 1000, "ReadWriteOnceWithFSType", True),
    ],
)
def test_supports_fs_group(volume: CSIVolume, fs_group: int | None, policy: str, applies: bool) -> None:
    assert csiutil.supports_fs_group(volume, fs_group, policy) is applies


def test_persistent_volume_source() -> None:
    pv = {
        "metadata": {"name": "pv-1"},
        "spec": {
            "accessModes": ["ReadOnlyMany", "ReadWriteOnce"],
            "csi": {
                "driver": "d",
                "volumeHandle": "h",
                "readOnly": True,
                "volumeAttributes": {"a": "b"},
                "nodeStageSecretRef": {"name": "s", "namespace": "ns"},
            },
        },
    }
    vol = csiutil.persistent_volume(pv, claim_read_only=False)
    assert vol is not None
    assert (vol.spec_name, vol.access_mode, vol.read_only, vol.fs_type) == ("pv-1", "ReadOnlyMany", True, "")
    assert vol.node_stage_secret == csiutil.SecretRef("ns", "s")
    assert vol.node_publish_secret is None
    assert csiutil.persistent_volume({"spec": {"nfs": {}}}, claim_read_only=False) is None


def test_inline_volume_secret_is_in_the_pods_namespace() -> None:
    vol = csiutil.inline_volume(
        "u", "team", {"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}
    )
    assert vol.node_publish_secret == csiutil.SecretRef("team", "s")
    assert vol.access_mode == "ReadWriteOnce"
    assert vol.ephemeral


def test_secret_data_decodes_and_skips_garbage() -> None:
    assert csiutil.secret_data({"data": {"a": "aGk=", "b": "***"}}) == {"a": "hi"}


def test_attachment_state() -> None:
    assert csiutil.attachment_state(None) == (False, {}, "")
    assert csiutil.attachment_state({"status": {"attached": True, "attachmentMetadata": {"k": "v"}}}) == (
        True,
        {"k": "v"},
        "",
    )
    assert csiutil.attachment_state({"status": {"attachError": {"message": "m"}}}) == (False, {}, "m")


@pytest.mark.parametrize(
    ("info", "mode", "error"),
    [
        (DriverInfo(), "Persistent", None),
        (DriverInfo(), "Ephemeral", 'volume mode "Ephemeral" not supported by driver d (no CSIDriver object)'),
        (DriverInfo(lifecycle_modes=("Persistent", "Ephemeral"), exists=True), "Ephemeral", None),
        (
            DriverInfo(lifecycle_modes=("Ephemeral",), exists=True),
            "Persistent",
            'volume mode "Persistent" not supported by driver d (only supports ["Ephemeral"])',
        ),
    ],
)
def test_lifecycle_mode_error(info: DriverInfo, mode: str, error: str | None) -> None:
    assert csiutil.lifecycle_mode_error("d", mode, info) == error
