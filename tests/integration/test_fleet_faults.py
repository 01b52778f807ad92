"""`nodeagent fleet` under the issue's faults (issue 35): the apiserver down for 60 s under a fleet with pods, and a
fleet process SIGKILLed under its pods and started again.

The outage: 20 nodes (each with its own certificate from TLS bootstrap) run 60 pods, and one more pod whose container
exits with code 3 while the apiserver is away (the fake runtime's `exit-after`). The shared testbed's kube-apiserver
is stopped for OUTAGE seconds, longer than the node lifecycle controller's grace period (16 s on the testbed) and than
a lease (40 s), and comes back writing an audit log of every node's create, list and watch requests
(nodeagent/testbed/audit.py, the group `system:nodes`). The fleet must live through it (no exit, no traceback);
every node renews its lease and is Ready again, with the node lifecycle controller's taints gone; no node registers
again (no `create nodes`, the Node objects' uids unchanged) and none re-lists a resource more than once (the
apiserver's watch cache starts afresh, so each watch is answered 410 Gone and lists once, as client-go's
reflectors); the 60 pods are undisturbed (the same containers, never restarted, Ready) and the exit during the
outage reaches the API (Failed, exit code 3).

The throttle: 10 nodes run 20 pods; then, for THROTTLE seconds, API priority and fairness sends every request of
the group `system:nodes` to a priority level that seats one request at a time and rejects the rest (429 with a
Retry-After), and the Deployment is scaled up meanwhile. The fleet must live through it; the apiserver counts its
rejections (the nodes were throttled); once the level is gone, every node is Ready with its lease renewed, none
registered again (no POST of a Node by anyone, the uids unchanged), and the 30 pods are Running and Ready.

The crash: a fleet of 4 nodes runs a Deployment of 8 pods, and is SIGKILLed. The node lifecycle controller marks
the nodes' conditions Unknown and the pods not Ready. The same fleet (the same `--dir`, so the same names and
credentials) is started again: it comes back with the same Node objects and no others, and every pod (the same pods:
none evicted or replaced) is Running and Ready again on its node. The fake runtime's state died with the process,
so the containers are new ones, as after a node's reboot.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import signal
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime as Datetime
from pathlib import Path
from typing import Any

from nodeagent.fleet.plan import FLEET_LABEL, FleetOptions
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import audit
from nodeagent.testbed.kubectl import kubectl
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.test_fleet import (
    DEPLOYMENTS,
    IMAGE,
    NS,
    deployment,
    first_traceback,
    fleet_argv,
    forget_nodes,
    ready,
    running_fleet,
    spawn,
    until,
)
from tests.integration.test_kube_throttled import FLOWCONTROL, rejecting
from tests.integration.test_tls_bootstrap import KUBEADM_BINDINGS, bootstrap_kubeconfig, bootstrap_token

OUTAGE = 60.0  # seconds the apiserver is down (the figure)
OUTAGE_NODES = 20
OUTAGE_PODS = 60
THROTTLE = 60.0  # seconds the nodes are throttled
THROTTLE_NODES = 10
THROTTLE_PODS = 20  # then scaled up by half during the throttle
NODE_POSTS = ("apiserver_request_total", 'resource="nodes"', 'verb="POST"')  # every create of a Node, any answer
CRASH_NODES = 4
CRASH_PODS = 8
EXIT_AFTER = 20  # seconds after its start that the exiting pod's container exits: inside the outage


def wall(stamp: str) -> float:
    return Datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@contextlib.asynccontextmanager
async def bootstrapped(admin: KubeClient, testbed: Testbed, settings: Settings, tmp_path: Path) -> AsyncIterator[Path]:
    """A bootstrap kubeconfig with a kubeadm-style token: each fleet node gets its own certificate."""
    async with bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS) as token:
        yield bootstrap_kubeconfig(tmp_path / "bootstrap.conf", testbed, settings, token)


async def fleet_nodes(admin: KubeClient, prefix: str) -> list[dict[str, Any]]:
    return list((await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"])


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (status,) = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict(status)


def exiting_pod(name: str, prefix: str) -> dict[str, Any]:
    """A bare pod for the fleet whose container exits with code 3, EXIT_AFTER seconds after it started."""
    spec = deployment(name, prefix, 1)["spec"]["template"]["spec"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {
                "fake.cri.nodeagent.io/exit-after": str(EXIT_AFTER),
                "fake.cri.nodeagent.io/exit-code": "3",
            },
        },
        "spec": dict(spec, restartPolicy="Never"),
    }


def unreachable_taints(node: dict[str, Any]) -> list[str]:
    """The node lifecycle controller's taints of a node it has not heard from."""
    return [
        t["key"]
        for t in node["spec"].get("taints") or []
        if t["key"] in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]


