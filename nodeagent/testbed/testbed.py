"""`nodeagent testbed up|down --dir DIR`: one hermetic set of real parts on this machine.

`up` starts, each with its own directory, ports, sockets and bridge so that two testbeds can run side by side:
etcd and kube-apiserver (TLS, Node+RBAC authorization, NodeRestriction, the aggregation layer),
kube-controller-manager and kube-scheduler, metrics-server (registered as v1beta1.metrics.k8s.io), a
docker-registry on loopback holding locally built pause and busybox images, and a containerd with its own root,
state, socket and CNI config, whose pods get their network from the project's CNI plugin and its helper (cni/).
The bridge exists from the start with its gateway address, the node's address (`Settings.node_ip`), where the
agent's kubelet API and metrics-server listen. It writes `DIR/env` and `DIR/nodeagent.yaml`. The daemons outlive
the command.

`down` removes every sandbox through CRI (so CNI tears down veths and network namespaces), stops the daemons and
containerd's shims by PID, unmounts what containerd mounted below DIR and deletes the bridge (and so the node's
address). A component that does not come up fails `up` with the tail of its log, after tearing down what had
started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from cri.client import connect
from cri.errors import CRIError
from nodeagent.kuberuntime.cgroups import remove_cgroup_tree
from nodeagent.testbed import (
    clusterdns,
    cniplugin,
    configs,
    coredns,
    csistack,
    hostnet,
    images,
    kubeproxy,
    metricsserver,
    nginximage,
    processes,
    registry,
    sandboxes,
)
from nodeagent.testbed.kubeconfig import write_kubeconfig
from nodeagent.testbed.layout import Layout, Settings
from nodeagent.testbed.pki import CertificateAuthority, CertPair, service_account_keys
from nodeagent.testbed.versions import (
    NONROOT_USER,
    agnhost_path,
    busybox_path,
    cache_root,
    grpc_health_path,
    kubernetes_bin_dir,
    metrics_server_path,
    nginx_root,
    nonewprivs_path,
)

log = logging.getLogger(__name__)
# Upstream's kubelet API port (KubeletConfiguration `port`), which the e2e framework dials through the node proxy.
KUBELET_PORT = 10250

# Stopped in this order by `down`: clients of the apiserver first, containerd after its sandboxes are gone.
AGENT = "nodeagent"
# The upstream kubelet when it runs as the node instead (testbed/upstreamkubelet.py): DIR/pids/kubelet.json.
UPSTREAM_KUBELET = "kubelet"
METRICS_SERVER = metricsserver.NAME
COMPONENTS = (
    AGENT,
    UPSTREAM_KUBELET,
    METRICS_SERVER,
    kubeproxy.NAME,
    "kube-controller-manager",
    "kube-scheduler",
    "kube-apiserver",
    "etcd",
    "registry",
    "containerd",
    cniplugin.HELPER,  # after containerd: sandboxes removed at down still find it (they would not need it)
)
READY_TIMEOUT = 90.0


# The controller-manager's --controllers for a testbed without node-condition taints (Testbed's
# `node_condition_taints=False`): every default controller but the node-lifecycle-controller.
CONTROLLERS_WITHOUT_NODE_LIFECYCLE = "*,-node-lifecycle-controller"


class TestbedError(RuntimeError):
    """The testbed cannot be brought up or down (besides a component failing, which is ComponentFailed)."""


def default_node_name() -> str:
    return socket.gethostname().lower()


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def kubelet_api_port(node_ip: str, fallback: int) -> int:
    """Upstream's kubelet port (10250) on the node's own address when nothing holds it there, else `fallback`.

    Each testbed's node address is its own (the gateway of its pod range), so two testbeds both get 10250; what takes
    it away is a listener on the wildcard address (a kubeadm node on this machine, say). The e2e framework reaches a
    node's kubelet through the node proxy at `NODE:10250` (a constant), so specs such as Pods Extended's
    Delete Grace Period only work where the agent listens there.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the agent's server binds (asyncio sets SO_REUSEADDR): a previous agent's connections in TIME_WAIT on
        # this address do not hold the port, a listener does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((node_ip, KUBELET_PORT))
        except OSError as exc:
            log.info(
                "testbed kubelet port taken node_ip=%s port=%d err=%s fallback=%d", node_ip, KUBELET_PORT, exc, fallback
            )
            return fallback
    return KUBELET_PORT


def _metrics_server_binary() -> str:
    binary = metrics_server_path()
    if not binary.exists():
        raise TestbedError(f"metrics-server is not built ({binary}): run `nodeagent testbed install` first")
    return str(binary)


