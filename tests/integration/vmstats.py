"""/stats/summary and a memory eviction inside the Vagrant VM (issue 31), for test_vm_systemd_cgroups.py.

- `read_summary`: one script run in the VM (its python3) reads each pod's and container's cgroup files, then the
  agent's /stats/summary from its read-only port, then the files again, so the summary's figures can be held
  between two readings taken a moment apart (`check_summary`).
- `ApiTunnel`: the VM has no apiserver, and static pods are critical (upstream's IsCriticalPod), so the eviction
  manager never evicts them. The VM's agent joins the host testbed's apiserver through an `ssh -R` tunnel (the VM's
  127.0.0.1:6443 to the apiserver on the testbed's node address): loopback at both ends, nothing routed.
- `eviction_threshold`: memory.available in the VM now, computed as the agent computes it (MemTotal minus the root's
  working set: anon + file - inactive_file), so the test can set evictionHard a fixed margin below it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from nodeagent.kuberuntime.systemd_cgroup_names import to_systemd
from nodeagent.testbed.kubeconfig import write_kubeconfig
from nodeagent.testbed.pki import CertificateAuthority, CertPair
from nodeagent.vm.box import BUSYBOX_IMAGE
from tests.integration.test_vm_vagrant import NODE

MIB = 1024 * 1024
READ_ONLY_PORT = 10255
TUNNEL_PORT = 6443
CGROUP_FILES = (
    "memory.current",
    "memory.stat",
    "memory.max",
    "cpu.stat",
    "cpu.pressure",
    "memory.pressure",
    "io.pressure",
)

# Run in the VM as root: argv[1] is {key: cgroup directory}; prints the files before and after, the summary, and
# the root's pressure files.
_READ_SCRIPT = f"""
import json, sys, urllib.request
paths = json.loads(sys.argv[1])
def read(d):
    out = {{}}
    for name in {CGROUP_FILES!r}:
        try:
            with open(d + "/" + name) as f:
                out[name] = f.read()
        except OSError:
            out[name] = None
    return out
before = {{k: read(v) for k, v in paths.items()}}
with urllib.request.urlopen("http://127.0.0.1:{READ_ONLY_PORT}/stats/summary", timeout=120) as r:
    summary = json.load(r)
after = {{k: read(v) for k, v in paths.items()}}
proc = {{}}
for name in ("cpu", "memory", "io"):
    with open("/proc/pressure/" + name) as f:
        proc[name] = f.read()
print(json.dumps({{"summary": summary, "before": before, "after": after, "root": read("/sys/fs/cgroup"),
                  "proc_pressure": proc}}))
"""


def run_script(vagrant: Any, script: str, *args: str) -> str:
    encoded = base64.b64encode(script.encode()).decode()
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)
    return str(
        vagrant.ssh(
            f"echo {encoded} | base64 -d > /tmp/nodeagent-test.py && sudo python3 /tmp/nodeagent-test.py {quoted}"
        )
    )


def pod_cgroup(pod: dict[str, Any]) -> str:
    """The pod's cgroup directory in the VM (systemd driver)."""
    qos = pod["status"]["qosClass"].lower()
    tier = "" if qos == "guaranteed" else f"/{qos}"
    return "/sys/fs/cgroup" + to_systemd(f"/kubepods{tier}/pod{pod['metadata']['uid']}")


def container_scope(pod: dict[str, Any]) -> str:
    [status] = pod["status"]["containerStatuses"]
    cid = status["containerID"].split("://", 1)[-1]
    return f"{pod_cgroup(pod)}/cri-containerd-{cid}.scope"


def read_summary(vagrant: Any, running: dict[str, dict[str, Any]]) -> dict[str, Any]:
    paths = {}
    for name, pod in running.items():
        paths[f"pod/{name}"] = pod_cgroup(pod)
        paths[f"container/{name}"] = container_scope(pod)
    result: dict[str, Any] = json.loads(run_script(vagrant, _READ_SCRIPT, json.dumps(paths)))
    return result


def flat(text: str | None) -> dict[str, int]:
    out = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def working_set(files: dict[str, str | None]) -> int:
    current = int(files["memory.current"] or 0)
    return max(current - flat(files["memory.stat"]).get("inactive_file", 0), 0)


