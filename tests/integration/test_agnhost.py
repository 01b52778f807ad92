"""agnhost, built here and pushed under upstream's e2e name, runs on the testbed as the e2e suite runs it.

Two agnhost pods on the node: a server (`netexec --http-port=8080`) and a client. From inside the client, pod to
pod over the testbed's pod network: `agnhost connect` (TCP), netexec's /dial (agnhost's own HTTP client, as the
e2e suite's network checks use it), and curl (the lifecycle hook specs run `sh -c "curl http://..."` in agnhost).
Also OpenBSD's nc over TCP and UDP (the Services and HostPort specs), the shell, bash (probe specs run `/bin/bash -c`),
the image's users, and curl's TLS against the kubelet API.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-agnhost.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _pod(name: str, image: str, args: list[str] | None = None) -> Obj:
    container: Obj = {"name": "agnhost", "image": image}
    if args is not None:
        container["args"] = args  # the image's entrypoint (/agnhost) runs them, as the e2e suite's agnhost pods
        container["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}
    return {
        "metadata": {"name": name, "labels": {"test": "agnhost"}},
        "spec": {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False, "containers": [container]},
    }


async def _running(admin: KubeClient, agent: Agent, name: str, *, ready: bool) -> tuple[str, str]:
    """The pod's IP and its container's id, once it runs (and is Ready, if asked)."""

    async def check() -> tuple[str, str] | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        status = pod.get("status") or {}
        for cs in status.get("containerStatuses") or ():
            if "running" in (cs.get("state") or {}) and status.get("podIP") and (cs.get("ready") or not ready):
                return str(status["podIP"]), str(cs["containerID"]).rpartition("://")[2]
        return None

    found: tuple[str, str] = await eventually(check, timeout=120, what=f"{name} running", agent=agent)
    return found


async def _exec(cri: CRIClient, container_id: str, argv: list[str]) -> str:
    answer = await cri.runtime.exec_sync(container_id, argv, timeout=30)
    assert answer.exit_code == 0, f"{argv}: exit {answer.exit_code}, stderr {answer.stderr.decode()!r}"
    return answer.stdout.decode()


async def test_agnhost_pods_reach_each_other_and_have_a_shell_and_curl(
    agent: Agent, admin: KubeClient, cri_client: CRIClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    image = configs.agnhost_image(settings)
    assert image.endswith("/e2e-test-images/agnhost:2.56")  # upstream's repository path and manifest.go tag
    suffix = uuid.uuid4().hex[:6]
    server, client = f"agnhost-server-{suffix}", f"agnhost-client-{suffix}"
    await admin.create(paths.pods(NS), _pod(server, image, ["netexec", "--http-port=8080", "--udp-port=8081"]))
    # The client serves netexec too: its /dial is agnhost's HTTP client, driven from inside the pod.
    await admin.create(paths.pods(NS), _pod(client, image, ["netexec", "--http-port=8080"]))
    server_ip, _ = await _running(admin, agent, server, ready=True)
    client_ip, client_id = await _running(admin, agent, client, ready=True)
    pod_network = ipaddress.ip_network(settings.pod_cidr)
    assert ipaddress.ip_address(server_ip) in pod_network
    assert ipaddress.ip_address(client_ip) in pod_network
    assert server_ip != client_ip

    # TCP, with agnhost's own subcommand: exit 0 only once the connection is made.
    await _exec(cri_client, client_id, ["/agnhost", "connect", f"{server_ip}:8080", "--timeout=5s"])
    # HTTP through agnhost's client (netexec /dial in the client pod GETs the server's /hostname).
    dial = f"http://127.0.0.1:8080/dial?request=hostname&protocol=http&host={server_ip}&port=8080&tries=1"
    answer = json.loads(await _exec(cri_client, client_id, ["curl", "-sS", "--max-time", "10", dial]))
    assert answer == {"responses": [server]}
    # curl straight to the server, as the lifecycle hook specs do it (through the shell).
    hostname = await _exec(
        cri_client, client_id, ["sh", "-c", f"curl -sS --max-time 10 http://{server_ip}:8080/hostname"]
    )
    assert hostname == server
    # The server saw the client's pod IP (no NAT between pods on the node).
    seen = await _exec(cri_client, client_id, ["curl", "-sS", "--max-time", "10", f"http://{server_ip}:8080/clientip"])
    assert seen.rpartition(":")[0] == client_ip

    # OpenBSD's nc, as the Services specs run it: `echo hostName | nc -v -t -w 2 IP PORT` (netexec's HTTP server
    # answers the line with a 400) and `-u` (netexec's UDP server answers hostName with the pod's name); the
    # HostPort spec's `nc -vuz -w 5`. A port nothing listens on fails. BusyBox's nc exits 1 on -t.
    tcp = await _exec(cri_client, client_id, ["sh", "-c", f"echo hostName | nc -v -t -w 2 {server_ip} 8080"])
    assert tcp.startswith("HTTP/1.1 400 Bad Request")
    udp = await _exec(cri_client, client_id, ["sh", "-c", f"echo hostName | nc -v -u -w 2 {server_ip} 8081"])
    assert udp == server
    await _exec(cri_client, client_id, ["sh", "-c", f"nc -vuz -w 5 {server_ip} 8081"])
    closed = await cri_client.runtime.exec_sync(
        client_id, ["sh", "-c", f"echo hostName | nc -v -t -w 2 {server_ip} 8090"], timeout=30
    )
    assert closed.exit_code != 0, closed.stdout
    assert "OpenBSD netcat" in (await cri_client.runtime.exec_sync(client_id, ["nc", "-h"], timeout=30)).stderr.decode()

    # The shell and coreutils of busybox, and bash.
    assert (await _exec(cri_client, client_id, ["sh", "-c", "cat /etc/hostname"])).strip() == client
    assert (await _exec(cri_client, client_id, ["/bin/bash", "-c", 'echo "${BASH_VERSINFO[0]}"'])).strip().isdigit()
    assert (await _exec(cri_client, client_id, ["ls", "/"])).split().count("uploads") == 1
    groups = await _exec(cri_client, client_id, ["id", "user-defined-in-image"])
    assert "uid=1000(user-defined-in-image)" in groups and "50000(group-defined-in-image)" in groups
    assert (await _exec(cri_client, client_id, ["/agnhost-2", "--version"])).strip() == "app version 2.56"

    # curl's TLS stack (OpenSSL and its libraries in the image): the kubelet API on the node's address answers
    # 401 to a client without credentials, over HTTPS.
    code = await _exec(
        cri_client,
        client_id,
        ["curl", "-sk", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
         f"https://{settings.node_ip}:{settings.kubelet_port}/healthz"],
    )  # fmt: skip
    assert code == "401"