def _binary(name: str) -> str:
    candidate = kubernetes_bin_dir() / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise TestbedError(f"{name} is not installed: run `nodeagent testbed install` first")
    return found


@dataclass(frozen=True)
class Pki:
    ca: CertPair
    apiserver: CertPair
    etcd_server: CertPair
    etcd_client: CertPair
    admin: CertPair
    node: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    kubelet_client: CertPair
    kubelet_serving: CertPair
    service_account: CertPair
    front_proxy_ca: CertPair
    front_proxy_client: CertPair
    metrics_server_serving: CertPair
    metrics_server_client: CertPair
    kube_proxy: CertPair


def _make_pki(layout: Layout, node_name: str, node_ip: str) -> Pki:
    d = layout.pki
    ca = CertificateAuthority.create(d, "nodeagent-testbed-ca")
    # The aggregation layer's CA of its own, as upstream's front-proxy CA: an aggregated server trusts request
    # headers (X-Remote-User) only from a certificate of this CA, never from one of the cluster's clients.
    front_proxy = CertificateAuthority.create(layout.front_proxy_pki, "nodeagent-testbed-front-proxy-ca")
    loopback = ("127.0.0.1",)
    return Pki(
        ca=ca.pair,
        apiserver=ca.issue(
            d,
            "apiserver",
            common_name="kube-apiserver",
            server=True,
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            # Loopback, the node address it listens on, and the `kubernetes` Service's ClusterIP pods call.
            ip_addresses=(*loopback, node_ip, hostnet.kubernetes_service_ip()),
        ),
        etcd_server=ca.issue(
            d,
            "etcd-server",
            common_name="etcd",
            server=True,
            client=True,
            dns_names=("localhost",),
            ip_addresses=loopback,
        ),
        etcd_client=ca.issue(d, "etcd-client", common_name="kube-apiserver-etcd-client", client=True),
        admin=ca.issue(d, "admin", common_name="kubernetes-admin", organizations=("system:masters",), client=True),
        node=ca.issue(d, "node", common_name=f"system:node:{node_name}", organizations=("system:nodes",), client=True),
        controller_manager=ca.issue(d, "controller-manager", common_name="system:kube-controller-manager", client=True),
        scheduler=ca.issue(d, "scheduler", common_name="system:kube-scheduler", client=True),
        kubelet_client=ca.issue(
            d,
            "apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            organizations=("system:masters",),
            client=True,
        ),
        # The agent's serving certificate for the kubelet API, as the kubelet-serving signer would issue it: the
        # apiserver verifies it (--kubelet-certificate-authority) when it proxies logs, exec and the node proxy.
        kubelet_serving=ca.issue(
            d,
            "kubelet-serving",
            common_name=f"system:node:{node_name}",
            organizations=("system:nodes",),
            server=True,
            dns_names=(node_name, "localhost"),
            ip_addresses=(*loopback, node_ip),
        ),
        service_account=service_account_keys(d),
        front_proxy_ca=front_proxy.pair,
        front_proxy_client=front_proxy.issue(
            layout.front_proxy_pki, "front-proxy-client", common_name=metricsserver.FRONT_PROXY_CLIENT, client=True
        ),
        metrics_server_serving=ca.issue(
            d,
            "metrics-server",
            common_name="metrics-server",
            server=True,
            dns_names=metricsserver.SERVICE_DNS_NAMES,
            ip_addresses=(node_ip,),
        ),
        metrics_server_client=ca.issue(d, "metrics-server-client", common_name=metricsserver.USER, client=True),
        kube_proxy=ca.issue(d, "kube-proxy", common_name=kubeproxy.USER, client=True),
    )


async def _wait(name: str, log_path: Path, check: Callable[[], Awaitable[bool]], proc: processes.Process) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    last_error = ""
    while time.monotonic() < deadline:
        if not proc.alive():
            raise processes.ComponentFailed(name, "exited during start-up", log_path)
        try:
            if await check():
                log.info("testbed component ready name=%s", name)
                return
        except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
            last_error = str(exc)
        await asyncio.sleep(0.2)
    raise processes.ComponentFailed(name, f"not ready after {READY_TIMEOUT:.0f}s ({last_error})", log_path)


