"""Run a planned fleet: every node a task in this event loop, started staggered, stopped together; their Leases
renewed on a thread of their own (`heartbeat`), so that pod work in this loop does not delay them; with a kubelet
port, every node's kubelet API on it, routed by the address a request came in on (`kubeletapi`). With
`--pod-watch shared`, one list+watch of the pods of every node (`SharedPodSource`, with the fleet's --kubeconfig)
instead of one per node.

A node whose agent fails (a credential that may not register it, say) is logged and left down; the others go on.
The fleet ends when `stop` is set, or when every node has failed (`FleetError`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from cri.fake import Behaviour
from nodeagent.agent import KubeletAPIRoute, PodSourceRunner
from nodeagent.fleet import kubeletapi
from nodeagent.fleet.heartbeat import LeaseHeartbeats
from nodeagent.fleet.node import run_node
from nodeagent.fleet.plan import POD_WATCH_SHARED, FleetError, FleetOptions, plan_nodes, shared_config
from nodeagent.kube.client import KubeClient
from nodeagent.sources.apiserver import SharedPodSource

log = logging.getLogger(__name__)


@dataclass
class FleetResult:
    nodes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


async def run_fleet(options: FleetOptions, behaviour: Behaviour, stop: asyncio.Event) -> FleetResult:
    plans = plan_nodes(options)
    config = shared_config(options)
    result = FleetResult(nodes=[p.name for p in plans])
    log.info(
        "fleet starting nodes=%d first=%s last=%s stagger=%s pod_watch=%s",
        len(plans),
        plans[0].name,
        plans[-1].name,
        options.stagger,
        options.pod_watch,
    )
    route: KubeletAPIRoute | None = None
    http = None
    if options.kubelet_port:
        router = kubeletapi.KubeletRouter()
        addresses = [p.internal_ip for p in plans]
        tls = kubeletapi.fleet_tls(
            options.directory / "kubelet-api",
            addresses,
            cert_file=options.tls_cert_file,
            key_file=options.tls_private_key_file,
            client_ca_file=config.authentication.x509.client_ca_file,
        )
        http = await kubeletapi.listen(router, tls, addresses, options.kubelet_port)
        route = router.route
    pod_source: PodSourceRunner | None = None
    pod_client: KubeClient | None = None
    pod_watch: asyncio.Task[None] | None = None
    if options.pod_watch == POD_WATCH_SHARED and options.kubeconfig is not None:
        shared = SharedPodSource(p.name for p in plans)
        pod_client = KubeClient.from_kubeconfig(options.kubeconfig, direct=True)
        pod_watch = asyncio.create_task(shared.run(pod_client), name="fleet-pod-watch")
        pod_source = shared.source
    heartbeats = LeaseHeartbeats(config)
    heartbeats.start()
    tasks = {
        asyncio.create_task(
            run_node(
                plan,
                options,
                config,
                behaviour,
                stop,
                lease_renewer=heartbeats.renew,
                kubelet_api=route,
                pod_source=pod_source,
            ),
            name=f"fleet-node-{plan.name}",
        ): plan.name
        for plan in plans
    }
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                name = tasks[task]
                error = task.exception()
                if error is not None:
                    result.failed[name] = str(error)
                    log.error("fleet node failed node=%s error=%s", name, error)
                elif not stop.is_set():
                    result.failed[name] = "the agent ended before the fleet was stopped"
                    log.error("fleet node ended node=%s", name)
            if len(result.failed) == len(plans):
                first = next(iter(result.failed.items()))
                raise FleetError(f"every node failed; {first[0]}: {first[1]}")
    finally:
        stop.set()
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if pod_watch is not None:
            pod_watch.cancel()
            await asyncio.gather(pod_watch, return_exceptions=True)
        if pod_client is not None:
            await pod_client.aclose()
        # The nodes are down (each one's renewal cancelled with it): the thread ends and closes what is left.
        await asyncio.to_thread(heartbeats.stop)
        if http is not None:
            await http.close()
    log.info("fleet stopped nodes=%d failed=%d", len(plans), len(result.failed))
    return result