def cpu_ns(files: dict[str, str | None]) -> int:
    return flat(files["cpu.stat"])["usage_usec"] * 1000


def psi(text: str | None) -> dict[str, dict[str, float]]:
    """A *.pressure file as {"some": {"total": ..., "avg10": ...}, "full": {...}}."""
    out: dict[str, dict[str, float]] = {}
    for line in (text or "").splitlines():
        kind, *fields = line.split()
        out[kind] = {k: float(v) for k, v in (f.split("=", 1) for f in fields)}
    return out


def close(name: str, got: int, low: int, high: int, slack: int) -> None:
    """`got` between the two readings of the files (`low`, `high`, either order), give or take `slack`."""
    lo, hi = min(low, high) - slack, max(low, high) + slack
    assert lo <= got <= hi, f"{name}: summary {got} not within [{lo}, {hi}] of the cgroup files"


def check_psi(where: str, stats: dict[str, Any] | None, files_psi: str | None) -> None:
    """The summary's PSI (upstream's PSIStats: full and some, each total/avg10/avg60/avg300) against the file:
    totals (microseconds) never ahead of the file read after it."""
    assert stats is not None and "psi" in stats, f"{where}: no psi in {stats}"
    read = psi(files_psi)
    for kind in ("some", "full"):
        data = stats["psi"][kind]
        assert set(data) == {"total", "avg10", "avg60", "avg300"}, f"{where}: {data}"
        if kind in read:
            assert data["total"] <= read[kind]["total"], f"{where} {kind}: {data} after the file's {read[kind]}"


def check_summary(reading: dict[str, Any], running: dict[str, dict[str, Any]]) -> None:
    """Each pod and its container in the summary, their cpu and memory non-zero and within the two readings of the
    cgroup files around it (working set = memory.current - inactive_file, 2 MiB of slack for what moved between
    the readings); a limited pod's availableBytes; the pod's network and process count; the node's memory; PSI
    (KubeletPSI, on by default in v1.34, on cgroup v2): cpu, memory and io for the node (the root cgroup's files)
    and the pods, cpu and memory for the containers."""
    summary, before, after = reading["summary"], reading["before"], reading["after"]
    node = summary["node"]
    assert node["nodeName"] == NODE, node["nodeName"]
    assert node["memory"]["availableBytes"] > 0 and node["memory"]["workingSetBytes"] > 0, node["memory"]
    assert node["cpu"]["usageCoreNanoSeconds"] > 0, node["cpu"]
    by_name = {p["podRef"]["name"]: p for p in summary["pods"]}
    for name, pod in running.items():
        full = pod["metadata"]["name"]
        assert full in by_name, f"{full} not in the summary's pods {sorted(by_name)}"
        stats = by_name[full]
        assert stats["podRef"]["uid"] == pod["metadata"]["uid"], stats["podRef"]
        [container] = [c for c in stats["containers"] if c["name"] == "main"]
        for level, got, key in (("pod", stats, f"pod/{name}"), ("container", container, f"container/{name}")):
            where = f"{name} {level}"
            memory, cpu = got["memory"], got["cpu"]
            assert memory["workingSetBytes"] > 0 and memory["usageBytes"] > 0, f"{where}: {memory}"
            assert cpu["usageCoreNanoSeconds"] > 0, f"{where}: {cpu}"
            close(
                f"{where} workingSetBytes",
                memory["workingSetBytes"],
                working_set(before[key]),
                working_set(after[key]),
                2 * MIB,
            )
            close(
                f"{where} usageBytes",
                memory["usageBytes"],
                int(before[key]["memory.current"]),
                int(after[key]["memory.current"]),
                2 * MIB,
            )
            # cpu: the summary may carry a sample up to a housekeeping period old, never one from the future.
            assert cpu["usageCoreNanoSeconds"] <= cpu_ns(after[key]), f"{where}: {cpu} after {after[key]['cpu.stat']}"
            assert cpu["usageCoreNanoSeconds"] >= cpu_ns(before[key]) - 10**9, f"{where}: {cpu}"
            limit = (after[key]["memory.max"] or "max").strip()
            if level == "pod" and limit != "max":
                assert memory["availableBytes"] == int(limit) - memory["workingSetBytes"], f"{where}: {memory}"
            # Containers: cpu and memory PSI (upstream takes them with cAdvisor's cpu and memory); no io.
            for resource in ("cpu", "memory", "io") if level == "pod" else ("cpu", "memory"):
                check_psi(f"{where} {resource}", got.get(resource), after[key][f"{resource}.pressure"])
        # The pause container's network namespace and the container's processes, found in their systemd scopes.
        network = stats.get("network") or {}
        assert network.get("name") == "eth0" and network.get("rxBytes") is not None, f"{name}: network {network}"
        assert (stats.get("process_stats") or {}).get("process_count") == 1, f"{name}: {stats.get('process_stats')}"
    for resource in ("cpu", "memory", "io"):
        check_psi(f"node {resource}", node.get(resource), reading["proc_pressure"][resource])


