"""Termination messages on the real testbed, as upstream's [NodeConformance] specs check them: what a container writes
to its terminationMessagePath (default or custom, as root or not) and, with FallbackToLogsOnError, the end of its
log, ends up in `state.terminated.message` (and `lastState`'s after a restart), cut at 4096 bytes per container and
12 KiB per pod. The message files live under the agent's --root-dir and go with the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import stat
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.config.quantity import parse_quantity
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-termination-message.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _name(prefix: str) -> str:
    return f"tmsg-{prefix}-{uuid.uuid4().hex[:5]}"


def container(name: str, image: str, script: str, **fields: Any) -> Obj:
    return {"name": name, "image": image, "command": ["sh", "-c", script], **fields}


async def run_pod(admin: KubeClient, name: str, containers: list[Obj], restart_policy: str = "Never") -> Obj:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "containers": containers,
        },
    }
    created: Obj = await admin.create(paths.pods(NS), body)
    return created


async def terminated(admin: KubeClient, agent: Agent, name: str, *containers: str) -> dict[str, Obj]:
    """The terminated state of each named container, once all have one."""

    async def check() -> dict[str, Obj] | None:
        pod = await admin.get(paths.pod(NS, name))
        states = {
            s["name"]: s["state"]["terminated"]
            for s in (pod.get("status") or {}).get("containerStatuses") or ()
            if "terminated" in (s.get("state") or {})
        }
        return states if set(containers) <= set(states) else None

    got: dict[str, Obj] = await eventually(check, timeout=90, what=f"{name} terminated", agent=agent)
    return got


async def test_message_from_the_default_file(
    agent: Agent, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("file")
    image = configs.busybox_image(settings)
    created = await run_pod(admin, name, [container("main", image, "printf 'file says bye' > /dev/termination-log")])
    state = (await terminated(admin, agent, name, "main"))["main"]
    assert (state["exitCode"], state["reason"], state["message"]) == (0, "Completed", "file says bye")

    # The instance's file, as upstream makes it: <root-dir>/pods/<uid>/containers/<name>/<8 hex digits>, mode 0666.
    uid = created["metadata"]["uid"]
    pod_dir = testbed.layout.kubelet_root / "pods" / uid
    [file] = list((pod_dir / "containers" / "main").iterdir())
    assert len(file.name) == 8 and int(file.name, 16) >= 0
    assert stat.S_IMODE(file.stat().st_mode) == 0o666
    assert file.read_text() == "file says bye"

    # Deleting the pod removes its directory with its containers.
    await admin.delete(paths.pod(NS, name))

    async def gone() -> bool:
        with contextlib.suppress(NotFound):
            await admin.get(paths.pod(NS, name))
            return False
        return not pod_dir.exists()

    await eventually(gone, timeout=60, what="pod and its directory gone", agent=agent)


async def test_non_root_container_with_a_custom_path(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("nonroot")
    spec = container(
        "main",
        configs.busybox_image(settings),
        'printf "DONE as $(id -u)" > /tmp/custom-log',
        terminationMessagePath="/tmp/custom-log",
        securityContext={"runAsUser": 1000},
    )
    await run_pod(admin, name, [spec])
    state = (await terminated(admin, agent, name, "main"))["main"]
    assert (state["exitCode"], state["message"]) == (0, "DONE as 1000")


async def test_fallback_to_logs_on_error(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("logs")
    image = configs.busybox_image(settings)
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    containers = [
        # upstream's spec: `echo -n DONE; false`; the log's unterminated last line comes back without a newline
        container("failed", image, "echo first; sleep 1; echo -n DONE >&2; exit 1", **fallback),
        container("succeeded", image, "echo -n not-reported", **fallback),  # exit 0: no fallback
        container("wrote", image, "printf from-file > /dev/termination-log; echo from-log; exit 2", **fallback),
        container("file-policy", image, "echo -n not-reported; exit 1"),  # File: the log is never read
    ]
    await run_pod(admin, name, containers)
    states = await terminated(admin, agent, name, "failed", "succeeded", "wrote", "file-policy")
    assert (states["failed"]["exitCode"], states["failed"]["message"]) == (1, "first\nDONE")
    assert "message" not in states["succeeded"]
    assert states["wrote"]["message"] == "from-file"
    assert "message" not in states["file-policy"]


async def test_long_messages_are_cut(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    image = configs.busybox_image(settings)
    # 5003 bytes: 500 times the ten digits, then END.
    script = "i=0; while [ $i -lt 500 ]; do printf 0123456789; i=$((i+1)); done > /dev/termination-log; "
    script += "printf END >> /dev/termination-log"
    written = "0123456789" * 500 + "END"

    alone = _name("long")
    await run_pod(admin, alone, [container("main", image, script)])
    state = (await terminated(admin, agent, alone, "main"))["main"]
    assert state["message"] == written[-4096:]  # the last 4096 bytes, as upstream reads the file

    # Four containers share 12 KiB: each keeps the first 3072 bytes of its 4096.
    shared = _name("shared")
    names = ["a", "b", "c", "d"]
    await run_pod(admin, shared, [container(n, image, script) for n in names])
    states = await terminated(admin, agent, shared, *names)
    assert {n: states[n]["message"] for n in names} == {n: written[-4096:][:3072] for n in names}


async def test_last_state_keeps_the_message_of_the_run_before(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("restart")
    script = 'printf "bye from $(hostname)" > /dev/termination-log; exit 3'
    await run_pod(admin, name, [container("main", configs.busybox_image(settings), script)], "Always")

    async def restarted() -> Obj | None:
        pod = await admin.get(paths.pod(NS, name))
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        last = (statuses[0].get("lastState") or {}).get("terminated")
        return last if statuses[0].get("restartCount", 0) >= 1 and last else None

    last = await eventually(restarted, timeout=90, what=f"{name} restarted", agent=agent)
    assert (last["exitCode"], last["message"]) == (3, f"bye from {name}")


async def test_resource_field_ref_divisor_defaults_to_one_and_limits_to_allocatable(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    """The downward API's resource values, reported through the termination message: an unset divisor (which the
    apiserver stores as "0") means 1, and a container without limits sees the node's allocatable."""
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("env")

    def ref(resource: str, divisor: str | None = None) -> Obj:
        field: Obj = {"resource": resource}
        if divisor is not None:
            field["divisor"] = divisor
        return {"valueFrom": {"resourceFieldRef": field}}

    env = {
        "CPU": ref("limits.cpu"),
        "CPU_M": ref("limits.cpu", "1m"),
        "MEM": ref("limits.memory"),
        "MEM_MI": ref("limits.memory", "1Mi"),
        "REQ_MEM": ref("requests.memory", "0"),
    }
    spec = container(
        "main",
        configs.busybox_image(settings),
        'printf "$CPU $CPU_M $MEM $MEM_MI $REQ_MEM" > /dev/termination-log',
        env=[{"name": k, **v} for k, v in env.items()],
    )
    created = await run_pod(admin, name, [spec])
    stored = created["spec"]["containers"][0]["env"][0]["valueFrom"]["resourceFieldRef"]
    assert stored.get("divisor") in (None, "0")
    state = (await terminated(admin, agent, name, "main"))["main"]
    allocatable = (await admin.get(paths.node(settings.node_name)))["status"]["allocatable"]
    cpu, memory = parse_quantity(allocatable["cpu"]), parse_quantity(allocatable["memory"])
    expected = [
        math.ceil(cpu),
        math.ceil(cpu * 1000),
        math.ceil(memory),
        math.ceil(memory / 2**20),
        0,  # no request: 0, whatever the divisor
    ]
    assert (state["exitCode"], state["message"]) == (0, " ".join(str(v) for v in expected))
