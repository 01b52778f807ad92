"""The upstream kubelet as a testbed part, without running it: `--with-kubelet` plumbing from the command line to
the install steps, the KubeletConfiguration and command line it gets, who counts as holding the node, and the
cgroup root made for it. tests/integration/test_upstream_kubelet.py runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent import cli
from nodeagent.testbed import configs, install, upstreamkubelet
from nodeagent.testbed.layout import Layout, Settings
from nodeagent.testbed.upstreamkubelet import MACHINE_FIELDS, holds_node, kubelet_argv, kubelet_config

ROOT = Path("/bed/upstream-kubelet")


@pytest.mark.parametrize(
    ("argv", "with_kubelet"),
    [
        pytest.param(["testbed", "install"], False, id="default"),
        pytest.param(["testbed", "install", "--with-kubelet"], True, id="with-kubelet"),
    ],
)
async def test_install_option_reaches_the_installer(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], with_kubelet: bool
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(install, "install", lambda **kwargs: calls.append(kwargs))
    args = cli.build_parser().parse_args(argv)
    assert await cli._testbed(args) == 0
    assert calls == [
        {
            "with_kubelet": with_kubelet,
            "with_csi": False,
            "with_kubeadm": False,
            "with_certified": False,
            "with_kwok": False,
        }
    ]


def test_with_kubelet_is_refused_elsewhere() -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["testbed", "up", "--dir", "/x", "--with-kubelet"])


@pytest.mark.parametrize(
    ("with_kubelet", "expected"),
    [
        pytest.param(False, [], id="default-no-kubelet"),
        # Right after the control plane: it is built in the control plane's build module.
        pytest.param(True, ["build_kubelet"], id="kubelet-after-control-plane"),
    ],
)
def test_install_steps(with_kubelet: bool, expected: list[str]) -> None:
    names = [step.__name__ for step in install.install_steps(with_kubelet=with_kubelet)]
    base = [step.__name__ for step in install.install_steps()]
    assert [n for n in names if n not in base] == expected
    assert [n for n in names if n in base] == base
    if with_kubelet:
        assert names.index("build_kubelet") == names.index("build_kubernetes") + 1
    assert "kubelet" not in install.KUBERNETES_COMMANDS  # an optional extra, never part of the default set


@pytest.mark.parametrize(
    ("agent", "expected_extra"),
    [
        pytest.param(
            {"cgroupDriver": "cgroupfs", "port": 1234},
            {
                **MACHINE_FIELDS,
                "volumePluginDir": str(ROOT / "volume-plugins"),
                # Not /var/log/pods: the kubelet's GC would delete the logs of other testbeds' pods (issue 34).
                "podLogsDir": str(ROOT / "pod-logs"),
            },
            id="machine-fields-added",
        ),
        # A caller's own value wins (a config handed to start_kubelet(config=...)).
        pytest.param(
            {"failSwapOn": True, "oomScoreAdj": -999, "volumePluginDir": "/mine", "podLogsDir": "/var/log/pods"},
            {"failCgroupV1": False},
            id="caller-wins",
        ),
    ],
)
def test_kubelet_config(agent: dict[str, Any], expected_extra: dict[str, Any]) -> None:
    config = kubelet_config(agent, root=ROOT)
    assert config == {**agent, **expected_extra}
    assert agent == {k: v for k, v in config.items() if k in agent}  # the input is not changed


def test_kubelet_argv() -> None:
    layout = Layout(Path("/bed"))
    settings = Settings(
        node_name="node-a",
        etcd_client_port=1,
        etcd_peer_port=2,
        apiserver_port=3,
        controller_manager_port=4,
        scheduler_port=5,
        registry_port=6,
        stream_port=7,
        bridge="na1",
        pod_cidr="198.18.7.0/24",
        service_cidr="198.19.0.0/16",
    )
    argv = kubelet_argv(Path("/cache/kubelet"), config=Path("/bed/k.yaml"), layout=layout, settings=settings, root=ROOT)
    assert argv == [
        "/cache/kubelet",
        "--config=/bed/k.yaml",
        "--kubeconfig=/bed/node.kubeconfig",
        "--hostname-override=node-a",
        "--node-ip=198.18.7.1",
        f"--root-dir={ROOT}",
    ]
    assert holds_node(tuple(argv), layout.node_kubeconfig)


@pytest.mark.parametrize(
    ("argv", "held"),
    [
        pytest.param(("kubelet", "--kubeconfig=/bed/node.kubeconfig"), True, id="kubelet-equals"),
        pytest.param(("python3", "-m", "nodeagent", "run", "--kubeconfig", "/bed/node.kubeconfig"), True, id="agent"),
        pytest.param(("kubelet", "--kubeconfig=/other/node.kubeconfig"), False, id="another-testbed"),
        pytest.param(("kube-proxy", "--kubeconfig=/bed/kube-proxy.kubeconfig"), False, id="another-credential"),
        pytest.param(("python3", "x.py", "/bed/node.kubeconfig"), False, id="path-without-flag"),
        pytest.param(("nodeagent", "--kubeconfig"), False, id="flag-without-value"),
    ],
)
def test_holds_node(argv: tuple[str, ...], held: bool) -> None:
    assert holds_node(argv, Path("/bed/node.kubeconfig")) is held


def test_ensure_cgroup_root_v1(tmp_path: Path) -> None:
    for hierarchy in ("cpuset", "memory", "systemd"):
        (tmp_path / hierarchy).mkdir()
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu").symlink_to(tmp_path / "cpu,cpuacct")  # as /sys/fs/cgroup/cpu on v1: not a hierarchy of its own
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    # The kernel makes the files of a new cgroup; here the test plays the kernel for the cpuset ones, empty.
    original_mkdir = Path.mkdir

    def mkdir(path: Path, *args: Any, **kwargs: Any) -> None:
        original_mkdir(path, *args, **kwargs)
        if path.parent.name == "cpuset":
            (path / "cpuset.cpus").write_text("")
            (path / "cpuset.mems").write_text("")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", mkdir)
        made = upstreamkubelet.ensure_cgroup_root("/nodeagent-na1", root=tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in made) == [
        "cpu,cpuacct/nodeagent-na1",
        "cpuset/nodeagent-na1",
        "memory/nodeagent-na1",
        "systemd/nodeagent-na1",
    ]
    assert (tmp_path / "cpuset/nodeagent-na1/cpuset.cpus").read_text() == "0-1\n"
    assert (tmp_path / "cpuset/nodeagent-na1/cpuset.mems").read_text() == "0\n"
    assert upstreamkubelet.ensure_cgroup_root("/nodeagent-na1", root=tmp_path) == []  # idempotent


def test_ensure_cgroup_root_v2(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "system.slice").mkdir()
    made = upstreamkubelet.ensure_cgroup_root("nodeagent-na1", root=tmp_path)
    assert made == [tmp_path / "nodeagent-na1"]
    assert upstreamkubelet.ensure_cgroup_root("/", root=tmp_path) == []


def test_kubelet_config_keeps_the_testbeds_cluster_dns(tmp_path: Path) -> None:
    # The node handed to the kubelet resolves as nodeagent's did: the same clusterDNS and clusterDomain.
    settings = Settings(
        node_name="n", etcd_client_port=1, etcd_peer_port=2, apiserver_port=3, controller_manager_port=4,
        scheduler_port=5, registry_port=6, stream_port=7, bridge="na0", pod_cidr="198.18.7.0/24",
        service_cidr="198.19.0.0/16", cluster_dns="198.19.0.10",
    )  # fmt: skip
    agent = yaml.safe_load(configs.agent_config(Layout(tmp_path), settings))
    config = kubelet_config(agent, root=ROOT)
    assert (config["clusterDNS"], config["clusterDomain"]) == (["198.19.0.10"], "cluster.local")


def test_the_kubelets_device_plugin_files_go_and_a_plugins_socket_stays(tmp_path: Path) -> None:
    for name in ("kubelet.sock", "kubelet_internal_checkpoint", "example.sock"):
        (tmp_path / name).write_text("")
    upstreamkubelet._remove_device_plugin_files(tmp_path)
    upstreamkubelet._remove_device_plugin_files(tmp_path)  # idempotent: nothing left to remove
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example.sock"]
