"""The event recorder against the real apiserver, with the node's credential (Node authorizer + NodeRestriction)."""

from __future__ import annotations

import asyncio
import uuid

from nodeagent.events import EventRecorder, ObjectRef
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed


async def test_events_are_written_and_repeats_fold_into_a_count(testbed: Testbed, settings: Settings) -> None:
    pod_name = f"ev-{uuid.uuid4().hex[:6]}"
    ref = ObjectRef("Pod", "default", pod_name, str(uuid.uuid4()), field_path="spec.containers{c}")
    async with KubeClient.from_kubeconfig(testbed.layout.node_kubeconfig) as node_client:
        recorder = EventRecorder(node_client, settings.node_name)
        recorder.record(ref, "Warning", "Failed", "Error: ErrImagePull")
        recorder.record(ref, "Warning", "Failed", "Error: ErrImagePull")
        recorder.record(ref, "Normal", "Pulling", 'Pulling image "busybox"')
        # A reason of its own: the agent under test in the same session posts "Starting" node events too.
        node_reason = f"Test{pod_name.replace('-', '')}"
        recorder.record(ObjectRef.for_node(settings.node_name), "Normal", node_reason, "Starting kubelet.")
        await recorder.flush()
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        listed = await admin.list(paths.events("default"), field_selector=f"involvedObject.name={pod_name}")
        node_events = await admin.list(
            paths.events("default"), field_selector=f"involvedObject.name={settings.node_name},reason={node_reason}"
        )
    by_reason = {e["reason"]: e for e in listed["items"]}
    assert set(by_reason) == {"Failed", "Pulling"}
    failed = by_reason["Failed"]
    assert failed["count"] == 2
    assert failed["type"] == "Warning"
    assert failed["source"] == {"component": "kubelet", "host": settings.node_name}
    assert failed["involvedObject"]["fieldPath"] == "spec.containers{c}"
    assert by_reason["Pulling"]["count"] == 1
    assert [e["involvedObject"]["kind"] for e in node_events["items"]] == ["Node"]


async def test_a_full_queue_drops_and_counts_without_blocking(testbed: Testbed, settings: Settings) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.node_kubeconfig) as node_client:
        recorder = EventRecorder(node_client, settings.node_name, queue_size=2)
        ref = ObjectRef.for_node(settings.node_name)
        for i in range(5):
            recorder.record(ref, "Normal", "Test", f"message {i}")
        assert recorder.dropped == 3
        await asyncio.wait_for(recorder.flush(), 10)
        assert recorder.sent == 2


async def test_an_object_gets_25_events_and_similar_ones_are_combined(testbed: Testbed, settings: Settings) -> None:
    # client-go's correlator, as the kubelet's: at most 25 events per object (then one every 5 minutes), and the
    # tenth different message of one reason becomes "(combined from similar events): ..." counted up.
    noisy, similar = (f"ev-{uuid.uuid4().hex[:6]}" for _ in range(2))
    noisy_ref = ObjectRef("Pod", "default", noisy, str(uuid.uuid4()))
    similar_ref = ObjectRef("Pod", "default", similar, str(uuid.uuid4()))
    async with KubeClient.from_kubeconfig(testbed.layout.node_kubeconfig) as node_client:
        recorder = EventRecorder(node_client, settings.node_name)
        for i in range(30):
            recorder.record(noisy_ref, "Normal", f"Reason{i}", "m")
        for i in range(12):
            recorder.record(similar_ref, "Warning", "Failed", f"error {i}")
        await recorder.flush()
        assert (recorder.sent, recorder.filtered, recorder.failed) == (25 + 12, 5, 0)
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        listed = await admin.list(paths.events("default"), field_selector=f"involvedObject.name={noisy}")
        assert sorted(e["reason"] for e in listed["items"]) == sorted(f"Reason{i}" for i in range(25))
        listed = await admin.list(paths.events("default"), field_selector=f"involvedObject.name={similar}")
    by_message = {e["message"]: e["count"] for e in listed["items"]}
    assert by_message == {
        **{f"error {i}": 1 for i in range(9)},
        "(combined from similar events): error 11": 3,
    }
