"""One emulated node: its fake runtime, its facts, its agent options; run until the fleet stops."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid

from cri.fake import Behaviour, FakeCRI, StreamingServer
from cri.fake.runtime import RUNTIME_NAME, RUNTIME_VERSION
from nodeagent.agent import (
    AgentOptions,
    Emulation,
    KubeletAPIRoute,
    LeaseRenewer,
    PodSourceRunner,
    SharedInformers,
    run_emulated_agent,
)
from nodeagent.config import KubeletConfiguration
from nodeagent.fleet.plan import FLEET_LABEL, FleetOptions, NodePlan
from nodeagent.nodestatus import NodeFacts

log = logging.getLogger(__name__)

# One boot per fleet process: a restarted fleet is a rebooted node to the control plane, as it should be.
BOOT_ID = str(uuid.uuid4())


def node_facts(plan: NodePlan, options: FleetOptions, config: KubeletConfiguration) -> NodeFacts:
    return NodeFacts(
        hostname=plan.name,
        internal_ip=plan.internal_ip,
        machine_id=plan.machine_id,
        boot_id=BOOT_ID,
        system_uuid=str(uuid.uuid5(uuid.NAMESPACE_DNS, plan.name)),
        kernel_version=os.uname().release,
        os_image="nodeagent fleet (emulated node)",
        container_runtime_version=f"{RUNTIME_NAME}://{RUNTIME_VERSION}",
        kubelet_version=config.emulated_kubernetes_version,
        architecture="amd64",
        operating_system="linux",
        cpu_count=options.cpu,
        memory_bytes=options.memory_bytes,
        ephemeral_storage_bytes=100 << 30,
        daemon_port=config.port,
    )


def agent_options(plan: NodePlan, options: FleetOptions) -> AgentOptions:
    return AgentOptions(
        config_path=options.directory / "fleet-config (built in)",
        kubeconfig=plan.kubeconfig,
        node_name=plan.name,
        node_ip=plan.internal_ip,
        root_dir=plan.root_dir,
        bootstrap_kubeconfig=options.bootstrap_kubeconfig,
        cert_dir=plan.root_dir / "pki",
        node_labels={FLEET_LABEL: options.prefix, **options.labels},
    )


async def run_node(
    plan: NodePlan,
    options: FleetOptions,
    config: KubeletConfiguration,
    behaviour: Behaviour,
    stop: asyncio.Event,
    *,
    lease_renewer: LeaseRenewer | None = None,
    kubelet_api: KubeletAPIRoute | None = None,
    pod_source: PodSourceRunner | None = None,
    informers: SharedInformers | None = None,
    streaming: StreamingServer | None = None,
) -> FakeCRI:
    """Run the node until `stop`; waits its turn first (the fleet's stagger). Returns its runtime (for reports).
    `lease_renewer`: who renews the node's Lease (the fleet's heartbeat thread); None, the agent's own loop.
    `kubelet_api`: the fleet's router of kubelet API requests, when the fleet serves it. `pod_source`: the fleet's
    shared pod watch; None, the node's own list+watch. `informers`: the fleet's Services and RuntimeClasses; None,
    the node's own list+watch of each. `streaming`: the fleet's server of exec URLs; None, exec is Unimplemented."""
    runtime = FakeCRI(plan.name, behaviour=behaviour, pod_network=plan.pod_network, streaming=streaming)
    try:
        await asyncio.wait_for(stop.wait(), plan.start_after)
        return runtime  # stopped before its turn
    except TimeoutError:
        pass
    plan.root_dir.mkdir(parents=True, exist_ok=True)
    log.info("fleet node starting node=%s ip=%s pods=%s", plan.name, plan.internal_ip, plan.pod_network)
    emulation = Emulation(
        runtime=runtime,
        facts=node_facts(plan, options, config),
        config=config,
        stop=stop,
        lease_renewer=lease_renewer,
        kubelet_api=kubelet_api,
        pod_source=pod_source,
        informers=informers,
        eviction=options.eviction,
        max_requests=options.max_requests or None,
    )
    async with runtime:
        await run_emulated_agent(agent_options(plan, options), emulation)
    log.info("fleet node stopped node=%s", plan.name)
    return runtime
