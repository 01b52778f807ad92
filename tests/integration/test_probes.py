"""Probes as users see them: the agent (`nodeagent run`) probes real containers on containerd, and the effects show in
the apiserver (pod conditions, restart counts, events) and in the real controller-manager's EndpointSlices.

The tests act through the apiserver as admin and through containerd's CRI (ExecSync) to change what a container
answers. Every wait is a condition with a generous deadline; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import datetime
import re
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
    cstatus,
    events,
    eventually,
    running_id,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-probes.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _name(prefix: str) -> str:
    return f"probe-{prefix}-{uuid.uuid4().hex[:5]}"


def container(name: str, image: str, command: list[str], **fields: Any) -> Obj:
    return {"name": name, "image": image, "command": command, **fields}


async def run_pod(admin: KubeClient, name: str, containers: list[Obj], **spec: Any) -> Obj:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "containers": containers,
            **spec,
        },
    }
    created: Obj = await admin.create(paths.pods(NS), body)
    return created


async def get_pod(admin: KubeClient, name: str) -> Obj:
    pod: Obj = await admin.get(paths.pod(NS, name))
    return pod


def condition(pod: Obj, kind: str) -> Obj:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond["type"] == kind:
            out: Obj = cond
            return out
    return {}


async def exec_in(cri: CRIClient, container_id: str, *command: str) -> int:
    response = await cri.runtime.exec_sync(container_id, list(command), 10)
    return response.exit_code


async def past(stamp: str) -> None:
    """Wait (a second at most) until this host's clock, in the API's whole seconds, is past `stamp`, an RFC 3339 time
    the agent wrote on the same host: a transition made from now on gets a later time, so a kept time shows."""
    moment = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    left = moment + datetime.timedelta(seconds=1) - datetime.datetime.now(datetime.UTC)
    await asyncio.sleep(max(left.total_seconds() + 0.01, 0.0))


EXEC_FAST = {"periodSeconds": 1, "failureThreshold": 1}


async def test_readiness_flips_pod_ready_and_the_endpointslice(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await wait_node_ready(admin, agent, settings.node_name, timeout=30)
    name = _name("web")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": "http", "protocol": "TCP"}]},
    }
    created = await admin.create(paths.api_path("services", namespace=NS), service)
    assert created["spec"]["clusterIP"].startswith("198.19.")
    readiness = {
        "httpGet": {"path": "/ready.txt", "port": "http", "httpHeaders": [{"name": "X-Probe", "value": "1"}]},
        **EXEC_FAST,
    }
    web = container(
        "web",
        configs.busybox_image(settings),
        ["httpd", "-f", "-p", "8080", "-h", "/var/www"],
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe=readiness,
    )
    await run_pod(admin, name, [web])
    pod = await wait_running(admin, agent, name, "web")
    cid = running_id(pod, "web")
    pod_ip = pod["status"]["podIP"]

    async def endpoint_ready() -> bool | None:
        slices = await admin.list(
            paths.api_path("endpointslices", group="discovery.k8s.io", namespace=NS),
            label_selector=f"kubernetes.io/service-name={name}",
        )
        for item in slices["items"]:
            for endpoint in item.get("endpoints") or ():
                if pod_ip in endpoint.get("addresses", ()):
                    return bool((endpoint.get("conditions") or {}).get("ready"))
        return None

    async def ready_is(value: str) -> Obj | None:
        got = await get_pod(admin, name)
        ready, containers_ready = condition(got, "Ready"), condition(got, "ContainersReady")
        if ready.get("status") == value and containers_ready.get("status") == value:
            return got
        return None

    # No file yet: running but not ready, listed in the slice as not ready.
    not_ready = await eventually(lambda: ready_is("False"), timeout=30, what="Ready=False at first", agent=agent)
    assert cstatus(not_ready, "web")["ready"] is False
    assert cstatus(not_ready, "web")["started"] is True
    await eventually(
        lambda: _is(endpoint_ready(), False), timeout=60, what="slice lists the pod not ready", agent=agent
    )

    # A flip sets the transition time anew (upstream keeps it only while the status stays): later, not kept.
    went_unready_at = condition(not_ready, "Ready")["lastTransitionTime"]
    await past(went_unready_at)
    assert await exec_in(cri_client, cid, "sh", "-c", "echo ok > /var/www/ready.txt") == 0
    ready = await eventually(lambda: ready_is("True"), timeout=30, what="Ready=True after the file", agent=agent)
    assert cstatus(ready, "web")["ready"] is True
    went_ready_at = condition(ready, "Ready")["lastTransitionTime"]
    assert went_ready_at > went_unready_at
    await eventually(lambda: _is(endpoint_ready(), True), timeout=60, what="slice lists the pod ready", agent=agent)
    # Resyncs with nothing new keep the transition time.
    again = await get_pod(admin, name)
    assert condition(again, "Ready")["lastTransitionTime"] == went_ready_at

    await past(went_ready_at)
    assert await exec_in(cri_client, cid, "rm", "/var/www/ready.txt") == 0
    unready = await eventually(lambda: ready_is("False"), timeout=30, what="Ready=False after rm", agent=agent)
    assert condition(unready, "Ready")["reason"] == "ContainersNotReady"
    assert condition(unready, "Ready")["message"] == "containers with unready status: [web]"
    assert condition(unready, "Ready")["lastTransitionTime"] > went_ready_at
    await eventually(
        lambda: _is(endpoint_ready(), False), timeout=60, what="slice lists the pod not ready again", agent=agent
    )
    # A container that is not ready is never restarted for it.
    assert cstatus(unready, "web")["restartCount"] == 0
    assert running_id(unready, "web") == cid
    unhealthy = await events(admin, unready, "Unhealthy")
    assert any(e["message"] == "Readiness probe failed: HTTP probe failed with statuscode: 404" for e in unhealthy)
    assert all(e["involvedObject"]["fieldPath"] == "spec.containers{web}" for e in unhealthy)


async def _is(value: Any, expected: bool) -> bool:
    return (await value) is expected


async def test_exec_liveness_failure_restarts_the_container(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = _name("live")
    main = container(
        "main",
        configs.busybox_image(settings),
        ["sh", "-c", "touch /tmp/healthy; exec sleep 3600"],
        # The probe's own grace (1 s) overrides the pod's (600 s): sleep as PID 1 ignores SIGTERM, so without the
        # override the restart would wait ten minutes.
        livenessProbe={"exec": {"command": ["cat", "/tmp/healthy"]}, "terminationGracePeriodSeconds": 1, **EXEC_FAST},
    )
    await run_pod(admin, name, [main], terminationGracePeriodSeconds=600)
    pod = await wait_running(admin, agent, name, "main")
    first = running_id(pod, "main")
    assert cstatus(pod, "main")["restartCount"] == 0

    seen_counts: list[int] = []
    for restarts in (1, 2):
        assert await exec_in(cri_client, running_id(pod, "main"), "rm", "/tmp/healthy") == 0

        async def restarted(count: int = restarts) -> Obj | None:
            got = await get_pod(admin, name)
            seen_counts.append(int(cstatus(got, "main").get("restartCount", 0)))
            return got if cstatus(got, "main").get("restartCount") == count and running_id(got, "main") else None

        pod = await eventually(restarted, timeout=120, what=f"restartCount {restarts}", agent=agent)
    assert seen_counts == sorted(seen_counts), "the restart count only rises"
    assert running_id(pod, "main") != first
    last = cstatus(pod, "main")["lastState"]["terminated"]
    assert last["exitCode"] == 137  # killed: SIGTERM was ignored, the short grace ran out

    async def both_events() -> tuple[list[Obj], list[Obj]] | None:
        unhealthy = await events(admin, pod, "Unhealthy")
        killing = [e for e in await events(admin, pod, "Killing") if "liveness" in e["message"]]
        return (unhealthy, killing) if unhealthy and killing else None

    unhealthy, killing = await eventually(both_events, timeout=30, what="Unhealthy and Killing events", agent=agent)
    assert (
        unhealthy[0]["message"] == "Liveness probe failed: cat: can't open '/tmp/healthy': No such file or directory\n"
    )
    assert unhealthy[0]["type"] == "Warning"
    assert killing[0]["message"] == "Container main failed liveness probe, will be restarted"
    assert killing[0]["involvedObject"]["fieldPath"] == "spec.containers{main}"


async def test_startup_probe_holds_off_a_strict_liveness_probe(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("slow")
    slow = container(
        "slow",
        configs.busybox_image(settings),
        ["sh", "-c", "sleep 20; touch /tmp/started; exec sleep 3600"],
        # Fails for about 20 s; its budget is 2 s x 30 = 60 s.
        startupProbe={"exec": {"command": ["cat", "/tmp/started"]}, "periodSeconds": 2, "failureThreshold": 30},
        # Would kill the container at its first failure if it ran before startup succeeded.
        livenessProbe={"exec": {"command": ["cat", "/tmp/started"]}, **EXEC_FAST},
    )
    await run_pod(admin, name, [slow])
    pod = await wait_running(admin, agent, name, "slow")
    assert cstatus(pod, "slow")["started"] is False
    assert condition(pod, "Ready")["status"] == "False"

    async def started() -> Obj | None:
        got = await get_pod(admin, name)
        # No readiness probe: ready once started. The two may reach the apiserver in two status updates (as
        # upstream: `started` is set when the probe succeeds, `ready` at the pod's next sync), so wait for both.
        status = cstatus(got, "slow")
        return got if status.get("started") and status.get("ready") else None

    pod = await eventually(started, timeout=120, what="startup probe succeeds and the container is ready", agent=agent)
    assert cstatus(pod, "slow")["restartCount"] == 0
    killing = [e for e in await events(admin, pod, "Killing") if "probe" in e["message"]]
    assert killing == []
    unhealthy = await events(admin, pod, "Unhealthy")
    assert unhealthy and all(e["message"].startswith("Startup probe failed: ") for e in unhealthy)


async def test_startup_probe_failing_past_its_threshold_kills_the_container(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("never")
    never = container(
        "never",
        configs.busybox_image(settings),
        ["sleep", "3600"],
        startupProbe={"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 2},
    )
    await run_pod(admin, name, [never])

    async def restarted() -> Obj | None:
        got = await get_pod(admin, name)
        return got if cstatus(got, "never").get("restartCount", 0) >= 1 else None

    pod = await eventually(restarted, timeout=90, what="restarted after the startup probe failed", agent=agent)

    async def killing() -> list[Obj]:
        return [e for e in await events(admin, pod, "Killing") if "startup probe" in e["message"]]

    [event] = await eventually(killing, timeout=30, what="Killing event", agent=agent)
    assert event["message"] == "Container never failed startup probe, will be restarted"


async def test_tcp_socket_probe_on_a_listening_and_a_closed_port(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("tcp")
    image = configs.busybox_image(settings)
    listening = container(
        "listening",
        image,
        ["httpd", "-f", "-p", "8080", "-h", "/var/www"],
        readinessProbe={"tcpSocket": {"port": 8080}, **EXEC_FAST},
        livenessProbe={"tcpSocket": {"port": 8080}, **EXEC_FAST},
    )
    closed = container("closed", image, ["sleep", "3600"], readinessProbe={"tcpSocket": {"port": 8081}, **EXEC_FAST})
    await run_pod(admin, name, [listening, closed])
    await wait_running(admin, agent, name, "listening", "closed")

    async def verdicts() -> tuple[Obj, list[Obj]] | None:
        got = await get_pod(admin, name)
        failures = await events(admin, got, "Unhealthy")
        closed_failed = any(e["involvedObject"]["fieldPath"] == "spec.containers{closed}" for e in failures)
        return (got, failures) if cstatus(got, "listening").get("ready") is True and closed_failed else None

    pod, failures = await eventually(verdicts, timeout=60, what="listening ready, closed failing", agent=agent)
    assert cstatus(pod, "closed")["ready"] is False
    assert condition(pod, "Ready")["message"] == "containers with unready status: [closed]"
    ip = pod["status"]["podIP"]
    by_container: dict[str, list[str]] = {}
    for e in failures:
        by_container.setdefault(e["involvedObject"]["fieldPath"], []).append(e["message"])
    # The closed port fails with one message (its repeats fold into the event's count).
    assert by_container.pop("spec.containers{closed}") == [
        f"Readiness probe failed: dial tcp {ip}:8081: connect: connection refused"
    ]
    # The listening container fails at most before httpd listens (a first probe can be that early), never otherwise.
    early = re.compile(
        rf"^(Readiness|Liveness) probe failed: dial tcp {re.escape(ip)}:8080: connect: connection refused$"
    )
    assert set(by_container) <= {"spec.containers{listening}"}
    assert all(early.match(m) for m in by_container.get("spec.containers{listening}", ())), by_container
    assert cstatus(pod, "listening")["restartCount"] == 0


async def test_exec_probe_that_hangs_past_its_timeout_fails(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("hang")
    hang = container(
        "hang",
        configs.busybox_image(settings),
        ["sleep", "3600"],
        readinessProbe={"exec": {"command": ["sleep", "30"]}, "timeoutSeconds": 1, **EXEC_FAST},
    )
    await run_pod(admin, name, [hang])
    pod = await wait_running(admin, agent, name, "hang")

    async def timed_out() -> list[Obj]:
        return await events(admin, pod, "Unhealthy")

    [event] = await eventually(timed_out, timeout=90, what="timeout reported", agent=agent)
    assert event["message"] == 'Readiness probe failed: command timed out: "sleep 30" timed out after 1s'
    pod = await get_pod(admin, name)
    assert cstatus(pod, "hang")["ready"] is False
    assert condition(pod, "Ready")["status"] == "False"


async def test_grpc_probe_against_a_health_server_in_a_pod(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    name = _name("grpc")
    image = configs.grpc_health_image(settings)
    healthy = container(
        "healthy",
        image,
        ["/grpc-health", "-port", "5000", "-not-serving", "db"],
        readinessProbe={"grpc": {"port": 5000}, **EXEC_FAST},
        livenessProbe={"grpc": {"port": 5000}, **EXEC_FAST},
    )
    # The same server answers NOT_SERVING for the "db" service (both containers share the pod's network).
    unhealthy = container(
        "unhealthy", configs.busybox_image(settings), ["sleep", "3600"],
        readinessProbe={"grpc": {"port": 5000, "service": "db"}, **EXEC_FAST},
    )  # fmt: skip
    await run_pod(admin, name, [healthy, unhealthy])
    await wait_running(admin, agent, name, "healthy", "unhealthy")

    not_serving = 'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")'

    async def verdicts() -> tuple[Obj, list[Obj]] | None:
        got = await get_pod(admin, name)
        failures = await events(admin, got, "Unhealthy")
        answered = any(e["message"] == not_serving for e in failures)
        return (got, failures) if cstatus(got, "healthy").get("ready") is True and answered else None

    pod, failures = await eventually(verdicts, timeout=60, what="grpc verdicts", agent=agent)
    assert cstatus(pod, "unhealthy")["ready"] is False
    # One NOT_SERVING failure (repeats fold into its count), and only for the "db" service's container.
    [event] = [e for e in failures if e["message"] == not_serving]
    assert event["involvedObject"]["fieldPath"] == "spec.containers{unhealthy}"
    # Any other failure is a first probe made before the server listened: the health RPC could not be made.
    early = re.compile(
        r"^(Readiness|Liveness) probe failed: (error: health rpc probe failed: rpc error: code = Unavailable desc = "
        r"|timeout: health rpc did not complete within 1s$)"
    )
    others = [e["message"] for e in failures if e is not event]
    assert all(early.match(m) for m in others), others
    assert cstatus(pod, "healthy")["restartCount"] == 0


REDIRECT_CGI = (
    "mkdir -p /var/www/cgi-bin"
    ' && printf \'#!/bin/sh\\necho "Status: 302 Found"\\necho "Location: http://198.19.255.254:81/elsewhere"\\n'
    'echo "Content-Type: text/plain"\\necho\\necho moved\\n\' > /var/www/cgi-bin/redirect'
    " && chmod +x /var/www/cgi-bin/redirect"
    " && exec httpd -f -p 8080 -h /var/www"
)


async def test_http_redirect_to_another_host_is_success_with_a_probe_warning(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("redirect")
    web = container(
        "web",
        configs.busybox_image(settings),
        ["sh", "-c", REDIRECT_CGI],
        # A second's delay: a first probe before httpd listens is refused, and its Unhealthy event is not what
        # this test is about (seen once at load, 2026-11-30).
        readinessProbe={"httpGet": {"path": "/cgi-bin/redirect", "port": 8080}, **EXEC_FAST, "initialDelaySeconds": 1},
    )
    await run_pod(admin, name, [web])
    await wait_running(admin, agent, name, "web")

    async def ready_with_warning() -> tuple[Obj, list[Obj]] | None:
        got = await get_pod(admin, name)
        warnings = await events(admin, got, "ProbeWarning")
        return (got, warnings) if cstatus(got, "web").get("ready") is True and warnings else None

    pod, warnings = await eventually(ready_with_warning, timeout=60, what="ready plus ProbeWarning", agent=agent)
    assert condition(pod, "Ready")["status"] == "True"
    assert warnings[0]["type"] == "Warning"
    assert warnings[0]["message"] == "Readiness probe warning: Probe terminated redirects, Response body: moved\n"
    assert await events(admin, pod, "Unhealthy") == []


async def test_termination_turns_readiness_false_and_stops_liveness(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    name = _name("term")
    script = (
        "_term() { rm -f /tmp/ready /tmp/alive; sleep 20; exit 0; }; trap _term TERM;"
        " touch /tmp/ready /tmp/alive; while true; do sleep 1; done"
    )
    main = container(
        "main",
        configs.busybox_image(settings),
        ["sh", "-c", script],
        readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, **EXEC_FAST},
        # Would restart the container during its grace period if liveness still ran.
        livenessProbe={"exec": {"command": ["cat", "/tmp/alive"]}, **EXEC_FAST},
    )
    await run_pod(admin, name, [main], terminationGracePeriodSeconds=60)
    pod = await wait_running(admin, agent, name, "main")

    async def ready() -> bool:
        return cstatus(await get_pod(admin, name), "main").get("ready") is True

    await eventually(ready, timeout=30, what="ready before deletion", agent=agent)
    await admin.delete(paths.pod(NS, name))

    async def unready_while_terminating() -> Obj | None:
        got = await get_pod(admin, name)
        terminating = bool(got["metadata"].get("deletionTimestamp")) and running_id(got, "main")
        return got if terminating and condition(got, "Ready").get("status") == "False" else None

    got = await eventually(unready_while_terminating, timeout=30, what="not ready while terminating", agent=agent)
    assert cstatus(got, "main")["ready"] is False
    assert cstatus(got, "main")["restartCount"] == 0

    async def gone() -> bool:
        try:
            await get_pod(admin, name)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=90, what="pod deleted after its grace", agent=agent)
    killing = [e for e in await events(admin, pod, "Killing") if "probe" in e["message"]]
    assert killing == []
    # The liveness probe stopped with the termination: /tmp/alive was gone for 20 s and it never said so.
    failed = [e["message"] for e in await events(admin, pod, "Unhealthy")]
    assert any(m.startswith("Readiness probe failed: ") for m in failed)
    assert not any(m.startswith("Liveness probe") for m in failed)
