"""The kubelet's side of graceful node shutdown: the shutdown admit handler refuses a pod with upstream's reason
and message; the shutdown's kill publishes phase Failed, reason Terminated, the message and DisruptionTarget
(TerminationByKubelet), and a pod already Succeeded stays Succeeded, as upstream's status function."""

from __future__ import annotations

import datetime

from nodeagent.kubelet import PodEviction
from nodeagent.nodeshutdown.manager import (
    NODE_SHUTDOWN_MESSAGE,
    NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE,
    NODE_SHUTDOWN_NOT_ADMITTED_REASON,
    NODE_SHUTDOWN_REASON,
)
from tests.unit.status.test_kubelet_status import Statuses, kubelet, pod
from tests.unit.test_kubelet_eviction import with_workers

SHUTDOWN = PodEviction(NODE_SHUTDOWN_REASON, NODE_SHUTDOWN_MESSAGE, disruption_target=True, keep_succeeded=True)
NOW = datetime.datetime(2026, 11, 29, 6, 0, tzinfo=datetime.UTC)


async def test_a_pod_is_refused_while_the_node_shuts_down() -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    workers = with_workers(k)
    k.shutdown_admit = lambda p: (NODE_SHUTDOWN_NOT_ADMITTED_REASON, NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE)
    await k.handle_pod_additions([pod()])
    assert workers.updates == []
    published = statuses.published["u1"]
    assert (published["phase"], published["reason"], published["message"]) == (
        "Failed",
        "NodeShutdown",
        "Pod was rejected as the node is shutting down.",
    )


def test_the_shutdown_status_is_failed_terminated_with_disruption_target() -> None:
    out = SHUTDOWN.apply({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, NOW)
    assert (out["phase"], out["reason"], out["message"]) == (
        "Failed",
        "Terminated",
        "Pod was terminated in response to imminent node shutdown.",
    )
    [target] = [c for c in out["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"], target["lastTransitionTime"]) == (
        "True",
        "TerminationByKubelet",
        "Pod was terminated in response to imminent node shutdown.",
        "2026-11-29T06:00:00Z",
    )


def test_a_succeeded_pod_stays_succeeded() -> None:
    assert SHUTDOWN.apply({"phase": "Succeeded"}, NOW)["phase"] == "Succeeded"
    assert PodEviction("Evicted", "m").apply({"phase": "Succeeded"}, NOW)["phase"] == "Failed"  # eviction: as before
