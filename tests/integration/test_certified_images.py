"""The certified suite's own images (testbed/certifiedimages.py) run on the testbed's node as their specs run them.

`nodeagent testbed install --with-certified` must have run (it builds their parts); the module pushes them into the
testbed's registry under the suite's names, as the conformance image step does, and each test pulls by that name:

- httpd (both tags): no command, the image's CMD serves "It works!" on port 80, the StatefulSet fixture's readiness
  probe (GET /index.html) passes, and the specs' `mv -v /usr/local/apache2/htdocs/index.html /tmp/` through exec
  turns the pod NotReady;
- jessie-dnsutils, and agnhost with the DNS tools (pushed over the testbed's agnhost:2.56): the DNS specs' probe
  shape, `sh -c` with seq, `dig +notcp/+tcp +noall +answer +search` and `getent hosts`: dig answers from a DNS
  server (busybox dnsd in the same container, UDP), getent reads the kubelet's /etc/hosts;
- etcd: the aggregator spec's command (`/usr/local/bin/etcd --listen-client-urls http://127.0.0.1:2379 ...`)
  serves: a second container reads /health and /version, and etcdctl in the etcd container writes and reads a key;
- sample-apiserver: the binary starts and prints its flags (`--help`, exit 0);
- nautilus: the Update Demo specs read /data.json through the apiserver's pod proxy.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import certifiedimages, configs, registry
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import ETCD_E2E_TAG, HTTPD_IMAGE_TAGS, kubernetes_bin_dir, nautilus_dir
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    eventually,
    kubectl_logs,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_ready,
)

Obj = dict[str, Any]
LABEL = {"test": "certified-images"}

# Not in CI's pytest step: its parts (sample-apiserver, etcd 3.6) are the certified install's, about 20 minutes of Go
# builds on a cold machine, which the CI budget does not hold. Run it with the certified suite (docs/conformance.md).
pytestmark = [pytest.mark.integration, pytest.mark.certified]


@pytest.fixture(scope="module")
def pushed(settings: Settings) -> dict[str, str]:
    """Builder name -> `registry/repository` of every certified image, pushed under each of its tags."""

    async def push() -> dict[str, str]:
        names: dict[str, str] = {}
        repositories = certifiedimages.certified_repositories()
        for build in certifiedimages.certified_builders().values():
            for image in await asyncio.to_thread(build):
                await registry.push_image(settings.registry, image.repository, image.tag, image.image)
                names[repositories[image.repository]] = f"{settings.registry}/{image.repository}"
        return names

    return asyncio.run(push())


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings, pushed: dict[str, str]) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-certified-images.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _kubectl(testbed: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(testbed.layout.admin_kubeconfig), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


async def kubectl(testbed: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(_kubectl, testbed, *args)


async def _container_done(admin: KubeClient, agent: Agent, pod: str, container: str) -> Obj:
    """The container's terminated state, once it has one."""

    async def check() -> Obj | None:
        found: Obj = await admin.get(paths.pod(NS, pod))
        for status in (found.get("status") or {}).get("containerStatuses") or ():
            if status["name"] == container and "terminated" in (status.get("state") or {}):
                terminated: Obj = status["state"]["terminated"]
                return terminated
        return None

    done: Obj = await eventually(check, timeout=180, what=f"{pod}/{container} done", agent=agent)
    return done


def _suffix() -> str:
    return uuid.uuid4().hex[:6]


