"""Static pods on the real testbed: a manifest directory, a manifest URL, mirror pods, restarts and standalone mode.

The agent runs as a subprocess (`nodeagent run`) with the testbed's node credential and a config whose staticPodPath
is a directory of this module and whose staticPodURL is a small HTTP server on loopback that the tests start and
stop. The tests act as a user: they write and remove manifest files, change what the URL serves, and look at the
apiserver (mirror pods, events) as admin, at containerd through CRI, and at the agent's local /pods endpoint.
The standalone test stops the testbed's apiserver and runs a second agent with no kubeconfig at all, against the
same containerd; the apiserver is started again (same command line) before the module ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiUnavailable, NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
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
UID_LABEL = "io.kubernetes.pod.uid"
MIRROR = "kubernetes.io/config.mirror"
HASH = "kubernetes.io/config.hash"


# --- the manifest URL: a local HTTP server on loopback -------------------------------------------------------------


class _Served:
    def __init__(self) -> None:
        self.body = b""
        self.requests = 0
        self.headers: list[dict[str, str]] = []


class ManifestServer:
    """Serves `body` at any path on 127.0.0.1, records the request headers; started and stopped by the test."""

    def __init__(self) -> None:
        served = self.served = _Served()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests += 1
                served.headers.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Type", "application/yaml")
                self.send_header("Content-Length", str(len(served.body)))
                self.end_headers()
                self.wfile.write(served.body)

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="manifest-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/pods.yaml"

    def serve(self, doc: Obj) -> None:
        self.served.body = yaml.safe_dump(doc).encode()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


# --- the agent under test ------------------------------------------------------------------------------------------


@dataclass
class StaticAgent:
    """The agent with a static pod directory and URL; tests may stop and start it again."""

    testbed: Testbed
    settings: Settings
    manifests: Path
    config: Path
    log: Path
    server: ManifestServer
    agent: Agent | None = None
    started: list[Agent] = field(default_factory=list)

    def start(self) -> Agent:
        if self.agent is None or self.agent.proc.poll() is not None:
            self.agent = start_agent(
                self.testbed, self.log, config=self.config, args=("--kubeconfig", "<node>", "--node-name", self.node)
            )
            self.started.append(self.agent)
        return self.agent

    def stop(self) -> None:
        if self.agent is not None:
            stop_agent(self.agent)
            self.agent = None

    @property
    def node(self) -> str:
        return self.settings.node_name

    def write(self, name: str, doc: Obj | str) -> Path:
        """Write a manifest the way editors and config tools do: a hidden temporary file renamed into place."""
        path = self.manifests / name
        tmp = self.manifests / f".{name}.tmp"
        tmp.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
        tmp.rename(path)
        return path


@pytest.fixture(scope="module")
def static_agent(
    testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StaticAgent]:
    root = tmp_path_factory.mktemp("static-pods")
    manifests = root / "manifests"
    manifests.mkdir()
    server = ManifestServer()
    server.serve({"apiVersion": "v1", "kind": "PodList", "items": []})
    server.start()
    config = agent_config(
        testbed,
        root / "nodeagent.yaml",
        staticPodPath=str(manifests),
        staticPodURL=server.url,
        staticPodURLHeader={"X-Static-Pods": ["test"]},
        httpCheckFrequency="2s",
    )
    holder = StaticAgent(testbed, settings, manifests, config, testbed.layout.logs / "agent-static.log", server)
    try:
        yield holder
    finally:
        holder.stop()
        server.stop()
        asyncio.run(clean_up(testbed, settings))


@pytest_asyncio.fixture(loop_scope="session")
async def agent(static_agent: StaticAgent, admin: KubeClient) -> AsyncIterator[Agent]:
    """The agent running (started again if a test stopped it), its node Ready, no manifest left from a test before."""
    for path in static_agent.manifests.iterdir():
        path.unlink()
    static_agent.server.serve({"apiVersion": "v1", "kind": "PodList", "items": []})
    running = static_agent.start()
    await eventually(lambda: node_ready(admin, static_agent.node), timeout=30, what="node Ready", agent=running)
    yield running


# --- helpers -------------------------------------------------------------------------------------------------------


def pod_manifest(name: str, image: str, *, marker: str = "v1", **extra: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name, "marker": marker}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}],
            **extra,
        },
    }


async def mirror_pod(admin: KubeClient, name: str) -> Obj | None:
    with contextlib.suppress(NotFound):
        return await admin.get(paths.pod(NS, name))
    return None


async def running_mirror(admin: KubeClient, name: str, *, not_hash: str | None = None, not_uid: str = "") -> Obj | None:
    """The mirror pod `name` once it is Running with a ready container (another version than `not_hash`)."""
    pod = await mirror_pod(admin, name)
    if pod is None or pod["metadata"].get("deletionTimestamp") or pod["metadata"]["uid"] == not_uid:
        return None
    annotations = pod["metadata"].get("annotations") or {}
    if not_hash is not None and annotations.get(MIRROR) == not_hash:
        return None
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    if status.get("phase") != "Running" or not statuses or not all(c.get("ready") for c in statuses):
        return None
    return pod


async def sandboxes_of(cri: CRIClient, uid: str, *, ready_only: bool = True) -> list[Any]:
    ready = 0  # SANDBOX_READY
    return [
        s
        for s in await cri.runtime.list_pod_sandbox()
        if s.labels.get(UID_LABEL) == uid and (not ready_only or s.state == ready)
    ]


async def running_containers_of(cri: CRIClient, uid: str) -> list[Any]:
    running = 1  # CONTAINER_RUNNING
    return [c for c in await cri.runtime.list_containers() if c.labels.get(UID_LABEL) == uid and c.state == running]


async def events_for(admin: KubeClient, name: str, reason: str) -> list[Obj]:
    listed = await admin.list(paths.events(NS), field_selector=f"involvedObject.name={name},reason={reason}")
    items: list[Obj] = listed["items"]
    return items


def kubectl(testbed: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(testbed.layout.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


async def local_pods(port: int) -> Obj:
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        response = await client.get(f"http://127.0.0.1:{port}/pods")
        response.raise_for_status()
        out: Obj = response.json()
        return out


# --- the directory source and mirror pods --------------------------------------------------------------------------


async def test_manifest_appears_as_running_mirror_pod(
    agent: Agent, static_agent: StaticAgent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    static_agent.write("web.yaml", pod_manifest("web", configs.busybox_image(settings)))
    name = f"web-{static_agent.node}"
    pod = await eventually(lambda: running_mirror(admin, name), timeout=60, what="mirror pod Running", agent=agent)

    meta = pod["metadata"]
    static_uid = meta["annotations"][HASH]
    assert meta["annotations"][MIRROR] == static_uid
    assert meta["annotations"]["kubernetes.io/config.source"] == "file"
    assert meta["uid"] != static_uid  # the apiserver's own UID; the static pod's is the config hash
    node = await admin.get(paths.node(static_agent.node))
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Node",
        static_agent.node,
        node["metadata"]["uid"],
        True,
    )
    assert pod["spec"]["nodeName"] == static_agent.node
    assert {"operator": "Exists", "effect": "NoExecute"} in pod["spec"]["tolerations"]
    # What runs in containerd is the static pod, under its own UID.
    [sandbox] = await sandboxes_of(cri_client, static_uid)
    assert sandbox.metadata.name == name
    [container] = await running_containers_of(cri_client, static_uid)
    assert pod["status"]["containerStatuses"][0]["containerID"] == f"containerd://{container.id}"


async def test_editing_the_manifest_restarts_the_pod_with_a_new_uid(
    agent: Agent, static_agent: StaticAgent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    image = configs.busybox_image(settings)
    static_agent.write("edit.yaml", pod_manifest("edit", image, marker="v1"))
    name = f"edit-{static_agent.node}"
    first = await eventually(lambda: running_mirror(admin, name), timeout=60, what="first version Running", agent=agent)
    old_uid = first["metadata"]["annotations"][HASH]
    ready_uids: list[set[str]] = []  # the UIDs of the pod's ready sandboxes, sampled until the new version runs

    async def sample_once() -> None:
        sandboxes = await cri_client.runtime.list_pod_sandbox()
        ready_uids.append({s.labels[UID_LABEL] for s in sandboxes if s.metadata.name == name and s.state == 0})

    async def sample() -> None:
        while True:
            await sample_once()
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    static_agent.write("edit.yaml", pod_manifest("edit", image, marker="v2"))
    try:
        second = await eventually(
            lambda: running_mirror(admin, name, not_hash=old_uid),
            timeout=60,
            what="edited version Running",
            agent=agent,
        )
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    await sample_once()
    new_uid = second["metadata"]["annotations"][HASH]
    # The old pod was terminated before the new one started (its sleep ignores SIGTERM: 2 s of grace to wait out):
    # the two were never ready at once.
    assert ready_uids[0] == {old_uid} and ready_uids[-1] == {new_uid}
    assert not [r for r in ready_uids if len(r) > 1]
    assert new_uid != old_uid
    assert second["metadata"]["labels"]["marker"] == "v2"
    assert second["metadata"]["uid"] != first["metadata"]["uid"]  # a new mirror pod for the new version

    async def old_gone() -> bool:
        return not await sandboxes_of(cri_client, old_uid) and not await running_containers_of(cri_client, old_uid)

    await eventually(old_gone, timeout=30, what="the old pod stopped", agent=agent)
    assert len(await running_containers_of(cri_client, new_uid)) == 1


async def test_removing_the_file_removes_the_pod_and_its_mirror(
    agent: Agent, static_agent: StaticAgent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    path = static_agent.write("gone.yaml", pod_manifest("gone", configs.busybox_image(settings)))
    name = f"gone-{static_agent.node}"
    pod = await eventually(lambda: running_mirror(admin, name), timeout=60, what="mirror pod Running", agent=agent)
    uid = pod["metadata"]["annotations"][HASH]

    path.unlink()

    async def mirror_gone() -> bool:
        return await mirror_pod(admin, name) is None

    async def stopped() -> bool:
        return not await sandboxes_of(cri_client, uid) and not await running_containers_of(cri_client, uid)

    await eventually(stopped, timeout=30, what="the pod stopped", agent=agent)
    await eventually(mirror_gone, timeout=30, what="the mirror pod deleted", agent=agent)


@pytest.mark.parametrize("how", ["graceful", "forced"])
async def test_a_mirror_pod_deleted_with_kubectl_comes_back(
    how: str,
    agent: Agent,
    static_agent: StaticAgent,
    admin: KubeClient,
    settings: Settings,
    testbed: Testbed,
    cri_client: CRIClient,
) -> None:
    static_agent.write("keep.yaml", pod_manifest("keep", configs.busybox_image(settings)))
    name = f"keep-{static_agent.node}"
    first = await eventually(lambda: running_mirror(admin, name), timeout=60, what="mirror pod Running", agent=agent)
    static_uid = first["metadata"]["annotations"][HASH]
    [container] = await running_containers_of(cri_client, static_uid)

    extra = ["--grace-period=0", "--force"] if how == "forced" else []
    await asyncio.to_thread(kubectl, testbed, "delete", "pod", "-n", NS, name, "--wait=false", *extra)

    back = await eventually(
        lambda: running_mirror(admin, name, not_uid=first["metadata"]["uid"]),
        timeout=60,
        what="the mirror pod recreated",
        agent=agent,
    )
    assert back["metadata"]["annotations"][MIRROR] == static_uid
    # Only the mirror was deleted: the static pod kept running, container and all.
    assert [c.id for c in await running_containers_of(cri_client, static_uid)] == [container.id]
    assert back["status"]["containerStatuses"][0]["restartCount"] == 0


async def test_an_invalid_manifest_is_reported_and_the_valid_one_runs(
    agent: Agent, static_agent: StaticAgent, admin: KubeClient, settings: Settings
) -> None:
    bad = static_agent.write("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: [broken\n")
    aliases = static_agent.write("bomb.yaml", "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n")
    static_agent.write("good.yaml", pod_manifest("good", configs.busybox_image(settings)))
    name = f"good-{static_agent.node}"
    await eventually(lambda: running_mirror(admin, name), timeout=60, what="the valid pod Running", agent=agent)

    async def reported(path: Path) -> list[Obj]:
        events = await events_for(admin, static_agent.node, "FailedValidation")
        return [e for e in events if str(path) in e["message"]]

    [event] = await eventually(lambda: reported(bad), timeout=30, what="an event for bad.yaml", agent=agent)
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Node"
    assert "couldn't parse as pod" in event["message"]
    [bomb] = await eventually(lambda: reported(aliases), timeout=30, what="an event for bomb.yaml", agent=agent)
    assert "aliases are not allowed" in bomb["message"]
    assert "couldn't parse as pod" in agent.log.read_text()
    # The agent stays healthy.
    assert agent.proc.poll() is None
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        healthz = await client.get(f"http://127.0.0.1:{settings.healthz_port}/healthz")
    assert (healthz.status_code, healthz.text) == (200, "ok")


async def test_of_two_files_with_one_pod_name_exactly_one_runs_and_the_other_is_reported(
    agent: Agent, static_agent: StaticAgent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    image = configs.busybox_image(settings)
    first = static_agent.write("a-dup.yaml", pod_manifest("dup", image, marker="a"))
    second = static_agent.write("b-dup.yaml", pod_manifest("dup", image, marker="b"))
    name = f"dup-{static_agent.node}"
    pod = await eventually(lambda: running_mirror(admin, name), timeout=60, what="one dup pod Running", agent=agent)
    assert pod["metadata"]["labels"]["marker"] == "a"  # the first file in name order keeps the name

    async def reported() -> list[Obj]:
        return await events_for(admin, name, "FailedValidation")

    [event] = await eventually(reported, timeout=30, what="a FailedValidation event", agent=agent)
    assert event["type"] == "Warning"
    # upstream filterInvalidPods' words (format.Pod is name_namespace(uid)), then the two files
    matched = re.fullmatch(
        rf"Error validating pod {re.escape(name)}_{NS}\(([0-9a-f]{{32}})\) from file due to duplicate pod name "
        rf'"{re.escape(name)}", ignoring \(from {re.escape(str(second))}; the pod from {re.escape(str(first))} '
        r"keeps the name\)",
        event["message"],
    )
    assert matched is not None, event["message"]
    assert matched.group(1) != pod["metadata"]["annotations"][HASH]  # the ignored pod is b-dup's, not the running one
    running = [
        c
        for c in await cri_client.runtime.list_containers()
        if c.labels.get("io.kubernetes.pod.name") == name and c.state == 1
    ]
    assert len(running) == 1
    assert running[0].labels[UID_LABEL] == pod["metadata"]["annotations"][HASH]


# --- the URL source ------------------------------------------------------------------------------------------------


async def test_a_url_serving_a_pod_list_runs_its_pods_and_follows_changes(
    agent: Agent, static_agent: StaticAgent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    image = configs.busybox_image(settings)
    server = static_agent.server

    def pod_list(*names: str) -> Obj:
        items = []
        for name in names:
            item = pod_manifest(name, image)
            del item["apiVersion"], item["kind"]
            items.append(item)
        return {"apiVersion": "v1", "kind": "PodList", "items": items}

    server.serve(pod_list("url-one", "url-two"))
    one = await eventually(
        lambda: running_mirror(admin, f"url-one-{static_agent.node}"), timeout=60, what="url-one Running", agent=agent
    )
    await eventually(
        lambda: running_mirror(admin, f"url-two-{static_agent.node}"), timeout=60, what="url-two Running", agent=agent
    )
    assert one["metadata"]["annotations"]["kubernetes.io/config.source"] == "http"
    assert server.served.headers and server.served.headers[-1].get("X-Static-Pods") == "test"

    server.serve(pod_list("url-two", "url-three"))
    await eventually(
        lambda: running_mirror(admin, f"url-three-{static_agent.node}"),
        timeout=60,
        what="url-three Running",
        agent=agent,
    )
    one_uid = one["metadata"]["annotations"][HASH]

    async def one_gone() -> bool:
        return await mirror_pod(admin, f"url-one-{static_agent.node}") is None and not await running_containers_of(
            cri_client, one_uid
        )

    await eventually(one_gone, timeout=30, what="url-one removed", agent=agent)
    assert await running_mirror(admin, f"url-two-{static_agent.node}") is not None

    # One item turns invalid: as upstream, the whole list is refused and reported; nothing stops, not even url-three,
    # which the refused list leaves out.
    three = await running_mirror(admin, f"url-three-{static_agent.node}")
    assert three is not None
    three_uid = three["metadata"]["annotations"][HASH]
    [three_container] = await running_containers_of(cri_client, three_uid)
    broken = pod_list("url-two", "url-bad")
    broken["items"][1]["spec"]["containers"][0]["image"] = ""
    server.serve(broken)

    async def reported() -> list[Obj]:
        events = await events_for(admin, static_agent.node, "FailedValidation")
        return [e for e in events if f"{server.url} items[1]" in e["message"]]

    [event] = await eventually(reported, timeout=30, what="the invalid item reported", agent=agent)
    assert "invalid pod: [spec.containers[0].image: Required value]" in event["message"]
    polls = server.served.requests
    await eventually(
        lambda: asyncio.sleep(0, server.served.requests >= polls + 2), timeout=30, what="two more polls", agent=agent
    )
    assert [c.id for c in await running_containers_of(cri_client, three_uid)] == [three_container.id]
    assert await running_mirror(admin, f"url-three-{static_agent.node}") is not None
    assert await running_mirror(admin, f"url-two-{static_agent.node}") is not None
    assert await mirror_pod(admin, f"url-bad-{static_agent.node}") is None


# --- restarts ------------------------------------------------------------------------------------------------------


async def test_restarting_the_agent_keeps_a_static_pod_running_with_the_same_uid(
    agent: Agent, static_agent: StaticAgent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    static_agent.write("steady.yaml", pod_manifest("steady", configs.busybox_image(settings)))
    name = f"steady-{static_agent.node}"
    before = await eventually(lambda: running_mirror(admin, name), timeout=60, what="mirror pod Running", agent=agent)
    uid = before["metadata"]["annotations"][HASH]
    [sandbox] = await sandboxes_of(cri_client, uid)
    [container] = await running_containers_of(cri_client, uid)

    static_agent.stop()
    again = static_agent.start()
    await eventually(lambda: node_ready(admin, static_agent.node), timeout=30, what="node Ready again", agent=again)

    async def adopted() -> Obj | None:
        """The restarted agent reports the pod Running, with the container it found (its /pods)."""
        with contextlib.suppress(httpx.HTTPError):
            for pod in (await local_pods(settings.healthz_port))["items"]:
                statuses = (pod.get("status") or {}).get("containerStatuses") or []
                if pod["metadata"]["name"] == name and statuses and statuses[0].get("containerID"):
                    return pod
        return None

    pod = await eventually(adopted, timeout=60, what="the pod adopted by the new agent", agent=again)
    assert pod["metadata"]["uid"] == uid
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["containerID"] == f"containerd://{container.id}"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    # A few sync and housekeeping rounds later, containerd still runs the very same sandbox and container.
    await asyncio.sleep(6)
    assert [s.id for s in await sandboxes_of(cri_client, uid)] == [sandbox.id]
    assert [c.id for c in await running_containers_of(cri_client, uid)] == [container.id]
    mirror = await mirror_pod(admin, name)
    assert mirror is not None and mirror["metadata"]["uid"] == before["metadata"]["uid"]  # the mirror was kept too


# --- standalone mode -----------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def apiserver_stopped(testbed: Testbed) -> AsyncIterator[None]:
    """The testbed's kube-apiserver stopped, and started again (ready) before the next test, whatever happened."""
    await testbed.stop_apiserver()
    try:
        yield
    finally:
        await testbed.start_apiserver()


