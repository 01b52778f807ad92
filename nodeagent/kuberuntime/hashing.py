"""A stable hash of a container's spec: a change means the running container no longer matches and is restarted.

Upstream (HashContainer) now hashes only name and image, because those are the only container fields a pod update may
change. Static pods are the exception: their file may change any field while the pod keeps its name, so we hash the
whole container dict, canonicalised as sorted-key compact JSON, and exclude what changes without a restart:

- `resources` and `resizePolicy`: an in-place resize changes them without a restart (`actions.compute_resize_action`
  decides whether the resize policy restarts the container). Upstream also leaves resources out.

Empty values (None, "", [], {}) are dropped before hashing, so a defaulted-empty field and a missing one hash alike.
The result is the first 16 hex digits of SHA-256: stable across processes and Python versions (unlike `hash()`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

EXCLUDED_FIELDS = frozenset({"resources", "resizePolicy"})


def _prune(value: Any) -> Any:
    if isinstance(value, Mapping):
        pruned = {str(k): _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, "", [], {})}
    if isinstance(value, list | tuple):
        return [_prune(v) for v in value]
    return value


def hash_container(container: Mapping[str, Any]) -> str:
    """Hex digest of the container spec without the fields that change in place."""
    hashable = {k: v for k, v in container.items() if k not in EXCLUDED_FIELDS}
    canonical = json.dumps(_prune(hashable), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
