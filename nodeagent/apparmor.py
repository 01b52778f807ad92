"""AppArmor: which profile a container asks for, and whether this host can enforce it (upstream:
pkg/security/apparmor, helpers.go and validate.go; the host check is libcontainer's apparmor.IsEnabled).

A container's profile is, first found: its own `securityContext.appArmorProfile`, the deprecated annotation
`container.apparmor.security.beta.kubernetes.io/<container>` ("runtime/default", "unconfined" or
"localhost/<name>"; any other value is ignored), then the pod's `securityContext.appArmorProfile`. The kubelet
still reads the annotation in v1.34, so it counts here as upstream counts it.

A pod *requires* AppArmor when a profile other than Unconfined is asked for anywhere. On a host without AppArmor
such a pod is refused at admission (reason `AppArmor`, "Cannot enforce AppArmor: AppArmor is not enabled on the
host"). Where the host has it, the profile goes to CRI (container_config) as upstream's getAppArmorProfile.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
RUNTIME_DEFAULT = "RuntimeDefault"
UNCONFINED = "Unconfined"
LOCALHOST = "Localhost"
# The deprecated annotation's values (v1.DeprecatedAppArmorBeta*), also what CRI's apparmor_profile carries.
DEPRECATED_RUNTIME_DEFAULT = "runtime/default"
DEPRECATED_UNCONFINED = "unconfined"
DEPRECATED_LOCALHOST_PREFIX = "localhost/"

NOT_ADMITTED_REASON = "AppArmor"

_SECURITYFS = Path("/sys/kernel/security/apparmor")
_ENABLED_PARAMETER = Path("/sys/module/apparmor/parameters/enabled")


@dataclass(frozen=True)
class Profile:
    type: str
    localhost_profile: str | None = None


def _containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    spec: Mapping[str, Any] = pod.get("spec") or {}
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or ()


def _field_profile(value: Mapping[str, Any] | None) -> Profile | None:
    if value is None:
        return None
    local = value.get("localhostProfile")
    return Profile(type=str(value.get("type") or ""), localhost_profile=None if local is None else str(local))


def _annotation_profile(annotations: Mapping[str, Any], container_name: str) -> Profile | None:
    value = annotations.get(ANNOTATION_PREFIX + container_name)
    if value is None:
        return None
    value = str(value)
    if value == DEPRECATED_RUNTIME_DEFAULT:
        return Profile(RUNTIME_DEFAULT)
    if value == DEPRECATED_UNCONFINED:
        return Profile(UNCONFINED)
    if value.startswith(DEPRECATED_LOCALHOST_PREFIX):
        return Profile(LOCALHOST, value.removeprefix(DEPRECATED_LOCALHOST_PREFIX))
    return None


def get_profile(pod: Mapping[str, Any], container: Mapping[str, Any]) -> Profile | None:
    """The container's profile (upstream GetProfile), or None when nothing asks for one."""
    own = _field_profile((container.get("securityContext") or {}).get("appArmorProfile"))
    if own is not None:
        return own
    annotations: Mapping[str, Any] = (pod.get("metadata") or {}).get("annotations") or {}
    annotated = _annotation_profile(annotations, str(container.get("name", "")))
    if annotated is not None:
        return annotated
    return _field_profile(((pod.get("spec") or {}).get("securityContext") or {}).get("appArmorProfile"))


def is_required(pod: Mapping[str, Any]) -> bool:
    """Upstream isRequired: a profile other than Unconfined on the pod, on any container, or in any deprecated
    annotation. (Upstream reads only the first annotation its map iteration meets; with several, some asking and
    some unconfined, its answer varies from run to run. Here any annotation asking for a profile counts.)"""
    pod_profile = ((pod.get("spec") or {}).get("securityContext") or {}).get("appArmorProfile")
    if pod_profile is not None and pod_profile.get("type") != UNCONFINED:
        return True
    for container in _containers(pod):
        profile = (container.get("securityContext") or {}).get("appArmorProfile")
        if profile is not None and profile.get("type") != UNCONFINED:
            return True
    annotations: Mapping[str, Any] = (pod.get("metadata") or {}).get("annotations") or {}
    return any(
        str(key).startswith(ANNOTATION_PREFIX) and str(value) != DEPRECATED_UNCONFINED
        for key, value in annotations.items()
    )


@functools.cache
def host_enabled() -> bool:
    """Whether this host enforces AppArmor (libcontainer apparmor.IsEnabled): securityfs has apparmor and the
    module's `enabled` parameter starts with Y. Read once, as upstream's sync.Once."""
    if not _SECURITYFS.exists():
        return False
    try:
        text = _ENABLED_PARAMETER.read_bytes()
    except OSError:
        return False
    return len(text) > 1 and text[:1] == b"Y"


def validate(pod: Mapping[str, Any], *, host_apparmor: bool) -> str | None:
    """Upstream's validator: None when the pod may run here, else why not (the admission message is
    "Cannot enforce AppArmor: " + this)."""
    if not is_required(pod):
        return None
    if not host_apparmor:
        return "AppArmor is not enabled on the host"
    for container in _containers(pod):
        profile = get_profile(pod, container)
        if profile is not None and profile.type == LOCALHOST and not (profile.localhost_profile or "").strip():
            # Upstream prints the profile struct with %q; its Go formatting is not reproduced.
            return f'invalid empty AppArmor profile name: "{profile.localhost_profile or ""}"'
    return None
