"""The `nodeagent` command line: `up` (the embedded default), `run`, `pods`, `conformance`,
`testbed install|up|down`, `vm install|box|network|check` (the Vagrant VM, nodeagent/vm), `cluster up|down` (a
kubeadm cluster of nodeagent nodes, nodeagent/cluster) and `kind install|check` (Docker for kind, nodeagent/kind)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import signal
import sys
from pathlib import Path

from nodeagent.agent import AgentError, AgentOptions, run_agent
from nodeagent.cluster import command as cluster_command
from nodeagent.cluster.cluster import ClusterError
from nodeagent.cluster.node import NodeError
from nodeagent.config import ConfigError, load_config
from nodeagent.conformance import presets, subset
from nodeagent.conformance.certified import CertifiedOptions, certified, cluster_target
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.harness import HarnessOptions, conformance
from nodeagent.conformance.run import DEFAULT_FOCUS, DEFAULT_PROCS, DEFAULT_TIMEOUT, default_skip
from nodeagent.experiment.errors import ExperimentError
from nodeagent.fleet import command as fleet_command
from nodeagent.fleet.plan import FleetError
from nodeagent.kind import command as kind_command
from nodeagent.kind.errors import KindError
from nodeagent.localserver import LocalServerUnreachable, fetch_pods, format_pods
from nodeagent.testbed import install as installer
from nodeagent.testbed.layout import Layout
from nodeagent.testbed.processes import ComponentFailed
from nodeagent.testbed.testbed import Testbed, TestbedError
from nodeagent.version import version_text
from nodeagent.vm import command as vm_command
from nodeagent.vm.errors import VMError

DEFAULT_DIR = Path("/var/lib/nodeagent/testbed")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # One line per HTTP request drowns the testbed's own progress; keep their warnings only.
    for noisy in ("httpx", "httpcore", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# What `up` suggests trying first: a Deployment behind a Service, fetched by name from a pod (cluster DNS), with the
# images `env` names (BUSYBOX_IMAGE: vanilla BusyBox 1.37.0, whose wget works here).
FIRST_STEPS = (
    'kubectl create deployment web --image="$NGINX_IMAGE" --port=80 && kubectl expose deployment web',
    'kubectl run client -it --rm --restart=Never --image="$BUSYBOX_IMAGE" -- wget -qO- http://web',
)


def _usage(layout: Layout, *, cluster_dns: str = "", kube_proxy_held_by: str = "") -> str:
    lines = [
        f"testbed up in {layout.root}",
        f"  . {layout.env_file}    # KUBECONFIG, CONTAINER_RUNTIME_ENDPOINT, REGISTRY; kubectl and crictl on PATH",
        "  kubectl get nodes,pods -A",
        "  crictl pods",
        f"  python3 -m nodeagent pods --config {layout.agent_config}    # what the agent runs (its local /pods)",
    ]
    if cluster_dns and kube_proxy_held_by:
        lines.append(
            f"  # no ClusterIPs and so no cluster DNS here: the host's kube-proxy belongs to {kube_proxy_held_by}"
        )
    elif cluster_dns:
        lines.append(f"  # cluster DNS: CoreDNS, the kube-dns Service at {cluster_dns} (cluster.local)")
        lines += [f"  {step}" for step in FIRST_STEPS]
    lines.append(f"  logs: {layout.logs}/")
    return "\n".join(lines) + "\n"


async def _up(args: argparse.Namespace) -> int:
    installer.install()
    bed = Testbed(args.dir)
    await bed.up(node_name=args.node_name, cluster_dns=True)
    await bed.start_agent()
    # Pods made from here on resolve Service names (unless another testbed's kube-proxy holds the host: it says so).
    await bed.wait_cluster_dns()
    print(f"node {bed.settings.node_name} is Ready (agent log: {bed.layout.logs}/nodeagent.log)", flush=True)
    settings = bed.settings
    print(
        _usage(bed.layout, cluster_dns=settings.cluster_dns, kube_proxy_held_by=settings.kube_proxy_held_by), flush=True
    )
    if args.detach:
        print(f"detached; stop it with: nodeagent testbed down --dir {bed.layout.root}", flush=True)
        return 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print("running; Ctrl-C stops the agent and the testbed", flush=True)
    await stop.wait()
    await bed.down()
    return 0


async def _testbed(args: argparse.Namespace) -> int:
    if args.action == "install":
        installer.install(
            with_kubelet=args.with_kubelet,
            with_csi=args.with_csi,
            with_kubeadm=args.with_kubeadm,
            with_certified=args.with_certified,
            with_kwok=args.with_kwok,
        )
        return 0
    bed = Testbed(args.dir)
    if args.action == "up":
        settings = await bed.up(node_name=args.node_name, cluster_dns=True)
        print(
            _usage(bed.layout, cluster_dns=settings.cluster_dns, kube_proxy_held_by=settings.kube_proxy_held_by),
            flush=True,
        )
    else:
        await bed.down()
    return 0


async def _run(args: argparse.Namespace) -> int:
    await run_agent(
        AgentOptions(
            config_path=args.config,
            kubeconfig=args.kubeconfig,
            node_name=args.node_name,
            node_ip=args.node_ip,
            standalone=args.standalone,
            root_dir=args.root_dir,
            eviction_signal_injection=args.eviction_signal_injection,
            bootstrap_kubeconfig=args.bootstrap_kubeconfig,
            cert_dir=args.cert_dir,
        )
    )
    return 0


async def _experiment(args: argparse.Namespace) -> int:
    # Imported here: the runner is heavy and only this command needs it.
    from nodeagent.experiment.runner import RunOptions, run_experiment  # noqa: PLC0415

    return await run_experiment(
        RunOptions(
            scenario=args.scenario,
            out=args.out,
            kubeconfig=args.kubeconfig,
            node=args.node,
            injection_file=args.injection_file,
            image=args.image,
            sweep=args.sweep,
            versus_upstream=args.versus_upstream,
        )
    )


async def _experiment_plot(args: argparse.Namespace) -> int:
    from nodeagent.experiment.runner import replot, replot_summary  # noqa: PLC0415

    png, table = replot_summary(args.run) or replot(args.run)
    print(table)
    print(f"plot: {png}")
    return 0


async def _conformance(args: argparse.Namespace) -> int:
    if args.suite is not None:
        return await _node_suite(args)
    if args.certified or args.resume is not None or args.report is not None:
        return await _certified(args)
    names = subset.SUBSETS[args.subset] if args.subset else ()
    preset = presets.PRESETS[args.preset] if args.preset else None
    # A given --focus, --skip or --label-filter replaces the preset's (e.g. to run again some specs of a preset on
    # the testbed it asks for).
    focus = (
        subset.focus(names)
        if names
        else args.focus
        if args.focus is not None
        else preset.focus
        if preset is not None
        else DEFAULT_FOCUS
    )
    default = preset.skip if preset is not None else default_skip(slow=args.slow)
    label_filter = args.label_filter if args.label_filter is not None else preset.label_filter if preset else ""
    kubeconfig, registry, cluster = args.kubeconfig, args.registry, None
    if args.cluster is not None:
        # A `nodeagent cluster up` cluster (e.g. the devices preset's multi-node specs): its admin kubeconfig and its
        # registry, from its state.
        if kubeconfig is not None:
            raise ConformanceError("give --cluster or --kubeconfig, not both")
        cluster = args.cluster.resolve()
        target = cluster_target(cluster)
        kubeconfig, registry = target.kubeconfig, target.registry
    return await conformance(
        HarnessOptions(
            focus=focus,
            expected_specs=len(names),
            label_filter=label_filter,
            preset=preset,
            skip=args.skip if args.skip is not None else default,
            procs=args.procs,
            provider=args.provider,
            timeout=args.timeout,
            dir=args.dir,
            kubeconfig=kubeconfig,
            cluster=cluster,
            registry=registry,
            keep=args.keep,
        )
    )


async def _node_suite(args: argparse.Namespace) -> int:
    from nodeagent.conformance import noderun  # noqa: PLC0415
    from nodeagent.conformance.systemctl_shim import Kubelet  # noqa: PLC0415

    if args.certified or args.subset or args.preset or args.skip is not None or args.kubeconfig is not None:
        raise ConformanceError("--suite runs its own selection on a testbed of its own: give only --focus, --dir "
                               "(or --resume / --report DIR), --shard, --shard-minutes, --time-budget, --kubelet, "
                               "--timeout, --keep")  # fmt: skip
    given = [path for path in (args.dir, args.resume, args.report) if path is not None]
    if len({path.resolve() for path in given}) > 1:
        raise ConformanceError("--dir, --resume and --report name the same run directory: give one of them")
    return await noderun.node_conformance(
        noderun.NodeRunOptions(
            focus=args.focus,
            dir=given[0] if given else None,
            kubelet=Kubelet(args.kubelet),
            timeout=args.timeout if args.timeout != DEFAULT_TIMEOUT else noderun.DEFAULT_TIMEOUT,
            keep=args.keep,
            shard=args.shard,
            shard_minutes=args.shard_minutes,
            time_budget_minutes=args.time_budget,
            report_only=args.report is not None,
        )
    )


async def _certified(args: argparse.Namespace) -> int:
    if args.skip is not None or args.slow:
        raise ConformanceError("--certified skips nothing: --skip and --slow do not apply")
    return await certified(
        CertifiedOptions(
            dir=args.dir,
            resume=args.resume,
            report_only=args.report,
            shard=args.shard,
            kubeconfig=args.kubeconfig,
            registry=args.registry,
            cluster=args.cluster,
            procs=args.procs,
            provider=args.provider,
            timeout=args.timeout,
            budget_minutes=args.shard_minutes,
            durations=tuple(args.durations),
            narrow=args.focus or "",
            label_filter=args.label_filter or "",
        )
    )


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


async def _pods(args: argparse.Namespace) -> int:
    address, port = "127.0.0.1", 10248
    if args.config is not None:
        config = load_config(args.config).config
        address, port = config.healthz_bind_address, config.healthz_port
        if port == 0:
            raise LocalServerUnreachable(f"healthzPort is 0 in {args.config}: the agent serves no local endpoint")
    if args.address is not None:
        address, port = args.address
    pods = await fetch_pods(address, port)
    if args.output == "json":
        print(json.dumps(pods, indent=2))
    else:
        print(format_pods(pods, now=datetime.datetime.now(datetime.UTC)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodeagent", description="A kubelet written in Python.")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument(
        "--version",
        action="version",
        version=version_text(),
        help="show nodeagent's version and the Kubernetes release it emulates by default, and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="install what is missing, start a local testbed and print how to use it")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    up.add_argument("--node-name", default=None)
    up.add_argument("--detach", action="store_true", help="leave the testbed running and return")
    up.set_defaults(handler=_up)

    run = sub.add_parser("run", help="run the node agent: join the cluster of --kubeconfig and run its pods")
    run.add_argument("--config", type=Path, required=True, help="KubeletConfiguration (kubelet.config.k8s.io/v1beta1)")
    run.add_argument("--kubeconfig", type=Path, default=None, help="the node's credential")
    run.add_argument("--node-name", default=None, help="default: the hostname")
    run.add_argument("--node-ip", default=None, help="the node's InternalIP (default: the first global IPv4)")
    run.add_argument("--standalone", action="store_true", help="no apiserver: static pods only")
    run.add_argument(
        "--root-dir",
        type=Path,
        default=Path("/var/lib/kubelet"),
        help="where the agent keeps pod directories (pods/<uid>/...), as the kubelet's --root-dir",
    )
    run.add_argument(
        "--bootstrap-kubeconfig",
        type=Path,
        default=None,
        help="TLS bootstrap: when --kubeconfig is missing or its certificate expired, request a client certificate "
        "with this kubeconfig's credential (a bootstrap token) and write --kubeconfig",
    )
    run.add_argument(
        "--cert-dir", type=Path, default=None, help="where the client certificate pairs go (default <root-dir>/pki)"
    )
    # Experiments only, so not in --help: eviction signals injected from a JSON file (nodeagent.experiment).
    run.add_argument("--eviction-signal-injection", type=Path, default=None, help=argparse.SUPPRESS)
    run.set_defaults(handler=_run)

    pods = sub.add_parser("pods", help="list the pods a running agent runs, with their status (its local /pods)")
    pods.add_argument("--config", type=Path, default=None, help="the agent's config: its healthzBindAddress/Port")
    pods.add_argument(
        "--address", type=_host_port, default=None, help="HOST:PORT of the agent's local endpoint (default :10248)"
    )
    pods.add_argument("-o", "--output", choices=("wide", "json"), default="wide")
    pods.set_defaults(handler=_pods)

    conf = sub.add_parser(
        "conformance",
        help="run the upstream e2e suite's [NodeConformance] specs against a testbed whose only node is nodeagent",
    )
    conf.add_argument(
        "--focus",
        default=None,
        help=f"ginkgo focus regex (default {DEFAULT_FOCUS!r}); with --certified, a Python regex that keeps only the "
        "certified specs it matches",
    )
    conf.add_argument(
        "--skip",
        default=None,
        help=f"ginkgo skip regex, replacing the default {default_skip(slow=False)!r} (--slow drops [Slow] from it)",
    )
    conf.add_argument("--slow", action="store_true", help="do not skip [Slow] specs")
    conf.add_argument(
        "--suite",
        choices=("node-eviction",),
        default=None,
        help="node-eviction: upstream's node e2e suite (e2e_node.test), its 22 eviction, image-GC, critical-pod and "
        "local-storage specs, against a testbed's agent behind a systemctl shim (--focus narrows them; one run per "
        "machine: ports 10248 and 10255; docs/conformance.md)",
    )
    conf.add_argument(
        "--kubelet",
        choices=("nodeagent", "upstream"),
        default="nodeagent",
        help="with --suite: the node behind the shim (upstream: the upstream kubelet, the judge)",
    )
    selection = conf.add_mutually_exclusive_group()
    selection.add_argument(
        "--subset",
        choices=sorted(subset.SUBSETS),
        default=None,
        help="a fixed list of specs instead of --focus (ci: what .ci/run runs); fails unless exactly those ran",
    )
    selection.add_argument(
        "--preset",
        choices=sorted(presets.PRESETS),
        default=None,
        help="a named selection with its own focus, skip, label filter and testbed settings, counted per group; "
        "--focus, --skip, --label-filter given with it replace its own (node-features: the node specs the default "
        "run leaves out; devices: upstream's DRA specs that need a kubelet and a driver)",
    )
    selection.add_argument(
        "--certified",
        action="store_true",
        help="the certified suite (focus [Conformance], no skip) in resumable shards of about 45 min, against "
        "`nodeagent cluster up` (--cluster) or --kubeconfig; see docs/conformance.md",
    )
    certified_group = conf.add_argument_group("--certified, and --suite")
    certified_group.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="go on with the certified (or --suite) run in DIR: what is missing",
    )
    certified_group.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="print the merged report of the certified (or --suite) run in DIR",
    )
    certified_group.add_argument("--shard", type=int, default=None, metavar="K", help="run only shard K of the plan")
    certified_group.add_argument(
        "--cluster",
        type=Path,
        default=None,
        metavar="DIR",
        help="the `nodeagent cluster up --dir DIR` cluster to run against (with --certified its default is "
        "/var/tmp/nodeagent-cluster; otherwise a new testbed unless this or --kubeconfig is given)",
    )
    certified_group.add_argument(
        "--shard-minutes", type=float, default=45.0, help="a shard's estimated length when planning (default 45)"
    )
    certified_group.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help="with --suite: start the pending specs in the plan's order (shards whose specs all ended passed over) "
        "while their estimates fit in MINUTES from the command's start",
    )
    certified_group.add_argument(
        "--durations",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="JUnit reports (files, or directories searched for junit_*.xml) whose spec times the plan uses",
    )
    conf.add_argument(
        "--label-filter",
        default=None,
        help="ginkgo v2 label filter (e.g. '!NodeConformance && Feature:SidecarContainers'); replaces a preset's",
    )
    conf.add_argument(
        "-p", "--procs", type=int, default=DEFAULT_PROCS, help=f"parallel ginkgo processes (default {DEFAULT_PROCS})"
    )
    conf.add_argument("--kubeconfig", type=Path, default=None, help="run against this cluster instead of a new testbed")
    conf.add_argument(
        "--registry",
        default=None,
        help="with --kubeconfig: HOST:PORT of the (testbed's) registry the suite's images come from; the testbed's "
        "busybox, pause and agnhost are pushed into it under the suite's names",
    )
    conf.add_argument("--provider", default="skeleton", help="the e2e framework's --provider (skeleton or local)")
    conf.add_argument("--timeout", default=DEFAULT_TIMEOUT, help=f"ginkgo's suite timeout (default {DEFAULT_TIMEOUT})")
    conf.add_argument(
        "--dir", type=Path, default=None, help="run directory: testbed/, repo-list.yaml, report/ (default: a new one)"
    )
    conf.add_argument("--keep", action="store_true", help="leave the testbed up after the run")
    conf.set_defaults(handler=_conformance)

    testbed = sub.add_parser("testbed", help="the hermetic set of real parts")
    actions = testbed.add_subparsers(dest="action", required=True)
    install = actions.add_parser(
        "install", help="install containerd, etcd, registry; build the control plane (idempotent)"
    )
    install.add_argument(
        "--with-kubelet",
        action="store_true",
        help="also build the upstream kubelet, which the testbed can run as its node instead of nodeagent",
    )
    install.add_argument(
        "--with-csi",
        action="store_true",
        help="also build the CSI stack (mock driver, registration sidecar, external-attacher; testbed/csistack.py)",
    )
    install.add_argument(
        "--with-kubeadm",
        action="store_true",
        help="also build kubeadm, which `nodeagent cluster up` runs (testbed/kubeadm.py, docs/kubeadm.md)",
    )
    install.add_argument(
        "--with-certified",
        action="store_true",
        help="also build what the images only the certified [Conformance] suite pulls are made of "
        "(sample-apiserver, etcd 3.6, Apache, dnsutils; testbed/certifiedbuild.py, docs/conformance.md)",
    )
    install.add_argument(
        "--with-kwok",
        action="store_true",
        help="also build KWOK's controller, the peer of `benchmarks/fleet.py --peer kwok` (testbed/kwok.py, "
        "docs/fleet.md)",
    )
    for name in ("up", "down"):
        action = actions.add_parser(name)
        action.add_argument("--dir", type=Path, required=True)
        if name == "up":
            action.add_argument("--node-name", default=None)
    testbed.set_defaults(handler=_testbed)

    experiment = sub.add_parser("experiment", help="eviction experiments: a scenario run, its timeline and plot")
    kinds = experiment.add_subparsers(dest="kind", required=True)
    evict = kinds.add_parser(
        "eviction",
        help="run SCENARIO.yaml on a new testbed (or --kubeconfig's node); writes timeline.jsonl/.csv, a PNG plot",
    )
    evict.add_argument("scenario", type=Path, help="the scenario (see experiments/*.yaml)")
    evict.add_argument("--out", type=Path, default=None, help="output directory (default ./eviction-NAME)")
    evict.add_argument("--kubeconfig", type=Path, default=None, help="an existing cluster (admin) instead of a testbed")
    evict.add_argument("--node", default=None, help="with --kubeconfig: the node whose agent is exercised")
    evict.add_argument(
        "--injection-file",
        type=Path,
        default=None,
        help="with --kubeconfig: the file that node's agent reads (nodeagent run --eviction-signal-injection)",
    )
    evict.add_argument("--image", default=None, help="the pods' image (sh, dd, sleep); default the testbed's busybox")
    how = evict.add_mutually_exclusive_group()
    how.add_argument(
        "--sweep",
        default=None,
        metavar="SETTING=V1,V2,...",
        help="one run per value of an eviction setting on one testbed (e.g. evictionHard.memory.available="
        "current-100Mi,current-200Mi), then sweep.png/sweep.txt: first eviction and victims against the value",
    )
    how.add_argument(
        "--versus-upstream",
        action="store_true",
        help="run it on nodeagent, then on the upstream kubelet, on one testbed (a scenario without inject), then "
        "comparison.png/comparison.txt side by side; exit status 2 when the victims or their order differ",
    )
    evict.set_defaults(handler=_experiment)
    replot = kinds.add_parser(
        "plot",
        help="draw RUN's plot and summary again from its timeline.jsonl and scenario.yaml (no testbed); for a sweep's "
        "or a comparison's directory, each run's and the summary's",
    )
    replot.add_argument("run", type=Path, help="an experiment's output directory")
    replot.set_defaults(handler=_experiment_plot)
    vm_command.add_parser(sub)
    cluster_command.add_parser(sub)
    fleet_command.add_parser(sub)
    kind_command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    try:
        code: int = asyncio.run(args.handler(args))
    except (
        installer.InstallError,
        TestbedError,
        ComponentFailed,
        AgentError,
        ConfigError,
        LocalServerUnreachable,
        ConformanceError,
        ExperimentError,
        VMError,
        ClusterError,
        NodeError,
        FleetError,
        KindError,
    ) as exc:
        print(_error_text(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: what was started is torn down already (the handlers' own cleanup)
        print("nodeagent: interrupted", file=sys.stderr)
        return 130
    return code


def _error_text(exc: Exception) -> str:
    """`nodeagent: <what>`; a configuration's problems each on their own `nodeagent: <field>: <problem>` line, so
    that a bad threshold reads `nodeagent: evictionHard: memory.available: ...` as the eviction issue asks."""
    if isinstance(exc, ConfigError) and exc.problems:
        return "\n".join([f"nodeagent: {exc.summary}", *(f"nodeagent: {p}" for p in exc.problems)])
    return f"nodeagent: {exc}"


if __name__ == "__main__":
    sys.exit(main())
