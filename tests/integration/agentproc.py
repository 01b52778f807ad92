"""The agent as a subprocess (`nodeagent run`) for integration tests, and what every such test module needs.

`start_agent` runs the agent with the testbed's node credential and config (or a config derived from it with
`agent_config`); `clean_up` deletes what a module left in the apiserver (Deployments, Jobs, Services, pods, the Node
and its Lease) and in containerd, so the next module starts from an empty node.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cri.client import connect
from cri.errors import CRIError
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import sandboxes
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.processes import tail
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir

NS = "default"


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return tail(self.log, 60)


def agent_config(testbed: Testbed, path: Path, **overrides: Any) -> Path:
    """The testbed's nodeagent.yaml with some KubeletConfiguration fields (camelCase) replaced, written to `path`."""
    config = yaml.safe_load(testbed.layout.agent_config.read_text())
    config.update(overrides)
    path.write_text(yaml.safe_dump(config))
    return path


def start_agent(
    testbed: Testbed,
    log: Path,
    *,
    config: Path | None = None,
    args: Sequence[str] = ("--kubeconfig", "<node>"),
    env: dict[str, str] | None = None,
) -> Agent:
    """`nodeagent run` with the testbed's config (or `config`); "<node>" in `args` is the node's kubeconfig."""
    argv = [str(testbed.layout.node_kubeconfig) if a == "<node>" else a for a in args]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "nodeagent", "run",
                "--config", str(config or testbed.layout.agent_config),
                # The testbed's node address (its bridge's gateway): not loopback, so the apiserver's node proxy
                # and metrics-server reach the agent's kubelet API there, as in a real cluster.
                "--node-ip", testbed.settings.node_ip,
                "--root-dir", str(testbed.layout.kubelet_root),
                *argv,
            ],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
        )  # fmt: skip
    return Agent(proc, log)


def stop_agent(agent: Agent) -> None:
    if agent.proc.poll() is None:
        agent.proc.send_signal(signal.SIGTERM)
        try:
            agent.proc.wait(15)
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait(5)


@contextlib.contextmanager
def module_agent(testbed: Testbed, settings: Settings, log: str, *, config: Path | None = None) -> Iterator[Agent]:
    """A module's agent, logging to `log` in the testbed's logs; stopped and the testbed cleaned up on the way out,
    even on failure (the body of most modules' `agent` fixture)."""
    running = start_agent(testbed, testbed.layout.logs / log, config=config)
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def eventually(check: Callable[[], Awaitable[Any]], *, timeout: float, what: str, agent: Agent) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"{what}: not true after {timeout:.0f}s (last={last!r})\n--- agent log ---\n{agent.tail()}")


async def node_ready(admin: KubeClient, name: str) -> bool:
    try:
        node = await admin.get(paths.node(name))
    except NotFound:
        return False
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions") or []
    )


def deployment_path() -> str:
    return paths.api_path("deployments", group="apps", namespace=NS)


def job_path() -> str:
    return paths.api_path("jobs", group="batch", namespace=NS)


async def clean_up(testbed: Testbed, settings: Settings) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        for kind_path in (deployment_path(), job_path()):
            for item in (await admin.list(kind_path))["items"]:
                with contextlib.suppress(NotFound):
                    await admin.delete(f"{kind_path}/{item['metadata']['name']}", propagation_policy="Background")
        for service in (await admin.list(paths.api_path("services", namespace=NS)))["items"]:
            name = service["metadata"]["name"]
            if name != "kubernetes":  # the apiserver's own
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.api_path("services", namespace=NS, name=name))
        for pod in (await admin.list(paths.pods(NS)))["items"]:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
        with contextlib.suppress(NotFound):
            await admin.delete(paths.lease("kube-node-lease", settings.node_name))
        with contextlib.suppress(NotFound):
            await admin.delete(paths.node(settings.node_name))
        # Owned by the Node, but the garbage collector takes its time: the next module's agent found the old one,
        # with the drivers of the modules before it, and took it over (a CI run of test_csi_registration).
        with contextlib.suppress(NotFound):
            await admin.delete(paths.api_path("csinodes", group="storage.k8s.io", name=settings.node_name))
    async with connect(f"unix://{testbed.layout.containerd_socket}", timeout=30) as cri:
        for sandbox in await cri.runtime.list_pod_sandbox():
            await cri.runtime.stop_pod_sandbox(sandbox.id)
            try:
                await sandboxes.remove_pod_sandbox(cri.runtime, sandbox.id)
            except CRIError as exc:
                # A container whose task containerd keeps although it never marked it started (a start cut off by
                # a killed agent): no CRI call removes it; `testbed down` kills its shim.
                if "running task" not in exc.message:
                    raise


# Pods as the tests run and read them (shared by test_e2e_images, test_nginx_image, test_probes and
# test_recursive_read_only).


async def wait_node_ready(admin: KubeClient, agent: Agent, node_name: str, *, timeout: float = 60) -> None:
    await eventually(lambda: node_ready(admin, node_name), timeout=timeout, what="node Ready", agent=agent)


def one_container_pod(name: str, container: dict[str, Any], labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A pod of one container named "main" that stops at once (grace 0) and mounts no service account token."""
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", **container}],
            **spec,
        },
    }


async def kubectl_logs(testbed: Testbed, name: str) -> str:
    """`kubectl logs` of a pod in NS: apiserver → the agent's kubelet API, as the e2e framework reads a log."""
    argv = [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(testbed.layout.admin_kubeconfig)]
    proc = await asyncio.to_thread(
        subprocess.run, [*argv, "logs", "-n", NS, name], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, f"kubectl logs {name}: {proc.stderr}"
    return proc.stdout


async def wait_ready(admin: KubeClient, agent: Agent, name: str) -> tuple[str, str]:
    """The pod's IP and its container's id, once a container runs and is ready."""

    async def check() -> tuple[str, str] | None:
        pod: dict[str, Any] = await admin.get(paths.pod(NS, name))
        status = pod.get("status") or {}
        for cs in status.get("containerStatuses") or ():
            if "running" in (cs.get("state") or {}) and cs.get("ready") and status.get("podIP"):
                return str(status["podIP"]), str(cs["containerID"]).rpartition("://")[2]
        return None

    found: tuple[str, str] = await eventually(check, timeout=120, what=f"{name} ready", agent=agent)
    return found


def cstatus(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """The status of the pod's container `name`; empty before the kubelet wrote one."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status["name"] == name:
            out: dict[str, Any] = status
            return out
    return {}


def running_id(pod: dict[str, Any], name: str) -> str:
    """The runtime's id of container `name` while it runs, else ""."""
    status = cstatus(pod, name)
    if "running" not in (status.get("state") or {}):
        return ""
    return str(status.get("containerID", "")).rpartition("://")[2]


async def events(admin: KubeClient, pod: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    """The events about this pod (by uid) with `reason`."""
    listed = await admin.list(
        paths.events(NS), field_selector=f"involvedObject.uid={pod['metadata']['uid']},reason={reason}"
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


async def wait_running(
    admin: KubeClient, agent: Agent, name: str, *containers: str, timeout: float = 90
) -> dict[str, Any]:
    """The pod, once each of `containers` runs."""

    async def running() -> dict[str, Any] | None:
        pod: dict[str, Any] = await admin.get(paths.pod(NS, name))
        return pod if all(running_id(pod, c) for c in containers) else None

    got: dict[str, Any] = await eventually(
        running, timeout=timeout, what=f"{name}: {', '.join(containers)} running", agent=agent
    )
    return got
