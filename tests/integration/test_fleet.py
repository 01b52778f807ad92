"""`nodeagent fleet` on the testbed, the issue's small CI fleet end to end: 50 emulated nodes, each with its own
client certificate from TLS bootstrap, register, become Ready and renew their leases; NodeRestriction holds between
them; a Deployment of 500 pods is scheduled onto them and every pod reaches Running with its status right (its
address from its own node's slice of the fleet's pod network, its host IP, conditions and container status); the
Deployment is scaled down to 100 and then deleted, and the pods are gone from the apiserver and from every node's own
`/pods`. Every node's kubelet API is served on the fleet's one port: the apiserver's node proxy reaches the nodes,
each with its own answers (their addresses made local to the machine by a `local` route on lo for the test).

The fleet runs as `python -m nodeagent fleet` in a process of its own, stopped by SIGTERM at the end (exit 0, no node
failed, no traceback in its log). How long it takes is in docs/fleet.md ("The CI fleet").

A second, small fleet runs with `--pod-watch shared` (one list+watch of pods for the whole process, with the admin
credential): its nodes hold one Service watch and one RuntimeClass watch between them (the apiserver's open watches,
before and after the fleet started); its pods too reach Running on their nodes, and a deleted pod is stopped by its
node and gone."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import random
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from nodeagent.fleet.plan import FLEET_LABEL, FleetOptions, NodePlan, plan_nodes
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Forbidden, NotFound
from nodeagent.testbed.kubectl import kubectl
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.pki import CertificateAuthority
from nodeagent.testbed.testbed import Testbed
from tests.integration.test_tls_bootstrap import KUBEADM_BINDINGS, bootstrap_kubeconfig, bootstrap_token

NODES = 50  # the issue's CI fleet: 50 nodes and 500 pods (docs/fleet.md, "The CI fleet")
PODS = 500
IMAGE = "registry.invalid/hollow:1"  # never pulled: the fake runtime has every image
SCALED = 100  # the Deployment scaled down to this before it is deleted
NS = "default"
DEPLOYMENTS = paths.api_path("deployments", group="apps", namespace=NS)


async def until(
    check: Callable[[], Awaitable[Any]], *, timeout: float, what: str, detail: Callable[[], str] | None = None
) -> Any:
    """Poll `check` until it returns something true; else fail with `detail()` (what was seen last)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(1.0)
    seen = detail() if detail is not None else f"last={last!r}"
    raise AssertionError(f"{what}: not true after {timeout:.0f}s ({seen})")


def first_traceback(text: str) -> str:
    """The log around its first traceback: the lines before it (what the node was doing) and the traceback."""
    at = text.find("Traceback")
    start = text.rfind("\n", 0, max(0, at - 1500)) + 1
    return text[start : at + 5000]


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def fleet_argv(options: FleetOptions) -> list[str]:
    argv = [
        sys.executable, "-m", "nodeagent", "fleet", "--nodes", str(options.nodes), "--prefix", options.prefix,
        "--dir", str(options.directory), "--node-network", options.node_network, "--pod-watch", options.pod_watch,
    ]  # fmt: skip
    if options.bootstrap_kubeconfig is not None:
        argv += ["--bootstrap-kubeconfig", str(options.bootstrap_kubeconfig)]
    if options.kubeconfig is not None:
        argv += ["--kubeconfig", str(options.kubeconfig)]
    if options.kubelet_port:
        argv += [
            "--kubelet-port", str(options.kubelet_port), "--tls-cert-file", str(options.tls_cert_file),
            "--tls-private-key-file", str(options.tls_private_key_file),
            "--client-ca-file", str(options.client_ca_file),
        ]  # fmt: skip
    if options.eviction:
        argv.append("--eviction")
    return argv


@contextlib.asynccontextmanager
async def running_fleet(options: FleetOptions, admin: KubeClient, log: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    fleet = spawn(fleet_argv(options), log)
    try:
        yield fleet
    finally:
        if fleet.poll() is None:
            fleet.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(fleet.wait, 60)
        except subprocess.TimeoutExpired:
            fleet.kill()
            fleet.wait()
        await forget_nodes(admin, options)


async def forget_nodes(admin: KubeClient, options: FleetOptions) -> None:
    """The fleet's Nodes and Leases deleted (a stopped or killed fleet leaves them behind)."""
    for ordinal in range(options.nodes):
        with contextlib.suppress(NotFound):
            await admin.delete(paths.node(f"{options.prefix}-{ordinal}"))
        with contextlib.suppress(NotFound):
            await admin.delete(paths.lease("kube-node-lease", f"{options.prefix}-{ordinal}"))


def deployment(name: str, prefix: str, replicas: int = PODS) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {FLEET_LABEL: prefix},
                    "tolerations": [{"key": FLEET_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": IMAGE, "command": ["serve"]}],
                },
            },
        },
    }


