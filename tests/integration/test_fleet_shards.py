"""`nodeagent fleet` as a StatefulSet of shard pods on the testbed's nodeagent node (issue 35, "Beyond one machine").

The shard image is built here from this machine's interpreter and this checkout (testbed/fleetimage.py; cached by
content) and pushed into the testbed's registry. A StatefulSet of SHARDS pods runs `fleet --nodes NODES
--shard-from-hostname`: each pod takes its ordinal from its hostname (its name, `<statefulset>-<ordinal>`) and runs
the nodes `<prefix>-<ordinal * NODES>` onwards. Every emulated node bootstraps its own `system:node:<name>`
certificate with the bootstrap token in a Secret. The pods reach the apiserver on the node address, as any pod of
the testbed does (no hostNetwork).

Checked: the shard pods Running on the testbed's node; SHARDS * NODES fleet nodes Ready with the expected names;
each shard's nodes its own (its log names its range, and all of one shard's nodes, and only they, carry its
process's boot id). Then one shard pod is deleted: the StatefulSet recreates it under the same name, the same node
names come back Ready from a new process (a new boot id on exactly those nodes, the Node objects the same), and no
other Node appears. Everything made is deleted after, the Nodes and Leases too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.fleet.plan import FLEET_LABEL
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import fleetimage, registry
from nodeagent.testbed.kubectl import kubectl
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import cache_root
from tests.integration.agentproc import Agent, module_agent, wait_node_ready
from tests.integration.test_fleet import ready, until
from tests.integration.test_tls_bootstrap import KUBEADM_BINDINGS, bootstrap_kubeconfig, bootstrap_token

SHARDS = 2
NODES = 3  # per shard
NS = "default"
REPOSITORY = "nodeagent/fleet"
STATEFULSETS = paths.api_path("statefulsets", group="apps", namespace=NS)

log = logging.getLogger(__name__)


def stopwatch() -> Callable[[str], None]:
    """Logs each phase's time since the start (not asserted: to read where a run's time went)."""
    start = time.monotonic()

    def mark(phase: str) -> None:
        log.info("fleet shards phase=%s elapsed=%.1fs", phase, time.monotonic() - start)

    return mark


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    """The testbed's nodeagent node, which runs the shard pods."""
    with module_agent(testbed, settings, "agent-fleet-shards.log") as running:
        yield running


async def push_fleet_image(settings: Settings) -> str:
    """The shard image, built (or reused from the cache) and pushed; its reference, tagged by its digest."""
    image = await asyncio.to_thread(fleetimage.build_fleet_image, cache_root() / "images" / "nodeagent-fleet")
    tag = image.manifest_digest.removeprefix("sha256:")[:16]
    await registry.push_image(settings.registry, REPOSITORY, tag, image)
    return f"{settings.registry}/{REPOSITORY}:{tag}"


