"""AgentHost: what the kubelet API sees of the agent."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from nodeagent.config import load_config
from nodeagent.kuberuntime import actions as acts
from nodeagent.server.host import AgentHost, bare_pod, config_json

MIRROR = {"kubernetes.io/config.mirror": "h"}


def pod(name: str, uid: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations or {}}}


STATIC = pod("etcd-n", "static-uid", {"kubernetes.io/config.source": "file"})
MIRROR_POD = pod("etcd-n", "mirror-uid", MIRROR)
API_POD = pod("web", "api-uid")

RUNTIME = acts.RuntimePodStatus(
    uid="api-uid",
    name="web",
    namespace="ns",
    sandboxes=(
        acts.SandboxStatus("s-new", acts.SandboxState.READY),
        acts.SandboxStatus("s-old", acts.SandboxState.NOT_READY),
    ),
    containers=(
        acts.ContainerStatus("c2", "main", acts.ContainerState.RUNNING, image="busybox"),
        acts.ContainerStatus("c1", "main", acts.ContainerState.EXITED, image="busybox"),
        acts.ContainerStatus("c3", "side", acts.ContainerState.EXITED, image="other"),
    ),
)


def host(registries: Mapping[str, CollectorRegistry] | None = None) -> AgentHost:
    statuses = {"api-uid": {"phase": "Running"}, "static-uid": {"phase": "Pending"}}

    async def list_runtime() -> dict[str, acts.RuntimePodStatus]:
        return {"api-uid": RUNTIME, "gone": acts.RuntimePodStatus(uid="gone")}

    async def runtime_pod(uid: str) -> acts.RuntimePodStatus:
        return RUNTIME if uid == "api-uid" else acts.RuntimePodStatus(uid=uid)

    return AgentHost(
        pods_fn=lambda: [MIRROR_POD, STATIC, API_POD],
        status_of=statuses.get,
        static_pods_of=lambda mirror: [STATIC] if mirror is MIRROR_POD else [],
        list_runtime_pods=list_runtime,
        runtime_pod=runtime_pod,
        config={"x": 1},
        registries=registries or {},
    )


def test_pods_skip_mirrors_and_carry_status() -> None:
    pods = host().pods()
    assert [p["metadata"]["uid"] for p in pods] == ["static-uid", "api-uid"]
    assert pods[1]["status"] == {"phase": "Running"}


def test_pod_by_name_prefers_the_static_pod_over_its_mirror() -> None:
    assert host().pod_by_name("ns", "etcd-n") is STATIC
    assert host().pod_by_name("ns", "web") is API_POD
    assert host().pod_by_name("other", "web") is None


async def test_runtime_lookups() -> None:
    h = host()
    assert await h.running_container_id(API_POD, "main") == "c2"
    assert await h.running_container_id(API_POD, "side") is None
    assert await h.running_sandbox_id(API_POD) == "s-new"
    assert await h.running_sandbox_id(STATIC) is None
    running = await h.running_pods()
    assert [p["metadata"]["uid"] for p in running] == ["api-uid"]


def test_bare_pod_lists_each_container_once() -> None:
    assert bare_pod(RUNTIME)["spec"]["containers"] == [
        {"name": "main", "image": "busybox"},
        {"name": "side", "image": "other"},
    ]


def test_metrics_by_path() -> None:
    registry = CollectorRegistry()
    Counter("kubelet_things", "things", registry=registry).inc()
    h = host({"/metrics": registry})
    body = h.metrics("/metrics")
    assert body is not None and b"kubelet_things_total 1.0" in body
    assert h.metrics("/metrics/probes") is None


def test_config_json_is_camel_case_with_go_durations(tmp_path: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: 90s\nmaxPods: 50\n"
    )
    out = config_json(load_config(path).config)
    assert out["syncFrequency"] == "1m30s"
    assert out["maxPods"] == 50
    assert config_json({"d": datetime.timedelta(seconds=2)}) == {"d": "2s"}


def test_configz_spells_fields_as_upstream_and_loads_again(tmp_path: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS: [198.19.0.10]\n"
        "imageGCHighThresholdPercent: 90\nkernelMemcgNotification: true\n"
    )
    config = load_config(path).config
    h = dataclasses.replace(host(), config=config)
    out = dict(h.configz())
    assert out["clusterDNS"] == ["198.19.0.10"] and out["imageGCHighThresholdPercent"] == 90
    assert out["kernelMemcgNotification"] is True
    # The upstream-only fields at nodeagent's behaviour: written back (as Go does, false and 0 spelled out) they load.
    assert (out["cpuCFSQuota"], out["localStorageCapacityIsolation"], out["kubeAPIQPS"]) == (True, True, -1)
    again = tmp_path / "again.json"
    again.write_text(json.dumps({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **out}))
    loaded = load_config(again)
    assert loaded.config == config and loaded.warnings == ()