def _tls_context(ca: Path | None, client: CertPair | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def _https_check(
    url: str, *, ca: Path | None, client: CertPair | None, expect: str = "ok"
) -> Callable[[], Awaitable[bool]]:
    context = _tls_context(ca, client)

    async def check() -> bool:
        async with httpx.AsyncClient(verify=context, timeout=2.0) as http:
            resp = await http.get(url)
            return resp.status_code == 200 and expect in resp.text

    return check


class Testbed:
    """One testbed, addressed by its directory. `up` and `down` may run in different processes."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        root: Path,
        *,
        cluster_signing_duration: str | None = None,
        runtime_config: str | None = None,
        node_condition_taints: bool = True,
    ) -> None:
        self.layout = Layout(root.resolve())
        self._apiserver_argv: list[str] = []  # remembered by stop_apiserver for start_apiserver
        # The controller-manager's --cluster-signing-duration (e.g. "150s"): every certificate its csrsigning
        # controller issues gets it, so only a testbed of its own sets it (certificate rotation tests); None keeps
        # the default (a year).
        self.cluster_signing_duration = cluster_signing_duration
        # The apiserver's --runtime-config (e.g. "resource.k8s.io/v1beta1=true"): API versions off by default that a
        # run needs served (upstream's DRA specs: test/e2e/dra/kind.yaml); None serves the defaults.
        self.runtime_config = runtime_config
        # False: the control plane never taints the node from its conditions, as upstream's node e2e services run
        # it (test/e2e_node/services: no controller-manager, the apiserver without TaintNodesByCondition). The
        # controller-manager runs without its node-lifecycle-controller (no memory-pressure or not-ready taints, no
        # NotReady marking) and the apiserver without the TaintNodesByCondition admission plugin (which taints a
        # new Node not-ready for that controller to lift). The node e2e suite finds no schedulable node under a
        # NoSchedule taint (`nodeagent conformance --suite node-eviction`, docs/conformance.md). Only `up` reads it.
        self.node_condition_taints = node_condition_taints

    @property
    def settings(self) -> Settings:
        return Settings.load(self.layout.settings_file)

    def running(self) -> list[str]:
        return [n for n in COMPONENTS if (p := processes.load(self.layout.pids, n)) is not None and p.alive()]

    async def up(self, *, node_name: str | None = None, cluster_dns: bool = False) -> Settings:
        """`cluster_dns`: CoreDNS as kubeadm deploys it (testbed/clusterdns.py) and the agent's clusterDNS naming
        it. Off by default: the test suite's node then runs only the pods a test makes."""
        if self.running():
            raise TestbedError(f"a testbed already runs in {self.layout.root}: {', '.join(self.running())}")
        self._reset_dir()
        try:
            return await self._up(node_name or default_node_name(), cluster_dns=cluster_dns)
        except BaseException:
            await self.down()
            raise

    def _reset_dir(self) -> None:
        lay = self.layout
        lay.root.mkdir(parents=True, exist_ok=True)
        # A stopped testbed in the same directory: start from clean state, as a hermetic set must.
        hostnet.unmount_under(lay.root)
        for sub in (lay.pki, lay.etcd_data, lay.containerd, lay.cni_conf_dir.parent, lay.registry_data, lay.pids):
            shutil.rmtree(sub, ignore_errors=True)
        lay.logs.mkdir(exist_ok=True)
        lay.manifests.mkdir(exist_ok=True)

    async def _up(self, node_name: str, *, cluster_dns: bool) -> Settings:
        lay = self.layout
        ports = _free_ports(12)
        bridge = hostnet.bridge_name(lay.root)
        # A bridge of this directory's name is this directory's, left by a testbed that was not brought down: its
        # route would keep the pod range from being chosen again, and its address would sit beside the new one.
        hostnet.remove_bridge_leftovers(bridge)
        settings = Settings(
            node_name=node_name,
            etcd_client_port=ports[0],
            etcd_peer_port=ports[1],
            apiserver_port=ports[2],
            controller_manager_port=ports[3],
            scheduler_port=ports[4],
            registry_port=ports[5],
            stream_port=ports[6],
            bridge=bridge,
            pod_cidr=hostnet.choose_pod_cidr(lay.root, taken=set()),
            service_cidr=hostnet.SERVICE_CIDR,
            healthz_port=ports[7],
            kubelet_port=ports[8],
            metrics_server_port=ports[9],
            kube_proxy_healthz_port=ports[10],
            kube_proxy_metrics_port=ports[11],
            cluster_dns=hostnet.cluster_dns_service_ip(hostnet.SERVICE_CIDR) if cluster_dns else "",
        )
        settings.save(lay.settings_file)
        # Before anything listens on the node address (metrics-server, the agent) and before the first CNI ADD.
        # In a thread: pyroute2's synchronous IPRoute runs an event loop of its own, which it cannot do in this one.
        try:
            await asyncio.to_thread(hostnet.ensure_bridge, settings.bridge, settings.pod_cidr)
        except hostnet.HostNetError as exc:
            raise TestbedError(str(exc)) from exc
        # Now that the node address exists: the kubelet API on upstream's port where it is free there.
        settings = replace(settings, kubelet_port=kubelet_api_port(settings.node_ip, ports[8]))
        settings.save(lay.settings_file)
        pki = _make_pki(lay, node_name, settings.node_ip)
        self._write_configs(settings, pki)
        cni_plugin = cniplugin.install_plugins(lay)

        etcd = self._start_etcd(settings, pki)
        reg = self._start(
            "registry",
            ["/usr/bin/docker-registry", "serve", str(lay.registry_data / "config.yml")],
        )
        cni_helper = self._start(cniplugin.HELPER, cni_plugin.helper_argv())
        containerd = self._start("containerd", self._containerd_argv())

        await _wait(
            "etcd",
            etcd.log_path,
            _https_check(
                f"https://127.0.0.1:{settings.etcd_client_port}/health",
                ca=pki.ca.cert,
                client=pki.etcd_client,
                expect="true",
            ),
            etcd,
        )
        apiserver = self._start_apiserver(settings, pki)
        await _wait(cniplugin.HELPER, cni_helper.log_path, lambda: cniplugin.helper_ready(lay), cni_helper)
        await _wait("registry", reg.log_path, lambda: _registry_ready(settings), reg)
        await self._push_images(settings)
        await _wait("containerd", containerd.log_path, lambda: _containerd_ready(lay), containerd)
        await _wait(
            "kube-apiserver",
            apiserver.log_path,
            _https_check(f"{settings.apiserver_url}/readyz", ca=pki.ca.cert, client=pki.admin),
            apiserver,
        )
        kcm = self._start_controller_manager(settings, pki)
        sched = self._start_scheduler(settings)
        kube_proxy = self._start_kube_proxy(settings)
        if kube_proxy is None:
            settings = replace(settings, kube_proxy_held_by=kubeproxy.read_owner_root())
            settings.save(lay.settings_file)
        if settings.cluster_dns:
            # Not waited for: its pod runs once a node registers (`wait_cluster_dns`).
            try:
                await clusterdns.deploy(lay, settings.cluster_dns, settings.registry)
            except clusterdns.ClusterDNSError as exc:
                raise TestbedError(f"cluster DNS: {exc}") from exc
        # While those two start: metrics-server and the objects that register it.
        metrics_server = await self._start_metrics_server(settings, pki)
        for proc, port in ((kcm, settings.controller_manager_port), (sched, settings.scheduler_port)):
            await _wait(
                proc.name, proc.log_path, _https_check(f"https://127.0.0.1:{port}/healthz", ca=None, client=None), proc
            )
        # kube-proxy is not waited for: it waits (up to 30 s) for its Node, which exists once an agent registers.
        if kube_proxy is not None and not kube_proxy.alive():
            raise processes.ComponentFailed(kube_proxy.name, "exited during start-up", kube_proxy.log_path)
        # Pods can be created only once the controller-manager has made the default ServiceAccount.
        await _wait(
            "kube-controller-manager",
            kcm.log_path,
            _https_check(
                f"{settings.apiserver_url}/api/v1/namespaces/default/serviceaccounts/default",
                ca=pki.ca.cert,
                client=pki.admin,
                expect='"name":"default"',
            ),
            kcm,
        )
        # `kubectl top` works from here on (with numbers once an agent has been scraped twice).
        await _wait(
            "v1beta1.metrics.k8s.io",
            metrics_server.log_path,
            lambda: metricsserver.api_service_available(lay),
            metrics_server,
        )
        lay.env_file.write_text(configs.env_file(lay, settings))
        return settings

    async def _start_metrics_server(self, settings: Settings, pki: Pki) -> processes.Process:
        lay = self.layout
        try:
            await metricsserver.register(lay, settings)
        except metricsserver.MetricsServerError as exc:
            raise TestbedError(f"metrics-server: {exc}") from exc
        files = metricsserver.Files(
            kubeconfig=lay.metrics_server_kubeconfig,
            tls_cert=pki.metrics_server_serving.cert,
            tls_key=pki.metrics_server_serving.key,
            kubelet_ca=pki.ca.cert,
        )
        proc = processes.start(
            METRICS_SERVER,
            metricsserver.argv(_metrics_server_binary(), settings, files),
            pid_dir=lay.pids,
            log_dir=lay.logs,
            cwd=lay.root,  # anything it would write relative to its directory stays in the testbed
        )
        await _wait(
            METRICS_SERVER,
            proc.log_path,
            _https_check(
                f"https://{settings.node_ip}:{settings.metrics_server_port}/livez", ca=pki.ca.cert, client=pki.admin
            ),
            proc,
        )
        try:
            await metricsserver.register_api_service(lay)
        except metricsserver.MetricsServerError as exc:
            raise TestbedError(f"metrics-server: {exc}") from exc
        return proc

    def _start_kube_proxy(self, settings: Settings) -> processes.Process | None:
        """kube-proxy, unless another testbed's runs (its iptables chains are host-wide: see kubeproxy.py)."""
        with kubeproxy.host_lock():
            owner = kubeproxy.live_owner()
            if owner is not None:
                log.warning(
                    "testbed kube-proxy not started: another testbed runs the host's kube-proxy owner=%s pid=%d "
                    "(ClusterIPs of this testbed are not served)",
                    owner.root,
                    owner.pid,
                )
                return None
            proc = self._start(kubeproxy.NAME, kubeproxy.argv(_binary("kube-proxy"), self.layout, settings))
            kubeproxy.record_owner(self.layout, proc)
            return proc

    def _start(self, name: str, argv: list[str]) -> processes.Process:
        return processes.start(name, argv, pid_dir=self.layout.pids, log_dir=self.layout.logs)

    def _containerd_argv(self) -> list[str]:
        return ["/usr/bin/containerd", "--config", str(self.layout.containerd_config)]

    async def stop_containerd(self) -> None:
        """Stop this testbed's containerd, by its PID (tests of a runtime restart). The shims, and so the pods'
        containers, keep running; a container that exits meanwhile is found by containerd when it starts again."""
        proc = processes.load(self.layout.pids, "containerd")
        if proc is None or not proc.alive():
            raise TestbedError(f"containerd of the testbed in {self.layout.root} is not running")
        await asyncio.to_thread(processes.stop, proc, pid_dir=self.layout.pids)

    async def start_containerd(self) -> None:
        """Start this testbed's containerd again (after `stop_containerd`) and wait until its CRI is ready."""
        proc = self._start("containerd", self._containerd_argv())

        async def ready() -> bool:
            try:
                return await _containerd_ready(self.layout)
            except CRIError:
                return False  # the socket is there before the CRI plugin answers

        await _wait("containerd", proc.log_path, ready, proc)

    async def stop_apiserver(self, *, grace: float = 10.0) -> None:
        """Stop this testbed's kube-apiserver, by its PID (tests of a node with no apiserver at all); the scheduler
        and controller-manager keep running and reconnect after `start_apiserver`. SIGKILL after `grace` seconds
        (its graceful shutdown often takes all 10)."""
        proc = processes.load(self.layout.pids, "kube-apiserver")
        if proc is None or not proc.alive():
            raise TestbedError(f"kube-apiserver of the testbed in {self.layout.root} is not running")
        await asyncio.to_thread(processes.stop, proc, pid_dir=self.layout.pids, grace=grace)
        self._apiserver_argv = list(proc.argv)

    async def start_apiserver(self, *, extra_args: Sequence[str] = ()) -> None:
        """Start this testbed's kube-apiserver again (after `stop_apiserver`), with the same command line (plus
        `extra_args`, e.g. an audit log, kept for later restarts), and wait until it is ready."""
        if not self._apiserver_argv:
            raise TestbedError("start_apiserver without stop_apiserver: the command line is not known")
        self._apiserver_argv = [*self._apiserver_argv, *(a for a in extra_args if a not in self._apiserver_argv)]
        proc = self._start("kube-apiserver", self._apiserver_argv)
        pki = self.layout.pki
        admin = CertPair(pki / "admin.crt", pki / "admin.key")
        ready = _https_check(f"{self.settings.apiserver_url}/readyz", ca=pki / "ca.crt", client=admin)
        await _wait("kube-apiserver", proc.log_path, ready, proc)

    def _write_configs(self, settings: Settings, pki: Pki) -> None:
        lay = self.layout
        lay.containerd.mkdir(parents=True, exist_ok=True)
        lay.containerd_config.write_text(configs.containerd_config(lay, settings))
        lay.cdi_spec_dir.mkdir(parents=True, exist_ok=True)
        Path(configs.HOST_CDI_SPEC_DIR).mkdir(parents=True, exist_ok=True)  # containerd's default; empty is fine
        hosts = lay.registry_hosts / settings.registry
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts.toml").write_text(configs.registry_hosts_toml(settings))
        lay.cni_conf_dir.mkdir(parents=True, exist_ok=True)
        (lay.cni_conf_dir / "10-nodeagent.conflist").write_text(configs.cni_conflist(lay, settings))
        lay.registry_data.mkdir(parents=True, exist_ok=True)
        (lay.registry_data / "config.yml").write_text(
            registry.registry_config(lay.registry_data / "storage", settings.registry)
        )
        server = settings.apiserver_url
        write_kubeconfig(lay.admin_kubeconfig, server=server, ca=pki.ca.cert, client=pki.admin, user="admin")
        write_kubeconfig(
            lay.node_kubeconfig,
            server=server,
            ca=pki.ca.cert,
            client=pki.node,
            user=f"system:node:{settings.node_name}",
        )
        write_kubeconfig(
            lay.root / "controller-manager.kubeconfig",
            server=server,
            ca=pki.ca.cert,
            client=pki.controller_manager,
            user="system:kube-controller-manager",
        )
        write_kubeconfig(
            lay.root / "scheduler.kubeconfig",
            server=server,
            ca=pki.ca.cert,
            client=pki.scheduler,
            user="system:kube-scheduler",
        )
        write_kubeconfig(
            lay.kube_proxy_kubeconfig, server=server, ca=pki.ca.cert, client=pki.kube_proxy, user=kubeproxy.USER
        )
        write_kubeconfig(
            lay.metrics_server_kubeconfig,
            server=server,
            ca=pki.ca.cert,
            client=pki.metrics_server_client,
            user=metricsserver.USER,
        )
        lay.agent_config.write_text(configs.agent_config(lay, settings))

    def _start_etcd(self, settings: Settings, pki: Pki) -> processes.Process:
        client = f"https://127.0.0.1:{settings.etcd_client_port}"
        peer = f"http://127.0.0.1:{settings.etcd_peer_port}"
        return self._start(
            "etcd",
            [
                "/usr/bin/etcd",
                "--name=testbed",
                f"--data-dir={self.layout.etcd_data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=testbed={peer}",
                f"--cert-file={pki.etcd_server.cert}",
                f"--key-file={pki.etcd_server.key}",
                f"--trusted-ca-file={pki.ca.cert}",
                "--client-cert-auth=true",
                # A test set: durability across power loss buys nothing and fsync costs every write.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self, settings: Settings, pki: Pki) -> processes.Process:
        d = self.layout.pki
        return self._start(
            "kube-apiserver",
            [
                _binary("kube-apiserver"),
                f"--etcd-servers=https://127.0.0.1:{settings.etcd_client_port}",
                f"--etcd-cafile={pki.ca.cert}",
                f"--etcd-certfile={pki.etcd_client.cert}",
                f"--etcd-keyfile={pki.etcd_client.key}",
                # The node address: pods reach it, and the endpoint reconciler writes it into the `kubernetes`
                # Service's endpoints, which kube-proxy serves on the Service's ClusterIP.
                f"--bind-address={settings.node_ip}",
                f"--advertise-address={settings.node_ip}",
                f"--secure-port={settings.apiserver_port}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                # Bootstrap tokens (Secrets bootstrap-token-<id> in kube-system) authenticate a joining node's TLS
                # bootstrap, as on a kubeadm cluster; no token exists unless a test or kubeadm makes one.
                "--enable-bootstrap-token-auth=true",
                f"--cert-dir={d / 'apiserver'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                *([] if self.node_condition_taints else ["--disable-admission-plugins=TaintNodesByCondition"]),
                f"--service-cluster-ip-range={settings.service_cidr}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.service_account.cert}",
                f"--service-account-signing-key-file={pki.service_account.key}",
                f"--kubelet-client-certificate={pki.kubelet_client.cert}",
                f"--kubelet-client-key={pki.kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca.cert}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                # The aggregation layer (metrics-server): the front-proxy CA and client, upstream's header names,
                # and routing to the APIService's endpoints, as there is no service proxy to reach a ClusterIP.
                f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
                f"--requestheader-allowed-names={metricsserver.FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                "--enable-aggregator-routing=true",
                "--allow-privileged=true",
                "--profiling=false",
                *([f"--runtime-config={rc}"] if (rc := self.runtime_config) else []),
                "--v=1",
            ],
        )

    def _start_controller_manager(self, settings: Settings, pki: Pki) -> processes.Process:
        kubeconfig = self.layout.root / "controller-manager.kubeconfig"
        return self._start(
            "kube-controller-manager",
            [
                _binary("kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={settings.controller_manager_port}",
                f"--cert-dir={self.layout.pki / 'controller-manager'}",
                f"--service-account-private-key-file={pki.service_account.key}",
                f"--root-ca-file={pki.ca.cert}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                *([f"--cluster-signing-duration={d}"] if (d := self.cluster_signing_duration) else []),
                *([] if self.node_condition_taints else [f"--controllers={CONTROLLERS_WITHOUT_NODE_LIFECYCLE}"]),
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                # Short, so that a stopped agent shows NotReady in seconds rather than after the 50 s default.
                "--node-monitor-period=2s",
                "--node-monitor-grace-period=16s",
                "--profiling=false",
                "--v=1",
            ],
        )

    def _start_scheduler(self, settings: Settings) -> processes.Process:
        kubeconfig = self.layout.root / "scheduler.kubeconfig"
        return self._start(
            "kube-scheduler",
            [
                _binary("kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={settings.scheduler_port}",
                f"--cert-dir={self.layout.pki / 'scheduler'}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )

    async def _push_images(self, settings: Settings) -> None:
        # Image layouts are deterministic; build once per machine into the cache and push into each testbed.
        cache = cache_root() / "images"
        nginx = nginximage.build_nginx_image(cache / "nginx", nginx_root(), busybox_path())
        e2e_busybox = images.build_e2e_busybox_image(cache / "e2e-busybox", busybox_path())
        built: list[tuple[str, str, images.OCIImage]] = [
            (configs.PAUSE_IMAGE_REPOSITORY, configs.PAUSE_IMAGE_TAG, images.build_pause_image(cache / "pause")),
            (
                configs.BUSYBOX_IMAGE_REPOSITORY,
                configs.BUSYBOX_IMAGE_TAG,
                images.build_busybox_image(cache / "busybox"),
            ),
            (
                configs.GRPC_HEALTH_IMAGE_REPOSITORY,
                configs.GRPC_HEALTH_IMAGE_TAG,
                images.build_grpc_health_image(cache / "grpc-health", grpc_health_path()),
            ),
            (
                # Under upstream's e2e repository paths and tags: the e2e suite's specs run them by those names.
                configs.AGNHOST_IMAGE_REPOSITORY,
                configs.AGNHOST_IMAGE_TAG,
                images.build_agnhost_image(cache / "agnhost", agnhost_path(), busybox_path()),
            ),
            (configs.E2E_BUSYBOX_IMAGE_REPOSITORY, configs.E2E_BUSYBOX_IMAGE_TAG, e2e_busybox),
            # The same image under docker-library's name: the busybox offered to users (configs.py says why).
            (configs.BUSYBOX_IMAGE_REPOSITORY, configs.VANILLA_BUSYBOX_IMAGE_TAG, e2e_busybox),
            (
                configs.NONEWPRIVS_IMAGE_REPOSITORY,
                configs.NONEWPRIVS_IMAGE_TAG,
                images.build_nonewprivs_image(cache / "nonewprivs", nonewprivs_path(), busybox_path()),
            ),
            (
                configs.NONROOT_IMAGE_REPOSITORY,
                configs.NONROOT_IMAGE_TAG,
                images.build_nonroot_image(cache / "nonroot", busybox_path(), user=NONROOT_USER),
            ),
            # One Debian nginx under both of upstream's tags (the specs switch between the two references).
            (configs.NGINX_IMAGE_REPOSITORY, configs.NGINX_IMAGE_TAG, nginx),
            (configs.NGINX_IMAGE_REPOSITORY, configs.NGINX_NEW_IMAGE_TAG, nginx),
        ]
        if settings.cluster_dns:
            dns = coredns.build_coredns_image(cache / coredns.COREDNS_IMAGE, coredns.coredns_path())
            built.append((clusterdns.IMAGE_REPOSITORY, clusterdns.IMAGE_TAG, dns))
        for repository, tag, image in built:
            await registry.push_image(settings.registry, repository, tag, image)
            log.info("testbed image pushed image=%s/%s:%s", settings.registry, repository, tag)

    async def start_agent(self, *, config: Path | None = None) -> processes.Process:
        """`nodeagent run` against this testbed (with its nodeagent.yaml, or `config`), detached like the other
        components (`down` stops it first). Refused while the upstream kubelet (or another agent) runs as the node."""
        # Imported here: upstreamkubelet builds on this module.
        from nodeagent.testbed.upstreamkubelet import refuse_if_held  # noqa: PLC0415

        refuse_if_held(self.layout, "nodeagent")
        settings = self.settings
        proc = self._start(
            AGENT,
            [
                sys.executable, "-m", "nodeagent", "run",
                "--config", str(config or self.layout.agent_config),
                "--kubeconfig", str(self.layout.node_kubeconfig),
                "--node-name", settings.node_name,
                "--node-ip", settings.node_ip,
                "--root-dir", str(self.layout.kubelet_root),
            ],
        )  # fmt: skip
        await _wait(AGENT, proc.log_path, _node_ready_check(self.layout, settings), proc)
        return proc

    async def wait_cluster_dns(self) -> None:
        """Until a CoreDNS replica is Ready, so that a pod made next resolves Service names (`nodeagent up` waits;
        a testbed's own `up` does not, as its node comes later). Nothing to wait for without cluster DNS, or when
        another testbed's kube-proxy holds the host: CoreDNS then cannot reach the apiserver's ClusterIP."""
        settings = self.settings
        if not settings.cluster_dns:
            return
        if settings.kube_proxy_held_by:
            log.warning(
                "testbed cluster DNS not served: another testbed runs the host's kube-proxy owner=%s",
                settings.kube_proxy_held_by,
            )
            return
        agent = processes.load(self.layout.pids, AGENT) or processes.load(self.layout.pids, UPSTREAM_KUBELET)
        if agent is None:
            raise TestbedError("cluster DNS waits for a node: start the agent first")
        await _wait("coredns", agent.log_path, lambda: clusterdns.ready(self.layout), agent)

    async def down(self) -> None:
        lay = self.layout
        settings = Settings.load(lay.settings_file) if lay.settings_file.exists() else None
        for name in (AGENT, UPSTREAM_KUBELET):  # first: a running agent would recreate the sandboxes removed below
            agent = processes.load(lay.pids, name)
            if agent is not None:
                processes.stop(agent, pid_dir=lay.pids, grace=20)
        # The CSI stack's host processes (testbed/csistack.py), started by tests on this testbed, after the agent.
        csistack.stop_all(lay)
        containerd = processes.load(lay.pids, "containerd")
        if containerd is not None and containerd.alive():
            try:
                await _remove_all_sandboxes(lay)
            except Exception as exc:  # the leftovers are removed below all the same
                log.warning("testbed down: could not remove sandboxes through CRI error=%r", exc)
        for name in COMPONENTS:
            proc = processes.load(lay.pids, name)
            if proc is not None:
                processes.stop(proc, pid_dir=lay.pids)
            if name == kubeproxy.NAME:  # its iptables rules go with it (only if they are this testbed's)
                kubeproxy.release(lay, _binary("kube-proxy"))
        for pid in processes.pids_with_arg("containerd-shim-runc-v2", str(lay.containerd_socket)):
            log.warning("testbed down: killing leftover shim pid=%d", pid)
            _kill_tree(pid)
        if settings is not None:  # the agent's cgroup root (cgroupRoot in nodeagent.yaml), now without processes
            remove_cgroup_tree(configs.agent_cgroup_root(settings))
        points = hostnet.unmount_under(lay.root)
        if points:
            log.info("testbed down: unmounted count=%d", len(points))
        if settings is not None:
            removed = hostnet.remove_bridge_leftovers(settings.bridge)
            if removed:
                log.info("testbed down: removed %s", ", ".join(removed))


def _kill_tree(pid: int) -> None:
    # A shim whose containerd is gone: kill it and the container processes it parented.
    children = Path(f"/proc/{pid}/task/{pid}/children")
    kids = [int(c) for c in children.read_text().split()] if children.exists() else []
    for target in (pid, *kids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)


def _node_ready_check(layout: Layout, settings: Settings) -> Callable[[], Awaitable[bool]]:
    context = _tls_context(layout.pki / "ca.crt", CertPair(layout.pki / "admin.crt", layout.pki / "admin.key"))
    url = f"{settings.apiserver_url}/api/v1/nodes/{settings.node_name}"

    async def check() -> bool:
        async with httpx.AsyncClient(verify=context, timeout=2.0) as http:
            resp = await http.get(url)
        if resp.status_code != 200:
            return False
        conditions = resp.json().get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    return check


async def _registry_ready(settings: Settings) -> bool:
    try:
        await registry.wait_ready(settings.registry, timeout=0.5)
    except Exception:
        return False
    return True


async def _containerd_ready(layout: Layout) -> bool:
    if not layout.containerd_socket.exists():
        return False
    async with connect(f"unix://{layout.containerd_socket}", timeout=2.0) as client:
        await client.runtime.version("v1")
        status = await client.runtime.status()
        return any(c.type == "RuntimeReady" and c.status for c in status.status.conditions)


async def _remove_all_sandboxes(layout: Layout) -> None:
    async with connect(f"unix://{layout.containerd_socket}", timeout=30.0) as client:
        await sandboxes.stop_and_remove_all(client.runtime)