async def test_standalone_mode_runs_a_static_pod_without_any_apiserver(
    static_agent: StaticAgent,
    testbed: Testbed,
    settings: Settings,
    admin: KubeClient,
    cri_client: CRIClient,
    tmp_path: Path,
) -> None:
    # One agent per containerd: the cluster agent would take the standalone agent's pods for strays.
    static_agent.stop()
    await clean_up(testbed, settings)
    node = f"standalone-{uuid.uuid4().hex[:6]}"
    name = f"solo-{node}"
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    solo_pod = pod_manifest("solo", configs.busybox_image(settings))
    # No memory limit: the downward API gives the node's allocatable memory, which a standalone agent (no Node
    # object to read it back from) computes itself, as upstream does.
    limit_ref = {"resourceFieldRef": {"containerName": "main", "resource": "limits.memory"}}
    solo_pod["spec"]["containers"][0]["env"] = [{"name": "MEM", "valueFrom": limit_ref}]
    (manifests / "solo.yaml").write_text(yaml.safe_dump(solo_pod))
    port = settings.healthz_port
    config = agent_config(testbed, tmp_path / "standalone.yaml", staticPodPath=str(manifests), healthzPort=port)
    log = testbed.layout.logs / "agent-standalone.log"
    try:
        async with apiserver_stopped(testbed):
            # No apiserver at all: nothing answers at its address.
            with pytest.raises(ApiUnavailable):
                await admin.get(paths.node(settings.node_name))
            solo = start_agent(testbed, log, config=config, args=("--standalone", "--node-name", node))
            try:
                await _standalone_pod_runs(solo, name, port, config, cri_client)
                assert "standalone=True" in log.read_text()
                assert solo.proc.poll() is None
            finally:
                stop_agent(solo)
        # The cluster never heard of this node or its pod.
        with pytest.raises(NotFound):
            await admin.get(paths.node(node))
        with pytest.raises(NotFound):
            await admin.get(paths.pod(NS, name))
    finally:
        await clean_up(testbed, settings)


