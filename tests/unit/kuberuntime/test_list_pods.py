"""RuntimeManager.list_pods: every pod with the kubelet's labels by UID, but those housekeeping asks to skip (it
converts only the pods it does not know). Over the in-process fake runtime."""

from __future__ import annotations

from typing import Any

from cri.fake.images import FakeImageService
from cri.fake.runtime import FakeRuntimeService
from cri.v1 import api_pb2
from nodeagent.kuberuntime import labels as kubelabels
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager


def _pod(uid: str) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid}, "spec": {"containers": []}}


async def _run(runtime: FakeRuntimeService, uid: str) -> None:
    pod = _pod(uid)
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=f"p-{uid}", namespace="default", uid=uid),
        labels=kubelabels.sandbox_labels(pod),
        annotations=kubelabels.sandbox_annotations(pod),
    )
    sandbox = await runtime.run_pod_sandbox(config)
    container = {"name": "app", "image": "busybox:1.36"}
    await runtime.create_container(
        sandbox,
        api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="app"),
            image=api_pb2.ImageSpec(image="busybox:1.36"),
            labels=kubelabels.container_labels(pod, container),
            annotations=kubelabels.container_annotations(pod, container, container_hash="1", restart_count=0),
        ),
        config,
    )


async def test_list_pods_leaves_out_the_skipped_uids_only() -> None:
    images = FakeImageService()
    runtime = FakeRuntimeService("n1", images=images)
    await images.pull_image(api_pb2.ImageSpec(image="busybox:1.36"))
    for uid in ("u1", "u2", "u3"):
        await _run(runtime, uid)
    # Not the kubelet's: no labels; left out with or without a skip set.
    await runtime.run_pod_sandbox(api_pb2.PodSandboxConfig(metadata=api_pb2.PodSandboxMetadata(name="x", uid="x")))
    manager = RuntimeManager(runtime, images, NodeContext(node_name="n1", host_ip="198.18.0.1"))

    everything = await manager.list_pods()
    assert sorted(everything) == ["u1", "u2", "u3"]
    assert [c.name for c in everything["u2"].containers] == ["app"]

    left = await manager.list_pods(skip={"u1", "u3", "unknown"})
    assert sorted(left) == ["u2"]
    assert left["u2"].name == "p-u2"
    assert len(left["u2"].sandboxes) == 1
    assert [c.name for c in left["u2"].containers] == ["app"]
