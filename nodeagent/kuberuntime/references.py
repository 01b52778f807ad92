"""ConfigMaps and Secrets a pod refers to, fetched before its containers are built, and registry credentials.

`make_container_config` is pure and takes plain lookups; this module fetches what a container's env and envFrom
name (through an injected async fetcher, the apiserver in the agent) and turns the pod's imagePullSecrets into the
CRI AuthConfig for an image's registry (`.dockerconfigjson` and `.dockercfg`, as upstream's credential provider).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cri.v1 import api_pb2

# (resource, namespace, name) -> the object, or None when it does not exist. resource: "configmaps" | "secrets".
ObjectFetcher = Callable[[str, str, str], Awaitable[Mapping[str, Any] | None]]
Lookup = Callable[[str, str], Mapping[str, str] | None]


def referenced_names(container: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The ConfigMap and Secret names a container's env and envFrom use."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    for source in container.get("envFrom") or []:
        if (ref := source.get("configMapRef")) and ref.get("name"):
            config_maps.add(str(ref["name"]))
        if (ref := source.get("secretRef")) and ref.get("name"):
            secrets.add(str(ref["name"]))
    for env in container.get("env") or []:
        value_from = env.get("valueFrom") or {}
        if (ref := value_from.get("configMapKeyRef")) and ref.get("name"):
            config_maps.add(str(ref["name"]))
        if (ref := value_from.get("secretKeyRef")) and ref.get("name"):
            secrets.add(str(ref["name"]))
    return config_maps, secrets


def _decoded(secret: Mapping[str, Any]) -> dict[str, str]:
    out = {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()}
    out.update({k: str(v) for k, v in (secret.get("stringData") or {}).items()})
    return out


async def lookups_for(
    fetch: ObjectFetcher | None, namespace: str, container: Mapping[str, Any]
) -> tuple[Lookup, Lookup]:
    config_maps, secrets = referenced_names(container)
    found: dict[tuple[str, str], Mapping[str, str] | None] = {}
    for resource, names in (("configmaps", config_maps), ("secrets", secrets)):
        for name in names:
            obj = await fetch(resource, namespace, name) if fetch is not None else None
            if obj is None:
                found[(resource, name)] = None
            elif resource == "secrets":
                found[(resource, name)] = _decoded(obj)
            else:
                found[(resource, name)] = {k: str(v) for k, v in (obj.get("data") or {}).items()}

    def config_map(ns: str, name: str) -> Mapping[str, str] | None:
        return found.get(("configmaps", name)) if ns == namespace else None

    def secret(ns: str, name: str) -> Mapping[str, str] | None:
        return found.get(("secrets", name)) if ns == namespace else None

    return config_map, secret


def registry_host(image: str) -> str:
    """The registry of an image reference, as the Docker reference rules name it (docker.io by default)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _normalise(key: str) -> str:
    key = key.removeprefix("https://").removeprefix("http://")
    host = key.split("/", 1)[0]
    return "docker.io" if host in ("index.docker.io", "registry-1.docker.io") else host


def _auths(secret: Mapping[str, Any]) -> Mapping[str, Any]:
    data = _decoded(secret)
    if ".dockerconfigjson" in data:
        parsed = json.loads(data[".dockerconfigjson"])
        auths: Mapping[str, Any] = parsed.get("auths") or {}
        return auths
    if ".dockercfg" in data:
        legacy: Mapping[str, Any] = json.loads(data[".dockercfg"])
        return legacy
    return {}


async def pull_auth(fetch: ObjectFetcher | None, pod: Mapping[str, Any], image: str) -> api_pb2.AuthConfig | None:
    """Credentials for `image` from the pod's imagePullSecrets, the first that names its registry; else None."""
    names = [str(s.get("name")) for s in (pod.get("spec") or {}).get("imagePullSecrets") or [] if s.get("name")]
    if fetch is None or not names:
        return None
    host = registry_host(image)
    namespace = str((pod.get("metadata") or {}).get("namespace", "default"))
    for name in names:
        secret = await fetch("secrets", namespace, name)
        if secret is None:
            continue
        try:
            auths = _auths(secret)
        except (ValueError, TypeError):
            continue
        for key, entry in auths.items():
            if _normalise(key) != host or not isinstance(entry, Mapping):
                continue
            username, password = str(entry.get("username", "")), str(entry.get("password", ""))
            if entry.get("auth"):
                username, _, password = base64.b64decode(str(entry["auth"])).decode(errors="replace").partition(":")
            return api_pb2.AuthConfig(username=username, password=password, server_address=host)
    return None