async def _standalone_pod_runs(solo: Agent, name: str, port: int, config: Path, cri_client: CRIClient) -> None:
    async def running() -> Obj | None:
        with contextlib.suppress(httpx.HTTPError):
            for pod in (await local_pods(port))["items"]:
                statuses = (pod.get("status") or {}).get("containerStatuses") or []
                if pod["metadata"]["name"] == name and pod["status"].get("phase") == "Running" and statuses:
                    return pod if statuses[0].get("ready") else None
        return None

    pod = await eventually(running, timeout=90, what="the static pod Running (local /pods)", agent=solo)
    [container] = await running_containers_of(cri_client, pod["metadata"]["uid"])
    printed = await cri_client.runtime.exec_sync(container.id, ["sh", "-c", "echo $MEM"], timeout=30)
    memory = int(printed.stdout.decode().strip())
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # Capacity minus the 100Mi hard eviction threshold (no reservations in the test's config); it was 0 when the
    # allocatable came only from a registered Node.
    assert total - 1024**3 < memory < total

    # What a user in a VM types.
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "nodeagent", "pods", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ},
    )
    [row] = [line for line in listed.stdout.splitlines() if name in line]
    assert "Running" in row and "1/1" in row
    as_json = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "nodeagent", "pods", "--config", str(config), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert [p["metadata"]["uid"] for p in json.loads(as_json.stdout)["items"]] == [pod["metadata"]["uid"]]
