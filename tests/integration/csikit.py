"""What the CSI tests on the real testbed share (test_csi_*.py): an agent of their own (restartable, killable), the
e2e suite's CSI mock drivers started for it with their CSIDriver objects, the PV/claim/pod prologue (a PV made as
external-provisioner would, a claim bound to it, a pod using it as volume "data"), the waits (Bound, Running,
deleted, FailedMount, the driver's calls) and the clean-up of everything a module made, even when a test fails.

The driver's own call log (csistack.driver_calls) is the witness of what the agent asked: the helpers here read
it by driver, volume id and method.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, csistack
from nodeagent.testbed.csistack import DriverSpec, DriverStack
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    events,
    eventually,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

Obj = dict[str, Any]
MI = 1 << 20
NODE = "/csi.v1.Node/"
STAGE, UNSTAGE = NODE + "NodeStageVolume", NODE + "NodeUnstageVolume"
PUBLISH, UNPUBLISH = NODE + "NodePublishVolume", NODE + "NodeUnpublishVolume"
TIMEOUT = 90.0
SLEEP = ("sleep", "3600")


class Bed:
    """The agent under test (its config kept for a restart), the testbed, the drivers' stacks by name."""

    def __init__(self, testbed: Testbed, agent: Agent, config: Path) -> None:
        self.testbed = testbed
        self.agent = agent
        self.config = config
        self.stacks: dict[str, DriverStack] = {}

    def driver_calls(self, driver: str, volume_id: str, *methods: str) -> list[Obj]:
        """The driver's calls (whole, in order) about `volume_id`, of the given methods only."""
        return [
            call
            for call in csistack.driver_calls(self.testbed.layout, driver)
            if call.get("Method") in methods and (call.get("Request") or {}).get("volume_id") == volume_id
        ]

    def calls(self, driver: str, volume_id: str, *methods: str) -> list[str]:
        """The methods of those calls, in order."""
        return [str(call["Method"]) for call in self.driver_calls(driver, volume_id, *methods)]

    def requests(self, driver: str, volume_id: str, method: str) -> list[Obj]:
        return [call.get("Request") or {} for call in self.driver_calls(driver, volume_id, method)]

    async def calls_are(self, driver: str, volume_id: str, methods: Sequence[str], expected: list[str]) -> None:
        await wait_calls(self.agent, lambda: self.calls(driver, volume_id, *methods), expected)

    def kill(self) -> int:
        """SIGKILL to the agent, waited for; the size of its log then (where a restarted agent's lines begin)."""
        self.agent.proc.send_signal(signal.SIGKILL)
        self.agent.proc.wait(10)
        return self.agent.log.stat().st_size

    def restart(self) -> None:
        self.agent = start_agent(self.testbed, self.agent.log, config=self.config)


@contextlib.contextmanager
def agent_bed(
    testbed: Testbed,
    settings: Settings,
    directory: Path,
    *,
    log: str,
    prefix: str,
    drivers: Sequence[DriverSpec],
    **config: Any,
) -> Iterator[Bed]:
    """A module's agent: the testbed's config with `config`'s KubeletConfiguration fields, logging to `log` in the
    testbed's logs. On the way out, even on failure: the agent stopped, the pods, claims and PVs named `prefix`-*
    and the drivers' CSIDriver objects deleted, the drivers stopped (faults cleared, their file removed), the
    testbed cleaned up."""
    path = agent_config(testbed, directory / "nodeagent.yaml", **config)
    bed = Bed(testbed, start_agent(testbed, testbed.layout.logs / log, config=path), path)
    try:
        yield bed
    finally:
        stop_agent(bed.agent)
        for spec in drivers:
            if csistack.faults_file(testbed.layout, spec.name).exists():
                csistack.set_faults(testbed.layout, spec.name, {})
        asyncio.run(_delete_objects(testbed, prefix, drivers))
        for spec in drivers:
            csistack.stop_driver(testbed.layout, spec.name)
            csistack.faults_file(testbed.layout, spec.name).unlink(missing_ok=True)
        asyncio.run(clean_up(testbed, settings))