# --- the eviction -------------------------------------------------------------------------------------------------

_AVAILABLE_SCRIPT = """
stat = dict(line.split() for line in open("/sys/fs/cgroup/memory.stat"))
total = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
print(total - (int(stat["anon"]) + int(stat["file"]) - int(stat["inactive_file"])))
"""


_FREE_LINE = """
print(next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemFree:")))
"""


def available_now(vagrant: Any) -> int:
    return int(run_script(vagrant, _AVAILABLE_SCRIPT).strip())


def free_and_available(vagrant: Any) -> tuple[int, int]:
    """MemFree of /proc/meminfo and memory.available (as `available_now`), read together."""
    free = run_script(vagrant, _AVAILABLE_SCRIPT + _FREE_LINE).split()
    return int(free[1]), int(free[0])


class ApiTunnel:
    """`ssh -N -R 127.0.0.1:6443:<apiserver>` into the VM, ended by its PID."""

    def __init__(self, config: Path, apiserver_host: str, apiserver_port: int, log: Path) -> None:
        self.log = log.open("a")
        self.proc = subprocess.Popen(
            [
                "ssh",
                "-F",
                str(config),
                "-N",
                "-o",
                "ExitOnForwardFailure=yes",
                "-o",
                "ServerAliveInterval=15",
                "-R",
                f"127.0.0.1:{TUNNEL_PORT}:{apiserver_host}:{apiserver_port}",
                "default",
            ],
            stdout=self.log,
            stderr=self.log,
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def vm_kubeconfig(pki: Path, directory: Path) -> str:
    """A kubeconfig for the VM's node (system:node:nodeagent-vm, a certificate of the testbed's CA, so the Node
    authorizer and NodeRestriction treat it as that node) with the server at the tunnel's VM end (127.0.0.1 is in
    the apiserver's certificate)."""
    pair = CertPair(pki / "ca.crt", pki / "ca.key")
    key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    ca = CertificateAuthority(pair, key, x509.load_pem_x509_certificate(pair.cert.read_bytes()))
    node = ca.issue(
        directory, "vm-node", common_name=f"system:node:{NODE}", organizations=("system:nodes",), client=True
    )
    path = directory / "vm-node.kubeconfig"
    write_kubeconfig(
        path, server=f"https://127.0.0.1:{TUNNEL_PORT}", ca=pair.cert, client=node, user=f"system:node:{NODE}"
    )
    return path.read_text()


def api_pod(name: str, command: str, resources: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {NODE}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {BUSYBOX_IMAGE}
    imagePullPolicy: Never
    command: ["sh", "-c", "{command}"]
{resources}
"""


def kubectl(admin: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(admin), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def get_json(admin: Path, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl(admin, "get", "-o", "json", *args))
    return result


def node_condition(admin: Path, kind: str) -> dict[str, Any] | None:
    node = get_json(admin, "node", NODE)
    return next((c for c in node["status"].get("conditions") or () if c["type"] == kind), None)


def node_ready(admin: Path) -> bool:
    if NODE not in kubectl(admin, "get", "nodes", "-o", "name"):
        return False
    ready = node_condition(admin, "Ready")
    return ready is not None and ready["status"] == "True"


def pressure_condition(admin: Path) -> dict[str, Any] | None:
    condition = node_condition(admin, "MemoryPressure")
    return condition if condition is not None and condition["status"] == "True" else None


def evicted_status(admin: Path, name: str) -> dict[str, Any] | None:
    status: dict[str, Any] = get_json(admin, "pod", name)["status"]
    return status if status.get("reason") == "Evicted" else None


def wait(what: str, probe: Any, timeout: float, interval: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")
