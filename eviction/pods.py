"""Plain values for the pods the eviction manager ranks: what their spec says (`PodInfo`) and what they use
(`PodUsage`, a subset of the kubelet's stats summary for one pod).

The wiring fills these from the pod objects and nodeagent's stats provider; the decisions here never read a pod
object or a file. Amounts are whole bytes or counts. Requests and limits are `Quantity` values, so messages print
them as the API wrote them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from eviction.quantity import ZERO, Quantity

# As upstream (pkg/apis/scheduling): priorities at or above this are system-critical (2 * 1e9).
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000


class QOSClass(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # "Equal" or "Exists"; the API's empty operator means Equal
    value: str = ""
    effect: str = ""  # empty tolerates every effect

    def tolerates(self, key: str, effect: str, value: str = "") -> bool:
        """corev1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("", "Equal"):
            return self.value == value
        return False


@dataclass(frozen=True)
class ContainerInfo:
    """A regular or init container's requests and limits (ephemeral containers never get the blame, as upstream)."""

    name: str
    init: bool = False  # init containers count for the message, not for the container storage limit
    memory_request: Quantity = ZERO
    ephemeral_storage_request: Quantity = ZERO
    ephemeral_storage_limit: Quantity | None = None


@dataclass(frozen=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    qos: QOSClass = QOSClass.BEST_EFFORT
    priority: int = 0  # spec.priority; unset is 0, as upstream's PodPriority
    static: bool = False  # from a file or URL source, not the apiserver
    mirror: bool = False  # carries kubernetes.io/config.mirror
    # The pod's effective requests, as upstream's GetResourceRequestQuantity (the pod-level request alone when
    # pod-level resources are set, else the containers' as the scheduler sums them; plus the overhead when not zero).
    memory_request: int = 0
    ephemeral_storage_request: int = 0
    # Pod-level resources (spec.resources): its memory request is quoted in the message when set.
    pod_level_memory_request: Quantity | None = None
    # The pod's total ephemeral-storage limit (upstream's PodLimits), when every container or the pod sets one.
    ephemeral_storage_limit: Quantity | None = None
    containers: tuple[ContainerInfo, ...] = ()
    local_volumes: tuple[str, ...] = ()  # volumes that use the node's disk: emptyDir (not Memory), hostPath, ...
    empty_dir_size_limits: Mapping[str, Quantity] = field(default_factory=dict)
    termination_grace_period_seconds: int | None = None
    tolerations: tuple[Toleration, ...] = ()

    @property
    def critical(self) -> bool:
        """As upstream's IsCriticalPod: static and mirror pods, and system-node/cluster-critical priorities."""
        return self.static or self.mirror or self.priority >= SYSTEM_CRITICAL_PRIORITY

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class FsUsage:
    used_bytes: int | None = None
    inodes_used: int | None = None


@dataclass(frozen=True)
class ContainerUsage:
    name: str
    memory_working_set: int | None = None
    rootfs: FsUsage | None = None
    logs: FsUsage | None = None


@dataclass(frozen=True)
class PodUsage:
    memory_working_set: int | None = None
    process_count: int | None = None
    containers: tuple[ContainerUsage, ...] = ()
    volumes: Mapping[str, FsUsage] = field(default_factory=dict)  # by volume name
    ephemeral_storage_used: int | None = None  # the pod's total (rootfs + logs + local volumes), as the summary's


# Pod UID -> usage; a pod without an entry had no stats (upstream ranks those first).
UsageByPod = Mapping[str, PodUsage]
