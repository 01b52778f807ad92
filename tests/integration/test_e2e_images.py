"""The e2e suite's images as the testbed builds them (vanilla BusyBox 1.37.0 under the e2e busybox, agnhost and
nonewprivs) behave as upstream's do where the [NodeConformance] specs look:

- the e2e busybox's `sh -c env` passes on envFrom variables whose names are no shell identifiers (`data-1`), as the
  ConfigMap and Secret "should be consumable via the environment" specs read them from the pod's log; Debian's
  busybox-static ash drops them;
- agnhost's `nc -w 1 -u` from a hostNetwork pod gets a netexec pod's UDP answer (the "node-pod communication: udp"
  spec's own command); Debian's busybox 1.35 nc has no -u;
- nonewprivs' setuid nnp, run as uid 1000, reports "Effective uid: 0" unless allowPrivilegeEscalation is false (the
  three AllowPrivilegeEscalation specs).

Logs are read with `kubectl logs` (apiserver → the agent's kubelet API), as the framework reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    eventually,
    kubectl_logs,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_ready,
)

Obj = dict[str, Any]
LABEL = {"test": "e2e-images"}


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-e2e-images.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(_delete_config(testbed))
        asyncio.run(clean_up(testbed, settings))


async def _delete_config(testbed: Testbed) -> None:
    """The ConfigMaps and Secrets the tests made (by their label); clean_up takes the pods."""
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for kind in ("configmaps", "secrets"):
            listed = await admin.list(paths.api_path(kind, namespace=NS), label_selector="test=e2e-images")
            for item in listed["items"]:
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.api_path(kind, namespace=NS, name=item["metadata"]["name"]))


def _suffix() -> str:
    return uuid.uuid4().hex[:6]


async def _succeeded(admin: KubeClient, agent: Agent, name: str) -> None:
    async def check() -> str | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        phase = (pod.get("status") or {}).get("phase")
        assert phase != "Failed", f"{name} failed: {pod.get('status')}"
        return "done" if phase == "Succeeded" else None

    await eventually(check, timeout=120, what=f"{name} Succeeded", agent=agent)


async def test_e2e_busybox_sh_passes_env_names_with_dashes(
    testbed: Testbed, agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = configs.e2e_busybox_image(settings)
    assert image.endswith("/e2e-test-images/busybox:1.37.0-1")  # upstream's repository path and manifest.go tag
    suffix = _suffix()
    configmap, secret, name = f"e2e-env-cm-{suffix}", f"e2e-env-secret-{suffix}", f"e2e-env-{suffix}"
    meta = {"labels": LABEL}
    await admin.create(
        paths.configmaps(NS), {"metadata": {"name": configmap, **meta}, "data": {"data-1": "value-1", "data_2": "v2"}}
    )
    await admin.create(
        paths.api_path("secrets", namespace=NS),
        {"metadata": {"name": secret, **meta}, "stringData": {"data-1": "secret-1"}},
    )
    container = {
        "image": image,
        # As the specs: `sh -c env`; then the shell's banner, to show which BusyBox this is.
        "command": ["sh", "-c", "env; busybox --help | head -n 1"],
        "envFrom": [
            {"configMapRef": {"name": configmap}},
            {"prefix": "p-", "configMapRef": {"name": configmap}},
            {"prefix": "s-", "secretRef": {"name": secret}},
        ],
    }
    await admin.create(paths.pods(NS), one_container_pod(name, container, LABEL, restartPolicy="Never"))
    await _succeeded(admin, agent, name)
    lines = (await kubectl_logs(testbed, name)).splitlines()
    for expected in ("data-1=value-1", "p-data-1=value-1", "s-data-1=secret-1", "data_2=v2", "p-data_2=v2"):
        assert expected in lines, f"{expected} not in the output of sh -c env: {lines}"
    assert lines[-1].startswith("BusyBox v1.37.0 ("), lines[-1]


async def test_agnhost_nc_udp_from_the_node_to_a_pod(
    agent: Agent, admin: KubeClient, cri_client: CRIClient, settings: Settings
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = configs.agnhost_image(settings)
    suffix = _suffix()
    server, host = f"e2e-udp-server-{suffix}", f"e2e-udp-host-{suffix}"
    netexec = {
        "image": image,
        "args": ["netexec", "--http-port=8080", "--udp-port=8081"],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
    }
    await admin.create(paths.pods(NS), one_container_pod(server, netexec, LABEL))
    # The spec's host-test-container-pod: agnhost on the node's network.
    idle = {"image": image, "args": ["pause"], "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}
    await admin.create(paths.pods(NS), one_container_pod(host, idle, LABEL, hostNetwork=True))
    server_ip, _ = await wait_ready(admin, agent, server)
    _, host_id = await wait_ready(admin, agent, host)

    async def answer() -> str | None:
        # The spec's command (test/e2e/framework/network/utils.go): netexec's UDP server answers "hostName" with
        # the pod's name. UDP may lose the first datagram, so it is retried, as the framework retries.
        cmd = f"echo hostName | nc -w 1 -u {server_ip} 8081"
        reply = await cri_client.runtime.exec_sync(host_id, ["/bin/sh", "-c", cmd], timeout=10)
        assert b"invalid option" not in reply.stderr, reply.stderr.decode()
        text = reply.stdout.decode().strip()
        return text or None

    assert await eventually(answer, timeout=30, what="UDP answer from netexec", agent=agent) == server


@pytest.mark.parametrize(
    ("allow", "uid"),
    [(None, 0), (True, 0), (False, 1000)],
    ids=["allowPrivilegeEscalation-unset", "allowPrivilegeEscalation-true", "allowPrivilegeEscalation-false"],
)
async def test_nonewprivs_reports_the_effective_uid(
    testbed: Testbed, agent: Agent, admin: KubeClient, settings: Settings, allow: bool | None, uid: int
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = configs.nonewprivs_image(settings)
    assert image.endswith("/e2e-test-images/nonewprivs:1.3")
    name = f"e2e-nnp-{_suffix()}"
    security: Obj = {"runAsUser": 1000}
    if allow is not None:
        security["allowPrivilegeEscalation"] = allow
    # The image's CMD (nnp) runs, setuid root: as the spec, no command is given.
    await admin.create(
        paths.pods(NS),
        one_container_pod(name, {"image": image, "securityContext": security}, LABEL, restartPolicy="Never"),
    )
    await _succeeded(admin, agent, name)
    assert (await kubectl_logs(testbed, name)).splitlines() == [f"Effective uid: {uid}"]
