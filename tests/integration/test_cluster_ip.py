"""In-cluster API access for real: a pod calls the apiserver through the `kubernetes` Service's ClusterIP with the
ServiceAccount token the agent mounted, and a ClusterIP Service in front of a Deployment reaches its replicas.

The testbed's kube-proxy (iptables mode) serves the ClusterIPs. The HTTPS client in the pod is the testbed's
kubectl (a static binary), mounted read-only from the host by a hostPath File volume: with no flags it uses the
in-cluster config, that is KUBERNETES_SERVICE_HOST/PORT and the files under
/var/run/secrets/kubernetes.io/serviceaccount, exactly what the agent provided."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs, hostnet
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    deployment_path,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
SERVICE = "cip-web"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    # Fail, never skip, when this testbed goes without kube-proxy: say which testbed holds it.
    assert not settings.kube_proxy_held_by, (
        f"the host's kube-proxy belongs to the testbed in {settings.kube_proxy_held_by}: bring that one down"
    )
    running = start_agent(testbed, testbed.layout.logs / "agent-cluster-ip.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def _running_container(admin: KubeClient, agent: Agent, name: str) -> str:
    async def running_id() -> str:
        pod: Obj = await admin.get(paths.pod(NS, name))
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            if "running" in (status.get("state") or {}):
                return str(status["containerID"]).rpartition("://")[2]
        return ""

    return str(await eventually(running_id, timeout=90, what=f"{name} running", agent=agent))


def _client_pod(name: str, settings: Settings) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "command": ["sleep", "3600"],
                    "volumeMounts": [{"name": "kubectl", "mountPath": "/usr/local/bin/kubectl", "readOnly": True}],
                }
            ],
            "volumes": [
                {"name": "kubectl", "hostPath": {"path": str(kubernetes_bin_dir() / "kubectl"), "type": "File"}}
            ],
        },
    }


async def test_token_authenticates_through_the_kubernetes_service(
    agent: Agent, admin: KubeClient, cri_client: CRIClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    name = f"cip-client-{uuid.uuid4().hex[:5]}"
    pod = await admin.create(paths.pods(NS), _client_pod(name, settings))
    container = await _running_container(admin, agent, name)

    env = await cri_client.runtime.exec_sync(container, ["env"], timeout=30)
    variables = dict(line.split("=", 1) for line in env.stdout.decode().splitlines() if "=" in line)
    # The address the client dials is the Service's ClusterIP, which only kube-proxy's rules make reachable.
    assert variables["KUBERNETES_SERVICE_HOST"] == hostnet.kubernetes_service_ip()
    assert variables["KUBERNETES_SERVICE_PORT"] == "443"

    async def whoami() -> Obj | None:
        answer = await cri_client.runtime.exec_sync(container, ["kubectl", "auth", "whoami", "-o", "json"], timeout=30)
        if answer.exit_code != 0:
            return None
        result: Obj = json.loads(answer.stdout)
        return result

    review = await eventually(whoami, timeout=60, what="kubectl auth whoami from the pod", agent=agent)
    info = review["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{NS}:default"
    # The token is bound to this pod (TokenRequest with the pod as boundObjectRef), as upstream's projected token.
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == [name]
    assert info["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    assert info["extra"]["authentication.kubernetes.io/node-name"] == [settings.node_name]

    # The CA the agent wrote verifies the apiserver at the ClusterIP: no insecure flag was needed above, and a
    # request the default ServiceAccount may not make is refused by authorization (not authentication).
    denied = await cri_client.runtime.exec_sync(container, ["kubectl", "get", "secrets"], timeout=30)
    assert denied.exit_code != 0
    assert f'User "system:serviceaccount:{NS}:default" cannot list resource "secrets"' in denied.stderr.decode()


async def test_service_in_front_of_a_deployment(
    agent: Agent, admin: KubeClient, cri_client: CRIClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    app = f"cip-web-{uuid.uuid4().hex[:5]}"
    serve = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"
    await admin.create(
        deployment_path(),
        {
            "metadata": {"name": app},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "web",
                                "image": configs.busybox_image(settings),
                                "command": ["sh", "-c", serve],
                                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                            }
                        ],
                    },
                },
            },
        },
    )
    service = await admin.create(
        paths.api_path("services", namespace=NS),
        {
            "metadata": {"name": SERVICE},
            "spec": {"selector": {"app": app}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        },
    )
    cluster_ip = service["spec"]["clusterIP"]

    async def replicas() -> set[str]:
        pods = await admin.list(paths.pods(NS), label_selector=f"app={app}")
        ready = {
            p["metadata"]["name"]
            for p in pods["items"]
            for c in (p.get("status") or {}).get("conditions") or []
            if c["type"] == "Ready" and c["status"] == "True"
        }
        return ready if len(ready) == 2 else set()

    backends = await eventually(replicas, timeout=120, what="2 ready replicas", agent=agent)

    client = f"cip-probe-{uuid.uuid4().hex[:5]}"
    await admin.create(paths.pods(NS), _client_pod(client, settings))
    container = await _running_container(admin, agent, client)
    script = f'for i in $(seq 20); do printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 2 {cluster_ip} 80; echo; done'
    seen: set[str] = set()

    async def both_answer() -> set[str]:
        answer = await cri_client.runtime.exec_sync(container, ["sh", "-c", script], timeout=60)
        seen.update(line.strip() for line in answer.stdout.decode().splitlines() if line.strip() in backends)
        return seen if seen == backends else set()

    # Both replicas answer on the one ClusterIP: kube-proxy spreads connections over the EndpointSlice's endpoints.
    assert await eventually(both_answer, timeout=90, what=f"both replicas behind {cluster_ip}", agent=agent) == backends
