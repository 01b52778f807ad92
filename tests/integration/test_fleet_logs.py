"""`kubectl logs` and `kubectl exec` of pods on emulated nodes: three fleet nodes serve their kubelet API on the
fleet's one port (their addresses made local by a route, as test_fleet.py does, whose helpers this reuses), and the
apiserver's `pods/<name>/log` and `pods/<name>/exec` reach them. One pod's container prints its
`fake.cri.nodeagent.io/log` text; another runs `echo`, exits and is restarted, so its previous attempt's log is
served too. Exec goes kubectl -> apiserver -> the node's kubelet API -> the fake runtime's streaming server (SPDY/3.1),
with kubectl's WebSocket (the apiserver translating it to SPDY) and with kubectl's SPDY passed through."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import uuid
from pathlib import Path
from typing import Any

from cri.fake import behaviour as behaviours
from nodeagent.fleet.plan import FLEET_LABEL, FleetOptions
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.server.logs import parse_cri_time
from nodeagent.testbed.kubectl import kubectl
from nodeagent.testbed.pki import CertificateAuthority
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
from tests.integration.test_fleet import (
    IMAGE,
    NS,
    first_traceback,
    free_port,
    local_node_network,
    ready,
    running_fleet,
    until,
)

NODES = 3
TEXT = "line one\nline two\nline three"


async def kubectl_exec(
    kubeconfig: Path, pod_name: str, command: list[str], *, stdin: bytes | None = None, websocket: bool = True
) -> tuple[int | None, bytes, bytes]:
    """`kubectl exec` of the pod's container: its exit code, stdout and stderr. `websocket=False`: kubectl speaks
    SPDY to the apiserver, which passes the upgrade through to the kubelet as it is."""
    env = dict(os.environ, KUBECTL_REMOTE_COMMAND_WEBSOCKETS="true" if websocket else "false")
    args = ["exec", "-n", NS, pod_name, "-c", "main", *(["-i"] if stdin is not None else []), "--", *command]
    proc = await asyncio.create_subprocess_exec(
        str(kubernetes_bin_dir() / "kubectl"),
        f"--kubeconfig={kubeconfig}",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, out, err


def pod(name: str, node: str, command: list[str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A bare pod bound to `node` (no scheduler in between), tolerating the fleet's taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": FLEET_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": IMAGE, "command": command}],
        },
    }


async def test_pod_logs_of_emulated_nodes_through_the_apiserver(
    admin: KubeClient, testbed: Testbed, tmp_path: Path
) -> None:
    prefix = f"fleetlog-{uuid.uuid4().hex[:6]}"
    with local_node_network() as network:
        addresses = [str(a) for a in list(network.hosts())[:NODES]]
        serving = CertificateAuthority.load(testbed.layout.pki).issue(
            tmp_path, "fleet-kubelet", common_name="nodeagent-fleet", server=True, ip_addresses=tuple(addresses)
        )
        options = FleetOptions(
            nodes=NODES,
            prefix=prefix,
            directory=tmp_path / "fleet",
            kubeconfig=testbed.layout.admin_kubeconfig,
            node_network=str(network),
            kubelet_port=free_port(addresses[0]),
            tls_cert_file=serving.cert,
            tls_private_key_file=serving.key,
            client_ca_file=testbed.layout.pki / "ca.crt",
        )
        log = tmp_path / "fleet.log"
        annotated, echoer = f"{prefix}-annotated", f"{prefix}-echo"
        async with running_fleet(options, admin, log) as fleet:

            def tail() -> str:
                return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

            async def all_ready() -> bool:
                assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
                nodes = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
                return len(nodes) == NODES and all(ready(n) for n in nodes)

            await until(all_ready, timeout=60, what=f"{NODES} fleet nodes Ready")
            await admin.create(paths.pods(NS), pod(annotated, f"{prefix}-0", ["serve"], {behaviours.LOG: TEXT}))
            await admin.create(paths.pods(NS), pod(echoer, f"{prefix}-1", ["echo", "hello", "from", "echo"]))
            try:

                async def status_of(name: str) -> dict[str, Any]:
                    assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
                    found = (await admin.get(paths.pod(NS, name))).get("status") or {}
                    return found

                async def running() -> bool:
                    return (await status_of(annotated)).get("phase") == "Running"

                async def restarted() -> bool:
                    statuses = (await status_of(echoer)).get("containerStatuses") or []
                    return bool(statuses) and statuses[0].get("restartCount", 0) >= 1

                await until(running, timeout=30, what=f"{annotated} Running")

                async def logs(name: str, query: str = "") -> str:
                    path = f"/api/v1/namespaces/{NS}/pods/{name}/log?container=main{query}"
                    return await kubectl(testbed.layout.admin_kubeconfig, "get", "--raw", path)

                assert await logs(annotated) == TEXT + "\n"
                assert await logs(annotated, "&tailLines=1") == "line three\n"
                stamped = (await logs(annotated, "&timestamps=true")).splitlines()
                assert [line.split(" ", 1)[1] for line in stamped] == TEXT.splitlines()
                now = datetime.datetime.now(datetime.UTC)
                for line in stamped:
                    written = parse_cri_time(line.split(" ", 1)[0])
                    assert now - datetime.timedelta(seconds=120) < written <= now, line

                kubeconfig = testbed.layout.admin_kubeconfig
                for websocket in (True, False):
                    result = await kubectl_exec(kubeconfig, annotated, ["echo", "hello", "exec"], websocket=websocket)
                    assert result == (0, b"hello exec\n", b""), (websocket, result)
                code, out, err = await kubectl_exec(kubeconfig, annotated, ["sh", "-c", "exit 3"])
                assert (code, out) == (3, b""), (code, out, err)
                assert b"command terminated with exit code 3" in err, err
                piped = b"through the apiserver\nand back\n"
                assert await kubectl_exec(kubeconfig, annotated, ["cat"], stdin=piped) == (0, piped, b"")

                # echo exits 0 at once; restartPolicy Always starts it again, in a new log file of its own.
                await until(restarted, timeout=30, what=f"{echoer} restarted")
                assert await logs(echoer) == "hello from echo\n"
                assert await logs(echoer, "&previous=true") == "hello from echo\n"
            finally:
                for name in (annotated, echoer):
                    with contextlib.suppress(NotFound):
                        await admin.delete(paths.pod(NS, name))

            async def gone() -> bool:
                names = {p["metadata"]["name"] for p in (await admin.list(paths.pods(NS)))["items"]}
                return not names & {annotated, echoer}

            await until(gone, timeout=60, what="the pods deleted by their nodes")
    assert fleet.returncode == 0, f"the fleet exited with {fleet.returncode}:\n{tail()}"
    text = log.read_text()
    assert f"fleet stopped nodes={NODES} failed=0" in text, tail()
    assert "Traceback" not in text, first_traceback(text)