def module_bed(name: str, *, prefix: str, drivers: Sequence[DriverSpec], **config: Any) -> Any:
    """A module's `bed` fixture: agent_bed with the config in a temporary directory `name`, the log agent-`name`.log."""

    @pytest.fixture(scope="module", name="bed")
    def bed(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
        directory = tmp_path_factory.mktemp(name)
        with agent_bed(
            testbed, settings, directory, log=f"agent-{name}.log", prefix=prefix, drivers=drivers, **config
        ) as holder:
            yield holder

    return bed


async def _delete_objects(testbed: Testbed, prefix: str, drivers: Sequence[DriverSpec]) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        await delete_objects(admin, prefix, drivers)


async def delete_objects(admin: KubeClient, prefix: str, drivers: Sequence[DriverSpec]) -> None:
    """The pods (at once), claims and PVs named `prefix`-*, and the drivers' CSIDriver objects."""
    for pod in await _named(admin, paths.pods(NS), prefix):
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, pod), grace_period_seconds=0)
    for claim in await _named(admin, paths.api_path("persistentvolumeclaims", namespace=NS), prefix):
        with contextlib.suppress(NotFound):
            await admin.delete(paths.api_path("persistentvolumeclaims", namespace=NS, name=claim))
    for pv in await _named(admin, paths.api_path("persistentvolumes"), prefix):
        with contextlib.suppress(NotFound):
            await admin.delete(paths.api_path("persistentvolumes", name=pv))
    for spec in drivers:
        await csistack.delete_csidriver(admin, spec.name)


async def _named(admin: KubeClient, path: str, prefix: str) -> list[str]:
    names = (item["metadata"]["name"] for item in (await admin.list(path))["items"])
    return [name for name in names if name.startswith(prefix + "-")]


async def start_drivers(
    bed: Bed,
    admin: KubeClient,
    settings: Settings,
    *specs: DriverSpec,
    csidriver: Callable[[DriverSpec], Obj] = csistack.csidriver_object,
) -> Bed:
    """The node Ready, then each driver not started yet: its stack and a fresh CSIDriver object (`csidriver`'s)."""
    await wait_node_ready(admin, bed.agent, settings.node_name)
    for spec in specs:
        if spec.name not in bed.stacks:
            bed.stacks[spec.name] = await csistack.start_driver(bed.testbed.layout, spec)
            await csistack.delete_csidriver(admin, spec.name)
            await admin.create(paths.api_path("csidrivers", group=csistack.STORAGE), csidriver(spec))
    return bed


def name(prefix: str, what: str) -> str:
    return f"{prefix}-{what}-{uuid.uuid4().hex[:5]}"


def claim_volume(claim: str) -> Obj:
    return {"name": "data", "persistentVolumeClaim": {"claimName": claim}}


def volume_pod(
    settings: Settings, pod_name: str, volume: Obj, *, command: Sequence[str] = SLEEP, device: str | None = None
) -> Obj:
    """A busybox pod (grace 1 s, no service account token) whose container "main" runs `command` with `volume`
    mounted at /data, or given as the block `device`."""
    container: Obj = {"name": "main", "image": configs.busybox_image(settings), "command": list(command)}
    if device is not None:
        container["volumeDevices"] = [{"name": volume["name"], "devicePath": device}]
    else:
        container["volumeMounts"] = [{"name": volume["name"], "mountPath": "/data"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": [volume],
        },
    }


def claim_path(claim: str) -> str:
    return paths.api_path("persistentvolumeclaims", namespace=NS, name=claim)


async def create_claim(admin: KubeClient, claim: str, pv_name: str, *, mode: str | None = None) -> Obj:
    """A claim of 1Mi, without a StorageClass, bound by name to the PV `pv_name` (of volumeMode `mode` if given)."""
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv_name}
    if mode is not None:
        spec["volumeMode"] = mode
    spec["resources"] = {"requests": {"storage": "1Mi"}}
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": NS}}
    created: Obj = await admin.create(paths.api_path("persistentvolumeclaims", namespace=NS), {**body, "spec": spec})
    return created


