"""configMap volumes (upstream pkg/volume/configmap): the object's data (and binaryData) as files, all keys or the
listed `items` (key → path, mode), `defaultMode` 0644, `optional`. Content follows the object on every resync.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.volume.atomic_writer import FileProjection
from nodeagent.volume.errors import SetUpError
from nodeagent.volume.layout import CONFIG_MAP
from nodeagent.volume.plugin import Pod, Volume, VolumeHost, pod_namespace
from nodeagent.volume.projection import (
    default_mode,
    get_object,
    not_found,
    reconstruct_volume,
    tear_down_volume,
    write_volume,
)


def config_map_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """data (text) and binaryData (base64 on the wire) as bytes."""
    out = {str(k): str(v).encode() for k, v in (obj.get("data") or {}).items()}
    for key, value in (obj.get("binaryData") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            continue
    return out


def make_payload(
    items: Sequence[Mapping[str, Any]] | None,
    data: Mapping[str, bytes],
    mode: int,
    *,
    optional: bool,
    missing_key: str,
) -> dict[str, FileProjection]:
    """Upstream's MakePayload (configmap and secret alike): every key, or the items; a listed key that is missing
    is an error unless the volume is optional, where it is left out. `missing_key` is the message prefix."""
    if not items:
        return {key: FileProjection(value, mode) for key, value in data.items()}
    payload: dict[str, FileProjection] = {}
    for item in items:
        key = str(item.get("key", ""))
        if key not in data:
            if optional:
                continue
            raise SetUpError(f"{missing_key}: {key}")
        item_mode = item.get("mode")
        payload[str(item.get("path", ""))] = FileProjection(
            data[key], int(item_mode) if item_mode is not None else mode
        )
    return payload


MISSING_CONFIG_KEY = "configmap references non-existent config key"


async def config_map_payload(
    host: VolumeHost, namespace: str, source: Mapping[str, Any], mode: int
) -> dict[str, FileProjection]:
    name = str(source.get("name", ""))
    optional = bool(source.get("optional"))
    obj = await get_object(host, "configmaps", namespace, name)
    if obj is None:
        if not optional:
            raise not_found("configmaps", name)
        obj = {}
    return make_payload(
        source.get("items"), config_map_data(obj), mode, optional=optional, missing_key=MISSING_CONFIG_KEY
    )


class ConfigMapPlugin:
    name = CONFIG_MAP
    requires_remount = True
    read_only = True

    def __init__(self, host: VolumeHost) -> None:
        self._host = host

    def can_support(self, volume: Volume) -> bool:
        return volume.get("configMap") is not None

    async def set_up(self, pod: Pod, volume: Volume) -> str:
        source: Mapping[str, Any] = volume.get("configMap") or {}
        payload = await config_map_payload(self._host, pod_namespace(pod), source, default_mode(source))
        return await write_volume(self._host, CONFIG_MAP, pod, volume, payload, memory=False)

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        await tear_down_volume(self._host, CONFIG_MAP, pod_uid, volume_name)

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        return reconstruct_volume(self._host, CONFIG_MAP, pod_uid, volume_name, memory=False)