def over_its_storage_limit(name: str, prefix: str) -> dict[str, Any]:
    """A bare pod for the fleet whose container may use 1Ki of ephemeral storage: less than the fake's 4 KiB
    writable layer."""
    template = deployment(name, prefix, 1)["spec"]["template"]
    container = dict(template["spec"]["containers"][0], resources={"limits": {"ephemeral-storage": "1Ki"}})
    spec = dict(template["spec"], containers=[container])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


@contextlib.contextmanager
def local_node_network() -> Any:
    """A /26 of 198.19.255.0/24 (62 addresses) made local to this machine (`ip route add local ... dev lo`), so that
    the apiserver reaches the fleet's nodes at their own addresses; random, so that two runs side by side are
    unlikely to collide."""
    network = ipaddress.ip_network(f"198.19.255.{64 * random.randrange(4)}/26")
    subprocess.run(["ip", "route", "add", "local", str(network), "dev", "lo"], check=True)
    try:
        yield network
    finally:
        subprocess.run(["ip", "route", "del", "local", str(network), "dev", "lo"], check=True)


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


async def check_kubelet_api(testbed: Testbed, pods: list[dict[str, Any]]) -> None:
    """Through the apiserver's node proxy (its kubelet client certificate, the node's own address and the fleet's
    port), two nodes answer, each with its own pods and summary."""
    by_node: dict[str, set[str]] = {}
    for pod in pods:
        by_node.setdefault(pod["spec"]["nodeName"], set()).add(pod["metadata"]["name"])
    for node, names in sorted(by_node.items())[:2]:

        async def get(path: str, node: str = node) -> str:
            return await kubectl(testbed.layout.admin_kubeconfig, "get", "--raw", f"/api/v1/nodes/{node}/proxy{path}")

        assert await get("/healthz") == "ok\n"
        served = {p["metadata"]["name"] for p in json.loads(await get("/pods"))["items"]}
        assert served == names, (node, served, names)
        summary = json.loads(await get("/stats/summary"))
        assert summary["node"]["nodeName"] == node
        assert {p["podRef"]["name"] for p in summary["pods"]} == names
        assert "kubelet_pleg_relist_duration_seconds" in await get("/metrics")


async def open_watches(testbed: Testbed, resource: str) -> int:
    """The apiserver's open WATCH requests of `resource` (apiserver_longrunning_requests, every client)."""
    metrics = await kubectl(testbed.layout.admin_kubeconfig, "get", "--raw", "/metrics")
    total = 0
    for line in metrics.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line:
            labels, _, value = line.rpartition(" ")
            if f'resource="{resource}"' in labels and 'subresource=""' in labels:
                total += int(float(value))
    return total


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def test_fleet_nodes_register_renew_and_run_a_deployment(
    admin: KubeClient, testbed: Testbed, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"fleet-{uuid.uuid4().hex[:6]}"
    with local_node_network() as network:
        addresses = [str(a) for a in list(network.hosts())[:NODES]]
        # The kubelet API's certificate from the CA the apiserver trusts for kubelets (--kubelet-certificate-authority),
        # for every node address; client certificates (the apiserver's kubelet client) of the same CA.
        serving = CertificateAuthority.load(testbed.layout.pki).issue(
            tmp_path, "fleet-kubelet", common_name="nodeagent-fleet", server=True, ip_addresses=tuple(addresses)
        )
        async with bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS) as token:
            boot = bootstrap_kubeconfig(tmp_path / "bootstrap.conf", testbed, settings, token)
            options = FleetOptions(
                nodes=NODES,
                prefix=prefix,
                directory=tmp_path / "fleet",
                bootstrap_kubeconfig=boot,
                node_network=str(network),
                kubelet_port=free_port(addresses[0]),
                tls_cert_file=serving.cert,
                tls_private_key_file=serving.key,
                client_ca_file=testbed.layout.pki / "ca.crt",
            )
            await _run_fleet(admin, testbed, options, tmp_path)


