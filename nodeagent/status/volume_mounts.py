"""containerStatuses[].volumeMounts (v1.VolumeMountStatus), as convertToAPIContainerStatuses writes them.

The CRI knows no volume names, so upstream builds them from the spec: name, mountPath, readOnly as the spec says
(not the read-only that a ConfigMap or Secret volume forces), and for a read-only mount the recursiveReadOnly
mode it was resolved to: Enabled or Disabled, never IfPossible. A mode that cannot be honoured shows as Disabled
(the container itself waits with CreateContainerConfigError). A status built from a runtime container keeps the
previous status's list (it is immutable once written); see `container_status`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodeagent.kuberuntime.recursive_read_only import (
    DISABLED,
    ENABLED,
    RecursiveReadOnlyError,
    resolve_recursive_read_only,
)
from nodeagent.status._common import JSON

log = logging.getLogger(__name__)


def volume_mount_statuses(container: Mapping[str, Any], *, supports_rro: bool) -> list[JSON]:
    """One VolumeMountStatus per volumeMounts entry of the spec `container`, in its order (JSON with upstream's
    omitempty: readOnly only when true)."""
    statuses: list[JSON] = []
    for mount in container.get("volumeMounts") or ():
        status: JSON = {"name": mount.get("name", ""), "mountPath": mount.get("mountPath", "")}
        if mount.get("readOnly"):
            status["readOnly"] = True
            mode = DISABLED
            try:
                if resolve_recursive_read_only(mount, supports_rro):
                    mode = ENABLED
            except RecursiveReadOnlyError as exc:
                # Reported where it matters, as the container's CreateContainerConfigError and its event.
                log.debug("recursive read-only mode not resolved container=%s error=%s", container.get("name"), exc)
            status["recursiveReadOnly"] = mode
        statuses.append(status)
    return statuses
