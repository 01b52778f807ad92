"""kube-proxy (iptables mode) for the testbed: ClusterIP Services, the `kubernetes` Service among them, reach their
endpoints from pods and from the host.

kube-proxy's iptables chains (KUBE-SERVICES, KUBE-POSTROUTING, ...) have fixed names in the host's network
namespace, and every kube-proxy rewrites them whole from its own apiserver. Two testbeds side by side would each
undo the other's rules, so kube-proxy is host-wide: the first testbed to come up runs it and records itself in
`OWNER_FILE`; a testbed that comes up while another one's kube-proxy runs goes without, says so in its log and in
`Settings.kube_proxy_held_by`, and its ClusterIPs are not served. The owner's `down` stops kube-proxy and removes
its rules (`kube-proxy --cleanup`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nodeagent.testbed import processes
from nodeagent.testbed.layout import Layout, Settings

log = logging.getLogger(__name__)

NAME = "kube-proxy"
STATE_DIR = Path("/run/nodeagent")
OWNER_FILE = STATE_DIR / "kube-proxy.json"
LOCK_FILE = STATE_DIR / "kube-proxy.lock"
FIREWALL_CHAIN = "KUBE-FIREWALL"
USER = "system:kube-proxy"  # bound to system:node-proxier by the apiserver's default RBAC


@dataclass(frozen=True)
class Owner:
    root: str
    pid: int
    argv: tuple[str, ...]


def argv(binary: str, layout: Layout, settings: Settings) -> list[str]:
    """The command line: iptables mode, this node's name and address, the pod range as the cluster's (traffic to a
    Service from outside it is masqueraded, as on a real node), NodePorts only on the node address (no
    route_localnet), and no conntrack sysctls (a testbed does not retune the host's conntrack table)."""
    return [
        binary,
        f"--kubeconfig={layout.kube_proxy_kubeconfig}",
        "--proxy-mode=iptables",
        f"--hostname-override={settings.node_name}",
        f"--bind-address={settings.node_ip}",
        f"--cluster-cidr={settings.pod_cidr}",
        f"--nodeport-addresses={settings.node_ip}/32",
        f"--healthz-bind-address=127.0.0.1:{settings.kube_proxy_healthz_port}",
        f"--metrics-bind-address=127.0.0.1:{settings.kube_proxy_metrics_port}",
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
        "--v=1",
    ]


@contextlib.contextmanager
def host_lock() -> Iterator[None]:
    """Serialises claiming kube-proxy between testbeds coming up at the same moment."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_owner() -> Owner | None:
    try:
        data = json.loads(OWNER_FILE.read_text())
        return Owner(root=str(data["root"]), pid=int(data["pid"]), argv=tuple(str(a) for a in data["argv"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_owner() -> Owner | None:
    """The testbed whose kube-proxy runs now, if any: the recorded PID must still run that command line."""
    owner = read_owner()
    if owner is None:
        return None
    proc = processes.Process(name=NAME, pid=owner.pid, argv=owner.argv, log_path=Path())
    return owner if proc.alive() else None


def read_owner_root() -> str:
    owner = read_owner()
    return owner.root if owner is not None else ""


def record_owner(layout: Layout, proc: processes.Process) -> None:
    record = {"root": str(layout.root.resolve()), "pid": proc.pid, "argv": list(proc.argv)}
    OWNER_FILE.write_text(json.dumps(record) + "\n")


def owned_by(layout: Layout) -> bool:
    owner = read_owner()
    return owner is not None and owner.root == str(layout.root.resolve())


def release(layout: Layout, binary: str) -> None:
    """After this testbed's kube-proxy stopped: remove its iptables rules and the record. Nothing when another
    testbed owns kube-proxy (its rules are not ours to remove)."""
    with host_lock():
        if not owned_by(layout):
            return
        proc = subprocess.run([binary, "--cleanup", "--v=0"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            log.warning("kube-proxy cleanup failed rc=%d output=%r", proc.returncode, proc.stderr[-500:])
        _remove_firewall_chain()
        OWNER_FILE.unlink(missing_ok=True)
        log.info("kube-proxy released root=%s", layout.root)


def _remove_firewall_chain() -> None:
    # KUBE-FIREWALL (drop packets to 127/8 from elsewhere) is made by kube-proxy but left by --cleanup, which counts
    # it as shared with a kubelet. No upstream kubelet runs beside a testbed's kube-proxy: it goes with the rest.
    for args in (
        ("-D", "INPUT", "-j", FIREWALL_CHAIN),
        ("-D", "OUTPUT", "-j", FIREWALL_CHAIN),
        ("-F", FIREWALL_CHAIN),
        ("-X", FIREWALL_CHAIN),
    ):
        subprocess.run(["iptables", "-w", *args], capture_output=True, check=False)
