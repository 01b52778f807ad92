"""The node's versions on the real testbed: `kubectl get nodes` shows the emulated Kubernetes release (v1.34.4, the
testbed's own), probes say `kube-probe/1.34`, and nodeagent's own version is in `nodeagent --version`, the node's
Starting event and its `nodeagent.io/version` annotation (which NodeRestriction lets the node set). A configured
`emulatedKubernetesVersion` changes the first two."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent import __version__
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import KUBERNETES_VERSION, kubernetes_bin_dir
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]

# A CGI behind busybox httpd that keeps the User-Agent of every request, for the readiness probe to hit.
UA_CGI = (
    "mkdir -p /var/www/cgi-bin"
    ' && printf \'#!/bin/sh\\necho "$HTTP_USER_AGENT" >> /tmp/agents\\necho "Content-Type: text/plain"\\n'
    "echo\\necho ok\\n' > /var/www/cgi-bin/ua"
    " && chmod +x /var/www/cgi-bin/ua"
    " && exec httpd -f -p 8080 -h /var/www"
)


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-node-version.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def test_nodeagent_version_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nodeagent", "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == f"nodeagent {__version__} (Kubernetes {KUBERNETES_VERSION})"


async def _node(admin: KubeClient, name: str) -> Obj:
    node: Obj = await admin.get(paths.node(name))
    return node


async def _starting_events(admin: KubeClient, node_name: str) -> list[str]:
    listed = await admin.list(paths.events("default"), field_selector=f"involvedObject.name={node_name}")
    # The kubelet's own: kube-proxy records a Starting event on the Node too (with no message).
    return [
        e["message"]
        for e in listed["items"]
        if e["reason"] == "Starting" and (e.get("source") or {}).get("component") == "kubelet"
    ]


async def _probe_user_agents(admin: KubeClient, cri: CRIClient, agent: Agent, settings: Settings) -> list[str]:
    """The User-Agents an httpGet readiness probe sent to a pod, once the pod is Ready."""
    name = f"ua-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": settings.node_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "web",
                    "image": configs.busybox_image(settings),
                    "command": ["sh", "-c", UA_CGI],
                    "readinessProbe": {
                        "httpGet": {"path": "/cgi-bin/ua", "port": 8080},
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                    },
                }
            ],
        },
    }
    await admin.create(paths.pods(NS), pod)
    try:

        async def ready() -> Obj | None:
            got = await admin.get(paths.pod(NS, name))
            statuses = (got.get("status") or {}).get("containerStatuses") or []
            return got if statuses and statuses[0].get("ready") else None

        got = await eventually(ready, timeout=60, what="the probed pod Ready", agent=agent)
        selector = api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": got["metadata"]["uid"]})
        [container] = await cri.runtime.list_containers(selector)
        answer = await cri.runtime.exec_sync(container.id, ["cat", "/tmp/agents"], timeout=10)
        assert answer.exit_code == 0, answer.stderr
        return sorted(set(answer.stdout.decode().split("\n")) - {""})
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_the_node_reports_the_emulated_release_and_our_version(
    agent: Agent, admin: KubeClient, settings: Settings, testbed: Testbed, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    node = await _node(admin, settings.node_name)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.34.4" == KUBERNETES_VERSION
    assert node["metadata"]["annotations"]["nodeagent.io/version"] == __version__

    kubectl = kubernetes_bin_dir() / "kubectl"
    shown = await asyncio.create_subprocess_exec(
        str(kubectl),
        "--kubeconfig",
        str(testbed.layout.admin_kubeconfig),
        "get",
        "node",
        settings.node_name,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(shown.communicate(), 60)
    assert shown.returncode == 0
    header, row = out.decode().strip().splitlines()
    assert header.split()[-1] == "VERSION"
    assert row.split()[-1] == "v1.34.4"

    expected = f"Starting kubelet. nodeagent {__version__} (Kubernetes v1.34.4)"
    messages = await eventually(
        lambda: _starting_events(admin, settings.node_name), timeout=15, what="the Starting event", agent=agent
    )
    assert expected in messages
    assert await _probe_user_agents(admin, cri_client, agent, settings) == ["kube-probe/1.34"]


async def test_a_configured_release_is_reported_and_probes_follow_it(
    agent: Agent, admin: KubeClient, settings: Settings, testbed: Testbed, cri_client: CRIClient, tmp_path: Path
) -> None:
    stop_agent(agent)
    config = agent_config(testbed, tmp_path / "v1.33.yaml", emulatedKubernetesVersion="v1.33.9")
    older = start_agent(testbed, testbed.layout.logs / "agent-node-version-v1.33.log", config=config)
    try:

        async def reported() -> bool:
            return bool((await _node(admin, settings.node_name))["status"]["nodeInfo"]["kubeletVersion"] == "v1.33.9")

        await eventually(reported, timeout=30, what="kubeletVersion v1.33.9", agent=older)
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=older)
        node = await _node(admin, settings.node_name)
        assert node["metadata"]["annotations"]["nodeagent.io/version"] == __version__

        async def starting() -> bool:
            wanted = f"Starting kubelet. nodeagent {__version__} (Kubernetes v1.33.9)"
            return wanted in await _starting_events(admin, settings.node_name)

        await eventually(starting, timeout=15, what="the Starting event of v1.33.9", agent=older)
        assert await _probe_user_agents(admin, cri_client, older, settings) == ["kube-probe/1.33"]
    finally:
        stop_agent(older)
