"""The CRI mounts of one container from its volumeMounts and the pod's set-up volumes (upstream kubelet_pods.go
makeMounts): readOnly (forced for the API data volumes), subPath and subPathExpr through the guard in
`nodeagent.volume.subpath`, mountPropagation, recursiveReadOnly (`kuberuntime.recursive_read_only`). Problems
are `CreateContainerConfigError`s in upstream's words, which the runtime manager reports as the container's
waiting reason and a Failed event.
"""

from __future__ import annotations

import logging
import os
import posixpath
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cri.v1 import api_pb2
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.kuberuntime.expansion import expand
from nodeagent.kuberuntime.recursive_read_only import (
    RecursiveReadOnlyError,
    mount_error_message,
    resolve_recursive_read_only,
)
from nodeagent.volume.errors import MountError, SubPathError
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.mounter import Mounter
from nodeagent.volume.subpath import bind_subpath, safe_make_dir, validate_subpath

log = logging.getLogger(__name__)

_PROPAGATION = {
    "": api_pb2.PROPAGATION_PRIVATE,
    "None": api_pb2.PROPAGATION_PRIVATE,
    "HostToContainer": api_pb2.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": api_pb2.PROPAGATION_BIDIRECTIONAL,
}


@dataclass(frozen=True)
class PodVolume:
    """A set-up volume as containers see it: where it is on the host, and whether its plugin forces read-only."""

    host_path: str
    read_only: bool = False


def referenced_names(text: str) -> list[str]:
    """The `$(NAME)` references of `text`, parsed as `expand` parses them (`$$` escapes)."""
    names: list[str] = []
    i = 0
    while i < len(text) - 1:
        if text[i] != "$":
            i += 1
            continue
        if text[i + 1] == "$":
            i += 2
        elif text[i + 1] == "(" and (close := text.find(")", i + 2)) != -1:
            names.append(text[i + 2 : close])
            i = close + 1
        else:
            i += 2
    return names


def expand_subpath_expr(expr: str, env: Mapping[str, str]) -> str:
    """Upstream ExpandContainerVolumeMounts: a variable that is unset or empty is an error."""
    missing = sorted({name for name in referenced_names(expr) if not env.get(name)})
    if missing:
        raise CreateContainerConfigError(f"missing value for {', '.join(missing)}")
    return expand(expr, env)


def mount_propagation(container: Mapping[str, Any], mode: str | None) -> int:
    value = _PROPAGATION.get(mode or "")
    if value is None:
        raise CreateContainerConfigError(f'invalid MountPropagation mode: "{mode}"')
    if value == api_pb2.PROPAGATION_BIDIRECTIONAL and not (container.get("securityContext") or {}).get("privileged"):
        # The API refuses it for unprivileged containers; static pods are not validated by the API.
        raise CreateContainerConfigError("Bidirectional mount propagation is available only to privileged containers")
    return value


def make_mounts(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    volumes: Mapping[str, PodVolume],
    env: Callable[[], Sequence[tuple[str, str]]],
    *,
    dirs: PodDirs,
    mounter: Mounter,
    supports_rro: bool = False,
) -> list[api_pb2.Mount]:
    """Blocking (subPath preparation mounts): run it in a thread. `supports_rro`: the pod's runtime handler makes
    recursive read-only mounts."""
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    cname = str(container.get("name", ""))
    env_map: dict[str, str] | None = None
    mounts: list[api_pb2.Mount] = []
    for index, vm in enumerate(container.get("volumeMounts") or []):
        name = str(vm.get("name", ""))
        volume = volumes.get(name)
        if volume is None:
            raise CreateContainerConfigError(f'cannot find volume "{name}" to mount into container "{cname}"')
        host_path = volume.host_path
        sub = str(vm.get("subPath") or "")
        if vm.get("subPathExpr"):
            if env_map is None:
                env_map = dict(env())
            sub = expand_subpath_expr(str(vm["subPathExpr"]), env_map)
        if sub:
            host_path = _prepare_subpath(
                uid, cname, name, index, sub=sub, volume_path=volume.host_path, dirs=dirs, mounter=mounter
            )
        propagation = mount_propagation(container, vm.get("mountPropagation"))
        try:
            rro = resolve_recursive_read_only(vm, supports_rro)
        except RecursiveReadOnlyError as exc:
            raise CreateContainerConfigError(mount_error_message(exc)) from exc
        container_path = str(vm.get("mountPath", ""))
        mounts.append(
            api_pb2.Mount(
                container_path=container_path if container_path.startswith("/") else "/" + container_path,
                host_path=host_path,
                readonly=bool(vm.get("readOnly")) or volume.read_only,
                recursive_read_only=rro,
                propagation=propagation,  # type: ignore[arg-type]
            )
        )
    return mounts


def _prepare_subpath(
    uid: str, cname: str, name: str, index: int, *, sub: str, volume_path: str, dirs: PodDirs, mounter: Mounter
) -> str:
    try:
        validate_subpath(sub)
    except SubPathError as exc:
        raise CreateContainerConfigError(exc.message) from exc
    path = posixpath.join(volume_path, sub)
    if not os.path.lexists(path):
        # Made now, with the volume root's mode, rather than by the runtime later with whatever it picks.
        try:
            safe_make_dir(sub, volume_path, stat.S_IMODE(os.stat(volume_path).st_mode))
        except OSError as exc:
            log.warning("subPath directory refused pod=%s container=%s volumeMount=%s error=%s", uid, cname, name, exc)
            raise CreateContainerConfigError(
                f'failed to create subPath directory for volumeMount "{name}" of container "{cname}"'
            ) from exc
    try:
        return bind_subpath(
            mounter, path=path, volume_path=volume_path, target=dirs.subpath_target(uid, name, cname, index)
        )
    except (OSError, MountError) as exc:
        # Upstream keeps the host's details out of the user's message; the log has them.
        log.warning("subPath refused pod=%s container=%s volumeMount=%s error=%s", uid, cname, name, exc)
        raise CreateContainerConfigError(
            f'failed to prepare subPath for volumeMount "{name}" of container "{cname}"'
        ) from exc
