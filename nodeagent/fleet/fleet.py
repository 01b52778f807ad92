"""Run a planned fleet: every node a task in this event loop, started staggered, stopped together; their Leases
renewed on a thread of their own (`heartbeat`), so that pod work in this loop does not delay them; with a kubelet
port, every node's kubelet API on it, routed by the address a request came in on (`kubeletapi`). With
`--pod-watch shared`, one list+watch of the pods of every node (`SharedPodSource`, with the fleet's --kubeconfig)
instead of one per node. With --kubeconfig, one list+watch of the Services and one of the RuntimeClasses for all the
nodes (`SharedInformers`, with the same client), instead of one of each per node; with only --bootstrap-kubeconfig
each node keeps its own (the fleet has no credential of its own until a node has bootstrapped one).

A node whose agent fails (a credential that may not register it, say) is logged and left down; the others go on.
The fleet ends when `stop` is set, or when every node has failed (`FleetError`). Stopped, the nodes have
`STOP_GRACE` seconds to end by themselves; those still running then are cancelled, and given as long again. A node
whose stop waits on an apiserver that does not answer (its requests under way time out after 30 s each) does not
hold the fleet: 250 nodes in the middle of a mass deletion did not stop within 90 s of SIGTERM (docs/fleet.md).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from cri.fake import Behaviour, StreamingServer
from nodeagent.agent import KubeletAPIRoute, PodSourceRunner, SharedInformers
from nodeagent.fleet import kubeletapi
from nodeagent.fleet.heartbeat import LeaseHeartbeats
from nodeagent.fleet.node import run_node
from nodeagent.fleet.plan import POD_WATCH_SHARED, FleetError, FleetOptions, plan_nodes, shared_config
from nodeagent.kube.client import KubeClient
from nodeagent.sources.apiserver import SharedPodSource

log = logging.getLogger(__name__)

# Seconds the nodes have to end once the fleet is stopped, before they are cancelled (and again after that).
STOP_GRACE = 20.0


@dataclass
class FleetResult:
    nodes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def _ended(task: asyncio.Task[None]) -> None:
    """A shared watch ends only when cancelled (the fleet stopping); else it is a bug, said here, not at the end."""
    if not task.cancelled():
        log.error("fleet shared watch ended name=%s error=%r", task.get_name(), task.exception())


async def run_fleet(
    options: FleetOptions, behaviour: Behaviour, stop: asyncio.Event, *, stop_grace: float = STOP_GRACE
) -> FleetResult:
    plans = plan_nodes(options)
    config = shared_config(options)
    result = FleetResult(nodes=[p.name for p in plans])
    log.info(
        "fleet starting nodes=%d first=%s last=%s stagger=%s pod_watch=%s informers=%s eviction=%s",
        len(plans),
        plans[0].name,
        plans[-1].name,
        options.stagger,
        options.pod_watch,
        "shared" if options.kubeconfig is not None else "per-node",
        "on" if options.eviction else "off",
    )
    route: KubeletAPIRoute | None = None
    http = None
    # Exec URLs of every node's fake runtime, on loopback; the kubelet API proxies to them.
    streaming: StreamingServer | None = None
    if options.kubelet_port:
        streaming = StreamingServer()
        await streaming.start()
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
    informers: SharedInformers | None = None
    # The fleet's own client (one connection pool for its watches), with its own credential: --kubeconfig.
    fleet_client: KubeClient | None = None
    watches: list[asyncio.Task[None]] = []
    if options.kubeconfig is not None:
        fleet_client = KubeClient.from_kubeconfig(options.kubeconfig, direct=True)
        informers = SharedInformers()
        watches.append(asyncio.create_task(informers.run(fleet_client), name="fleet-informers"))
        if options.pod_watch == POD_WATCH_SHARED:
            shared = SharedPodSource(p.name for p in plans)
            watches.append(asyncio.create_task(shared.run(fleet_client), name="fleet-pod-watch"))
            pod_source = shared.source
    for watch in watches:
        watch.add_done_callback(_ended)
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
                informers=informers,
                streaming=streaming,
            ),
            name=f"fleet-node-{plan.name}",
        ): plan.name
        for plan in plans
    }
    pending: set[asyncio.Task[Any]] = set(tasks)

    def settle(done: set[asyncio.Task[Any]]) -> None:
        for task in done:
            name = tasks[task]
            error = task.exception() if not task.cancelled() else None
            if error is not None:
                result.failed[name] = str(error)
                log.error("fleet node failed node=%s error=%s", name, error)
            elif not stop.is_set():
                result.failed[name] = "the agent ended before the fleet was stopped"
                log.error("fleet node ended node=%s", name)

    stopping = asyncio.create_task(stop.wait(), name="fleet-stop")
    try:
        while pending and not stop.is_set():
            done, _ = await asyncio.wait(pending | {stopping}, return_when=asyncio.FIRST_COMPLETED)
            done.discard(stopping)
            pending -= done
            settle(done)
            if len(result.failed) == len(plans):
                first = next(iter(result.failed.items()))
                raise FleetError(f"every node failed; {first[0]}: {first[1]}")
        if pending:
            done, pending = await asyncio.wait(pending, timeout=stop_grace)
            settle(done)
            if pending:
                log.warning(
                    "fleet stop grace passed grace=%s nodes_running=%d: cancelling them", stop_grace, len(pending)
                )
    finally:
        stop.set()
        stopping.cancel()
        for task in pending:
            task.cancel()
        if pending:
            _, left = await asyncio.wait(pending, timeout=stop_grace)
            if left:
                log.error("fleet nodes did not end when cancelled nodes=%d grace=%s", len(left), stop_grace)
        for watch in watches:
            watch.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        if fleet_client is not None:
            await fleet_client.aclose()
        # The nodes are down (each one's renewal cancelled with it): the thread ends and closes what is left.
        await asyncio.to_thread(heartbeats.stop)
        if http is not None:
            await http.close()
        if streaming is not None:
            await streaming.close()
    log.info("fleet stopped nodes=%d failed=%d", len(plans), len(result.failed))
    return result
