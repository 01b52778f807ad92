"""What the node e2e suite expects of a node, made on a testbed: its working directory, shims and token.

`prepare` makes `DIR/node-e2e/`, the suite's working directory (docs/conformance.md, "node-eviction suite"):
- `kubelet-config`: the testbed's nodeagent.yaml with the fields the suite relies on (`SUITE_FIELDS`): healthz on
  upstream's fixed 127.0.0.1:10248, the read-only port 10255 (its /stats/summary), and `cgroupRoot: /` (the memory
  specs write `/sys/fs/cgroup/memory/kubepods/memory.force_empty`, a path that ignores cgroupRoot). The suite
  rewrites the whole file from /configz with each config change; the shim's start reads it afresh.
- `bin/sudo` (runs its arguments: the run is root and this host has no sudo) and `bin/systemctl` (the
  `systemctl_shim` module with this run's state), for the front of the suite's PATH only.
- `shim.json`, the shim's state, and `systemctl.log`, where each call is recorded.

`check_ports` refuses a run while 127.0.0.1:10248 or port 10255 is held: those ports are fixed in the suite, so one
run per machine. `bearer_token` makes the ServiceAccount whose token the suite uses (node e2e mode builds its client
from `--host` and `--bearer-token` only).
"""

from __future__ import annotations

import errno
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import nodeagent
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.systemctl_shim import Kubelet, ShimState

HEALTHZ_ADDRESS = ("127.0.0.1", 10248)  # ports.KubeletHealthzPort, on loopback: kubeletHealthCheckURL
READ_ONLY_PORT = 10255  # ports.KubeletReadOnlyPort: the suite's /metrics polls use it whatever the config says
SUITE_FIELDS: dict[str, Any] = {
    "healthzBindAddress": HEALTHZ_ADDRESS[0],
    "healthzPort": HEALTHZ_ADDRESS[1],
    "readOnlyPort": READ_ONLY_PORT,
    "cgroupRoot": "/",
}
SERVICE_ACCOUNT = "node-e2e"
SERVICE_ACCOUNT_NAMESPACE = "kube-system"
# The cgroup the agent's QoS tree gets under `cgroupRoot: /`; removed after the run (the testbed removes only its
# own /nodeagent-<bridge>).
KUBEPODS_CGROUP = "/kubepods"


@dataclass(frozen=True)
class SuiteDir:
    root: Path  # the suite's working directory ($CWD)
    bin: Path
    config: Path
    state: Path
    log: Path


def suite_dir(root: Path) -> SuiteDir:
    return SuiteDir(
        root=root,
        bin=root / "bin",
        config=root / "kubelet-config",
        state=root / "shim.json",
        log=root / "systemctl.log",
    )


def suite_config(agent_config: dict[str, Any]) -> dict[str, Any]:
    """The testbed's KubeletConfiguration with the suite's fields (they replace the testbed's own)."""
    return {**agent_config, **SUITE_FIELDS}


def sudo_script() -> str:
    return '#!/bin/sh\n# nodeagent node e2e shim: the run is root; sudo runs its arguments.\nexec "$@"\n'


def systemctl_script(python: str, python_path: Path, state: Path) -> str:
    return (
        "#!/bin/sh\n"
        "# nodeagent node e2e shim: systemctl for the one unit kubelet-nodeagent.service (docs/conformance.md).\n"
        f"PYTHONPATH={shlex.quote(str(python_path))} exec {shlex.quote(python)} -m "
        f'nodeagent.conformance.systemctl_shim --state {shlex.quote(str(state))} "$@"\n'
    )


def prepare(root: Path, *, testbed_root: Path, agent_config: Path, kubelet: Kubelet) -> SuiteDir:
    """Make the suite's working directory for the testbed in `testbed_root` (see the module's text)."""
    d = suite_dir(root)
    d.bin.mkdir(parents=True, exist_ok=True)
    source = yaml.safe_load(agent_config.read_text()) or {}
    d.config.write_text(yaml.safe_dump(suite_config(source), sort_keys=False))
    ShimState(testbed=testbed_root, config=d.config, log=d.log, kubelet=kubelet).save(d.state)
    # The nodeagent being run (a worktree's, under PYTHONPATH), not whatever an installed one would be.
    package_parent = Path(nodeagent.__file__).resolve().parent.parent
    for name, text in (
        ("sudo", sudo_script()),
        ("systemctl", systemctl_script(sys.executable, package_parent, d.state)),
    ):
        path = d.bin / name
        path.write_text(text)
        path.chmod(0o755)
    return d


def read_only_target(d: SuiteDir) -> tuple[str, int] | None:
    """Where the node's read-only server listens, when loopback does not reach it (loopbackforward.py): the
    config's `address` and `readOnlyPort`; None when `address` is a wildcard or loopback already."""
    config = yaml.safe_load(d.config.read_text()) or {}
    address = str(config.get("address", "0.0.0.0"))
    if address in {"0.0.0.0", "::", "127.0.0.1", "localhost"}:
        return None
    return address, int(config.get("readOnlyPort", READ_ONLY_PORT))


def suite_path(d: SuiteDir, path: str | None = None) -> str:
    """The suite's PATH: the shims first."""
    rest = os.environ.get("PATH", "") if path is None else path
    return f"{d.bin}:{rest}" if rest else str(d.bin)


def _held(address: tuple[str, int]) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def check_ports(
    addresses: tuple[tuple[str, int], ...] = (HEALTHZ_ADDRESS, ("0.0.0.0", READ_ONLY_PORT)),
) -> None:
    """Refuse while the suite's fixed ports are taken (another run, or a kubelet on this machine). Port 10255 is
    tried on every address: a listener on any of them conflicts with the agent's or the suite's."""
    taken = [f"{host}:{port}" for host, port in addresses if _held((host, port))]
    if taken:
        raise ConformanceError(
            f"the node e2e suite's fixed ports are taken: {', '.join(taken)} (healthz 127.0.0.1:10248 and the "
            "read-only port 10255 are constants in the suite, so one run per machine; find the holder with "
            "`ss -ltnp`)"
        )


def bearer_token(kubectl: Path, kubeconfig: Path) -> str:
    """A token of ServiceAccount kube-system/node-e2e, bound to cluster-admin (made if missing)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def run(*args: str, check: bool = True) -> str:
        proc = subprocess.run(
            [str(kubectl), *args], env=env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
        if check and proc.returncode != 0:
            raise ConformanceError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout.strip()

    ns = SERVICE_ACCOUNT_NAMESPACE
    if not run("get", "serviceaccount", SERVICE_ACCOUNT, "-n", ns, "--ignore-not-found", "-o", "name"):
        run("create", "serviceaccount", SERVICE_ACCOUNT, "-n", ns)
    if not run("get", "clusterrolebinding", SERVICE_ACCOUNT, "--ignore-not-found", "-o", "name"):
        run(
            "create",
            "clusterrolebinding",
            SERVICE_ACCOUNT,
            "--clusterrole=cluster-admin",
            f"--serviceaccount={ns}:{SERVICE_ACCOUNT}",
        )
    return run("create", "token", SERVICE_ACCOUNT, "-n", ns, "--duration=24h")
