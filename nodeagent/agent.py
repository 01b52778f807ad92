"""`nodeagent run`: build the agent's parts from its config and run them as supervised tasks until stopped.

Order at start, as the kubelet: install the SIGINT/SIGTERM handlers, load the config (unknown fields warn, invalid
values stop with a clear error), connect to the runtime and wait for it, relist it once (so the node's first status
already knows the PLEG's health and the pod status cache is filled), register the node, then start the pod sources,
the PLEG (`pleg: generic | evented | auto`), the status managers, the lease, the syncLoop and the local endpoint.
Each start-up wait gives way to a stop signal (`nodeagent.startup`): an agent that cannot reach its runtime or
apiserver, or may not register its node, still exits at once, cleanly. Once running, on SIGINT/SIGTERM the tasks stop
in reverse order; pods keep running (a restarted agent adopts them).

The node reports the emulated Kubernetes release (`emulatedKubernetesVersion`, `nodeagent.version`) as its
kubeletVersion and in the probes' User-Agent; nodeagent's own version is in its `Starting` event and annotation.

With `standalone` there is no apiserver at all: no registration, no lease, no events, no mirror pods; the pods come
from the static sources only (staticPodPath, staticPodURL) and `nodeagent pods` reads them from the local endpoint.

`run_emulated_agent` runs the same start-up and parts for one emulated node of `nodeagent fleet`: an injected
runtime (`cri.fake`), given facts and config, and none of the host-level parts (`Emulation` lists them).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from cri.client import CRIClient, connect
from cri.errors import CRIError
from cri.instrumented import instrument
from cri.service import RuntimeServices
from csi.registration.handler import DRA_PLUGIN
from eviction.injection import InjectionError
from eviction.messages import REASON as EVICTED
from eviction.thresholds import ThresholdError
from nodeagent.admission import new_allowlist
from nodeagent.admission.sysctls import kernel_release
from nodeagent.allocation import AllocationManager, AllocationStateError
from nodeagent.certificate.bootstrap import BootstrapError, load_client_cert
from nodeagent.certificate.rotation import ClientCertificateManager, forced_rotation_seconds
from nodeagent.certificate.serving import ServingCertificateManager
from nodeagent.clock import SystemClock
from nodeagent.config import KubeletConfiguration, load_config
from nodeagent.config.kubelet_config import CgroupDriver
from nodeagent.config.quantity import parse_quantity
from nodeagent.devicemanager import DeviceManager, running_containers
from nodeagent.devicemanager import container_resources as device_container_resources
from nodeagent.dra import DRAError, DRAManager, DRAPluginManager, claim_reader, resource_slice_wiper
from nodeagent.dra import crioptions as dra_options
from nodeagent.events import EventRecorder, ObjectRef
from nodeagent.evictionmanager import (
    EvictionInputs,
    EvictionManager,
    configured_notifiers,
    disk_layout,
    eviction_config,
)
from nodeagent.experiment.injectionfile import InjectionFile
from nodeagent.gc import (
    ContainerGCManager,
    ImageGCManager,
    ImageGCMetrics,
    gc_periods,
    image_policy,
    pod_gc_state,
    summary_image_fs,
)
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import KubeconfigError, NotFound
from nodeagent.kube.metrics import RestClientMetrics
from nodeagent.kube.nodestore import NodeStore
from nodeagent.kube.servicestore import ServiceStore
from nodeagent.kubelet import Kubelet, Pod, PodEviction
from nodeagent.kuberuntime.cgroups import CgroupfsPodCgroups, PodCgroups
from nodeagent.kuberuntime.etc_hosts import selinux_enabled
from nodeagent.kuberuntime.logrotation import ContainerLogManager
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from nodeagent.kuberuntime.qos_cgroups import QOSCgroups
from nodeagent.kuberuntime.references import ObjectFetcher
from nodeagent.kuberuntime.runtime_handlers import RuntimeState
from nodeagent.kuberuntime.sandbox_config import DNSSettings, ResolvConf
from nodeagent.kuberuntime.systemd_cgroups import SystemdCgroupManager, SystemdPodCgroups
from nodeagent.kuberuntime.systemd_dbus import DBusSystemd
from nodeagent.localserver import LocalServer, running_pods
from nodeagent.nodeshutdown.logind import DBusLogind
from nodeagent.nodeshutdown.manager import (
    NODE_SHUTDOWN_MESSAGE,
    NODE_SHUTDOWN_REASON,
    NodeShutdownManager,
    ShutdownInputs,
    shutdown_periods,
)
from nodeagent.nodeshutdown.metrics import ShutdownMetrics
from nodeagent.nodestatus import NodeFacts, gather_node_facts
from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.nodestatus.node import build_node_status
from nodeagent.nodestatus.resources import allocatable as node_allocatable
from nodeagent.pluginmanager.manager import PluginManager
from nodeagent.podconfig import FAILED_VALIDATION, PodConfig
from nodeagent.podconfig.storage import SourceUpdate
from nodeagent.podresources import PodResourcesServer
from nodeagent.prober import Prober, ProberManager, ProberMetrics
from nodeagent.processsettings import apply_process_settings, cgroup_v1_problem, host_is_unified
from nodeagent.runtimeclass import RuntimeClassManager, UnresolvedRuntimeClasses
from nodeagent.server.host import AgentHost
from nodeagent.server.http import Handler, HTTPServer
from nodeagent.server.serve import build_auth, run_server, serving_files
from nodeagent.server.server import KubeletServer
from nodeagent.server.tls import server_context
from nodeagent.sources import file as file_source
from nodeagent.sources import url as url_source
from nodeagent.sources.apiserver import SOURCE as API_SOURCE
from nodeagent.sources.apiserver import run_apiserver_source
from nodeagent.sources.problems import ManifestProblem
from nodeagent.startup import RuntimeUnavailable, RuntimeVersion, StopRequested, until_stopped, wait_for_runtime
from nodeagent.staticpods import MirrorPods
from nodeagent.stats.provider import SharedHostReads, StatsProvider
from nodeagent.stats.volumemetrics import VolumeStatsCollector
from nodeagent.stats.volumes import PluginVolumeStats
from nodeagent.status.manager import StatusManager
from nodeagent.syncloop import SyncLoop, SyncLoopChannels
from nodeagent.tasks import Supervisor
from nodeagent.version import NODEAGENT_VERSION, probe_user_agent, version_text
from nodeagent.volume.csiutil import CSI_PLUGIN_NAME
from nodeagent.volume.mounter import DirectoryMounter
from nodeagent.volumemanager import VolumeManager, new_volume_manager
from pleg.cache import Cache
from pleg.events import PodLifecycleEvent
from pleg.generator import new_pleg
from pleg.health import CHANNEL_CAPACITY
from pleg.metrics import PLEGMetrics

log = logging.getLogger(__name__)

# The host-wide stats reads of this process's emulated nodes, read once for all of them (a real node has its own).
EMULATED_HOST_READS = SharedHostReads()


class AgentError(RuntimeError):
    """The agent cannot start: a bad config, no runtime, no apiserver credentials."""


@dataclass(frozen=True)
class AgentOptions:
    config_path: Path
    kubeconfig: Path | None
    node_name: str | None = None
    node_ip: str | None = None
    standalone: bool = False
    root_dir: Path = Path("/var/lib/kubelet")
    # Experiments only (hidden): a JSON file of injected eviction signals (nodeagent.experiment.injectionfile).
    eviction_signal_injection: Path | None = None
    # TLS bootstrap (nodeagent.certificate.bootstrap): when --kubeconfig is missing or its certificate expired, a
    # client certificate is requested with this kubeconfig's bootstrap token and --kubeconfig written.
    bootstrap_kubeconfig: Path | None = None
    cert_dir: Path | None = None  # None: <root-dir>/pki, as upstream's --cert-dir
    # The kubelet's --node-labels (set at registration) and the flags that override config fields (snake_case).
    node_labels: Mapping[str, str] = field(default_factory=dict)
    config_overrides: Mapping[str, Any] = field(default_factory=dict)


# Renews node_name's Lease with the credential in kubeconfig, reading the Node's UID through the callable (from
# another thread, maybe), until cancelled: a fleet's heartbeat thread (`nodeagent.fleet.heartbeat`).
LeaseRenewer = Callable[[str, Path, Callable[[], str]], Coroutine[Any, Any, None]]

# Serves a node's kubelet API on a listener shared with other nodes: given the node's address and its server's
# handler, routes that address's requests to it; the returned callable stops the routing (`nodeagent.fleet`).
KubeletAPIRoute = Callable[[str, Handler], Callable[[], None]]

# A node's apiserver pod source provided by the fleet (its shared pod watch): given the node's name and its
# PodConfig's push, runs until cancelled (`nodeagent.sources.apiserver.SharedPodSource.source`).
PodSourceRunner = Callable[[str, Callable[[SourceUpdate], None]], Coroutine[Any, Any, None]]


@dataclass
class SharedInformers:
    """The cluster-wide caches a node reads but does not own: every Service (the containers' Service environment
    variables) and every RuntimeClass (the sandboxes' handlers). A real agent keeps its own (one list+watch each); a
    fleet keeps one of each for all its nodes (`Emulation.informers`), run once by `run` with the fleet's client, so
    1,000 nodes hold one Service watch and one RuntimeClass watch, not 1,000 of each. The nodes read the same
    objects, so each one's gate holds as before: its containers wait until `services.synced`."""

    services: ServiceStore = field(default_factory=ServiceStore)
    runtime_classes: RuntimeClassManager = field(default_factory=RuntimeClassManager)

    async def run(self, client: KubeClient) -> None:
        """List and watch both until cancelled."""
        log.info("shared informers starting resources=services,runtimeclasses")
        async with asyncio.TaskGroup() as group:
            group.create_task(self.services.run(client), name="shared-service-informer")
            group.create_task(self.runtime_classes.run(client), name="shared-runtimeclass-informer")


@dataclass(frozen=True)
class Emulation:
    """What an emulated node (`nodeagent.fleet`) puts in place of the host, for `run_emulated_agent`.

    The agent's own logic runs unchanged (registration, lease, node status, admission, the syncLoop, pod workers, the
    status manager, the PLEG, garbage collection and, with `eviction`, the eviction cycle) over `runtime` (an in-process
    fake) with `facts` for a node status and `config` instead of a config file. The parts that belong to the host are
    left out: the signal handlers (`stop` ends the node), the cgroup driver and SELinux checks, device plugins and the
    PodResources server (gRPC servers on sockets), CSI plugin registration, pod and QoS cgroups, the memory threshold
    notifiers and container log rotation; volumes are plain directories (no tmpfs mounts) and pod log directories are
    under the node's root dir. The healthz and read-only servers follow `config` (the fleet turns them off). The kubelet
    API (authenticated and authorized as for a real node, with the node's own credential for the webhooks) is served
    through `kubelet_api` on the fleet's shared listener, when `config` enables it; the node opens no port of its own.
    With `lease_renewer` the node's Lease is renewed by it (on the fleet's own thread and client) instead of beside the
    node status in this loop. With `pod_source` the node's apiserver pod source is the fleet's shared pod watch instead
    of a list+watch of its own. With `informers` the node reads the fleet's Services and RuntimeClasses
    (`SharedInformers`, run by the fleet) instead of a list+watch of each of its own."""

    runtime: RuntimeServices
    facts: NodeFacts
    config: KubeletConfiguration
    stop: asyncio.Event
    lease_renewer: LeaseRenewer | None = None
    kubelet_api: KubeletAPIRoute | None = None
    pod_source: PodSourceRunner | None = None
    informers: SharedInformers | None = None
    # The eviction manager's cycle (`nodeagent fleet --eviction`). Off by default: an emulated node's only
    # thresholds are local-storage limits against the fake's usage (the host's memory and disk are not the
    # node's), and a cycle over every pod every 10 s was a third of the CPU of a node with 25 pods (py-spy,
    # 2026-11-30). Off, the node's pressure conditions stay False and admission is the same.
    eviction: bool = False
    # Requests the node's client sends at once, watches apart (`KubeClient(max_requests=)`; None: no bound).
    max_requests: int | None = None


def read_resolv_conf(path: str) -> ResolvConf:
    if not path:
        return ResolvConf()
    try:
        text = Path(path).read_text()
    except OSError:
        return ResolvConf()
    nameservers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) > 1:
            nameservers.append(fields[1])
        elif fields[0] == "search":
            searches = fields[1:]
        elif fields[0] == "options":
            options.extend(fields[1:])
    return ResolvConf(tuple(nameservers), tuple(searches), tuple(options))