def pod_status_problems(pod: dict[str, Any], plans: dict[str, NodePlan]) -> list[str]:
    """What is wrong with a fleet pod's status once Running (empty: nothing), against the plan of its node."""
    name, status = pod["metadata"]["name"], pod.get("status") or {}
    node = pod["spec"].get("nodeName", "")
    if node not in plans:
        return [f"{name}: on {node!r}, not a fleet node"]
    plan, problems = plans[node], []
    ip = status.get("podIP", "")
    if not ip or ipaddress.ip_address(ip) not in ipaddress.ip_network(plan.pod_network):
        problems.append(f"{name}: podIP {ip!r} not in {node}'s {plan.pod_network}")
    if status.get("podIPs") != [{"ip": ip}]:
        problems.append(f"{name}: podIPs {status.get('podIPs')!r}")
    if status.get("hostIP") != plan.internal_ip:
        problems.append(f"{name}: hostIP {status.get('hostIP')!r}, want {plan.internal_ip}")
    if not status.get("startTime") or status.get("qosClass") != "BestEffort":
        problems.append(f"{name}: startTime {status.get('startTime')!r} qosClass {status.get('qosClass')!r}")
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
        if conditions.get(kind) != "True":
            problems.append(f"{name}: condition {kind}={conditions.get(kind)!r}")
    containers = status.get("containerStatuses") or []
    if len(containers) != 1:
        return [*problems, f"{name}: {len(containers)} container statuses"]
    (container,) = containers
    if not (container.get("ready") and container.get("started") and "running" in container.get("state", {})):
        problems.append(f"{name}: container not ready and running: {container!r}")
    if container.get("restartCount") != 0 or container.get("image") != IMAGE:
        problems.append(f"{name}: restartCount {container.get('restartCount')!r} image {container.get('image')!r}")
    # The type is the fake runtime's name from its Version answer, as kubemark's hollow nodes say.
    if not container.get("containerID", "").startswith("fakeRuntime://"):
        problems.append(f"{name}: containerID {container.get('containerID')!r}")
    return problems


async def served_pods(admin: KubeClient, node: str) -> set[str]:
    """The pods a node's own kubelet API lists (`/pods`, through the apiserver's node proxy)."""
    answer = await admin.get(f"/api/v1/nodes/{node}/proxy/pods")
    return {p["metadata"]["name"] for p in answer["items"]}


