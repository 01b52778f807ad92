"""downwardAPI volumes (upstream pkg/volume/downwardapi, pkg/fieldpath): the pod's own metadata and its
containers' resources as files. Labels and annotations are rendered as upstream's FormatMap (`key="value"` lines
in key order, values quoted as Go's %q); the content follows the pod on every resync, so a label change shows in
place. Each item that cannot be rendered is an error; they are reported together, as upstream's aggregate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.kuberuntime.container_config import _resource_field_value, downward_api_allocatable
from nodeagent.kuberuntime.errors import KubeRuntimeError
from nodeagent.volume.atomic_writer import FileProjection
from nodeagent.volume.errors import SetUpError
from nodeagent.volume.layout import DOWNWARD_API
from nodeagent.volume.plugin import Pod, Volume, VolumeHost
from nodeagent.volume.projection import (
    aggregate,
    default_mode,
    reconstruct_volume,
    tear_down_volume,
    write_volume,
)

_SHORT_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's strconv.Quote: a double-quoted literal, printable characters kept, the rest escaped."""
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def format_map(values: Mapping[str, Any]) -> str:
    """Upstream fieldpath.FormatMap: `key="value"` per line, sorted by key, no trailing newline."""
    return "\n".join(f"{key}={go_quote(str(values[key]))}" for key in sorted(values))


def field_path_value(pod: Pod, path: str) -> str:
    """Upstream ExtractFieldPathAsString, for what a volume may ask (metadata only)."""
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    for prefix, key in (("metadata.annotations", "annotations"), ("metadata.labels", "labels")):
        if path == prefix:
            return format_map(meta.get(key) or {})
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((meta.get(key) or {}).get(path[len(prefix) + 2 : -2], ""))
    simple = {"metadata.name": "name", "metadata.namespace": "namespace", "metadata.uid": "uid"}
    if path in simple:
        return str(meta.get(simple[path], ""))
    raise SetUpError(f"unsupported fieldPath: {path}")


def resource_field_value(pod: Pod, ref: Mapping[str, Any], node_allocatable: Mapping[str, str]) -> str:
    spec: Mapping[str, Any] = pod.get("spec") or {}
    name = str(ref.get("containerName", ""))
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    found = [c for c in containers if c.get("name") == name]
    if not found:
        raise SetUpError(f"container {name} not found")
    try:
        return _resource_field_value(
            found[0], str(ref.get("resource", "")), ref.get("divisor"), downward_api_allocatable(pod, node_allocatable)
        )
    except KubeRuntimeError as exc:
        raise SetUpError(str(exc)) from exc


def collect_data(
    items: Sequence[Mapping[str, Any]], pod: Pod, node_allocatable: Mapping[str, str], mode: int
) -> dict[str, FileProjection]:
    """Upstream CollectData: one file per item (the item's mode or the default); errors reported together."""
    payload: dict[str, FileProjection] = {}
    errors: list[str] = []
    for item in items:
        item_mode = item.get("mode")
        data = b""
        try:
            if (field_ref := item.get("fieldRef")) is not None:
                data = field_path_value(pod, str(field_ref.get("fieldPath", ""))).encode()
            elif (resource_ref := item.get("resourceFieldRef")) is not None:
                data = resource_field_value(pod, resource_ref, node_allocatable).encode()
        except SetUpError as exc:
            errors.append(str(exc))
        payload[str(item.get("path", ""))] = FileProjection(data, int(item_mode) if item_mode is not None else mode)
    if errors:
        raise SetUpError(aggregate(errors))
    return payload


class DownwardAPIPlugin:
    name = DOWNWARD_API
    requires_remount = True
    read_only = True

    def __init__(self, host: VolumeHost) -> None:
        self._host = host

    def can_support(self, volume: Volume) -> bool:
        return volume.get("downwardAPI") is not None

    async def set_up(self, pod: Pod, volume: Volume) -> str:
        source: Mapping[str, Any] = volume.get("downwardAPI") or {}
        payload = collect_data(source.get("items") or [], pod, self._host.node_allocatable, default_mode(source))
        return await write_volume(self._host, DOWNWARD_API, pod, volume, payload, memory=False)

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        await tear_down_volume(self._host, DOWNWARD_API, pod_uid, volume_name)

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        return reconstruct_volume(self._host, DOWNWARD_API, pod_uid, volume_name, memory=False)
