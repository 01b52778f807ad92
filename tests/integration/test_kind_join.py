"""nodeagent joins a real kind v0.33.0 cluster as one more node, for real: `kind up` (the isolated Docker, the
offline node image, a control plane and a worker), `kind join` (a bootstrap token from the control-plane container,
kubeadm join, nodeagent's TLS bootstrap, its own containerd on kind's bridge), then a Deployment spread over the kind
worker and nodeagent, served through a ClusterIP Service from both sides, and `kubectl logs/exec/port-forward` to
nodeagent's pod through kind's API server. `kind down` removes everything, also when a step fails.

Marked `kind` and deselected by default (pyproject addopts); warm, it takes about three minutes (163 s at load
average 9-11). Run it with `python3 -m pytest -m kind tests/integration/test_kind_join.py -s` (root; `nodeagent
kind install` first).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from nodeagent.kind import cluster, join, lifecycle
from nodeagent.kind.errors import KindError
from nodeagent.kind.hoststate import compare, snapshot
from nodeagent.testbed import configs, images
from nodeagent.testbed.versions import agnhost_path, busybox_path, cache_root, kubernetes_bin_dir

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

AGNHOST = f"registry.k8s.io/{configs.AGNHOST_IMAGE_REPOSITORY}:{configs.AGNHOST_IMAGE_TAG}"
APP = "kind-join-web"
WORKER = f"{cluster.CLUSTER_NAME}-worker"


def workload(replicas: int = 2) -> str:
    """A Deployment whose pods avoid each other's node (so one lands on the kind worker, one on nodeagent; the
    control plane is tainted) and a ClusterIP Service in front of agnhost's netexec."""
    labels = {"app": APP}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "web",
                            "image": AGNHOST,
                            "imagePullPolicy": "Never",
                            "args": ["netexec", "--http-port=8080"],
                            "ports": [{"containerPort": 8080}],
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 2},
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [deployment, service]})


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.argv = [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(kubeconfig)]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        proc = subprocess.run(
            [*self.argv, *args], input=stdin, capture_output=True, text=True, check=False, timeout=timeout
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout


def http_get_argv(address: str, path: str) -> list[str]:
    """An HTTP GET with bash's /dev/tcp (the kind node has no curl): the body after the headers."""
    script = (
        f"exec 3<>/dev/tcp/{address}/80 && printf 'GET {path} HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3 && "
        "sed '1,/^\\r$/d' <&3"
    )
    return ["timeout", "5", "bash", "-c", script]


def backends_seen(run: list[str] | None, argv_for: list[str], want: set[str], timeout: float = 90) -> set[str]:
    """GET /hostname through the Service until every pod in `want` has answered (or `timeout`)."""
    del run
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while seen != want and time.monotonic() < deadline:
        proc = subprocess.run(argv_for, capture_output=True, text=True, check=False, timeout=30)
        if proc.returncode == 0 and proc.stdout.strip():
            seen.add(proc.stdout.strip())
        else:
            time.sleep(0.5)
    return seen


def check_workload(root: Path) -> dict[str, float]:
    """The Deployment over the kind worker and nodeagent, the Service from both, logs/exec/port-forward."""
    timings: dict[str, float] = {}
    kdir = lifecycle.KindDir(root)
    kubectl = Kubectl(kdir.work / "kubeconfig")
    docker = lifecycle.attached_docker(kdir)
    t = time.monotonic()
    agnhost = images.build_agnhost_image(cache_root() / "images" / "agnhost", agnhost_path(), busybox_path())
    join.import_image(root, AGNHOST, agnhost)
    timings["agnhost image into the nodes"] = time.monotonic() - t
    t = time.monotonic()
    kubectl("apply", "-f", "-", stdin=workload())
    kubectl("rollout", "status", f"deployment/{APP}", "--timeout=180s", timeout=200)
    timings["rollout"] = time.monotonic() - t
    pods = json.loads(kubectl("get", "pods", "-l", f"app={APP}", "-o", "json"))["items"]
    by_node = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods}
    assert set(by_node) == {WORKER, join.NODE_NAME}, by_node
    ours = by_node[join.NODE_NAME]
    assert all(p["status"]["podIP"].startswith("198.18.") for p in pods), [p["status"]["podIP"] for p in pods]

    service_ip = kubectl("get", "service", APP, "-o", "jsonpath={.spec.clusterIP}").strip()
    want = set(by_node.values())
    t = time.monotonic()
    from_worker = backends_seen(
        None, [*docker.base_argv(), "exec", WORKER, *http_get_argv(service_ip, "/hostname")], want
    )
    assert from_worker == want, (from_worker, want)
    from_nodeagent = backends_seen(None, join.node_namespace_argv(root, http_get_argv(service_ip, "/hostname")), want)
    assert from_nodeagent == want, (from_nodeagent, want)
    timings["service from both nodes"] = time.monotonic() - t

    # Through kind's API server to nodeagent's kubelet (198.19.252.200:10250).
    logs = kubectl("logs", ours)
    assert "Started HTTP server on port 8080" in logs, logs
    assert kubectl("exec", ours, "--", "cat", "/etc/hostname").strip() == ours
    with subprocess.Popen(
        [*kubectl.argv, "port-forward", f"pod/{ours}", ":8080"], stdout=subprocess.PIPE, text=True
    ) as forward:
        try:
            assert forward.stdout is not None
            line = forward.stdout.readline()
            assert line.startswith("Forwarding from 127.0.0.1:"), line
            port = int(line.split("127.0.0.1:")[1].split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/hostname", timeout=10) as answer:
                assert answer.read().decode() == ours
        finally:
            forward.terminate()
    return timings


def check_refusals(root: Path) -> dict[str, float]:
    """A wrong CA hash: kubeadm's discovery refuses the cluster-info CA. An expired bootstrap token as the TLS
    bootstrap credential (discovery with a good one): the API server answers kubeadm 401 before the kubelet starts.
    Each failed join leaves nothing behind (the real join follows)."""
    timings: dict[str, float] = {}
    kdir = lifecycle.KindDir(root)
    docker = lifecycle.attached_docker(kdir)
    t = time.monotonic()
    with pytest.raises(KindError) as refused:
        asyncio.run(join.join(root, print, ca_cert_hash="sha256:" + "0" * 64))
    timings["wrong CA hash refused"] = time.monotonic() - t
    assert "none of the public keys" in str(refused.value) and "are pinned" in str(refused.value), refused.value
    assert not (kdir.join / join.PLAN_FILE).exists()

    expired = docker.docker("exec", cluster.CONTROL_PLANE, "kubeadm", "token", "create", "--ttl", "1s").stdout.strip()
    time.sleep(2)
    t = time.monotonic()
    with pytest.raises(KindError) as refused:
        asyncio.run(join.join(root, print, tls_bootstrap_token=expired))
    timings["expired token refused"] = time.monotonic() - t
    assert "failed to get config map: Unauthorized" in str(refused.value), refused.value
    assert not (kdir.join / "logs" / "kubelet.log").exists()
    assert not (kdir.join / join.PLAN_FILE).exists()
    return timings


def test_nodeagent_joins_a_kind_cluster() -> None:
    before = snapshot()
    # Short: containerd's ttrpc socket path under it must stay within 104 bytes (pytest's tmp_path is too long).
    root = Path(tempfile.mkdtemp(prefix="nakj-"))
    timings: dict[str, float] = {}
    try:
        t = time.monotonic()
        lifecycle.up(root, print, workers=1)
        timings["kind up"] = time.monotonic() - t
        timings.update(check_refusals(root))
        joined = asyncio.run(join.join(root, print))
        timings.update({f"join {k}": v for k, v in joined.timings.items()})
        assert joined.pod_cidr == "198.18.98.0/24"
        kubectl = Kubectl(lifecycle.KindDir(root).work / "kubeconfig")
        nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
        ready = {
            n["metadata"]["name"]: any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
            )
            for n in nodes
        }
        assert ready == {cluster.CONTROL_PLANE: True, WORKER: True, join.NODE_NAME: True}, ready
        timings.update(check_workload(root))
    finally:
        t = time.monotonic()
        problems = lifecycle.down(root, print)
        timings["kind down"] = time.monotonic() - t
        if not problems:
            shutil.rmtree(root)
        print("timings: " + ", ".join(f"{k}={v:.1f}s" for k, v in timings.items()))
    assert problems == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert cluster.BRIDGE not in links
    assert str(root) not in Path("/proc/self/mountinfo").read_text()
    assert not (root / lifecycle.STATE_FILE).exists()
    diff = compare(before, snapshot())
    assert diff.refused == [], diff.refused