def _object_fetcher(client: KubeClient | None) -> ObjectFetcher | None:
    """ConfigMaps and Secrets through the node's credential (the Node authorizer allows those its pods use)."""
    if client is None:
        return None
    api = client

    async def fetch(resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await api.get(paths.api_path(resource, namespace=namespace, name=name))
        except NotFound:
            return None

    return fetch


def _stored_status(pod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A pod's status as the pod config keeps it (the apiserver's, as the sources last saw it), not copied."""
    status = pod.get("status") if pod is not None else None
    return status if isinstance(status, Mapping) else None


async def _runtime_health(cri: RuntimeServices, runtime_state: RuntimeState) -> tuple[bool, str]:
    try:
        status = await cri.runtime.status(timeout=10)
    except CRIError as exc:
        return False, f"container runtime is down: {exc.message}"
    # As upstream's updateRuntimeUp: the same Status call refreshes the handlers and features the runtime reports.
    runtime_state.update(status)
    problems = [
        f"{c.type}=false reason:{c.reason} message:{c.message}" for c in status.status.conditions if not c.status
    ]
    if problems:
        return False, "container runtime status check may not have completed yet: " + ", ".join(problems)
    return True, ""


def _stop_on_signals(stop: asyncio.Event) -> None:
    """SIGINT and SIGTERM set `stop`, from the first moment of the agent's life (start-up waits race it)."""
    loop = asyncio.get_running_loop()

    def requested(sig: signal.Signals) -> None:
        log.info("stop signal received signal=%s", sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, requested, sig)


def systemd_booted(run_dir: Path = Path("/run/systemd/system")) -> bool:
    """Whether systemd is the init system (PID 1), as sd_booted and libcontainer's IsRunningSystemd tell it."""
    return run_dir.is_dir()


def cgroup_driver_problem(config: KubeletConfiguration, *, systemd: bool, unified: bool = True) -> str | None:
    """Why the agent cannot run with this cgroupDriver, or None. Refused rather than read and ignored: a runtime set
    up for systemd slices would disagree with pod cgroups made as cgroupfs directories. Off systemd, as upstream
    refuses it ("systemd cgroup flag passed, but systemd support for managing cgroups is not available"). On systemd
    with cgroup v1 (legacy or hybrid) because nodeagent's systemd driver (kuberuntime/systemd_cgroups.py) speaks the
    unified hierarchy only: v1's unit properties and per-controller paths are not written."""
    if config.cgroup_driver != CgroupDriver.SYSTEMD:
        return None
    fallback = "set cgroupDriver: cgroupfs (and the runtime to match: containerd's runc option SystemdCgroup = false)"
    if not systemd:
        return (
            'cgroupDriver: "systemd" needs systemd as the init system (PID 1), and this host has none '
            f"(/run/systemd/system is missing): {fallback}"
        )
    if not unified:
        return (
            'cgroupDriver: "systemd" is supported on the unified cgroup v2 hierarchy only, and this host mounts '
            f"cgroup v1 at /sys/fs/cgroup (boot with systemd.unified_cgroup_hierarchy=1), or {fallback}"
        )
    return None


def selinux_problem(enabled: bool) -> str | None:
    """Why the agent cannot run on this host's SELinux, or None. Refused rather than run half-way: on a host with
    SELinux on, upstream labels pod volumes (the runtime relabels them, or they are mounted with `-o context` per the
    pod's seLinuxChangePolicy); nodeagent does neither, so every pod's volumes would carry the wrong label and the
    pod's seLinuxChangePolicy would be ignored. Without SELinux (this project's hosts) the field has no effect, on
    upstream as here."""
    if enabled:
        return (
            "SELinux is enabled on this host and nodeagent does not label pod volumes for it "
            "(no relabelling, no seLinuxChangePolicy mount option): run nodeagent on a host with SELinux disabled"
        )
    return None


# How long an agent with static pods waits for its Node before it starts the pods anyway.
STATIC_POD_REGISTRATION_WAIT = 5.0


def registration_wait(static_pod_path: str | None) -> float | None:
    """How long the Node's registration may hold back the pod sources (None: until it succeeds). Upstream registers
    from syncNodeStatus, beside the pod workers, so static pods run while the apiserver is away: on a kubeadm
    control plane the apiserver IS one of this node's static pods, and waiting for it would wait for ever. Without
    static pods nothing can run before the apiserver answers, and registering first gives the first pods the Node's
    allocatable (as it does with static pods when the apiserver answers within the bound)."""
    return STATIC_POD_REGISTRATION_WAIT if static_pod_path else None


async def _bounded(work: Coroutine[Any, Any, None], seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(work, seconds)


async def run_agent(options: AgentOptions) -> None:
    """Run the agent until a stop signal; returns normally when stopped (also during start-up)."""
    stop = asyncio.Event()
    _stop_on_signals(stop)
    try:
        await _start(options, stop)
    except StopRequested as stopped:
        log.info("agent stopped during start-up stage=%s", stopped.stage)


async def run_emulated_agent(options: AgentOptions, emulation: Emulation) -> None:
    """Run one emulated node until `emulation.stop` is set; returns normally when stopped (also during start-up)."""
    try:
        await _start(options, emulation.stop, emulation)
    except StopRequested as stopped:
        log.info("agent stopped during start-up node=%s stage=%s", options.node_name, stopped.stage)


async def _start(options: AgentOptions, stop: asyncio.Event, emulation: Emulation | None = None) -> None:
    if emulation is None:
        loaded = load_config(options.config_path)
        for warning in loaded.warnings:
            log.warning("config warning path=%s %s", options.config_path, warning)
        config: KubeletConfiguration = loaded.config
    else:
        config = emulation.config
    if options.config_overrides:
        # The kubelet's flags that are config fields too (--container-runtime-endpoint, --register-with-taints):
        # as upstream, the flag wins over the file.
        config = replace(config, **options.config_overrides)
    node_name = (options.node_name or socket.gethostname()).lower()
    problem = (
        None
        if emulation is not None
        else cgroup_driver_problem(config, systemd=systemd_booted(), unified=host_is_unified())
        or selinux_problem(selinux_enabled())
        or cgroup_v1_problem(config, unified=host_is_unified())
    )
    if problem is not None:
        raise AgentError(problem)
    apply_process_settings(config)  # maxOpenFiles, oomScoreAdj; a refusal is logged, as upstream
    if not options.standalone and options.kubeconfig is None:
        raise AgentError("--kubeconfig is required (or --standalone for static pods only)")
    if options.standalone and options.kubeconfig is not None:
        raise AgentError("--standalone runs without an apiserver: drop --kubeconfig")
    cert_dir = options.cert_dir if options.cert_dir is not None else options.root_dir / "pki"
    if options.kubeconfig is not None and options.bootstrap_kubeconfig is not None:
        # As upstream's run(): the client credential is settled first, before the runtime or anything else.
        try:
            await until_stopped(
                stop,
                "bootstrapping the client certificate",
                load_client_cert(options.kubeconfig, options.bootstrap_kubeconfig, cert_dir, node_name),
            )
        except BootstrapError as exc:
            raise AgentError(f"failed to run Kubelet: {exc}") from exc
    clock = SystemClock()
    try:
        # As upstream: the thresholds are parsed before anything starts; a bad one stops the agent.
        eviction = EvictionManager(eviction_config(config), clock=clock)
    except ThresholdError as exc:
        raise AgentError(str(exc)) from exc
    if options.eviction_signal_injection is not None:
        try:
            eviction.injector = InjectionFile(options.eviction_signal_injection)
        except InjectionError as exc:
            raise AgentError(f"--eviction-signal-injection: {exc}") from exc
    supervisor = Supervisor()
    kubelet_version = config.emulated_kubernetes_version

    async with (
        connect(
            config.container_runtime_endpoint,
            image_endpoint=config.image_service_endpoint or None,
            timeout=config.runtime_request_timeout.total_seconds(),
        )
        if emulation is None
        else contextlib.nullcontext(emulation.runtime)
    ) as cri:
        try:
            runtime_version = await until_stopped(
                stop,
                "waiting for the container runtime",
                wait_for_runtime(
                    cri.runtime,
                    config.container_runtime_endpoint,
                    budget=config.runtime_request_timeout.total_seconds(),
                    clock=clock,
                ),
            )
        except RuntimeUnavailable as exc:
            raise AgentError(str(exc)) from exc
        facts = (
            await until_stopped(
                stop,
                "reading the node's facts",
                asyncio.to_thread(
                    gather_node_facts,
                    container_runtime_version=str(runtime_version),
                    kubelet_version=kubelet_version,
                    hostname=node_name,
                    internal_ip=options.node_ip,
                    daemon_port=config.port,
                ),
            )
            if emulation is None
            else emulation.facts
        )
        log.info(
            "agent starting node=%s runtime=%s kubelet_version=%s nodeagent_version=%s",
            node_name,
            runtime_version,
            kubelet_version,
            NODEAGENT_VERSION,
        )
        try:
            # An emulated node's client also keeps a direct connection (`KubeClient(direct=True)`) for its Node GET and
            # status PATCH every 10 s (docs/fleet.md); a single agent sends everything through httpx.
            client = (
                None
                if options.standalone
                else KubeClient.from_kubeconfig(
                    options.kubeconfig,  # type: ignore[arg-type]
                    direct=emulation is not None,
                    max_requests=emulation.max_requests if emulation is not None else None,
                )
            )
        except KubeconfigError as exc:
            raise AgentError(f"the kubeconfig {options.kubeconfig} cannot be used: {exc}") from exc
        try:
            if client is not None and config.rotate_certificates:
                # The client certificate renewed before it expires, loaded into the client without a restart.
                rotation = ClientCertificateManager(
                    client,
                    cert_dir,
                    node_name,
                    bootstrap_kubeconfig=options.bootstrap_kubeconfig,
                    forced_after=forced_rotation_seconds(),
                )
                rotation.load_current()
                supervisor.start("client-certificate", rotation.run())
            # Servers _run starts (device plugins, PodResources) are closed however it ends: a stop during start-up
            # (registration is retried for ever) or a start-up error must not leave a gRPC server to the garbage
            # collector once the loop is closed.
            async with contextlib.AsyncExitStack() as started:
                await _run(
                    options,
                    config=config,
                    node_name=node_name,
                    facts=facts,
                    runtime_version=runtime_version,
                    cri=cri,
                    client=client,
                    supervisor=supervisor,
                    stop=stop,
                    clock=clock,
                    eviction=eviction,
                    started=started,
                    host=emulation is None,
                    lease_renewer=emulation.lease_renewer if emulation is not None else None,
                    kubelet_api=emulation.kubelet_api if emulation is not None else None,
                    pod_source=emulation.pod_source if emulation is not None else None,
                    informers=emulation.informers if emulation is not None else None,
                    eviction_cycle=emulation is None or emulation.eviction,
                )
        finally:
            await supervisor.stop()
            if client is not None:
                await client.aclose()


async def _routed_kubelet_api(route: KubeletAPIRoute, address: str, api: KubeletServer) -> None:
    """An emulated node's kubelet API: its requests routed to `api` from the fleet's listener until cancelled."""
    unroute = route(address, api.handle)
    log.info("kubelet api routed address=%s", address)
    try:
        await asyncio.Event().wait()
    finally:
        unroute()
        log.info("kubelet api unrouted address=%s active_streams=%d", address, api.active_streams)


async def _run(
    options: AgentOptions,
    *,
    config: KubeletConfiguration,
    node_name: str,
    facts: NodeFacts,
    runtime_version: RuntimeVersion,
    cri: RuntimeServices,
    client: KubeClient | None,
    supervisor: Supervisor,
    stop: asyncio.Event,
    clock: SystemClock,
    eviction: EvictionManager,
    started: contextlib.AsyncExitStack,
    host: bool = True,
    lease_renewer: LeaseRenewer | None = None,
    kubelet_api: KubeletAPIRoute | None = None,
    pod_source: PodSourceRunner | None = None,
    informers: SharedInformers | None = None,
    eviction_cycle: bool = True,
) -> None:
    """`host`: False for an emulated node (`Emulation`), which runs none of the host-level parts. `lease_renewer`:
    the Lease is renewed by it rather than by the node status manager (`Emulation.lease_renewer`). `pod_source`:
    the apiserver pod source is it rather than a list+watch of this node's own (`Emulation.pod_source`).
    `informers`: the Services and RuntimeClasses are read from them, run by their owner, rather than from a
    list+watch of this node's own (`Emulation.informers`). `eviction_cycle`: False runs no eviction cycle
    (`Emulation.eviction`)."""
    recorder = EventRecorder(client, node_name) if client is not None else None

    def pod_event(
        pod: Pod,
        type_: str,
        reason: str,
        message: str,
        field_path: str = "",
        *,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        if recorder is not None:
            ref = ObjectRef.for_pod(pod, field_path)
            recorder.record(ref, type_, reason, message, annotations)  # type: ignore[arg-type]

    def node_event(type_: str, reason: str, message: str) -> None:
        if recorder is not None:
            recorder.record(ObjectRef.for_node(node_name), type_, reason, message)  # type: ignore[arg-type]

    def manifest_problem(problem: ManifestProblem) -> None:
        # No pod to attach it to: the event goes on the Node (upstream only logs "Could not process manifest file").
        log.warning("static pod manifest ignored origin=%s error=%s", problem.origin, problem.message)
        node_event("Warning", FAILED_VALIDATION, str(problem))

    def invalid_pod(pod: Pod, message: str) -> None:
        meta = pod.get("metadata") or {}
        log.warning("pod ignored pod=%s/%s error=%s", meta.get("namespace"), meta.get("name"), message)
        pod_event(pod, "Warning", FAILED_VALIDATION, message)

    # What /metrics serves (the PLEG's and the runtime's series); the prober keeps its own for /metrics/probes.
    metrics_registry = CollectorRegistry()
    # Every CRI call the agent makes is counted and timed under upstream's names (kubelet_runtime_operations_*).
    runtime_service, image_service = instrument(cri.runtime, cri.image, metrics_registry)
    if client is not None:
        client.metrics = RestClientMetrics(metrics_registry)
    # The process and Python runtime series every Go component's registry has (process_*, python_gc_*, python_info).
    ProcessCollector(registry=metrics_registry)
    PlatformCollector(registry=metrics_registry)
    GCCollector(registry=metrics_registry)
    eviction.metrics.serve_on(metrics_registry)
    pod_cache = Cache()
    pleg = new_pleg(
        config.pleg.value,
        runtime_service,
        asyncio.Queue[PodLifecycleEvent](maxsize=CHANNEL_CAPACITY),
        pod_cache,
        clock=clock,
        metrics=PLEGMetrics(metrics_registry),
        relist_threshold=config.pleg_relist_threshold.total_seconds(),
    )
    await until_stopped(stop, "relisting the container runtime", pleg.relist())
    log.info("pleg started mode=%s type=%s", config.pleg.value, type(pleg).__name__)

    # The runtime's handlers (recursive read-only mounts) from a first Status now, before any pod syncs; the node
    # status loop's health check refreshes them.
    runtime_state = RuntimeState()
    await until_stopped(stop, "reading the runtime's status", _runtime_health(cri, runtime_state))
    eviction.use_disk_layout(await disk_layout(cri.image.image_fs_info, str(options.root_dir)))
    # Device plugins (upstream's container manager starts it before the node registers): its pods and sources are
    # the kubelet's, bound once they exist; the containers running now keep their devices until the sources are
    # read (a restart before their plugins are back).
    late: dict[str, Callable[..., Any]] = {}
    device_manager = DeviceManager(
        str(options.root_dir),
        active_pods=lambda: late["active_pods"]() if "active_pods" in late else [],
        sources_ready=lambda: bool(late["sources_ready"]()) if "sources_ready" in late else False,
        monotonic=clock.monotonic,
    )
    if host:
        await device_manager.start(running_containers(pod_cache.get_all()))
        started.push_async_callback(device_manager.stop)
    # Graceful node shutdown (upstream's node shutdown manager), only when a period is configured: a systemd-logind
    # delay lock, and the pods stopped by priority when logind announces a shutdown. The default makes none.
    periods = shutdown_periods(config)
    shutdown = (
        NodeShutdownManager(
            periods,
            DBusLogind,
            clock,
            record_node_event=node_event,
            state_dir=options.root_dir,
            metrics=ShutdownMetrics(metrics_registry),
        )
        if periods and host
        else None
    )
    node_status = None
    volume_managers: list[VolumeManager] = []
    # CSI drivers (and DRA drivers' kubelet plugins, whose handler is added below) register through
    # <rootDir>/plugins_registry (upstream's plugin manager); its registry is what the kubernetes.io/csi volume
    # plugin dials. Its CSINode is made from now on, beside the registration, as upstream's CSI plugin Init: until
    # it exists the node is NotReady, "CSINode is not yet initialized", the Node it creates included. Without an
    # apiserver there is no CSINode to write, so no registration.
    plugin_manager = PluginManager(str(options.root_dir), client, node_name) if client is not None and host else None
    if plugin_manager is not None:
        supervisor.start("csinode-init", plugin_manager.ensure_csinode(), finite=True)
    if client is not None:
        node_status = NodeStatusManager(
            client,
            node_name=node_name,
            config=config,
            facts=facts,
            runtime_health=lambda: _runtime_health(cri, runtime_state),
            clock=clock,
            record_event=node_event,
            pleg_health=pleg.healthy,
            runtime_handlers=runtime_state.handlers,
            node_features=runtime_state.features,
            pressure=eviction.pressure_conditions,
            # The volume manager is made after the node is registered: until then, nothing is in use.
            volumes_in_use=lambda: volume_managers[0].volumes_in_use() if volume_managers else (),
            node_labels=options.node_labels,
            device_capacity=lambda: device_manager.get_capacity()[:2],
            shutdown_status=shutdown.shutdown_status if shutdown is not None else lambda: None,
            storage_status=plugin_manager.storage.error if plugin_manager is not None else lambda: None,
            renew_lease=lease_renewer is None,
        )
        wait = registration_wait(config.static_pod_path)
        # Retried for ever, as upstream (an unreachable apiserver, a credential that may not register this name);
        # with static pods only for a while, then the node status loop goes on registering beside the pods.
        registration = node_status.register() if wait is None else _bounded(node_status.register(), wait)
        await until_stopped(stop, "registering the node", registration)

    node_obj = node_status.node() if node_status is not None else None
    # A restart under pressure keeps the Node's pressure conditions until the eviction manager observes again.
    eviction.restore_conditions(node_obj, clock.wall())
    # Capacity and allocatable computed here, as upstream does from its machine info, not read back from the Node:
    # with static pods the Node may not be registered yet (a kubeadm control plane's apiserver is one of them), and
    # a standalone agent has none; they are what the node status reports.
    local_status = build_node_status(facts, config, ())
    capacity = dict(local_status["capacity"])
    allocatable = dict(local_status["allocatable"])
    # Service environment variables need the cluster's Services; without an apiserver there are none (upstream: no
    # service lister, no variables). A fleet's nodes share one store (`SharedInformers`).
    own_informers = client is not None and informers is None
    services = (informers.services if informers is not None else ServiceStore()) if client is not None else None
    # The node's own Node by list and watch, for admission (node labels for NodeAffinity) and the mirror pods'
    # owner; before its first list, the status manager's copy (upstream: the node lister).
    node_store = NodeStore(node_name, node_status.node) if client is not None and node_status is not None else None
    node_view = node_store.node if node_store is not None else (node_status.node if node_status is not None else None)
    # The pods' RuntimeClasses, by list and watch; without an apiserver every pod gets the default handler (as
    # upstream, which has no RuntimeClass manager then), logged for a pod that names one.
    runtime_classes = (
        (informers.runtime_classes if informers is not None else RuntimeClassManager()) if client is not None else None
    )
    # DRA (upstream's DRA manager in the container manager): drivers' kubelet plugins register through the same
    # watcher (type DRAPlugin); their claim cache is checkpointed in the root dir. Without an apiserver no claim can
    # be read, so a pod with claims waits with FailedPrepareDynamicResources.
    try:
        dra_manager = DRAManager(
            claim_reader(client) if client is not None else None,
            str(options.root_dir),
            DRAPluginManager(resource_slice_wiper(client, node_name) if client is not None else None),
            active_pods=lambda: late["active_pods"]() if "active_pods" in late else [],
            sources_ready=lambda: bool(late["sources_ready"]()) if "sources_ready" in late else False,
            could_have_running_containers=lambda uid: (
                bool(late["could_have_running_containers"](uid)) if "could_have_running_containers" in late else True
            ),
        )
    except DRAError as exc:
        raise AgentError(str(exc)) from exc
    if plugin_manager is not None:
        plugin_manager.add_handler(DRA_PLUGIN, dra_manager.plugins)
    volumes = new_volume_manager(
        str(options.root_dir),
        client=client,
        get_object=_object_fetcher(client),
        node_allocatable=allocatable,
        memory_capacity=facts.memory_bytes,
        clock=clock,
        events=lambda pod, type_, reason, message: pod_event(dict(pod), type_, reason, message),
        node_name=node_name,
        csi_drivers=plugin_manager.registry if plugin_manager is not None else None,
        mounter=None if host else DirectoryMounter(),
    )
    volume_managers.append(volumes)
    await volumes.start()  # the actual state from disk and the mount table, before any pod syncs
    try:
        # In-place resize's allocated and actuated resources, checkpointed in the root dir (upstream's allocation
        # manager); checked against allocatable before eviction thresholds (GetNodeAllocatableAbsolute).
        allocation = AllocationManager(
            str(options.root_dir),
            node_allocatable(capacity, config.system_reserved, config.kube_reserved, {}),
            wall=clock.wall,
            monotonic=clock.monotonic,
            record_event=lambda pod, type_, reason, message: pod_event(dict(pod), type_, reason, message, ""),
        )
    except AllocationStateError as exc:
        raise AgentError(str(exc)) from exc
    # The QoS tiers are sized from the active pods, which the Kubelet (made below, before any sync) knows: the
    # lambda binds it late. Without cgroupsPerQOS upstream has no tiers.
    # cgroupDriver: systemd (accepted at start only with systemd as PID 1 on cgroup v2): the kubepods slices and the
    # pod slices are made through systemd over D-Bus, as libcontainer's systemd manager makes them for upstream.
    systemd_cgroups = SystemdCgroupManager(DBusSystemd()) if config.cgroup_driver == CgroupDriver.SYSTEMD else None
    pod_cgroups: PodCgroups = (
        SystemdPodCgroups(systemd_cgroups, pod_pids_limit=config.pod_pids_limit)
        if systemd_cgroups is not None
        else CgroupfsPodCgroups(pod_pids_limit=config.pod_pids_limit)
    )
    log.info("cgroup driver driver=%s", config.cgroup_driver.value)
    qos_cgroups = (
        QOSCgroups(
            lambda: kubelet.active_pod_views(),  # noqa: PLW0108
            cgroup_root=config.cgroup_root,
            systemd=systemd_cgroups,
        )
        if config.cgroups_per_qos and host
        else None
    )
    # An emulated node's pod log directories are its own, not the host's: its fake runtime writes the containers'
    # log files there (cri/fake/logs.py), and the kubelet API's containerLogs reads them.
    pod_log_dir_root = config.pod_logs_dir if host else str(options.root_dir / "pod-logs")
    runtime = RuntimeManager(
        runtime_service,
        image_service,
        NodeContext(
            node_name=node_name,
            host_ip=facts.internal_ip,
            cgroup_root=config.cgroup_root,
            cgroup_driver=config.cgroup_driver.value,
            dns=DNSSettings(
                cluster_dns=tuple(config.cluster_dns),
                cluster_domain=config.cluster_domain or "cluster.local",
                host=read_resolv_conf(config.resolv_conf),
            ),
            memory_capacity=facts.memory_bytes,
            node_allocatable=allocatable,
            node_hostname=facts.hostname,
            root_dir=str(options.root_dir),
            pod_log_dir_root=pod_log_dir_root,
        ),
        events=pod_event,
        node_events=node_event,
        fetch_object=_object_fetcher(client),
        container_mounts=volumes.container_mounts,
        container_devices=volumes.container_devices,
        container_resources=dra_options.chain(
            [device_container_resources(device_manager), dra_options.container_resources(dra_manager)]
        ),
        prepare_resources=dra_options.prepare_resources(dra_manager),
        services=services,
        runtime_handlers=runtime_state.handlers,
        runtime_classes=runtime_classes if runtime_classes is not None else UnresolvedRuntimeClasses(),
        resources=allocation,
        pod_cgroups=pod_cgroups if host else None,
        qos_cgroups=qos_cgroups,
        # containerd's own task API, when the runtime is containerd over gRPC (not an emulated node's fake).
        task_deleter=(
            cri.containerd_tasks.end if isinstance(cri, CRIClient) and runtime_version.name == "containerd" else None
        ),
    )
    sources = [API_SOURCE] if client is not None else []
    if config.static_pod_path:
        sources.append(file_source.SOURCE)
    if config.static_pod_url:
        sources.append(url_source.SOURCE)
    pod_config = PodConfig(sources, now=lambda: datetime.datetime.now(datetime.UTC).isoformat(), on_invalid=invalid_pod)
    mirror_pods = None
    if client is not None:
        mirror_pods = MirrorPods(
            client,
            node_name=node_name,
            pods_by_full_name=pod_config.pods_by_full_name,
            pod_by_uid=pod_config.pod_view,
            node=node_view if node_view is not None else lambda: None,
        )
    status_manager = StatusManager(
        client,
        clock=clock,
        pod_api_uid=mirror_pods.api_uid if mirror_pods is not None else None,
        pod_api_status=lambda uid: _stored_status(pod_config.pod_view(uid)),
    )
    try:
        # The safe sysctls of this kernel plus allowedUnsafeSysctls (which config validation has checked).
        sysctls = new_allowlist(config.allowed_unsafe_sysctls, kernel=kernel_release(os.uname().release))
    except ValueError as exc:
        raise AgentError(f"allowedUnsafeSysctls: {exc}") from exc
    channels = SyncLoopChannels(pod_config.updates, pleg.watch(), asyncio.Queue(maxsize=1000))
    prober = Prober(runtime_service, events=pod_event, user_agent=probe_user_agent(config.emulated_kubernetes_version))
    prober_metrics = ProberMetrics()
    probes = ProberManager(prober, status=status_manager, updates=channels.probes, metrics=prober_metrics, clock=clock)
    kubelet = Kubelet(
        node_name=node_name,
        pod_config=pod_config,
        runtime=runtime,
        status_manager=status_manager,
        node=node_view if node_view is not None else lambda: None,
        pod_cache=pod_cache,
        client=client,
        host_ips=(facts.internal_ip,),
        runtime_type=runtime_version.name,
        record_event=pod_event,
        request_relist=pleg.request_relist,
        request_reinspect=pleg.request_reinspect,
        allocation=allocation,
        sync_frequency=config.sync_frequency.total_seconds(),
        prober=probes,
        mirror_pods=mirror_pods,
        sysctls=sysctls,
        volumes=volumes,
        supports_recursive_read_only=runtime.supports_recursive_read_only,
        eviction_admit=lambda pod: (
            None if (refused := eviction.admit(pod)) is None else (refused.reason, refused.message)
        ),
        device_admit=device_manager.admit,
        shutdown_admit=shutdown.admit if shutdown is not None else lambda pod: None,
        node_for_admission=device_manager.sanitize_node,
        unprepare_resources=dra_manager.unprepare_resources,
    )
    late["active_pods"] = kubelet.active_pod_views  # the device and DRA managers read only the UIDs
    late["could_have_running_containers"] = kubelet.workers.could_have_running_containers
    # The PodResources API v1 for node agents (device monitors), on <root-dir>/pod-resources/kubelet.sock.
    pod_resources = PodResourcesServer(
        str(options.root_dir),
        device_manager,
        active_pods=kubelet.active_pods,
        all_pods=pod_config.pods,
        dra=dra_manager,
    )
    if host:
        await pod_resources.start()
        started.push_async_callback(pod_resources.stop)
    # As upstream's PodDeletionSafetyProvider: a terminal phase is sent once the pod's worker stopped everything.
    status_manager.could_have_running_containers = kubelet.workers.could_have_running_containers
    # A CSI volume's stats come from its driver (NodeGetVolumeStats), through the kubernetes.io/csi plugin.
    csi_plugin = volumes.plugin(CSI_PLUGIN_NAME)
    # The summary provider that /stats/summary serves and the eviction manager observes through.
    stats = StatsProvider(
        runtime_service,
        image_service,
        node_name=node_name,
        root_dir=str(options.root_dir),
        cgroup_root=config.cgroup_root,
        cgroup_driver=config.cgroup_driver.value,
        plugin_volumes=csi_plugin if isinstance(csi_plugin, PluginVolumeStats) else None,
        pod_spec=pod_config.pod_view,
        volume_health=config.feature_gates.get("CSIVolumeHealth", False),
        pod_log_dir_root=pod_log_dir_root,
        shared_host_reads=None if host else EMULATED_HOST_READS,
    )
    metrics_registry.register(VolumeStatsCollector(stats.latest_volume_stats))
    sync_loop = SyncLoop(
        channels,
        kubelet,
        pod_by_uid=pod_config.pod_by_uid,
        pods_due=kubelet.pods_due,
        sources_ready=pod_config.sources_ready,
        clock=clock,
    )
    # As upstream's sourcesReady: a source counts once its first update has been handled, not merely received.
    late["sources_ready"] = lambda: set(sources) <= sync_loop.handled_sources
    if recorder is not None:
        supervisor.start("events", recorder.run())
        # Upstream's words first (tools match them), then which agent and which release it emulates.
        node_event("Normal", "Starting", f"Starting kubelet. {version_text(config.emulated_kubernetes_version)}")
    if node_status is not None:
        supervisor.start("node-status", node_status.run())
        if lease_renewer is not None and options.kubeconfig is not None:
            supervisor.start("node-lease", lease_renewer(node_name, options.kubeconfig, node_status.node_uid))
    supervisor.start("status-manager", status_manager.run())
    if client is not None:
        if pod_source is not None:
            supervisor.start("source-api", pod_source(node_name, pod_config.push))
        else:
            supervisor.start("source-api", run_apiserver_source(client, node_name, pod_config.push))
    if config.static_pod_path:
        files = file_source.FileSource(
            config.static_pod_path,
            node_name=node_name,
            push=pod_config.push,
            check_frequency=config.file_check_frequency.total_seconds(),
            on_problem=manifest_problem,
            clock=clock,
        )
        supervisor.start("source-file", files.run())
    if config.static_pod_url:
        url = url_source.URLSource(
            config.static_pod_url,
            node_name=node_name,
            push=pod_config.push,
            check_frequency=config.http_check_frequency.total_seconds(),
            on_problem=manifest_problem,
            headers=config.static_pod_url_header,
            clock=clock,
        )
        supervisor.start("source-url", url.run())
    if options.standalone and not sources:
        log.warning("standalone mode without staticPodPath or staticPodURL: no pod will ever run")
    if own_informers and services is not None and client is not None:
        supervisor.start("service-informer", services.run(client))
    if own_informers and runtime_classes is not None and client is not None:
        supervisor.start("runtimeclass-informer", runtime_classes.run(client))
    if node_store is not None and client is not None:
        supervisor.start("node-informer", node_store.run(client))
    supervisor.start("pleg", pleg.run())
    if qos_cgroups is not None:
        supervisor.start("qos-cgroups", qos_cgroups.run())
    supervisor.start("volume-manager", volumes.run())
    if plugin_manager is not None:
        supervisor.start("plugin-manager", plugin_manager.run())
    supervisor.start("dra-manager", dra_manager.run())
    supervisor.start("sync-loop", sync_loop.run())
    # Node-level garbage collection (upstream's StartGarbageCollection): unused images every 5 min, dead containers
    # and sandboxes every minute, and both on the eviction manager's demand under disk pressure.
    image_gc = ImageGCManager(
        image_service,
        runtime_service,
        image_fs=summary_image_fs(stats.summary),
        policy=image_policy(config),
        clock=clock,
        metrics=ImageGCMetrics(metrics_registry),
        record_node_event=node_event,
    )
    container_gc = ContainerGCManager(
        runtime_service,
        pod_state=lambda uid: pod_gc_state(
            uid,
            worker_state=kubelet.workers.state,
            pod_by_uid=pod_config.pod_by_uid,
            sources_ready=pod_config.sources_ready,
            evicted_by_kill=kubelet.evicted_by_kill,
        ),
        sources_ready=pod_config.sources_ready,
        clock=clock,
        record_node_event=node_event,
        unremovable=lambda container_id: container_id in runtime.unremovable,
    )
    image_gc_period, container_gc_period = gc_periods(os.environ)
    supervisor.start("image-gc", image_gc.run(image_gc_period))
    supervisor.start("container-gc", container_gc.run(container_gc_period))
    # allocatableMemory.available is the kubepods cgroup against what upstream enforces on it
    # (GetNodeAllocatableAbsolute): capacity minus kube/system reserved, not minus the hard eviction thresholds
    # (those are the threshold itself; subtracting them too put a node with a high threshold under pressure at once).
    enforced = node_allocatable(capacity, config.system_reserved, config.kube_reserved, {})
    allocatable_memory = parse_quantity(enforced["memory"]) if "memory" in enforced else None
    # Memory threshold notification (kernelMemcgNotification, off by default as upstream): a crossed memory
    # threshold wakes the manager at once instead of at its next 10 s tick. Not on an emulated node (host cgroups).
    notifiers = configured_notifiers(config) if host else []
    if eviction_cycle:
        supervisor.start(
            "eviction-manager",
            eviction.run(
                EvictionInputs(
                    summary=stats.summary,
                    active_pods=kubelet.active_pod_views,
                    evict=lambda pod, evicted: kubelet.evict_pod(
                        pod,
                        PodEviction(EVICTED, evicted.message, disruption_target=evicted.disruption_target),
                        evicted.grace_period_seconds,
                    ),
                    record_node_event=node_event,
                    record_pod_event=lambda pod, type_, reason, message, annotations: pod_event(
                        pod, type_, reason, message, annotations=annotations
                    ),
                    allocatable_memory=lambda: int(allocatable_memory) if allocatable_memory is not None else None,
                    pod_cleaned_up=kubelet.pod_cleaned_up,
                    delete_all_unused_containers=container_gc.delete_all_unused_containers,
                    delete_unused_images=image_gc.delete_unused_images,
                ),
                notifiers,
            ),
        )
    else:
        log.info("eviction manager not started node=%s reason=emulated-node-without-eviction", node_name)
    if shutdown is not None:
        inputs = ShutdownInputs(
            active_pods=kubelet.active_pods,
            kill_pod=lambda pod, grace: kubelet.evict_pod(
                pod,
                PodEviction(
                    NODE_SHUTDOWN_REASON,
                    NODE_SHUTDOWN_MESSAGE,
                    disruption_target=True,
                    keep_succeeded=True,
                    evict=False,
                ),
                grace,
            ),
            pod_killed=kubelet.pod_cleaned_up,
            sync_node_status=node_status.sync_node_status if node_status is not None else None,
        )
        # As upstream's kubelet: a manager that cannot start (no system bus, no logind, a delay logind will not
        # raise) is logged, and the agent goes on without it.
        if await shutdown.start(inputs):
            supervisor.start("node-shutdown-manager", shutdown.run())
    if config.healthz_port:
        local = LocalServer(
            config.healthz_bind_address,
            config.healthz_port,
            pods=lambda: running_pods(pod_config.pods(), status_manager.get_pod_status),
            health=lambda: (not supervisor.failed.is_set(), "a background task failed; see the agent log"),
            clock=clock,
        )
        supervisor.start("local-server", local.run())
    if host:  # an emulated node's containers write no log files to rotate
        supervisor.start(
            "container-log-manager",
            ContainerLogManager(
                runtime_service,
                clock=clock,
                max_size=config.container_log_max_size,
                max_files=config.container_log_max_files,
                max_workers=config.container_log_max_workers,
                monitor_interval=config.container_log_monitor_interval.total_seconds(),
            ).run(),
        )
    if config.enable_server and config.port:
        api_host = AgentHost(
            pods_fn=pod_config.pods,
            status_of=status_manager.get_pod_status,
            static_pods_of=(mirror_pods.static_pods_of if mirror_pods is not None else lambda mirror: []),
            list_runtime_pods=runtime.list_pods,
            runtime_pod=runtime.get_pod_status,
            config=config,
            registries={"/metrics": metrics_registry, "/metrics/probes": prober_metrics.registry},
            syncloop_health=lambda: (not supervisor.failed.is_set(), "a background task failed; see the agent log"),
            stats_summary=stats.summary,
            cadvisor_containers=stats.cadvisor_containers,
        )
        authenticator, authorizer = build_auth(config, client)
        api = KubeletServer(
            api_host,
            runtime_service,
            node_name=node_name,
            authenticator=authenticator,
            authorizer=authorizer,
            enable_debugging_handlers=config.enable_debugging_handlers,
            enable_system_log_handler=config.enable_system_log_handler,
        )
        if kubelet_api is not None:
            supervisor.start("kubelet-server", _routed_kubelet_api(kubelet_api, facts.internal_ip, api))
        else:
            if config.server_tls_bootstrap and client is not None and not config.tls_cert_file:
                # The serving certificate from the cluster's kubelet-serving signer, renewed before it expires.
                tls = server_context(None, None, config.authentication.x509.client_ca_file)
                serving = ServingCertificateManager(
                    client,
                    tls,
                    cert_dir=options.root_dir / "pki",
                    node_name=node_name,
                    addresses=(facts.hostname, facts.internal_ip),
                )
                serving.load_current()
                supervisor.start("serving-certificate", serving.run())
            else:
                cert, key = serving_files(config, options.root_dir, facts.hostname, (facts.internal_ip,))
                tls = server_context(cert, key, config.authentication.x509.client_ca_file)
            supervisor.start(
                "kubelet-server",
                run_server(api, HTTPServer(api.handle, ssl_context=tls), address=config.address, port=config.port),
            )
        if config.read_only_port:
            # As upstream's read-only server: plain HTTP, no authentication, and the debugging handlers (logs,
            # exec, attach, portForward, run, runningpods, /logs) answer 405 "Debug endpoints are disabled.".
            read_only = KubeletServer(api_host, runtime_service, node_name=node_name, enable_debugging_handlers=False)
            supervisor.start(
                "kubelet-read-only-server",
                run_server(read_only, HTTPServer(read_only.handle), address=config.address, port=config.read_only_port),
            )
    log.info(
        "agent running node=%s sources=%s standalone=%s",
        node_name,
        ",".join(sources) or "none",
        options.standalone,
    )
    stopped = asyncio.create_task(stop.wait())
    failed = asyncio.create_task(supervisor.failed.wait())
    await asyncio.wait([stopped, failed], return_when=asyncio.FIRST_COMPLETED)
    for task in (stopped, failed):
        task.cancel()
    await kubelet.workers.stop()
    await probes.stop()
    await prober.aclose()
    log.info("agent stopping node=%s", node_name)  # the PodResources and device plugin servers close next (started)
    if failed.done() and not failed.cancelled() and supervisor.failed.is_set():
        raise AgentError("a background task failed; see the log above")