@pytest.mark.parametrize("tag", HTTPD_IMAGE_TAGS)
async def test_httpd_serves_and_the_statefulset_specs_mv_breaks_its_probe(
    testbed: Testbed, agent: Agent, admin: KubeClient, settings: Settings, pushed: dict[str, str], tag: str
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = f"{pushed['httpd']}:{tag}"
    assert image.endswith(f"/e2e-test-images/httpd:{tag}")
    server, client = f"httpd-{_suffix()}", f"httpd-client-{_suffix()}"
    # e2estatefulset.NewStatefulSet's probe, at a shorter period.
    probe = {"httpGet": {"path": "/index.html", "port": 80}, "periodSeconds": 1, "successThreshold": 1}
    await admin.create(paths.pods(NS), one_container_pod(server, {"image": image, "readinessProbe": probe}, LABEL))
    ip, _ = await wait_ready(admin, agent, server)
    fetch = {"image": configs.e2e_busybox_image(settings), "command": ["wget", "-q", "-O", "-", f"http://{ip}/"]}
    await admin.create(paths.pods(NS), one_container_pod(client, fetch, LABEL, restartPolicy="Never"))
    assert (await _container_done(admin, agent, client, "main"))["exitCode"] == 0
    assert "<h1>It works!</h1>" in await kubectl_logs(testbed, client)
    # The access log is the container's stdout.
    assert '"GET /index.html HTTP/1.1" 200' in await kubectl_logs(testbed, server)
    # breakHTTPProbe: the spec's exact command, then the pod must turn NotReady.
    cmd = "mv -v /usr/local/apache2/htdocs/index.html /tmp/ || true"
    moved = await kubectl(testbed, "exec", "-n", NS, server, "--", "/bin/sh", "-x", "-c", cmd)
    assert moved.returncode == 0, moved.stderr
    assert "/usr/local/apache2/htdocs/index.html" in moved.stdout

    async def not_ready() -> bool | None:
        pod: Obj = await admin.get(paths.pod(NS, server))
        [status] = pod["status"]["containerStatuses"]
        return True if not status["ready"] else None

    await eventually(not_ready, timeout=60, what=f"{server} NotReady after the mv", agent=agent)


# The DNS specs' probe loop (dns_common.go createProbeCommand), against a server in the container: busybox dnsd
# answers A queries for the names in its config over UDP; `getent hosts` reads the pod's /etc/hosts.
DNS_NAME = "certified-images.example.test"
DNS_ADDRESS = "198.18.77.7"
JESSIE_SCRIPT = f"""
echo '{DNS_NAME} {DNS_ADDRESS}' > /tmp/dnsd.conf
dnsd -c /tmp/dnsd.conf -i 127.0.0.1 -p 53 &
mkdir -p /results
for i in `seq 1 30`; do
  check="$(dig +notcp +noall +answer +search @127.0.0.1 {DNS_NAME} A)" \
    && test -n "$check" && echo "$check" > /results/udp
  test -n "$(getent hosts $(hostname))" && getent hosts $(hostname) > /results/hosts
  test -s /results/udp && test -s /results/hosts && break
  sleep 1
done
cat /results/udp /results/hosts
dig -v 2>&1; nslookup -version; host -V
"""


@pytest.mark.parametrize(("builder", "tag"), [("jessie-dnsutils", "1.7"), ("agnhost-dns", "2.56")])
async def test_the_dns_probers_run_the_dns_specs_probe_tools(
    testbed: Testbed,
    agent: Agent,
    admin: KubeClient,
    settings: Settings,
    pushed: dict[str, str],
    builder: str,
    tag: str,
) -> None:
    """The jessie prober (jessie-dnsutils) and the wheezy prober (agnhost) run the same loop."""
    await wait_node_ready(admin, agent, settings.node_name)
    image = f"{pushed[builder]}:{tag}"
    name = f"{builder}-{_suffix()}"
    container = {"image": image, "command": ["sh", "-c", JESSIE_SCRIPT]}
    await admin.create(paths.pods(NS), one_container_pod(name, container, LABEL, restartPolicy="Never"))
    terminated = await _container_done(admin, agent, name, "main")
    logs = await kubectl_logs(testbed, name)
    assert terminated["exitCode"] == 0, logs
    answer = [line.split() for line in logs.splitlines() if line.startswith(DNS_NAME)]
    assert answer and answer[0][-2:] == ["A", DNS_ADDRESS], logs  # dig's +answer line: name ttl IN A address
    pod: Obj = await admin.get(paths.pod(NS, name))
    assert any(line.split()[:2] == [pod["status"]["podIP"], name] for line in logs.splitlines()), logs
    assert "DiG 9." in logs and "nslookup 9." in logs and "host 9." in logs, logs


async def test_etcd_serves_with_the_aggregator_specs_command(
    testbed: Testbed, agent: Agent, admin: KubeClient, settings: Settings, pushed: dict[str, str]
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = f"{pushed['etcd']}:{ETCD_E2E_TAG}"
    assert image.endswith(f"/etcd:{ETCD_E2E_TAG}")
    url = "http://127.0.0.1:2379"
    name = f"etcd-{_suffix()}"
    check = f"for i in `seq 1 60`; do curl -sf {url}/health && break; sleep 1; done; echo; curl -sf {url}/version; echo"
    pod = one_container_pod(
        name,
        {
            "image": image,
            "command": ["/usr/local/bin/etcd", "--listen-client-urls", url, "--advertise-client-urls", url],
        },
        LABEL,
        restartPolicy="Never",
    )
    pod["spec"]["containers"][0]["name"] = "etcd"
    pod["spec"]["containers"].append(
        {"name": "check", "image": configs.agnhost_image(settings), "command": ["sh", "-c", check]}
    )
    await admin.create(paths.pods(NS), pod)
    terminated = await _container_done(admin, agent, name, "check")
    logs = await kubectl(testbed, "logs", "-n", NS, name, "-c", "check")
    assert terminated["exitCode"] == 0, logs.stdout
    health, version = (json.loads(line) for line in logs.stdout.split() if line.startswith("{"))
    assert health["health"] == "true", logs.stdout
    assert version["etcdserver"] == ETCD_E2E_TAG.removesuffix("-0"), logs.stdout
    etcdctl = ["exec", "-n", NS, name, "-c", "etcd", "--", "/usr/local/bin/etcdctl", f"--endpoints={url}"]
    put = await kubectl(testbed, *etcdctl, "put", "certified", "images")
    assert put.returncode == 0 and "OK" in put.stdout, put.stderr
    got = await kubectl(testbed, *etcdctl, "get", "certified", "--print-value-only")
    assert got.stdout.strip() == "images", got.stderr


async def test_sample_apiserver_starts_and_prints_its_flags(
    testbed: Testbed, agent: Agent, admin: KubeClient, settings: Settings, pushed: dict[str, str]
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = f"{pushed['sample-apiserver']}:1.29.2"
    name = f"sample-apiserver-{_suffix()}"
    # Args only, as the aggregator spec gives them: the image's entrypoint is the binary.
    await admin.create(
        paths.pods(NS), one_container_pod(name, {"image": image, "args": ["--help"]}, LABEL, restartPolicy="Never")
    )
    terminated = await _container_done(admin, agent, name, "main")
    logs = await kubectl_logs(testbed, name)
    assert terminated["exitCode"] == 0, logs
    for flag in ("--etcd-servers", "--tls-cert-file", "--tls-private-key-file", "--audit-log-path"):
        assert flag in logs, logs


async def test_nautilus_serves_data_json_through_the_pod_proxy(
    testbed: Testbed, agent: Agent, admin: KubeClient, settings: Settings, pushed: dict[str, str]
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = f"{pushed['nautilus']}:1.7"
    name = f"update-demo-nautilus-{_suffix()}"
    probe = {"tcpSocket": {"port": 80}, "periodSeconds": 1}
    container = {"image": image, "ports": [{"containerPort": 80, "protocol": "TCP"}], "readinessProbe": probe}
    await admin.create(paths.pods(NS), one_container_pod(name, container, LABEL))
    await wait_ready(admin, agent, name)
    # getUDData: GET pods/NAME/proxy/data.json, the image named in it.
    raw = await kubectl(testbed, "get", "--raw", f"/api/v1/namespaces/{NS}/pods/{name}/proxy/data.json")
    assert raw.returncode == 0, raw.stderr
    assert json.loads(raw.stdout) == {"image": "nautilus.jpg"}
    argv = [str(kubernetes_bin_dir() / "kubectl"), "--kubeconfig", str(testbed.layout.admin_kubeconfig), "get"]
    argv += ["--raw", f"/api/v1/namespaces/{NS}/pods/{name}/proxy/nautilus.jpg"]
    jpg = await asyncio.to_thread(subprocess.run, argv, capture_output=True, timeout=120, check=False)
    assert jpg.returncode == 0, jpg.stderr
    assert jpg.stdout == (nautilus_dir() / "nautilus.jpg").read_bytes()
