"""The kubelet's command line (pflag's forms) onto nodeagent's options, and kubeadm's drop-in files onto argv."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from nodeagent import kubeletflags
from nodeagent.config import defaults
from nodeagent.config.kubelet_config import Taint, TaintEffect
from nodeagent.kubeletflags import FlagError, KubeletFlags, parse_kubelet_args
from nodeagent.nodestatus import initial_node
from tests.unit.nodestatus.test_node import FACTS


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], KubeletFlags()),
        (["--config=/c.yaml"], KubeletFlags(config=Path("/c.yaml"))),
        (["--config", "/c.yaml"], KubeletFlags(config=Path("/c.yaml"))),
        (["--kubeconfig=/k", "--bootstrap-kubeconfig", "/b"],
         KubeletFlags(kubeconfig=Path("/k"), bootstrap_kubeconfig=Path("/b"))),
        (["--container-runtime-endpoint=unix:///run/c.sock"], KubeletFlags(container_runtime_endpoint="unix:///run/c.sock")),
        (["--node-ip", "198.18.0.5", "--hostname-override=Node-A"],
         KubeletFlags(node_ip="198.18.0.5", hostname_override="Node-A")),
        (["--pod-infra-container-image=registry.k8s.io/pause:3.10"],
         KubeletFlags(pod_infra_container_image="registry.k8s.io/pause:3.10")),
        (["--root-dir=/r"], KubeletFlags(root_dir=Path("/r"))),
        (["--provider-id=kind://docker/kind/kind-worker"], KubeletFlags(provider_id="kind://docker/kind/kind-worker")),
        (["--root-dir=/r", "--cert-dir", "/p"], KubeletFlags(root_dir=Path("/r"), cert_dir=Path("/p"))),
        # The kubelet's name normalization: _ reads as -.
        (["--node_ip=198.18.0.6"], KubeletFlags(node_ip="198.18.0.6")),
        # The last of a repeated flag wins.
        (["--node-ip=198.18.0.1", "--node-ip=198.18.0.2"], KubeletFlags(node_ip="198.18.0.2")),
        (["--v=2"], KubeletFlags(verbosity=2)),
        (["--v", "4"], KubeletFlags(verbosity=4)),
        (["-v", "3"], KubeletFlags(verbosity=3)),
        (["-v=5"], KubeletFlags(verbosity=5)),
        (["-v6"], KubeletFlags(verbosity=6)),
        (["--version"], KubeletFlags(version="true")),
        (["--version=raw"], KubeletFlags(version="raw")),
        (["--version=false"], KubeletFlags()),
        (["-h"], KubeletFlags(help=True)),
        # Node labels: pairs on ',' and the first '='; repeats merge (MapStringString).
        (["--node-labels=a=1,b=x", "--node-labels", "c=,a=2"], KubeletFlags(node_labels={"a": "2", "b": "x", "c": ""})),
        (["--node-labels=node.kubernetes.io/exclude-from-external-load-balancers=true"],
         KubeletFlags(node_labels={"node.kubernetes.io/exclude-from-external-load-balancers": "true"})),
        (["--node-labels=kubernetes.io/hostname=h,x.kubelet.kubernetes.io/y=z,example.com/role=db"],
         KubeletFlags(node_labels={"kubernetes.io/hostname": "h", "x.kubelet.kubernetes.io/y": "z",
                                   "example.com/role": "db"})),
        # Taints: key=value:Effect or key:Effect; a repeat replaces.
        (["--register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule,dedicated=gpu:NoExecute"],
         KubeletFlags(register_with_taints=(
             Taint(key="node-role.kubernetes.io/control-plane", effect=TaintEffect.NO_SCHEDULE),
             Taint(key="dedicated", effect=TaintEffect.NO_EXECUTE, value="gpu"),
         ))),
        (["--register-with-taints=a:NoSchedule", "--register-with-taints=b:PreferNoSchedule"],
         KubeletFlags(register_with_taints=(Taint(key="b", effect=TaintEffect.PREFER_NO_SCHEDULE),))),
        (["--register-with-taints="], KubeletFlags(register_with_taints=())),
        # A value that starts with '-' is still the value of the flag before it, as in pflag.
        (["--hostname-override", "-x"], KubeletFlags(hostname_override="-x")),
    ],
)  # fmt: skip
def test_parse(argv: list[str], expected: KubeletFlags) -> None:
    assert parse_kubelet_args(argv) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fail-swap-on=false"], "failed to parse kubelet flag: unknown flag: --fail-swap-on"),
        (["--feature-gates", "X=true"], "unknown flag: --feature-gates"),
        (["--config=/c", "--cgroup-driver=systemd"], "unknown flag: --cgroup-driver"),
        (["-config=/c"], "unknown shorthand flag: 'c' in -config=/c"),
        (["--config"], "flag needs an argument: --config"),
        (["-v"], "flag needs an argument: 'v' in -v"),
        (["--v=high"], 'invalid argument "high" for "-v, --v" flag'),
        (["--version=maybe"], 'invalid argument "maybe" for "--version" flag'),
        (["run"], 'unknown command "run" for "kubelet"'),
        (["--", "x"], 'unknown command "x" for "kubelet"'),
        (["--node-labels=noequals"], 'invalid argument "noequals" for "--node-labels" flag'),
        (["--node-labels=node-role.kubernetes.io/worker="],
         "failed to validate kubelet flags: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
         "[node-role.kubernetes.io/worker]"),
        (["--node-labels=app.k8s.io/x=1"], "labels specified with --node-labels: [app.k8s.io/x]"),
        (["--node-labels=bad key=1"], "invalid node labels: 'bad key'"),
        (["--node-labels=k=bad value"], "invalid node labels: 'bad value'"),
        (["--node-labels=b=x=y"], "invalid node labels: 'x=y'"),
        (["--register-with-taints=a:Sometimes"], "invalid taint effect: Sometimes"),
        (["--register-with-taints=novalue"], "invalid taint spec: novalue"),
    ],
)  # fmt: skip
def test_parse_errors_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse_kubelet_args(argv)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("flags", "overrides"),
    [
        (KubeletFlags(), {}),
        (KubeletFlags(container_runtime_endpoint="unix:///x.sock"), {"container_runtime_endpoint": "unix:///x.sock"}),
        (KubeletFlags(register_with_taints=()), {"register_with_taints": ()}),
        (KubeletFlags(provider_id="kind://docker/k/n"), {"provider_id": "kind://docker/k/n"}),
        (KubeletFlags(register_with_taints=(Taint(key="a", effect=TaintEffect.NO_SCHEDULE),)),
         {"register_with_taints": (Taint(key="a", effect=TaintEffect.NO_SCHEDULE),)}),
    ],
)  # fmt: skip
def test_config_overrides(flags: KubeletFlags, overrides: dict[str, Any]) -> None:
    assert kubeletflags.config_overrides(flags) == overrides


@pytest.mark.parametrize(
    ("flags", "cert_dir"),
    [
        (KubeletFlags(), Path("/var/lib/kubelet/pki")),
        (KubeletFlags(root_dir=Path("/r")), Path("/r/pki")),
        (KubeletFlags(root_dir=Path("/r"), cert_dir=Path("/c")), Path("/c")),
    ],
)
def test_cert_dir_defaults_under_root_dir(flags: KubeletFlags, cert_dir: Path) -> None:
    assert flags.effective_cert_dir == cert_dir


@pytest.mark.parametrize(
    ("mode", "line"),
    [("true", "Kubernetes v1.34.4"), ("raw", 'version.Info{GitVersion:"v1.34.4", Platform:"linux"}')],
)
def test_version_line(mode: str, line: str) -> None:
    assert kubeletflags.version_line("v1.34.4", mode) == line


KUBEADM_ENV = (
    'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock '
    '--pod-infra-container-image=registry.k8s.io/pause:3.10 --node-ip=198.18.0.9"\n'
)


@pytest.mark.parametrize(
    ("env", "defaults", "tail"),
    [
        (None, None, []),
        (KUBEADM_ENV, None, [
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
            "--node-ip=198.18.0.9",
        ]),
        # /etc/default/kubelet's KUBELET_EXTRA_ARGS come last, so they win over kubeadm's.
        (KUBEADM_ENV, "# local\nKUBELET_EXTRA_ARGS=--node-ip=198.18.0.10 --v=2\n", [
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
            "--node-ip=198.18.0.9",
            "--node-ip=198.18.0.10",
            "--v=2",
        ]),
        ("KUBELET_KUBEADM_ARGS=''\n", "KUBELET_EXTRA_ARGS=\n", []),
        ("OTHER=1\n", None, []),
    ],
)  # fmt: skip
def test_drop_in_argv(env: str | None, defaults: str | None, tail: list[str]) -> None:
    argv = kubeletflags.drop_in_argv(env, defaults)
    assert argv == [*kubeletflags.KUBEADM_FIXED_ARGS, *tail]
    # What kubeadm writes always parses.
    parse_kubelet_args(argv)


def test_drop_in_files(tmp_path: Path) -> None:
    env = tmp_path / "kubeadm-flags.env"
    env.write_text(KUBEADM_ENV)
    argv = kubeletflags.read_drop_in(env, tmp_path / "missing")
    flags = parse_kubelet_args(argv)
    assert flags.config == Path("/var/lib/kubelet/config.yaml")
    assert flags.kubeconfig == Path("/etc/kubernetes/kubelet.conf")
    assert flags.bootstrap_kubeconfig == Path("/etc/kubernetes/bootstrap-kubelet.conf")
    assert flags.node_ip == "198.18.0.9"


@pytest.mark.parametrize(
    ("argv", "code", "out", "err"),
    [
        (["--version"], 0, "Kubernetes v", ""),
        (["--bogus"], 1, "", "Error: failed to parse kubelet flag: unknown flag: --bogus"),
        (["--kubeconfig=/k"], 1, "", "Error: --config is required"),
        (["--help"], 0, "Supported flags: --config", ""),
    ],
)
def test_main_exits(argv: list[str], code: int, out: str, err: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert kubeletflags.main(argv) == code
    captured = capsys.readouterr()
    assert out in captured.out
    assert err in captured.err


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({}, {}),
        ({"example.com/role": "db"}, {"example.com/role": "db"}),
        # As upstream's initialNode: the flag's labels go over the well-known ones.
        ({"kubernetes.io/hostname": "other"}, {"kubernetes.io/hostname": "other"}),
    ],
)
def test_node_labels_reach_the_registered_node(labels: dict[str, str], expected: dict[str, str]) -> None:
    flags = parse_kubelet_args([f"--node-labels={','.join(f'{k}={v}' for k, v in labels.items())}"] if labels else [])
    config = dataclasses.replace(defaults(), **kubeletflags.config_overrides(flags))
    node = initial_node("n1", FACTS, config, extra_labels=flags.node_labels)
    got = node["metadata"]["labels"]
    assert {k: got[k] for k in expected} == expected
    assert got["kubernetes.io/os"] == "linux"
