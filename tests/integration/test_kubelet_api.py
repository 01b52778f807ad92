"""The kubelet API as users reach it: the real kubectl against the testbed's apiserver, which proxies to the agent's
:port over TLS (verifying the agent's serving certificate), plus direct calls with and without credentials.

logs (--tail, --timestamps, --limit-bytes, --since, -f, --previous), exec (exit codes, stdin, a tty), attach, cp,
port-forward with parallel requests, and the auth filter (401 without credentials, 403 with upstream's message for a
user who may only read stats and metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import re
import select
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cri.client import connect
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]
SA = "kubelet-api-reader"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-kubelet-api.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(_delete_rbac(testbed))
        asyncio.run(clean_up(testbed, settings))


async def _delete_rbac(testbed: Testbed) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for path in (
            paths.api_path("clusterrolebindings", group="rbac.authorization.k8s.io", name=SA),
            paths.api_path("clusterroles", group="rbac.authorization.k8s.io", name=SA),
            paths.api_path("serviceaccounts", namespace=NS, name=SA),
        ):
            with contextlib.suppress(NotFound):
                await admin.delete(path)


def kubectl_argv(testbed: Testbed, *args: str) -> list[str]:
    return [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(testbed.layout.admin_kubeconfig), *args]


def kubectl(
    testbed: Testbed, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kubectl_argv(testbed, *args), capture_output=True, text=True, timeout=120, check=check, input=stdin
    )


async def akubectl(
    testbed: Testbed, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(kubectl, testbed, *args, stdin=stdin, check=check)


def _name(prefix: str) -> str:
    return f"api-{prefix}-{uuid.uuid4().hex[:5]}"


async def run_pod(admin: KubeClient, agent: Agent, name: str, command: list[str], **extra: Any) -> Obj:
    container = {"name": "main", "command": command, **extra.pop("container", {})}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [container],
            **extra,
        },
    }
    await admin.create(paths.pods(NS), body)

    async def running() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, name))
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return pod if statuses and "running" in (statuses[0].get("state") or {}) else None

    got: Obj = await eventually(running, timeout=90, what=f"{name} running", agent=agent)
    return got


@pytest.fixture(scope="module")
def busybox(settings: Settings) -> str:
    return configs.busybox_image(settings)


async def wait_node(admin: KubeClient, agent: Agent, settings: Settings) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)


async def test_logs_options(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    await wait_node(admin, agent, settings)
    name = _name("logs")
    # stdout and stderr reach the log through separate pipes: a pause keeps their order in the file.
    script = "for i in 1 2 3 4 5; do echo line$i; done; sleep 1; echo oops >&2; sleep 3600"
    await run_pod(admin, agent, name, ["sh", "-c", script], container={"image": busybox})
    await eventually(lambda: _contains(testbed, name, "oops"), timeout=30, what="the log holds everything", agent=agent)
    out = (await akubectl(testbed, "logs", name)).stdout
    assert out == "line1\nline2\nline3\nline4\nline5\noops\n"
    assert (await akubectl(testbed, "logs", name, "--tail=2")).stdout == "line5\noops\n"
    assert (await akubectl(testbed, "logs", name, "--limit-bytes=8")).stdout == "line1\nli"
    assert (await akubectl(testbed, "logs", name, "--since=1h")).stdout == out
    stamped = (await akubectl(testbed, "logs", name, "--timestamps", "--tail=1")).stdout
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z oops\n", stamped), stamped
    failed = await akubectl(testbed, "logs", name, "-c", "nope", check=False)
    assert failed.returncode != 0 and "container nope is not valid for pod" in failed.stderr


async def _contains(testbed: Testbed, name: str, text: str) -> bool:
    done = await akubectl(testbed, "logs", name, check=False)
    return done.returncode == 0 and text in done.stdout


async def test_logs_follow_streams_new_lines(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    await wait_node(admin, agent, settings)
    name = _name("follow")
    await run_pod(admin, agent, name, ["sh", "-c", "echo start; sleep 3600"], container={"image": busybox})
    await eventually(lambda: _contains(testbed, name, "start"), timeout=30, what="first line", agent=agent)
    follower = await asyncio.create_subprocess_exec(
        *kubectl_argv(testbed, "logs", "-f", name), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert follower.stdout is not None
        first = await asyncio.wait_for(follower.stdout.readline(), 30)
        assert first == b"start\n"
        # A line written later by the container's own PID 1 output reaches the follower.
        await akubectl(testbed, "exec", name, "--", "sh", "-c", "echo later > /proc/1/fd/1")
        second = await asyncio.wait_for(follower.stdout.readline(), 30)
        assert second == b"later\n"
    finally:
        follower.kill()
        await follower.wait()


async def test_logs_previous_after_a_crash(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    await wait_node(admin, agent, settings)
    name = _name("prev")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": busybox, "command": ["sh", "-c", "echo run-$RANDOM; exit 1"]}],
        },
    }
    await admin.create(paths.pods(NS), body)

    async def restarted() -> bool:
        pod: Obj = await admin.get(paths.pod(NS, name))
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and int(statuses[0].get("restartCount", 0)) >= 1

    await eventually(restarted, timeout=90, what="a restart", agent=agent)
    previous = (await akubectl(testbed, "logs", name, "--previous")).stdout
    assert re.fullmatch(r"run-\d+\n", previous), previous


async def test_exec_exit_codes_stdin_and_tty(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    await wait_node(admin, agent, settings)
    name = _name("exec")
    await run_pod(admin, agent, name, ["sleep", "3600"], container={"image": busybox})
    assert (await akubectl(testbed, "exec", name, "--", "true", check=False)).returncode == 0
    assert (await akubectl(testbed, "exec", name, "--", "false", check=False)).returncode == 1
    assert (await akubectl(testbed, "exec", name, "--", "sh", "-c", "exit 7", check=False)).returncode == 7
    echoed = await akubectl(testbed, "exec", "-i", name, "--", "cat", stdin="through stdin\n")
    assert echoed.stdout == "through stdin\n"
    out = await asyncio.to_thread(
        _run_in_pty, kubectl_argv(testbed, "exec", "-it", name, "--", "sh", "-c", "tty; exit 3")
    )
    code, text = out
    assert code == 3, text
    assert "/dev/pts/" in text, text


def _run_in_pty(argv: list[str]) -> tuple[int, str]:
    """Run with a pseudo-terminal as stdin/stdout (kubectl only asks for a tty when its stdin is one)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    output = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(10), output.decode(errors="replace")


