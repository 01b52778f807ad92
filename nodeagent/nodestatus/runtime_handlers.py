"""Node.status.runtimeHandlers and Node.status.features from what the runtime reported (upstream nodestatus
setters RuntimeHandlers and NodeFeatures; their feature gates, RecursiveReadOnlyMounts and
SupplementalGroupsPolicy, are on in v1.34).

Both are omitted when the runtime reports nothing: no handlers (containerd 1.7), no features message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeagent.kuberuntime.runtime_handlers import RuntimeFeatures, RuntimeHandler


def runtime_handlers_status(handlers: Sequence[RuntimeHandler]) -> list[dict[str, Any]]:
    """One NodeRuntimeHandler per handler, in the runtime's order; "" names the default handler. Both features
    are always written (pointers upstream, so false shows)."""
    return [
        {
            "name": h.name,
            "features": {
                "recursiveReadOnlyMounts": h.supports_recursive_read_only_mounts,
                "userNamespaces": h.supports_user_namespaces,
            },
        }
        for h in handlers
    ]


def node_features_status(features: RuntimeFeatures | None) -> dict[str, Any] | None:
    if features is None:
        return None
    return {"supplementalGroupsPolicy": features.supplemental_groups_policy}
