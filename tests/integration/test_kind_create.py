"""kind v0.33.0 creates a cluster from the offline node image, for real: the isolated Docker (kind/dockerd.py),
the node image (nodeimage.py, cached by content), `kind create cluster` on a pre-created network in 198.19.252.0/24,
then `kind delete cluster` and every trace removed.

Marked `kind` and deselected by default (pyproject addopts): a cold image build runs mmdebstrap (about a minute and
a half) and Go builds kind once; warm, the test takes about a minute. Run it with
`python3 -m pytest -m kind tests/integration/test_kind_create.py -s` (root; `nodeagent kind install` first).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodeagent.kind import cluster, nodefiles, nodeimage
from nodeagent.kind.dockerd import isolated_docker
from nodeagent.kind.hoststate import compare, snapshot

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def test_kind_creates_a_control_plane_from_our_image(tmp_path: Path) -> None:
    before = snapshot()
    base = tmp_path / "docker"
    work = tmp_path / "work"
    work.mkdir()
    with isolated_docker(base) as docker:
        built = nodeimage.build_node_image(docker, print)
        result = cluster.try_create(docker, built.image, work, print, workers=1)
        print(cluster.report(result))
        networks = docker.docker("network", "ls", "--format", "{{.Name}}").stdout.split()
        containers = docker.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    daemons = [docker.dockerd, docker.containerd]
    assert all(p is not None and p.returncode is not None for p in daemons)

    assert result.returncode == 0, result.output[-4000:]
    assert "Your Kubernetes control-plane has initialized successfully!" in result.output
    nodes = result.diagnostics["nodes"]
    assert f"{cluster.CLUSTER_NAME}-control-plane" in nodes and "v1.34.4" in nodes
    # kindnet is not served (disableDefaultCNI): try_create's bridge conflist and routes make both nodes Ready.
    assert f"{cluster.CLUSTER_NAME}-worker" in nodes
    assert "NotReady" not in nodes and result.ready, nodes
    pods = result.diagnostics["pods"].splitlines()[1:]
    for name in ("coredns-", "kube-proxy-", *CONTROL_PLANE):
        assert any(line.split()[1].startswith(name) and "Running" in line for line in pods), (name, pods)
    dns = cluster.cluster_dns_ip()
    assert result.diagnostics[f"{cluster.CLUSTER_NAME}-worker -> kube-dns {dns}:53/tcp"].startswith("connected")
    running = result.diagnostics["crictl ps -a"]
    for name in CONTROL_PLANE:
        assert any(name in line and "Running" in line for line in running.splitlines()), (name, running)
    images = result.diagnostics["crictl images"]
    for image in nodefiles.upstream_image_names():
        repository, _, tag = image.upstream.rpartition(":")
        assert any(line.split()[:2] == [repository, tag] for line in images.splitlines()), (image, images)
    assert result.diagnostics["systemctl is-system-running"] == "running"

    # kind deleted its node and our network; nothing of ours is left on the host.
    assert not [c for c in containers if c.startswith(cluster.CLUSTER_NAME)], containers
    assert cluster.NETWORK not in networks
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert cluster.BRIDGE not in links
    assert str(base) not in Path("/proc/self/mountinfo").read_text()
    diff = compare(before, snapshot())
    assert diff.refused == []