async def nodes_back(
    admin: KubeClient, prefix: str, count: int, *, renewed_since: float | None = None
) -> list[dict[str, Any]] | None:
    """The fleet's `count` nodes when every one is Ready and untainted and, with `renewed_since` (wall time), has
    renewed its Lease since then; None until then."""
    nodes = await fleet_nodes(admin, prefix)
    if len(nodes) != count or not all(ready(n) and not unreachable_taints(n) for n in nodes):
        return None
    if renewed_since is not None:
        for node in nodes:
            lease = await admin.get(paths.lease("kube-node-lease", node["metadata"]["name"]))
            if wall(lease["spec"]["renewTime"]) < renewed_since:
                return None
    return nodes


async def test_fleet_lives_through_an_apiserver_outage_of_60_seconds(
    admin: KubeClient, testbed: Testbed, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"fleetout-{uuid.uuid4().hex[:6]}"
    name, exiter = f"{prefix}-web", f"{prefix}-exiter"
    log = tmp_path / "fleet.log"
    async with bootstrapped(admin, testbed, settings, tmp_path) as boot:
        options = FleetOptions(
            nodes=OUTAGE_NODES, prefix=prefix, directory=tmp_path / "fleet", bootstrap_kubeconfig=boot
        )
        async with running_fleet(options, admin, log) as fleet:

            def tail() -> str:
                return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

            async def pods_now() -> list[dict[str, Any]]:
                assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
                return list((await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"])

            async def all_ready() -> list[dict[str, Any]] | None:
                nodes = await fleet_nodes(admin, prefix)
                return nodes if len(nodes) == OUTAGE_NODES and all(ready(n) for n in nodes) else None

            nodes = await until(all_ready, timeout=180, what=f"{OUTAGE_NODES} fleet nodes Ready")
            uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes}
            await admin.create(DEPLOYMENTS, deployment(name, prefix, OUTAGE_PODS))
            try:
                census: dict[str, int] = {}

                def counted() -> str:
                    return " ".join(f"{k}={v}" for k, v in sorted(census.items()))

                async def all_running() -> list[dict[str, Any]] | None:
                    pods = await pods_now()
                    census.clear()
                    for pod in pods:
                        key = f"{(pod.get('status') or {}).get('phase')}/ready={pod_ready(pod)}"
                        census[key] = census.get(key, 0) + 1
                    good = [p for p in pods if (p.get("status") or {}).get("phase") == "Running" and pod_ready(p)]
                    return good if len(pods) == len(good) == OUTAGE_PODS else None

                pods = await until(all_running, timeout=240, what=f"{OUTAGE_PODS} pods Running", detail=counted)
                before = {p["metadata"]["name"]: container(p)["containerID"] for p in pods}
                await admin.create(paths.pods(NS), exiting_pod(exiter, prefix))

                async def exiter_running() -> dict[str, Any] | None:
                    pod: dict[str, Any] = await admin.get(paths.pod(NS, exiter))
                    return pod if "running" in (container(pod).get("state") or {}) else None

                started = wall(
                    (await until(exiter_running, timeout=60, what="the exiting pod Running"))["status"][
                        "containerStatuses"
                    ][0]["state"]["running"]["startedAt"]
                )
                log_path, flags = audit.enable(
                    testbed.layout.root, group="system:nodes", verbs=("create", "list", "watch")
                )
                await testbed.stop_apiserver(grace=1)  # gone at once, as a crash
                stopped = time.time()
                try:
                    assert stopped < started + EXIT_AFTER, "the container exited before the apiserver went away"
                    while time.time() < stopped + OUTAGE:
                        assert fleet.poll() is None, f"the fleet exited during the outage:\n{tail()}"
                        await asyncio.sleep(1.0)
                finally:
                    await testbed.start_apiserver(extra_args=flags)
                returned = time.time()
                print(f"apiserver down {returned - stopped:.1f} s (stopped {stopped:.1f}, back {returned:.1f})")

                async def recovered() -> list[dict[str, Any]] | None:
                    assert fleet.poll() is None, f"the fleet exited after the outage:\n{tail()}"
                    return await nodes_back(admin, prefix, OUTAGE_NODES, renewed_since=returned)

                nodes = await until(recovered, timeout=120, what="every node Ready, untainted and its lease renewed")
                recovered_after = time.time() - returned
                assert {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes} == uids  # none registered anew

                # What the node lifecycle controller does to the pods of a node it has not heard from (it may have
                # done it already, or not, as the nodes' first renewals and its grace period fall): Ready False. The
                # nodes' status managers must put it back though nothing changed on the nodes (upstream's
                # needsReconcile); they used to leave it False for good.
                marked = sorted(before)[:5]
                for pod_name in marked:
                    condition = {"type": "Ready", "status": "False", "reason": "NodeNotReady"}
                    await admin.patch(
                        paths.pod(NS, pod_name), {"status": {"conditions": [condition]}}, subresource="status"
                    )
                # The pods were left alone: the same containers, never restarted, Ready.
                pods = await until(
                    all_running, timeout=120, what=f"{OUTAGE_PODS} pods Running and Ready again", detail=counted
                )
                after = {p["metadata"]["name"]: container(p)["containerID"] for p in pods}
                assert after == before
                assert all(container(p)["restartCount"] == 0 for p in pods)

                async def exit_reported() -> dict[str, Any] | None:
                    pod: dict[str, Any] = await admin.get(paths.pod(NS, exiter))
                    terminated = (container(pod).get("state") or {}).get("terminated") or {}
                    return pod if pod["status"].get("phase") == "Failed" and terminated.get("exitCode") == 3 else None

                pod = await until(exit_reported, timeout=60, what="the exit during the outage reported")
                finished = wall(container(pod)["state"]["terminated"]["finishedAt"])
                assert stopped <= finished <= returned, (stopped, finished, returned)

                # No re-registration, and at most one list of a resource per node after the return (its watch
                # answered 410 Gone once); the window is at least 30 s after the return.
                await asyncio.sleep(max(0.0, returned + 30 - time.time()))
                counts = audit.requests(log_path, lambda user: user.startswith(f"system:node:{prefix}-"),
                                        returned - 5, time.time())  # fmt: skip
                print(f"recovered {recovered_after:.1f} s after the return; the nodes' requests: {counts}")
                assert counts.get("create nodes", 0) == 0, counts
                lists = {key: n for key, n in counts.items() if key.startswith("list ")}
                assert lists, f"no list seen in the audit log at all: {counts}"
                assert all(n <= OUTAGE_NODES for n in lists.values()), f"re-listed more than once per node: {lists}"
                assert counts.get("watch pods", 0) >= OUTAGE_NODES, counts  # every node watches its pods again
            finally:
                with contextlib.suppress(NotFound):
                    await admin.delete(f"{DEPLOYMENTS}/{name}")
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(NS, exiter))

            async def all_gone() -> bool:
                return not await pods_now()

            await until(all_gone, timeout=180, what="the Deployment's pods deleted")
    assert fleet.returncode == 0, f"the fleet exited with {fleet.returncode}:\n{tail()}"
    text = log.read_text()
    assert f"fleet stopped nodes={OUTAGE_NODES} failed=0" in text, tail()
    assert "Traceback" not in text, first_traceback(text)


async def apiserver_counter(testbed: Testbed, name: str, *selectors: str) -> float:
    """The sum of the apiserver's metric `name` over the series whose labels contain every selector."""
    metrics = await kubectl(testbed.layout.admin_kubeconfig, "get", "--raw", "/metrics")
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith(name + "{") and all(selector in line for selector in selectors):
            total += float(line.rpartition(" ")[2])
    return total


async def test_fleet_lives_through_a_minute_of_429s_and_catches_up(
    admin: KubeClient, testbed: Testbed, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"fleet429-{uuid.uuid4().hex[:6]}"
    name, level_name = f"{prefix}-web", f"{prefix}-throttle"
    log = tmp_path / "fleet.log"
    scaled = THROTTLE_PODS + THROTTLE_PODS // 2
    async with bootstrapped(admin, testbed, settings, tmp_path) as boot:
        options = FleetOptions(
            nodes=THROTTLE_NODES, prefix=prefix, directory=tmp_path / "fleet", bootstrap_kubeconfig=boot
        )
        async with running_fleet(options, admin, log) as fleet:

            def tail() -> str:
                return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

            async def all_ready() -> list[dict[str, Any]] | None:
                assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
                nodes = await fleet_nodes(admin, prefix)
                return nodes if len(nodes) == THROTTLE_NODES and all(ready(n) for n in nodes) else None

            def running_and_ready(count: int) -> Any:
                async def check() -> list[dict[str, Any]] | None:
                    assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
                    pods = (await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"]
                    good = [p for p in pods if (p.get("status") or {}).get("phase") == "Running" and pod_ready(p)]
                    return good if len(pods) == len(good) == count else None

                return check

            nodes = await until(all_ready, timeout=180, what=f"{THROTTLE_NODES} fleet nodes Ready")
            uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes}
            await admin.create(DEPLOYMENTS, deployment(name, prefix, THROTTLE_PODS))
            level, schema = rejecting(level_name, {"kind": "Group", "group": {"name": "system:nodes"}})
            try:
                await until(running_and_ready(THROTTLE_PODS), timeout=180, what=f"{THROTTLE_PODS} pods Running")
                node_posts = await apiserver_counter(
                    testbed, "apiserver_request_total", 'resource="nodes"', 'verb="POST"'
                )
                await admin.create(f"{FLOWCONTROL}/prioritylevelconfigurations", level)
                await admin.create(f"{FLOWCONTROL}/flowschemas", schema)
                began = time.time()
                try:
                    await admin.patch(f"{DEPLOYMENTS}/{name}", {"spec": {"replicas": scaled}}, patch_type="merge")
                    while time.time() < began + THROTTLE:
                        assert fleet.poll() is None, f"the fleet exited while throttled:\n{tail()}"
                        await asyncio.sleep(1.0)
                    rejected = await apiserver_counter(
                        testbed, "apiserver_flowcontrol_rejected_requests_total", f'priority_level="{level_name}"'
                    )
                finally:
                    for path in (f"{FLOWCONTROL}/flowschemas/{level_name}",
                                 f"{FLOWCONTROL}/prioritylevelconfigurations/{level_name}"):  # fmt: skip
                        with contextlib.suppress(NotFound):
                            await admin.delete(path)
                returned = time.time()
                assert rejected > 0, "the apiserver rejected no request of the nodes: nothing was throttled"

                async def recovered() -> list[dict[str, Any]] | None:
                    assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
                    return await nodes_back(admin, prefix, THROTTLE_NODES, renewed_since=returned)

                nodes = await until(recovered, timeout=120, what="every node Ready, untainted and its lease renewed")
                recovered_after = time.time() - returned
                assert {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes} == uids  # none registered anew
                await until(running_and_ready(scaled), timeout=180, what=f"{scaled} pods Running and Ready")
                caught_up = time.time() - returned
                posts = await apiserver_counter(testbed, *NODE_POSTS)
                assert posts == node_posts, "a Node was created (or tried) during or after the throttle"
                print(
                    f"throttled {returned - began:.1f} s: {rejected:.0f} requests of the nodes rejected (429); "
                    f"nodes back {recovered_after:.1f} s and {scaled} pods Running {caught_up:.1f} s after"
                )
            finally:
                with contextlib.suppress(NotFound):
                    await admin.delete(f"{DEPLOYMENTS}/{name}")

            async def all_gone() -> bool:
                return not (await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"]

            await until(all_gone, timeout=180, what="the Deployment's pods deleted")
    assert fleet.returncode == 0, f"the fleet exited with {fleet.returncode}:\n{tail()}"
    text = log.read_text()
    assert f"fleet stopped nodes={THROTTLE_NODES} failed=0" in text, tail()
    assert "Traceback" not in text, first_traceback(text)


async def test_fleet_sigkilled_under_pods_comes_back_with_the_same_nodes(
    admin: KubeClient, testbed: Testbed, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"fleetkill-{uuid.uuid4().hex[:6]}"
    name = f"{prefix}-web"
    async with bootstrapped(admin, testbed, settings, tmp_path) as boot:
        options = FleetOptions(
            nodes=CRASH_NODES, prefix=prefix, directory=tmp_path / "fleet", bootstrap_kubeconfig=boot
        )
        first_log = tmp_path / "fleet-first.log"
        first = spawn(fleet_argv(options), first_log)
        try:

            async def pods_now() -> list[dict[str, Any]]:
                return list((await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"])

            async def all_ready() -> list[dict[str, Any]] | None:
                assert first.poll() is None, first_log.read_text(errors="replace")[-3000:]
                nodes = await fleet_nodes(admin, prefix)
                return nodes if len(nodes) == CRASH_NODES and all(ready(n) for n in nodes) else None

            nodes = await until(all_ready, timeout=120, what=f"{CRASH_NODES} fleet nodes Ready")
            uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes}
            await admin.create(DEPLOYMENTS, deployment(name, prefix, CRASH_PODS))

            async def all_running() -> list[dict[str, Any]] | None:
                pods = await pods_now()
                good = [
                    p
                    for p in pods
                    if (p.get("status") or {}).get("phase") == "Running"
                    and pod_ready(p)
                    and not p["metadata"].get("deletionTimestamp")
                ]
                return good if len(pods) == len(good) == CRASH_PODS else None

            pods = await until(all_running, timeout=120, what=f"{CRASH_PODS} pods Running")
            before = {p["metadata"]["name"]: (p["spec"]["nodeName"], container(p)["containerID"]) for p in pods}
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait, 10)
            killed = time.time()

            # The node lifecycle controller notices (16 s grace on the testbed): conditions Unknown, pods not Ready.
            async def noticed() -> bool:
                nodes = await fleet_nodes(admin, prefix)
                unknown = all(
                    any(c["type"] == "Ready" and c["status"] == "Unknown" for c in n["status"]["conditions"])
                    for n in nodes
                )
                return unknown and not any(pod_ready(p) for p in await pods_now())

            await until(noticed, timeout=90, what="the nodes Unknown and their pods not Ready")
            print(f"noticed {time.time() - killed:.1f} s after the SIGKILL")
        except BaseException:
            with contextlib.suppress(NotFound):
                await admin.delete(f"{DEPLOYMENTS}/{name}")
            await forget_nodes(admin, options)
            raise
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()

        second_log = tmp_path / "fleet-second.log"
        async with running_fleet(options, admin, second_log) as second:
            try:

                async def back() -> list[dict[str, Any]] | None:
                    assert second.poll() is None, second_log.read_text(errors="replace")[-3000:]
                    return await nodes_back(admin, prefix, CRASH_NODES)

                restarted = time.time()
                nodes = await until(back, timeout=120, what="the same nodes Ready again")
                # The same Node objects, and no others (the names come from the prefix and the ordinals).
                assert {n["metadata"]["name"]: n["metadata"]["uid"] for n in nodes} == uids
                pods = await until(all_running, timeout=120, what="the pods Running and Ready again")
                print(f"pods recovered {time.time() - restarted:.1f} s after the restart; restartCounts "
                      f"{sorted(container(p)['restartCount'] for p in pods)}")  # fmt: skip
                after = {p["metadata"]["name"]: (p["spec"]["nodeName"], container(p)["containerID"]) for p in pods}
                assert set(after) == set(before)  # the same pods: none evicted or replaced
                for pod_name, (node, container_id) in after.items():
                    assert node == before[pod_name][0]
                    # The runtime's state died with the process: new containers, of the fake runtime.
                    assert container_id != before[pod_name][1] and container_id.startswith("fakeRuntime://")
                for pod in pods:
                    assert container(pod)["image"] == IMAGE and "running" in container(pod)["state"], pod["status"]
                    # As upstream after a reboot: the lost container counts as a restart, the new one's count comes
                    # from the log directory that survived (its first run's 0.log: 1).
                    assert container(pod)["restartCount"] == 1, pod["status"]
            finally:
                with contextlib.suppress(NotFound):
                    await admin.delete(f"{DEPLOYMENTS}/{name}")

            async def all_gone() -> bool:
                return not await pods_now()

            await until(all_gone, timeout=120, what="the Deployment's pods deleted")
    assert second.returncode == 0, second_log.read_text(errors="replace")[-3000:]
    text = second_log.read_text()
    assert f"fleet stopped nodes={CRASH_NODES} failed=0" in text
    assert "Traceback" not in text, first_traceback(text)
