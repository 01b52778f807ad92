"""secret volumes (upstream pkg/volume/secret): the secret's data as files, on a tmpfs (secrets never touch the
node's disk), with `items`, `defaultMode` 0644 and `optional` as configMap volumes. Content follows the object.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from nodeagent.volume.atomic_writer import FileProjection
from nodeagent.volume.configmap import make_payload
from nodeagent.volume.layout import SECRET
from nodeagent.volume.plugin import Pod, Volume, VolumeHost, pod_namespace
from nodeagent.volume.projection import (
    default_mode,
    get_object,
    not_found,
    reconstruct_volume,
    tear_down_volume,
    write_volume,
)

MISSING_SECRET_KEY = "references non-existent secret key"


def secret_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            continue
    return out


async def secret_payload(
    host: VolumeHost, namespace: str, name: str, source: Mapping[str, Any], mode: int
) -> dict[str, FileProjection]:
    optional = bool(source.get("optional"))
    obj = await get_object(host, "secrets", namespace, name)
    if obj is None:
        if not optional:
            raise not_found("secrets", name)
        obj = {}
    return make_payload(source.get("items"), secret_data(obj), mode, optional=optional, missing_key=MISSING_SECRET_KEY)


class SecretPlugin:
    name = SECRET
    requires_remount = True
    read_only = True

    def __init__(self, host: VolumeHost) -> None:
        self._host = host

    def can_support(self, volume: Volume) -> bool:
        return volume.get("secret") is not None

    async def set_up(self, pod: Pod, volume: Volume) -> str:
        source: Mapping[str, Any] = volume.get("secret") or {}
        name = str(source.get("secretName", ""))
        payload = await secret_payload(self._host, pod_namespace(pod), name, source, default_mode(source))
        return await write_volume(self._host, SECRET, pod, volume, payload, memory=True)

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        await tear_down_volume(self._host, SECRET, pod_uid, volume_name)

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        return reconstruct_volume(self._host, SECRET, pod_uid, volume_name, memory=True)
