"""Recursive read-only mounts (KEP-3857, `volumeMounts[].recursiveReadOnly`; the feature is GA and
locked on since v1.33).

A read-only bind mount leaves the mounts below it writable; a recursive read-only one (mount_setattr(2) with
AT_RECURSIVE) does not. Only the runtime can make one, and it says per runtime handler whether it can (CRI Status'
`runtime_handlers[].features.recursive_read_only_mounts`; see `runtime_handlers`). The pod asks with a mode:

- Disabled (or nothing): a plain read-only mount, as before;
- IfPossible: recursive where the pod's handler supports it, else plain;
- Enabled: recursive, or the container is not created (CreateContainerConfigError).

Upstream's resolveRecursiveReadOnly (kubelet_pods.go), with its error texts. A runtime that reports no handlers
(containerd 1.7) supports it for none, so `Enabled` fails there, as it does upstream.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from nodeagent.kuberuntime.errors import KubeRuntimeError

DISABLED: Final = "Disabled"
IF_POSSIBLE: Final = "IfPossible"
ENABLED: Final = "Enabled"


class RecursiveReadOnlyError(KubeRuntimeError):
    """The mount's recursive read-only mode cannot be honoured; makeMounts reports it, wrapped, as the container's
    CreateContainerConfigError."""

    reason = "CreateContainerConfigError"


def _q(value: Any) -> str:
    # Go's %q for the strings these messages carry (DNS-label volume names, mode and propagation words).
    return json.dumps(str(value), ensure_ascii=False)


def resolve_recursive_read_only(mount: Mapping[str, Any], runtime_supports_rro: bool) -> bool:
    """Whether `mount` (one volumeMounts entry) is made recursively read-only; RecursiveReadOnlyError when its mode
    cannot be honoured. Checked in upstream's order: the mode, readOnly, the propagation, then the runtime."""
    mode = mount.get("recursiveReadOnly")
    if mode is None or mode == DISABLED:
        return False
    name = mount.get("name", "")
    if not mount.get("readOnly"):
        raise RecursiveReadOnlyError(f"volume {_q(name)} requested recursive read-only mode, but it is not read-only")
    propagation = mount.get("mountPropagation")
    if propagation is not None and propagation != "None":
        raise RecursiveReadOnlyError(
            f"volume {_q(name)} requested recursive read-only mode, but it is not compatible with propagation "
            f"{_q(propagation)}"
        )
    if mode == IF_POSSIBLE:
        return runtime_supports_rro
    if mode == ENABLED:
        if not runtime_supports_rro:
            raise RecursiveReadOnlyError(
                f"volume {_q(name)} requested recursive read-only mode, but it is not supported by the runtime"
            )
        return True
    raise RecursiveReadOnlyError(f"unknown recursive read-only mode {_q(mode)}")


def mount_error_message(error: RecursiveReadOnlyError) -> str:
    """The text makeMounts wraps the error in, which the container's waiting message and Failed event carry."""
    return f"failed to resolve recursive read-only mode: {error}"
