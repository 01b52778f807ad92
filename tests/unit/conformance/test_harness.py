"""The harness's check that a given cluster serves a preset's API versions: one kubectl, the cluster's or the
testbed's, stood in for by a script that answers for the kubeconfig it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent import cli
from nodeagent.cli import build_parser
from nodeagent.cluster.cluster import STATE_FILE, Cluster, ClusterState
from nodeagent.cluster.nodenet import Fabric
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.harness import HarnessOptions, check_api_versions
from nodeagent.conformance.presets import DEVICES
from nodeagent.testbed.versions import kubernetes_bin_dir

# `kubectl --kubeconfig=K api-versions` prints the file K.served; without one it fails as kubectl does.
FAKE_KUBECTL = """#!/bin/sh
config="${1#--kubeconfig=}"
shift
[ "$*" = api-versions ] || { echo "unexpected: $*" >&2; exit 2; }
[ -f "$config.served" ] || { echo "error: stat $config: no such file or directory" >&2; exit 1; }
cat "$config.served"
"""


@pytest.fixture
def fake_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path / "cache"))
    path = kubernetes_bin_dir() / "kubectl"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE_KUBECTL)
    path.chmod(0o755)


def _serves(kubeconfig: Path, *versions: str) -> None:
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.with_name(kubeconfig.name + ".served").write_text("".join(f"{v}\n" for v in versions))


ALL = ("v1", "resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2")


@pytest.mark.usefixtures("fake_kubectl")
async def test_a_kubeconfig_is_asked_through_the_testbeds_kubectl(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "given" / "admin.conf"
    _serves(kubeconfig, *ALL)
    await check_api_versions(DEVICES, kubeconfig=kubeconfig)
    _serves(kubeconfig, "v1", "resource.k8s.io/v1")
    with pytest.raises(ConformanceError, match=r"does not serve resource.k8s.io/v1beta1, resource.k8s.io/v1beta2"):
        await check_api_versions(DEVICES, kubeconfig=kubeconfig)
    with pytest.raises(ConformanceError, match=r"^kubectl api-versions: error: stat .*/nowhere"):
        await check_api_versions(DEVICES, kubeconfig=tmp_path / "nowhere")


@pytest.mark.usefixtures("fake_kubectl")
async def test_a_cluster_is_asked_as_its_admin(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster")
    _serves(cluster.admin_kubeconfig, *ALL)
    # The cluster's admin answers, whatever kubeconfig is given beside it.
    await check_api_versions(DEVICES, kubeconfig=tmp_path / "nowhere", cluster=cluster.root)
    _serves(cluster.admin_kubeconfig, *ALL[:-1])
    with pytest.raises(ConformanceError, match=r"does not serve resource.k8s.io/v1beta2"):
        await check_api_versions(DEVICES, kubeconfig=tmp_path / "nowhere", cluster=cluster.root)
    cluster.admin_kubeconfig.with_name("admin.conf.served").unlink()
    with pytest.raises(ConformanceError, match=r"^kubectl api-versions: error: stat "):
        await check_api_versions(DEVICES, kubeconfig=tmp_path / "nowhere", cluster=cluster.root)


async def test_cli_cluster_reaches_the_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cluster"
    root.mkdir()
    fabric = Fabric(bridge="nafab0000000", cidr="198.18.5.0/24")
    ClusterState(registry="198.18.5.1:5000", service_cidr="198.19.0.0/16", nodes=(), fabric=fabric).save(
        root / STATE_FILE
    )
    seen: list[HarnessOptions] = []

    async def fake_conformance(options: HarnessOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(cli, "conformance", fake_conformance)
    args = build_parser().parse_args(["conformance", "--preset", "devices", "--cluster", str(root)])
    assert await args.handler(args) == 0
    (options,) = seen
    assert (options.cluster, options.kubeconfig, options.registry) == (
        root,
        Cluster(root).admin_kubeconfig,
        "198.18.5.1:5000",
    )