async def test_attach_and_cp(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str, tmp_path: Path
) -> None:
    await wait_node(admin, agent, settings)
    name = _name("attach")
    await run_pod(
        admin, agent, name, ["sh", "-c", "while read line; do echo got:$line; done"],
        container={"image": busybox, "stdin": True},
    )  # fmt: skip
    # Attached with stdin held open: a line typed in comes back from the container's own output.
    attach = await asyncio.create_subprocess_exec(
        *kubectl_argv(testbed, "attach", "-i", name, "-c", "main"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert attach.stdin is not None and attach.stdout is not None
        seen = b""
        for _ in range(20):  # the attach may take a moment to be in place: type until an answer comes
            attach.stdin.write(b"hello\n")
            await attach.stdin.drain()
            with contextlib.suppress(TimeoutError):
                seen += await asyncio.wait_for(attach.stdout.readline(), 1)
            if b"got:hello" in seen:
                break
        assert b"got:hello" in seen, seen
    finally:
        attach.kill()
        await attach.wait()
    source = tmp_path / "up.txt"
    source.write_text("copied up\n")
    await akubectl(testbed, "cp", str(source), f"{NS}/{name}:/tmp/up.txt", "-c", "main")
    assert (await akubectl(testbed, "exec", name, "--", "cat", "/tmp/up.txt")).stdout == "copied up\n"
    await akubectl(testbed, "exec", name, "--", "sh", "-c", "echo copied down > /tmp/down.txt")
    target = tmp_path / "down.txt"
    await akubectl(testbed, "cp", f"{NS}/{name}:/tmp/down.txt", str(target), "-c", "main")
    assert target.read_text() == "copied down\n"


async def test_port_forward_with_parallel_requests(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    await wait_node(admin, agent, settings)
    name = _name("pf")
    script = "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 8080 -h /www"
    await run_pod(admin, agent, name, ["sh", "-c", script], container={"image": busybox})
    forward = await asyncio.create_subprocess_exec(
        *kubectl_argv(testbed, "port-forward", f"pod/{name}", ":8080", "--address", "127.0.0.1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert forward.stdout is not None
        line = (await asyncio.wait_for(forward.stdout.readline(), 30)).decode()
        match = re.search(r"127\.0\.0\.1:(\d+) -> 8080", line)
        assert match, line
        port = int(match.group(1))
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            answers = await asyncio.gather(*(client.get(f"http://127.0.0.1:{port}/") for _ in range(20)))
        assert [a.status_code for a in answers] == [200] * 20
        assert {a.text for a in answers} == {"hello-from-pod\n"}
    finally:
        forward.kill()
        await forward.wait()


async def test_auth_without_credentials_and_with_a_stats_only_user(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient
) -> None:
    await wait_node(admin, agent, settings)
    base = f"https://{settings.node_ip}:{settings.kubelet_port}"  # the kubelet API listens on the node address
    ca = ssl.create_default_context(cafile=str(testbed.layout.pki / "ca.crt"))
    async with httpx.AsyncClient(verify=ca, timeout=10, trust_env=False) as anonymous:
        response = await anonymous.get(f"{base}/pods")
        assert response.status_code == 401
        assert response.text == "Unauthorized"
    token = await _stats_only_token(admin)
    async with httpx.AsyncClient(
        verify=ca, timeout=10, trust_env=False, headers={"Authorization": f"Bearer {token}"}
    ) as client:
        allowed = await client.get(f"{base}/metrics")
        assert allowed.status_code == 200
        denied = await client.post(f"{base}/exec/{NS}/x/main?command=true&output=1")
        assert denied.status_code == 403
        assert denied.text == (
            f"Forbidden (user=system:serviceaccount:{NS}:{SA}, verb=create, resource=nodes, subresource(s)=[proxy])\n"
        )
    # The apiserver reached the agent over verified TLS with its kubelet client certificate for every kubectl call
    # above. (Its node proxy, /api/v1/nodes/N/proxy/..., is test_node_proxy_reaches_the_agent_on_the_node_address.)


async def _stats_only_token(admin: KubeClient) -> str:
    rbac = "rbac.authorization.k8s.io"
    await admin.create(paths.api_path("serviceaccounts", namespace=NS), {"metadata": {"name": SA}})
    await admin.create(
        paths.api_path("clusterroles", group=rbac),
        {
            "metadata": {"name": SA},
            "rules": [{"apiGroups": [""], "resources": ["nodes/stats", "nodes/metrics"], "verbs": ["get"]}],
        },
    )
    await admin.create(
        paths.api_path("clusterrolebindings", group=rbac),
        {
            "metadata": {"name": SA},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": SA},
            "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": NS}],
        },
    )
    answer = await admin.create(
        paths.api_path("serviceaccounts", namespace=NS, name=SA) + "/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    )
    return str(answer["status"]["token"])


async def test_aborted_sessions_leak_nothing(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    """200 `logs -f` and 200 exec sessions dropped by the client mid-stream: the agent's open files come back to
    where they were (no leaked task holding a log file, socket or runtime stream)."""
    await wait_node(admin, agent, settings)
    name = _name("abort")
    await run_pod(admin, agent, name, ["sh", "-c", "echo ready; sleep 3600"], container={"image": busybox})
    await eventually(lambda: _contains(testbed, name, "ready"), timeout=30, what="first line", agent=agent)
    context = ssl.create_default_context(cafile=str(testbed.layout.pki / "ca.crt"))
    pki = testbed.layout.pki
    context.load_cert_chain(str(pki / "apiserver-kubelet-client.crt"), str(pki / "apiserver-kubelet-client.key"))
    pid = agent.proc.pid

    async def session(request: bytes, until: bytes) -> None:
        reader, writer = await asyncio.open_connection(settings.node_ip, settings.kubelet_port, ssl=context)
        writer.write(request)
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(until), 30)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    logs = f"GET /containerLogs/{NS}/{name}/main?follow=true HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    execute = (
        f"POST /exec/{NS}/{name}/main?command=sleep&command=600&output=1 HTTP/1.1\r\nHost: x\r\n"
        "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
    ).encode()
    # Warm up (lazy imports, the TLS context), then count.
    await session(logs, b"ready\n")
    await session(execute, b"\r\n\r\n")
    await asyncio.sleep(2)
    before = _fd_count(pid)
    for _ in range(20):
        await asyncio.gather(*(session(logs, b"ready\n") for _ in range(10)))
        await asyncio.gather(*(session(execute, b"\r\n\r\n") for _ in range(10)))

    async def settled() -> bool:
        return _fd_count(pid) <= before + 3

    await eventually(settled, timeout=30, what=f"agent fds back near {before}", agent=agent)


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_node_proxy_reaches_the_agent_on_the_node_address(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    """The apiserver's node proxy (what the e2e suite reads pods through) reaches the agent: the node's InternalIP
    is the testbed's node address, not loopback, which the proxy refuses ("address not allowed")."""
    await wait_node(admin, agent, settings)
    node: Obj = await admin.get(paths.node(settings.node_name))
    assert {"type": "InternalIP", "address": settings.node_ip} in node["status"]["addresses"]
    base = f"/api/v1/nodes/{settings.node_name}/proxy"
    assert (await akubectl(testbed, "get", "--raw", f"{base}/healthz")).stdout.rstrip("\n") == "ok"
    name = _name("proxy")
    await run_pod(admin, agent, name, ["sleep", "3600"], container={"image": busybox})
    listed = json.loads((await akubectl(testbed, "get", "--raw", f"{base}/pods")).stdout)
    assert listed["kind"] == "PodList"
    assert name in {p["metadata"]["name"] for p in listed["items"]}
    # The e2e framework names the port (NODE:10250, a constant): the testbed's agent listens on upstream's port.
    assert settings.kubelet_port == 10250
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    at_port = json.loads(
        (await akubectl(testbed, "get", "--raw", f"/api/v1/nodes/{settings.node_name}:10250/proxy/pods")).stdout
    )
    assert name in {p["metadata"]["name"] for p in at_port["items"]}
    # Pods reach the node address too (their gateway), as on a real node: a connection to the kubelet port opens.
    dial = f"nc -w 5 {settings.node_ip} {settings.kubelet_port} </dev/null; echo rc=$?"
    assert (await akubectl(testbed, "exec", name, "--", "sh", "-c", dial)).stdout.strip() == "rc=0"


async def test_kubectl_top_shows_the_cgroups_numbers(
    testbed: Testbed, settings: Settings, agent: Agent, admin: KubeClient, busybox: str
) -> None:
    """metrics-server, through the aggregation layer, from the agent's /metrics/resource: a pod burning CPU shows
    non-zero CPU within a minute, and memory within 10% of its container cgroup's working set."""
    await wait_node(admin, agent, settings)
    name = _name("top")
    # 20 MiB in the sandbox's /dev/shm (tmpfs, charged to the container's cgroup), then a busy loop held to 200m.
    script = "dd if=/dev/zero of=/dev/shm/fill bs=1048576 count=20 2>/dev/null; while :; do :; done"
    limits = {"cpu": "200m", "memory": "64Mi"}
    pod = await run_pod(
        admin, agent, name, ["sh", "-c", script], container={"image": busybox, "resources": {"limits": limits}}
    )
    try:
        started = time.monotonic()

        async def top_pod() -> tuple[int, int] | None:
            done = await akubectl(testbed, "top", "pod", name, "--no-headers", check=False)
            match = re.fullmatch(rf"{name}\s+(\d+)m\s+(\d+)Mi\s*", done.stdout)
            return (int(match.group(1)), int(match.group(2))) if match and int(match.group(1)) > 0 else None

        cpu_millis, memory_mib = await eventually(top_pod, timeout=60, what="kubectl top pod: CPU > 0", agent=agent)
        assert time.monotonic() - started < 60
        assert cpu_millis <= 260, cpu_millis  # held to 200m by its CFS quota
        container_id = pod["status"]["containerStatuses"][0]["containerID"].rpartition("://")[2]
        working_set = _cgroup_working_set(await _container_pid(testbed, container_id))
        assert working_set > 20 * 1024 * 1024
        assert abs(memory_mib * 1024 * 1024 - working_set) <= 0.1 * working_set, (memory_mib, working_set)
        node_row = (await akubectl(testbed, "top", "node", "--no-headers")).stdout.split()
        assert node_row[0] == settings.node_name
        assert re.fullmatch(r"\d+m", node_row[1]) and re.fullmatch(r"\d+Mi", node_row[3]), node_row
        assert int(node_row[1][:-1]) >= cpu_millis * 0.5  # the node holds at least the pod's burn
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def _container_pid(testbed: Testbed, container_id: str) -> int:
    async with connect(f"unix://{testbed.layout.containerd_socket}", timeout=30) as cri:
        status = await cri.runtime.container_status(container_id, verbose=True)
    return int(json.loads(status.info["info"])["pid"])


def _cgroup_working_set(pid: int) -> int:
    """As cAdvisor computes it, straight from the process's memory cgroup (v1): usage - total_inactive_file."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    path = next(line.split(":", 2)[2] for line in lines if line.split(":", 2)[1] == "memory")
    cgroup = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    usage = int((cgroup / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    return usage - int(stat["total_inactive_file"])