async def _run_fleet(admin: KubeClient, testbed: Testbed, options: FleetOptions, tmp_path: Path) -> None:
    prefix = options.prefix
    plans = {p.name: p for p in plan_nodes(options)}
    log = tmp_path / "fleet.log"
    async with running_fleet(options, admin, log) as fleet:

        def tail() -> str:
            return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

        async def all_ready() -> list[dict[str, Any]] | None:
            assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
            nodes = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
            return nodes if len(nodes) == NODES and all(ready(n) for n in nodes) else None

        nodes = await until(all_ready, timeout=180, what=f"{NODES} fleet nodes Ready")
        assert {n["metadata"]["name"] for n in nodes} == set(plans)
        for node in nodes:
            plan = plans[node["metadata"]["name"]]
            # (the node controller's not-ready taint may still be there, for a moment)
            assert {"key": FLEET_LABEL, "value": prefix, "effect": "NoSchedule"} in node["spec"]["taints"]
            assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "fakeRuntime://0.1.0"
            assert {"type": "InternalIP", "address": plan.internal_ip} in node["status"]["addresses"]
            assert node["status"]["capacity"]["pods"] == "30"
        names = sorted(plans)

        async def all_leased() -> dict[str, dict[str, Any]] | None:
            # Ready comes with the node status; the Lease is made beside it, a moment apart under load.
            found = {}
            for lease_name in names:
                try:
                    found[lease_name] = await admin.get(paths.lease("kube-node-lease", lease_name))
                except NotFound:
                    return None
            return found

        leases: dict[str, dict[str, Any]] = await until(all_leased, timeout=60, what="every node's Lease")
        for name, lease in leases.items():
            assert lease["spec"]["holderIdentity"] == name

        # Every node holds its own credential (system:node:<name>), and NodeRestriction keeps it to its node.
        first, second = f"{prefix}-0", f"{prefix}-1"
        async with KubeClient.from_kubeconfig(options.directory / "nodes" / first / "kubelet.conf") as node_client:
            await node_client.patch(paths.node(first), {"metadata": {"labels": {"example.com/self": "ok"}}})
            with pytest.raises(Forbidden):
                await node_client.patch(paths.node(second), {"metadata": {"labels": {"example.com/other": "x"}}})

        name = f"{prefix}-web"
        await admin.create(DEPLOYMENTS, deployment(name, prefix))
        try:

            async def pods_now() -> list[dict[str, Any]]:
                return list((await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"])

            census: dict[str, int] = {}

            def counted() -> str:
                return " ".join(f"{k}={v}" for k, v in sorted(census.items()))

            async def all_running(count: int) -> list[dict[str, Any]] | None:
                assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
                pods = await pods_now()
                census.clear()
                for pod in pods:
                    phase = (pod.get("status") or {}).get("phase", "none")
                    state = "terminating" if pod["metadata"].get("deletionTimestamp") else phase
                    scheduled = "scheduled" if pod["spec"].get("nodeName") else "unscheduled"
                    census[f"{state}/{scheduled}"] = census.get(f"{state}/{scheduled}", 0) + 1
                running = [
                    p
                    for p in pods
                    if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                ]
                return running if len(pods) == len(running) == count else None

            pods = await until(lambda: all_running(PODS), timeout=400, what=f"{PODS} pods Running", detail=counted)
            problems = [problem for pod in pods for problem in pod_status_problems(pod, plans)]
            assert not problems, f"{len(problems)} problems, the first: {problems[:10]}"
            addresses = {p["status"]["podIP"] for p in pods}
            assert len(addresses) == PODS
            per_node: dict[str, set[str]] = {}
            for pod in pods:
                per_node.setdefault(pod["spec"]["nodeName"], set()).add(pod["metadata"]["name"])
            assert max(len(v) for v in per_node.values()) <= 30  # each node's maxPods
            await check_kubelet_api(testbed, pods)

            # Leases renewed (every 10 s: a quarter of the 40 s lease) by every node, through the pod burst.
            async def all_renewed() -> dict[str, dict[str, Any]] | None:
                renewed = {}
                for lease_name, lease in leases.items():
                    now = await admin.get(paths.lease("kube-node-lease", lease_name))
                    if now["spec"]["renewTime"] == lease["spec"]["renewTime"]:
                        return None
                    renewed[lease_name] = now
                return renewed

            renewed = await until(all_renewed, timeout=60, what="every lease renewed")
            for lease_name, lease in renewed.items():
                (owner,) = lease["metadata"]["ownerReferences"]
                assert (owner["kind"], owner["name"]) == ("Node", lease_name)

            # Scaled down: the ReplicaSet deletes 400 pods; the nodes stop them and confirm, and they are gone.
            await admin.patch(f"{DEPLOYMENTS}/{name}", {"spec": {"replicas": SCALED}})
            kept = await until(
                lambda: all_running(SCALED), timeout=300, what=f"scaled down to {SCALED} pods", detail=counted
            )
            kept_names = {p["metadata"]["name"] for p in kept}
            assert kept_names <= {p["metadata"]["name"] for p in pods}  # none replaced, none restarted
            assert not [problem for pod in kept for problem in pod_status_problems(pod, plans)]

            # Every node's own view agrees: its kubelet lists exactly its kept pods.
            want: dict[str, set[str]] = {node: per_node.get(node, set()) & kept_names for node in plans}

            async def nodes_agree() -> bool:
                return all([await served_pods(admin, node) == want[node] for node in sorted(plans)])

            await until(nodes_agree, timeout=120, what="every node's /pods the kept pods")
        finally:
            with contextlib.suppress(NotFound):
                await admin.delete(f"{DEPLOYMENTS}/{name}")

        async def all_gone() -> bool:
            assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
            return not await pods_now()

        await until(all_gone, timeout=300, what="the Deployment's pods deleted")

        async def nodes_empty() -> bool:
            return all([not await served_pods(admin, node) for node in sorted(plans)])

        await until(nodes_empty, timeout=120, what="no pods left on any node")
        assert fleet.poll() is None, tail()
    assert fleet.returncode == 0, f"the fleet exited with {fleet.returncode}:\n{tail()}"
    text = log.read_text()
    assert f"fleet stopped nodes={NODES} failed=0" in text
    assert "Traceback" not in text, first_traceback(text)
    # Without --eviction no node runs the eviction cycle, and the fleet says so.
    assert "eviction=off" in text, text[:2000]
    # The leases renewed above (each node under NodeRestriction, with its own certificate) were renewed on the
    # fleet's heartbeat thread, which ended with the fleet.
    assert "fleet lease heartbeats started" in text and "fleet lease heartbeats stopped" in text


SHARED_NODES = 3
SHARED_PODS = 6


async def test_fleet_with_a_shared_pod_watch_runs_and_deletes_pods(
    admin: KubeClient, testbed: Testbed, tmp_path: Path
) -> None:
    """Three nodes, the admin credential, one pod watch for them all: the pods Running, each on a fleet node; one
    deleted by hand is stopped by its node and gone (its replacement Running); then all deleted and gone. With
    --eviction, the nodes run the eviction manager: a pod whose container's ephemeral-storage limit (1Ki) is below
    the fake's writable-layer usage (4 KiB) is evicted, as upstream evicts it."""
    prefix = f"fleetsh-{uuid.uuid4().hex[:6]}"
    options = FleetOptions(
        nodes=SHARED_NODES,
        prefix=prefix,
        directory=tmp_path / "fleet",
        kubeconfig=testbed.layout.admin_kubeconfig,
        pod_watch="shared",
        eviction=True,
    )
    log = tmp_path / "fleet.log"
    name = f"{prefix}-web"
    before = {r: await open_watches(testbed, r) for r in ("services", "runtimeclasses")}
    async with running_fleet(options, admin, log) as fleet:

        def tail() -> str:
            return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

        async def pods_now() -> list[dict[str, Any]]:
            assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
            return list((await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"])

        async def all_running() -> list[dict[str, Any]] | None:
            pods = await pods_now()
            running = [
                p
                for p in pods
                if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            ]
            return running if len(pods) == len(running) == SHARED_PODS else None

        async def all_ready() -> bool:
            assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
            nodes = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
            return len(nodes) == SHARED_NODES and all(ready(n) for n in nodes)

        await until(all_ready, timeout=120, what=f"{SHARED_NODES} fleet nodes Ready")
        # The fleet's nodes share one Service and one RuntimeClass watch (its --kubeconfig's), not one per node; the
        # other clients' watches (the controllers', the testbed's node) are counted before and after alike. Five
        # samples a second apart, their median: another client's watch between two of its requests moves one.
        samples: dict[str, list[int]] = {r: [] for r in before}
        for _ in range(5):
            for resource, seen in samples.items():
                seen.append(await open_watches(testbed, resource) - before[resource])
            await asyncio.sleep(1.0)
        for resource, seen in samples.items():
            assert sorted(seen)[2] == 1, (resource, before, samples)
        await admin.create(DEPLOYMENTS, deployment(name, prefix, SHARED_PODS))
        try:
            pods = await until(all_running, timeout=180, what=f"{SHARED_PODS} pods Running")
            nodes = {f"{prefix}-{ordinal}" for ordinal in range(SHARED_NODES)}
            assert {p["spec"]["nodeName"] for p in pods} <= nodes
            victim = pods[0]["metadata"]["name"]
            await admin.delete(paths.pod(NS, victim))

            async def replaced() -> list[dict[str, Any]] | None:
                running = await all_running()
                return running if running and victim not in {p["metadata"]["name"] for p in running} else None

            await until(replaced, timeout=120, what=f"{victim} gone and replaced")
            await admin.create(paths.pods(NS), over_its_storage_limit(f"{prefix}-hog", prefix))

            async def evicted() -> dict[str, Any] | None:
                status = (await admin.get(paths.pod(NS, f"{prefix}-hog"))).get("status") or {}
                return status if status.get("phase") == "Failed" else None

            status = await until(evicted, timeout=90, what="the pod over its ephemeral-storage limit evicted")
            assert status.get("reason") == "Evicted", status
            # Upstream's words: the pod's total limit is checked before each container's.
            assert "exceeds the total limit of containers 1Ki" in str(status.get("message")), status
        finally:
            with contextlib.suppress(NotFound):
                await admin.delete(f"{DEPLOYMENTS}/{name}")
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, f"{prefix}-hog"))

        async def all_gone() -> bool:
            return not await pods_now()

        await until(all_gone, timeout=120, what="the Deployment's pods deleted")
    assert fleet.returncode == 0, f"the fleet exited with {fleet.returncode}:\n{tail()}"
    text = log.read_text()
    assert "pod_watch=shared" in text and f"fleet stopped nodes={SHARED_NODES} failed=0" in text, tail()
    assert "eviction=on" in text, text[:2000]
    assert "Traceback" not in text, first_traceback(text)