def bootstrap_secret(name: str, kubeconfig: Path) -> dict[str, Any]:
    """The bootstrap kubeconfig as a Secret, the CA inline (the pod has no testbed directory)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    for cluster in doc["clusters"]:
        ca = Path(cluster["cluster"].pop("certificate-authority"))
        cluster["cluster"]["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "stringData": {"bootstrap.conf": yaml.safe_dump(doc)},
    }


def statefulset(name: str, prefix: str, image: str, secret: str, node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "serviceName": name,
            "replicas": SHARDS,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node_name},
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 10,
                    "containers": [
                        {
                            "name": "fleet",
                            "image": image,
                            "args": [
                                "fleet",
                                "--nodes",
                                str(NODES),
                                "--prefix",
                                prefix,
                                "--shard-from-hostname",
                                "--bootstrap-kubeconfig",
                                "/etc/fleet/bootstrap.conf",
                                "--dir",
                                "/var/lib/fleet",
                            ],
                            "volumeMounts": [
                                {"name": "bootstrap", "mountPath": "/etc/fleet", "readOnly": True},
                                {"name": "state", "mountPath": "/var/lib/fleet"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "bootstrap", "secret": {"secretName": secret}},
                        {"name": "state", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def pod_summary(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    containers = [
        f"{c['name']}:restarts={c.get('restartCount')}:{c.get('state')}:last={c.get('lastState')}"
        for c in status.get("containerStatuses") or []
    ]
    return f"{pod['metadata']['name']} phase={status.get('phase')} node={pod['spec'].get('nodeName')} {containers}"


async def test_fleet_shards_as_a_statefulset(
    admin: KubeClient, testbed: Testbed, settings: Settings, agent: Agent, tmp_path: Path
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    mark = stopwatch()
    image = await push_fleet_image(settings)
    mark("image built or reused, and pushed")
    prefix = f"shard-{uuid.uuid4().hex[:6]}"
    name, secret = f"{prefix}-fleet", f"{prefix}-bootstrap"
    names = [f"{prefix}-{ordinal}" for ordinal in range(SHARDS * NODES)]
    owned = {shard: names[shard * NODES : (shard + 1) * NODES] for shard in range(SHARDS)}
    before = {n["metadata"]["name"] for n in (await admin.list(paths.nodes()))["items"]}
    async with bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS) as token:
        boot = bootstrap_kubeconfig(tmp_path / "bootstrap.conf", testbed, settings, token)
        await admin.create(paths.api_path("secrets", namespace=NS), bootstrap_secret(secret, boot))
        try:
            await admin.create(STATEFULSETS, statefulset(name, prefix, image, secret, settings.node_name))
            await _check_shards(admin, testbed, settings, name, prefix, owned, before, mark)
        finally:
            await _clean_up(admin, name, secret, prefix, names)


async def _check_shards(
    admin: KubeClient,
    testbed: Testbed,
    settings: Settings,
    name: str,
    prefix: str,
    owned: dict[int, list[str]],
    before: set[str],
    mark: Callable[[str], None],
) -> None:
    seen: dict[str, str] = {}

    def detail() -> str:
        return " | ".join(seen.values())

    async def shard_pods() -> dict[str, dict[str, Any]]:
        pods = (await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"]
        seen.clear()
        seen.update({p["metadata"]["name"]: pod_summary(p) for p in pods})
        return {p["metadata"]["name"]: p for p in pods}

    async def unbroken_pods() -> dict[str, dict[str, Any]]:
        pods = await shard_pods()
        for pod in pods.values():
            for container in (pod.get("status") or {}).get("containerStatuses") or []:
                # A shard that cannot start (or ends) fails the test now, with its reason, not at the timeout.
                assert container.get("restartCount", 0) == 0, f"a shard restarted: {pod_summary(pod)}"
        return pods

    async def running() -> dict[str, dict[str, Any]] | None:
        pods = await unbroken_pods()
        good = {
            n: p
            for n, p in pods.items()
            if (p.get("status") or {}).get("phase") == "Running"
            and p["spec"].get("nodeName") == settings.node_name
            and not p["metadata"].get("deletionTimestamp")
        }
        return good if set(good) == {f"{name}-{s}" for s in owned} else None

    async def fleet_nodes() -> dict[str, dict[str, Any]]:
        found = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
        return {n["metadata"]["name"]: n for n in found}

    async def all_ready() -> dict[str, dict[str, Any]] | None:
        await unbroken_pods()
        nodes = await fleet_nodes()
        want = {n for ns in owned.values() for n in ns}
        seen["nodes"] = f"nodes={sorted((n, ready(v)) for n, v in nodes.items())}"
        return nodes if set(nodes) == want and all(ready(n) for n in nodes.values()) else None

    async def log_of(pod: str, *more: str) -> str:
        return await kubectl(testbed.layout.admin_kubeconfig, "logs", "-n", NS, pod, *more)

    async def logs() -> str:
        """The tails of the shard pods' logs (the previous container's too, after a restart), for a failure."""
        parts = []
        for pod_name, pod in sorted((await shard_pods()).items()):
            restarted = any(c.get("restartCount") for c in (pod.get("status") or {}).get("containerStatuses") or [])
            for which in (("--previous",) if restarted else ()) + ("",):
                try:
                    text = await log_of(pod_name, "--tail=20", *filter(None, (which,)))
                except Exception as exc:
                    text = f"(no log: {exc})"
                parts.append(f"--- {pod_name} {which}---\n{text}")
        return "\n".join(parts)

    @contextlib.asynccontextmanager
    async def failing_with_logs() -> AsyncIterator[None]:
        try:
            yield
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await logs()}") from None

    async with failing_with_logs():
        pods = await until(running, timeout=120, what=f"{len(owned)} shard pods Running", detail=detail)
        mark("shard pods Running")
        nodes = await until(all_ready, timeout=120, what=f"{len(owned) * NODES} fleet nodes Ready", detail=detail)
        mark("fleet nodes Ready")

    def boot_ids(nodes: dict[str, dict[str, Any]]) -> dict[int, set[str]]:
        return {s: {nodes[n]["status"]["nodeInfo"]["bootID"] for n in ns} for s, ns in owned.items()}

    # Disjoint: each shard's log names its range, and each shard's nodes carry one boot id (its process's), not
    # another shard's.
    for shard, own in owned.items():
        text = await log_of(f"{name}-{shard}")
        assert f"fleet shard ordinal={shard} process=0 processes=1 first={shard * NODES} nodes={NODES}" in text, text
        assert f"fleet starting nodes={NODES} first={own[0]} last={own[-1]}" in text, text
    first_boots = boot_ids(nodes)
    assert all(len(ids) == 1 for ids in first_boots.values()), first_boots
    assert len(set.union(*first_boots.values())) == len(owned), first_boots
    uids = {n: v["metadata"]["uid"] for n, v in nodes.items()}

    # A shard restarted: its pod deleted, the StatefulSet makes it again under the same name; the same nodes
    # come back from the new process.
    victim = max(owned)
    victim_pod = f"{name}-{victim}"
    old_uid = pods[victim_pod]["metadata"]["uid"]
    await admin.delete(paths.pod(NS, victim_pod))

    async def recreated() -> dict[str, dict[str, Any]] | None:
        pods = await running()
        return pods if pods is not None and pods[victim_pod]["metadata"]["uid"] != old_uid else None

    async with failing_with_logs():
        await until(recreated, timeout=120, what=f"{victim_pod} recreated and Running", detail=detail)
    mark("deleted shard recreated and Running")

    async def rejoined() -> dict[str, dict[str, Any]] | None:
        nodes = await all_ready()
        if nodes is None:
            return None
        boots = boot_ids(nodes)
        return nodes if boots[victim] != first_boots[victim] and len(boots[victim]) == 1 else None

    async with failing_with_logs():
        nodes = await until(rejoined, timeout=120, what=f"{owned[victim]} Ready from the new shard", detail=detail)
    mark("its nodes Ready again")
    after = boot_ids(nodes)
    assert {s: ids for s, ids in after.items() if s != victim} == {
        s: ids for s, ids in first_boots.items() if s != victim
    }, (after, first_boots)  # the other shards ran on
    assert {n: v["metadata"]["uid"] for n, v in nodes.items()} == uids  # re-registered, not made again
    text = await log_of(victim_pod)
    assert f"fleet starting nodes={NODES} first={owned[victim][0]} last={owned[victim][-1]}" in text, text
    # No orphan and no stranger: the cluster's Nodes are those before plus exactly the fleet's.
    every = {n["metadata"]["name"] for n in (await admin.list(paths.nodes()))["items"]}
    assert every == before | {n for ns in owned.values() for n in ns}, sorted(every - before)


async def _clean_up(admin: KubeClient, name: str, secret: str, prefix: str, names: list[str]) -> None:
    with contextlib.suppress(NotFound):
        await admin.delete(f"{STATEFULSETS}/{name}", propagation_policy="Background")

    async def pods_gone() -> bool:
        pods = (await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"]
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.pod(NS, pod["metadata"]["name"]))
        return not pods

    # The shards stop first, so that no node registers again after its Node is deleted.
    await until(pods_gone, timeout=90, what="the shard pods deleted")
    with contextlib.suppress(NotFound):
        await admin.delete(paths.api_path("secrets", namespace=NS, name=secret))
    left = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
    for node in sorted({*names, *(n["metadata"]["name"] for n in left)}):
        with contextlib.suppress(NotFound):
            await admin.delete(paths.node(node))
        with contextlib.suppress(NotFound):
            await admin.delete(paths.lease("kube-node-lease", node))
