"""`nodeagent up` as a newcomer meets it (issue 30): a Deployment, a Service, and a pod that calls it by name.

The README's first command, detached, in a directory of its own. Then what it prints as the first steps: nginx (the
testbed's image) as a Deployment behind a Service, made with kubectl from a shell that sourced `env`; then a client
pod on the busybox `env` offers (vanilla BusyBox 1.37.0, whose wget works) that reads its /etc/resolv.conf and
fetches the Service by its short name and by `web.default.svc.cluster.local`, through the testbed's CoreDNS and the
`kube-dns` Service. Before CoreDNS was in the testbed the agent had no clusterDNS: the pod got the host's resolver
(MissingClusterDNS) and neither name resolved.

Marker `cluster`, as tests/integration/test_kubeadm_addons.py: the Service's ClusterIP and DNS's are served by the
host's only kube-proxy, which the pytest session testbed holds while pytest runs (testbed/kubeproxy.py), so
scripts/test-all.sh runs this file in its own step. The test fails (never skips) when another kube-proxy holds the
host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.cli import FIRST_STEPS
from nodeagent.testbed import clusterdns, hostnet, kubeproxy
from nodeagent.testbed.layout import Layout

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

NGINX_WELCOME = "Welcome to nginx!"
CLIENT = "client"
# Both names of the Service, each fetched once; the markers split the log.
CLIENT_SCRIPT = (
    "cat /etc/resolv.conf; echo ---short; wget -qO- -T 10 http://web; echo ---fqdn; "
    "wget -qO- -T 10 http://web.default.svc.cluster.local"
)


def nodeagent(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def shell(layout: Layout, script: str, *, timeout: float = 120) -> str:
    """`script` in bash after `. DIR/env`, as a newcomer types it; its output, or the test fails with it."""
    proc = subprocess.run(
        ["bash", "-c", f". {layout.env_file} && {script}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
    )
    assert proc.returncode == 0, f"{script}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    return proc.stdout


def kubectl_json(layout: Layout, *args: str) -> Any:
    return json.loads(shell(layout, " ".join(["kubectl", *args, "-o", "json"])))


@pytest.fixture
def up() -> Iterator[tuple[Layout, str, float]]:
    root = Path(tempfile.mkdtemp(prefix="nodeagent-up-dns-", dir=os.environ.get("NODEAGENT_TEST_DIR")))
    started = time.monotonic()
    try:
        proc = nodeagent("up", "--detach", "--dir", str(root), timeout=400)
        took = time.monotonic() - started
        assert proc.returncode == 0, f"nodeagent up failed:\n{proc.stderr[-4000:]}"
        # When each part was ready (the agent's node, then CoreDNS's replica): the cost of waiting for DNS.
        print("".join(line + "\n" for line in proc.stderr.splitlines() if "component ready name=" in line))
        yield Layout(root), proc.stdout, took
    finally:
        down = nodeagent("testbed", "down", "--dir", str(root), timeout=180)
        shutil.rmtree(root, ignore_errors=True)
        assert down.returncode == 0, down.stderr[-4000:]


def test_a_pod_fetches_a_service_by_name_after_nodeagent_up(up: tuple[Layout, str, float]) -> None:
    layout, printed, took = up
    print(f"nodeagent up --detach: {took:.1f}s")
    owner = kubeproxy.live_owner()
    assert owner is not None and owner.root == str(layout.root.resolve()), (
        f"the host's kube-proxy belongs to {owner.root if owner else 'nobody'}: bring that testbed down"
    )
    dns_ip = hostnet.cluster_dns_service_ip()
    # What `up` offers: the cluster DNS and the first steps, on the images `env` names.
    assert dns_ip in printed and all(step in printed for step in FIRST_STEPS), printed
    env = layout.env_file.read_text()
    assert "/busybox:1.37.0'" in env or "/busybox:1.37.0\n" in env, env

    # The node's kubelet configuration names the DNS Service, which CoreDNS (Ready: `up` waited for it) serves.
    config = yaml.safe_load(layout.agent_config.read_text())
    assert (config["clusterDNS"], config["clusterDomain"]) == ([dns_ip], "cluster.local")
    service = kubectl_json(layout, "-n", "kube-system", "get", "service", clusterdns.SERVICE)
    assert service["spec"]["clusterIP"] == dns_ip
    deployment = kubectl_json(layout, "-n", "kube-system", "get", "deployment", clusterdns.NAME)
    assert clusterdns.ready_replicas(deployment) == 1, deployment["status"]

    # The first step `up` printed, as printed; then the client, without a terminal (`kubectl run -it` needs one).
    shell(layout, FIRST_STEPS[0])
    shell(layout, "kubectl rollout status deployment/web --timeout=90s", timeout=100)
    shell(layout, f'kubectl run {CLIENT} --restart=Never --image="$BUSYBOX_IMAGE" -- sh -c "{CLIENT_SCRIPT}"')
    deadline = time.monotonic() + 90
    phase = ""
    while time.monotonic() < deadline:
        phase = kubectl_json(layout, "get", "pod", CLIENT)["status"].get("phase", "")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    logs = shell(layout, f"kubectl logs {CLIENT}")
    print(logs)
    resolv, _, fetched = logs.partition("---short")
    short, _, fqdn = fetched.partition("---fqdn")
    assert f"nameserver {dns_ip}" in resolv
    assert "search default.svc.cluster.local svc.cluster.local cluster.local" in resolv
    assert "options ndots:5" in resolv
    assert NGINX_WELCOME in short, short
    assert NGINX_WELCOME in fqdn, fqdn
    assert phase == "Succeeded"
    events = kubectl_json(layout, "get", "events", "-A")["items"]
    assert not [e for e in events if e.get("reason") == "MissingClusterDNS"], "a pod fell back to the host's DNS"
