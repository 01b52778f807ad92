"""The stats provider's one error: the summary or the container list could not be made (the runtime did not
answer, the root cgroup is missing). The kubelet API answers it with 500 "Internal Error: ...", as upstream's
stats handler does."""

from __future__ import annotations


class StatsError(RuntimeError):
    pass
