"""Plays scenarios on agents and compares the recordings.

Agent-major: every chosen scenario on the first agent, then every one on the second, on the same testbed (one agent
switch instead of two per scenario; each scenario gets a namespace of its own either way). Each scenario: a new
namespace, its objects, a watch on its pods, the actions in order; the recording ends exactly where the last action
ended (a wait ends at the watch event that satisfied it), then the pods' events are read and the pods deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, ApiError, NotFound
from nodeagent.testbed import configs, registry, sampledeviceplugin
from nodeagent.testbed import images as testbed_images
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import busybox_path, cache_root
from tests.differential import agents
from tests.differential import devices as scenario_devices
from tests.differential.compare import Comparison, Recording, compare
from tests.differential.normalise import Context, event_line, pod_state
from tests.differential.recorder import Recorder
from tests.differential.runtimespec import Roots, merge, snapshot
from tests.differential.scenario import KnownDifference, Scenario, load_global_known, substitute
from tests.differential.waits import container_status, describe

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT}
DEFAULT_GRACE = 2
# The corpus's own image (nothing else uses it): the e2e busybox rootfs whose configured user is a NAME ("nobody",
# in its /etc/passwd), so that the image status reports a user name rather than a uid (`spec-image-user`).
NAMED_USER_REPOSITORY = "differential/named-user"
NAMED_USER_TAG = "1"
NAMED_USER = "nobody"


def images(testbed: Testbed) -> dict[str, str]:
    s = testbed.settings
    return {
        "busybox": configs.busybox_image(s),
        "agnhost": configs.agnhost_image(s),
        "nginx": configs.nginx_image(s),
        "grpc": configs.grpc_health_image(s),
        "pause": configs.pause_image(s),
        "e2e_busybox": configs.e2e_busybox_image(s),
        "nonewprivs": configs.nonewprivs_image(s),
        "named_user": f"{s.registry}/{NAMED_USER_REPOSITORY}:{NAMED_USER_TAG}",
        "registry": s.registry,
        "node_ip": s.node_ip,
    }


def roots(testbed: Testbed) -> Roots:
    """Each agent's root dir (nodeagent's --root-dir and the kubelet's own beside it), pod log dir (nodeagent's
    default /var/log/pods, the kubelet's podLogsDir under its root) and the testbed's dir."""
    layout = testbed.layout
    kubelet_root = layout.root / "upstream-kubelet"
    return Roots(
        agents=(str(layout.kubelet_root), str(kubelet_root)),
        testbed=str(layout.root),
        pod_logs=("/var/log/pods", str(kubelet_root / "pod-logs")),
    )


async def push_named_user_image(testbed: Testbed) -> None:
    """The named-user image into the testbed's registry (built once per machine into the testbed's image cache)."""
    image = await asyncio.to_thread(
        testbed_images.build_nonroot_image,
        cache_root() / "images" / "differential-named-user",
        busybox_path(),
        user=NAMED_USER,
    )
    await registry.push_image(testbed.settings.registry, NAMED_USER_REPOSITORY, NAMED_USER_TAG, image)


async def pull_all(cri: CRIClient, names: dict[str, str]) -> None:
    """Every image present before any agent runs, so that both see "already present" rather than one pulling."""
    for key in ("busybox", "agnhost", "nginx", "grpc", "e2e_busybox", "nonewprivs", "named_user"):
        await cri.image.pull_image(api_pb2.ImageSpec(image=names[key]), timeout=300)


@dataclass
class Played:
    scenario: Scenario
    recording: Recording
    context: Context
    raw: list[tuple[str, Obj | None]] = field(default_factory=list)


def _with_defaults(pod: Obj, namespace: str) -> Obj:
    """As the corpus writes pods: no service account token and a 2 s grace unless the scenario says otherwise."""
    spec = pod["spec"]
    spec.setdefault("automountServiceAccountToken", False)
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE)
    return {"apiVersion": "v1", "kind": "Pod", **pod, "metadata": {**pod["metadata"], "namespace": namespace}}


async def _make_namespace(admin: KubeClient, namespace: str) -> None:
    await admin.create(paths.namespaces(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # The ServiceAccount admission refuses pods until the controller-manager made the namespace's "default".
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            await admin.get(paths.api_path("serviceaccounts", namespace=namespace, name="default"))
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"namespace {namespace}: no default service account after 30s")


# Cluster-scoped kinds: the scenario's name as written, removed at the scenario's end.
CLUSTER_KINDS = {
    "RuntimeClass": ("runtimeclasses", "node.k8s.io/v1"),
    "DeviceClass": ("deviceclasses", "resource.k8s.io/v1"),
}
NAMESPACED_KINDS = {
    "ConfigMap": ("configmaps", "v1"),
    "Secret": ("secrets", "v1"),
    "Service": ("services", "v1"),
    "ResourceClaimTemplate": ("resourceclaimtemplates", "resource.k8s.io/v1"),
}


def _object_path(obj: Obj, namespace: str) -> str:
    kind = obj["kind"]
    plural, api_version = CLUSTER_KINDS[kind] if kind in CLUSTER_KINDS else NAMESPACED_KINDS[kind]
    group, _, version = api_version.rpartition("/")
    return paths.api_path(plural, group=group, version=version, namespace=None if kind in CLUSTER_KINDS else namespace)


def _body(obj: Obj, namespace: str) -> Obj:
    kind = obj["kind"]
    if kind in CLUSTER_KINDS:
        return {"apiVersion": CLUSTER_KINDS[kind][1], **obj}
    return {"apiVersion": NAMESPACED_KINDS[kind][1], **obj, "metadata": {**obj["metadata"], "namespace": namespace}}


async def _container_pid(cri: CRIClient, container_id: str) -> int:
    response = await cri.runtime.container_status(container_id, verbose=True)
    info = json.loads(response.info.get("info", "{}"))
    return int(info["pid"])


class Player:
    def __init__(
        self, testbed: Testbed, admin: KubeClient, cri: CRIClient, agent: str, log_dir: Path | None = None
    ) -> None:
        self.testbed = testbed
        self.admin = admin
        self.cri = cri
        self.agent = agent
        self.images = images(testbed)
        self.roots = roots(testbed)
        self.log_dir = log_dir or testbed.layout.logs

    def _root_dir(self) -> Path:
        """The agent's --root-dir, where a scenario's device plugin and DRA driver register."""
        return Path(self.roots.agents[1] if self.agent.startswith("kubelet") else self.roots.agents[0])

    async def _name_claims(self, namespace: str, ctx: Context) -> None:
        """The ResourceClaims made from the pods' templates, by `claim:<pod>/<claim>`: their names carry a random
        suffix, and the DRA driver puts them into the container's environment."""
        for pod in (await self.admin.list(paths.pods(namespace)))["items"]:
            for claim in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
                if claim.get("resourceClaimName"):
                    ctx.names[str(claim["resourceClaimName"])] = f"claim:{pod['metadata']['name']}/{claim['name']}"

    async def _record_runtime(self, namespace: str, ctx: Context, recording: Recording) -> None:
        await self._name_claims(namespace, ctx)
        merge(recording.runtime, await snapshot(self.cri, namespace, ctx, self.roots))

    async def play(self, scenario: Scenario) -> Played:
        short = {"nodeagent": "na", "kubelet": "kl"}.get(self.agent, self.agent[:2])
        namespace = f"d-{short}-{scenario.name}"[:52] + "-" + uuid.uuid4().hex[:5]
        ctx = Context(namespace=namespace, uids={}, node=self.testbed.settings.node_name)
        recording = Recording(agent=self.agent)
        played = Played(scenario, recording, ctx)
        await _make_namespace(self.admin, namespace)
        recorder = Recorder(self.admin, namespace)
        cut = 0
        label = self.agent.replace("#", "-")
        devices = scenario_devices.Devices()
        try:
            if scenario.devices:
                kubelet = self.agent.startswith("kubelet")
                devices = await scenario_devices.start(
                    scenario.devices,
                    self.testbed,
                    self.admin,
                    self._root_dir(),
                    self.log_dir,
                    label,
                    plugin_dir=Path(sampledeviceplugin.UPSTREAM_PLUGIN_DIR) if kubelet else None,
                )
                ctx.names.update(scenario_devices.device_names(scenario.devices))
            for obj in scenario.objects:
                body = _body(substitute(obj, self.images), namespace)
                with contextlib.suppress(AlreadyExists):  # a RuntimeClass left by an interrupted run
                    await self.admin.create(_object_path(body, namespace), body)
            await recorder.start()
            for index, action in enumerate(scenario.actions, 1):
                outcome, at = await self._act(scenario, action.kind, action.args, namespace, ctx, recorder)
                cut = at if at is not None else len(recorder.history)
                recording.outcomes.append(f"{index} {action.kind} {describe(action.args)}: {outcome}")
                if action.kind == "wait" and outcome == "ok":
                    await self._record_runtime(namespace, ctx, recording)
                if outcome == "timeout":
                    recording.outcomes.append("(the remaining actions were not played)")
                    break
            await self._record_runtime(namespace, ctx, recording)
            await asyncio.sleep(1.0)  # events are sent asynchronously by both agents
            listed = await self.admin.list(paths.events(namespace))
            recording.events = [
                event_line(e, ctx) for e in listed["items"] if (e.get("involvedObject") or {}).get("kind") == "Pod"
            ]
        except Exception as exc:
            log.exception("scenario failed scenario=%s agent=%s", scenario.name, self.agent)
            recording.error = f"{type(exc).__name__}: {exc}"
            cut = len(recorder.history)
        finally:
            await recorder.stop()
            played.raw = recorder.history[:cut]
            try:
                await self._clean(namespace, scenario)
            finally:
                await asyncio.to_thread(devices.stop)
        for name, version in played.raw:
            if version is not None:
                recording.states.setdefault(name, []).append(pod_state(version, ctx))
        return played

    async def _act(
        self, scenario: Scenario, kind: str, args: Obj, namespace: str, ctx: Context, recorder: Recorder
    ) -> tuple[str, int | None]:
        if kind == "create":
            names = [p["metadata"]["name"] for p in scenario.pods] if "*" in args["pods"] else args["pods"]
            for name in names:
                body = _with_defaults(substitute(scenario.pod(name), self.images), namespace)
                try:
                    created = await self.admin.create(paths.pods(namespace), body)
                except ApiError as exc:
                    return f"refused {type(exc).__name__}", None
                ctx.uids[name] = created["metadata"]["uid"]
            return "ok", None
        if kind == "sleep":
            await asyncio.sleep(args["seconds"])
            return "ok", None
        pod = args["pod"]
        if kind == "wait":
            at = await recorder.wait(pod, args, float(args.get("timeout", scenario.timeout)))
            return ("ok", at) if at is not None else ("timeout", None)
        if kind == "delete":
            grace = args.get("grace")
            await self.admin.delete(paths.pod(namespace, pod), grace_period_seconds=grace)
            return "ok", None
        latest: Obj = recorder.latest(len(recorder.history)).get(pod) or {}
        cid = str(container_status(latest, args["container"]).get("containerID", "")).rpartition("://")[2]
        if not cid:
            return "no container", None
        if kind == "kill":
            pid = await _container_pid(self.cri, cid)
            os.kill(pid, SIGNALS[str(args.get("signal", "KILL"))])
            return "ok", None
        if kind == "exec":
            response = await self.cri.runtime.exec_sync(cid, [str(c) for c in args["command"]], 10)
            return f"exit {response.exit_code}", None
        raise AssertionError(kind)

    async def _clean(self, namespace: str, scenario: Scenario) -> None:
        """Pods deleted (1 s grace) and waited for, then forced; then the namespace."""
        for pod in scenario.pods:
            with contextlib.suppress(NotFound):
                await self.admin.delete(paths.pod(namespace, pod["metadata"]["name"]), grace_period_seconds=1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not (await self.admin.list(paths.pods(namespace)))["items"]:
                break
            await asyncio.sleep(0.3)
        else:
            log.warning("pods not gone after 30s, forcing namespace=%s", namespace)
            for pod in (await self.admin.list(paths.pods(namespace)))["items"]:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(paths.pod(namespace, pod["metadata"]["name"]), grace_period_seconds=0)
        with contextlib.suppress(NotFound):
            await self.admin.delete(paths.namespace(namespace))
        for obj in scenario.objects:
            if obj["kind"] in CLUSTER_KINDS:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(f"{_object_path(obj, namespace)}/{obj['metadata']['name']}")


@dataclass
class Report:
    comparisons: list[Comparison]
    recordings: dict[str, dict[str, Recording]]  # agent -> scenario -> recording

    @property
    def unexplained(self) -> list[Comparison]:
        return [c for c in self.comparisons if not c.same]


def known_for(scenario: Scenario, global_known: tuple[KnownDifference, ...]) -> tuple[KnownDifference, ...]:
    return (*global_known, *scenario.known)


async def run(
    testbed: Testbed,
    scenarios: list[Scenario],
    agent_names: tuple[str, ...],
    log_dir: Path,
    *,
    progress: Any = print,
) -> Report:
    """Every scenario on each agent in turn; with two agents, the first against the second."""
    if "kubelet" in agent_names:
        agents.check_kubelet()  # before anything runs: fail at once, with the install command
    recordings: dict[str, dict[str, Recording]] = {}
    async with (
        KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin,
        connect(f"unix://{testbed.layout.containerd_socket}", timeout=60) as cri,
    ):
        await push_named_user_image(testbed)
        await pull_all(cri, images(testbed))
        for index, name in enumerate(agent_names):
            label = f"{name}#{index + 1}" if agent_names.count(name) > 1 else name
            started = time.monotonic()
            agent = await agents.start(name, testbed, log_dir, label.replace("#", "-"))
            progress(f"agent {label} up in {time.monotonic() - started:.1f}s (log {agent.log})")
            player = Player(testbed, admin, cri, label, log_dir)
            recordings[label] = {}
            try:
                for scenario in scenarios:
                    t0 = time.monotonic()
                    played = await player.play(scenario)
                    recordings[label][scenario.name] = played.recording
                    err = f" ERROR {played.recording.error}" if played.recording.error else ""
                    progress(f"  {label} {scenario.name}: {time.monotonic() - t0:.1f}s{err}")
            finally:
                try:
                    await agents.stop(agent, testbed)
                except Exception as exc:  # what was recorded stands; the next agent starts on what is left
                    log.exception("stopping agent failed agent=%s", label)
                    progress(f"agent {label}: its clean-up failed ({type(exc).__name__}: {exc}); recordings kept")
    labels = list(recordings)
    comparisons: list[Comparison] = []
    if len(labels) >= 2:
        global_known = load_global_known()
        left, right = recordings[labels[0]], recordings[labels[1]]
        for scenario in scenarios:
            comparisons.append(
                compare(scenario.name, left[scenario.name], right[scenario.name], known_for(scenario, global_known))
            )
    return Report(comparisons, recordings)