async def wait_bound(admin: KubeClient, agent: Agent, claim: str) -> None:
    async def bound() -> bool:
        obj = await admin.get(claim_path(claim))
        return (obj.get("status") or {}).get("phase") == "Bound"

    await eventually(bound, timeout=60, what=f"claim {claim} Bound", agent=agent)


async def bound_claim(admin: KubeClient, agent: Agent, claim: str, pv_name: str, *, mode: str | None = None) -> None:
    await create_claim(admin, claim, pv_name, mode=mode)
    await wait_bound(admin, agent, claim)


@dataclass(frozen=True)
class ClaimPod:
    pod: Obj  # as created
    volume_id: str
    pv_name: str
    claim: str


async def claim_pod(
    admin: KubeClient,
    bed: Bed,
    settings: Settings,
    driver: str,
    prefix: str,
    *,
    capacity_bytes: int = MI,
    command: Sequence[str] = SLEEP,
) -> ClaimPod:
    """A PV made as external-provisioner would, a claim bound to it, a pod using it (created, not waited for)."""
    pv_name = name(prefix, "pv")
    provisioned = await csistack.provision(admin, bed.stacks[driver], pv_name, capacity_bytes=capacity_bytes)
    claim = name(prefix, "claim")
    await bound_claim(admin, bed.agent, claim, pv_name)
    body = volume_pod(settings, name(prefix, "pod"), claim_volume(claim), command=command)
    created: Obj = await admin.create(paths.pods(NS), body)
    return ClaimPod(created, provisioned.volume_id, pv_name, claim)


async def running(admin: KubeClient, agent: Agent, pod_name: str, *, timeout: float = TIMEOUT) -> Obj:
    """The pod once its container "main" runs; on a time-out, its status in the message."""
    try:
        return await wait_running(admin, agent, pod_name, "main", timeout=timeout)
    except AssertionError as exc:
        pod = await admin.get(paths.pod(NS, pod_name))
        raise AssertionError(f"{exc}\nstatus: {pod.get('status')}") from None


async def wait_gone(admin: KubeClient, agent: Agent, path: str, what: str, *, timeout: float = TIMEOUT) -> None:
    async def gone() -> bool:
        try:
            await admin.get(path)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=timeout, what=what, agent=agent)


async def delete_pod(admin: KubeClient, agent: Agent, pod_name: str, *, timeout: float = TIMEOUT) -> None:
    """Deleted with its grace period, and gone from the apiserver (the agent has torn its volumes down)."""
    await admin.delete(paths.pod(NS, pod_name))
    await wait_gone(admin, agent, paths.pod(NS, pod_name), f"pod {pod_name} deleted", timeout=timeout)


async def wait_calls(agent: Agent, calls: Callable[[], list[str]], expected: list[str]) -> None:
    """`calls()` (the driver's, from its log) become `expected`; on a time-out, what they were in the message."""

    async def check() -> bool:
        return calls() == expected

    try:
        await eventually(check, timeout=30, what=f"driver calls {expected}", agent=agent)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ncalls: {calls()}") from None


async def wait_failed_mount(admin: KubeClient, agent: Agent, pod: Obj, expected: str) -> None:
    """A FailedMount event about `pod` with the message `expected`; on a time-out, the ones there were."""

    async def failed_mount() -> bool:
        return any(e.get("message") == expected for e in await events(admin, pod, "FailedMount"))

    try:
        await eventually(failed_mount, timeout=60, what=f"FailedMount {expected!r}", agent=agent)
    except AssertionError as exc:
        seen = [e.get("message") for e in await events(admin, pod, "FailedMount")]
        raise AssertionError(f"{exc}\nFailedMount events: {seen}") from None


def read_from(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")
