"""CSI plugin registration on the real testbed: nodeagent's plugin manager against the testbed's real CSI stack.

The driver is the e2e suite's CSI mock (csistack: csimock/main.go) with topology and an attach limit, registered by
the testbed's registration sidecar (csiregistrar/main.go, built on k8s.io/kubelet's pluginregistration v1), which
serves <root>/plugins_registry/<driver>-reg.sock. nodeagent runs as a subprocess with the node's credential, so every
write below went through the Node authorizer and NodeRestriction. Asserted:

- at start, before any driver, the CSINode of the node exists with no drivers, owned by the Node;
- a driver that registers gets its CSINode entry (nodeID from NodeGetInfo, the topology key, allocatable.count),
  its key in the `csi.volume.kubernetes.io/nodeid` annotation and its topology label;
- the sidecar's socket gone (the sidecar stopped), the entry and the annotation go (the label stays, as upstream);
- the driver started again registers again, cleanly: one entry, the annotation back;
- an agent restart finds the socket again and keeps the driver registered.

On the code before the plugin manager, the first test fails (no CSINode is ever made by the node).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import csistack, processes
from nodeagent.testbed.csistack import DriverSpec
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
ANNOTATION = "csi.volume.kubernetes.io/nodeid"
# The e2e mock's topology segment (service.TopologyKey / TopologyValue).
TOPOLOGY_KEY = "io.kubernetes.storage.mock/node"
TOPOLOGY_VALUE = "some-mock-node"
DRIVER = DriverSpec(
    name="reg.csi-mock.nodeagent.test",
    attach_required=False,
    mock_args=("--enable-topology", "--attach-limit=5"),
)


class Bed:
    def __init__(self, testbed: Testbed, agent: Agent, config: Path, log: Path) -> None:
        self.testbed = testbed
        self.agent = agent
        self.config = config
        self.log = log

    def restart(self) -> None:
        stop_agent(self.agent)
        self.agent = start_agent(self.testbed, self.log, config=self.config)


@pytest.fixture(scope="module")
def bed(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    config = agent_config(testbed, tmp_path_factory.mktemp("csireg") / "nodeagent.yaml")
    log = testbed.layout.logs / "agent-csi-registration.log"
    holder = Bed(testbed, start_agent(testbed, log, config=config), config, log)
    try:
        yield holder
    finally:
        stop_agent(holder.agent)
        csistack.stop_driver(testbed.layout, DRIVER.name)
        asyncio.run(_delete_csinode(testbed, settings.node_name))
        asyncio.run(clean_up(testbed, settings))


async def _delete_csinode(testbed: Testbed, node_name: str) -> None:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        with contextlib.suppress(NotFound):
            await admin.delete(_csinode_path(node_name))


def _csinode_path(node_name: str) -> str:
    return paths.api_path("csinodes", group="storage.k8s.io", name=node_name)


async def _csinode(admin: KubeClient, node_name: str) -> Obj | None:
    try:
        return await admin.get(_csinode_path(node_name))
    except NotFound:
        return None


def _drivers(csinode: Obj | None) -> list[Obj]:
    return list(((csinode or {}).get("spec") or {}).get("drivers") or [])


async def _node_ids(admin: KubeClient, node_name: str) -> dict[str, str] | None:
    node = await admin.get(paths.node(node_name))
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    return None if value is None else dict(json.loads(value))


@pytest_asyncio.fixture(loop_scope="session")
async def ready(bed: Bed, admin: KubeClient, settings: Settings) -> AsyncIterator[Bed]:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=bed.agent)
    yield bed


@pytest.mark.asyncio(loop_scope="session")
async def test_the_csinode_exists_with_no_drivers_at_start(ready: Bed, admin: KubeClient, settings: Settings) -> None:
    csinode = await eventually(
        lambda: _csinode(admin, settings.node_name), timeout=30, what="CSINode created", agent=ready.agent
    )
    node = await admin.get(paths.node(settings.node_name))
    assert _drivers(csinode) == []
    assert csinode["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": settings.node_name, "uid": node["metadata"]["uid"]}
    ]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_driver_registers_and_deregisters_and_registers_again(
    ready: Bed, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    node_name = settings.node_name
    expected_entry = {
        "name": DRIVER.name,
        "nodeID": DRIVER.name,  # the mock's NodeGetInfo answers its driver name
        "topologyKeys": [TOPOLOGY_KEY],
        "allocatable": {"count": 5},
    }

    async def registered() -> bool:
        return _drivers(await _csinode(admin, node_name)) == [expected_entry]

    started = time.monotonic()
    await csistack.start_driver(testbed.layout, DRIVER)
    await eventually(registered, timeout=30, what="CSINode entry of the driver", agent=ready.agent)
    print(f"registration: sidecar socket up -> CSINode entry in {time.monotonic() - started:.2f}s")
    assert await _node_ids(admin, node_name) == {DRIVER.name: DRIVER.name}
    node = await admin.get(paths.node(node_name))
    assert node["metadata"]["labels"][TOPOLOGY_KEY] == TOPOLOGY_VALUE

    # The sidecar goes (its socket with it): the driver is deregistered.
    csistack.stop_driver(testbed.layout, DRIVER.name)

    async def deregistered() -> bool:
        return _drivers(await _csinode(admin, node_name)) == [] and await _node_ids(admin, node_name) is None

    await eventually(deregistered, timeout=30, what="driver deregistered", agent=ready.agent)
    node = await admin.get(paths.node(node_name))
    assert node["metadata"]["labels"][TOPOLOGY_KEY] == TOPOLOGY_VALUE  # upstream leaves topology labels

    # Started again (a new socket): registered again, one entry.
    await csistack.start_driver(testbed.layout, DRIVER)
    await eventually(registered, timeout=30, what="driver registered again", agent=ready.agent)
    assert await _node_ids(admin, node_name) == {DRIVER.name: DRIVER.name}
    log_text = ready.log.read_text(errors="replace")
    assert log_text.count(f"CSI driver registered driver={DRIVER.name}") >= 2
    assert f"deregistering CSI driver driver={DRIVER.name}" in log_text


@pytest.mark.asyncio(loop_scope="session")
async def test_an_agent_restart_keeps_the_driver_registered(
    ready: Bed, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    node_name = settings.node_name
    if not _drivers(await _csinode(admin, node_name)):
        await csistack.start_driver(testbed.layout, DRIVER)
    before = ready.log.read_text(errors="replace").count(f"CSI driver registered driver={DRIVER.name}")
    ready.restart()

    async def registered_anew() -> bool:
        text = ready.log.read_text(errors="replace")
        return text.count(f"CSI driver registered driver={DRIVER.name}") > before

    await eventually(registered_anew, timeout=60, what="driver registered by the restarted agent", agent=ready.agent)
    assert [d["name"] for d in _drivers(await _csinode(admin, node_name))] == [DRIVER.name]
    assert await _node_ids(admin, node_name) == {DRIVER.name: DRIVER.name}
    # The sidecar was told "registered" and kept running (it exits on a failed registration).
    registrar = processes.load(testbed.layout.pids, csistack.process_name(csistack.REGISTRAR, DRIVER.name))
    assert registrar is not None and registrar.alive()
