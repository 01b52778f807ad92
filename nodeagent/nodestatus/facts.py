"""What the node is, read from the machine: the only I/O in `nodeagent.nodestatus`.

Everything else in the package turns a `NodeFacts` into Node JSON without touching the machine. Paths are
parameters so tests read files they wrote; the CPU count and sizes come from psutil, as cAdvisor's MachineInfo
reports them upstream (logical CPUs, MemTotal, the size of the filesystem holding the kubelet's root dir).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

DEFAULT_MACHINE_ID_PATHS = ("/etc/machine-id", "/var/lib/dbus/machine-id")
DEFAULT_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
DEFAULT_OS_RELEASE_PATH = "/etc/os-release"
DEFAULT_PRODUCT_UUID_PATH = "/sys/class/dmi/id/product_uuid"
DEFAULT_ROOT_DIR = "/var/lib/kubelet"

# uname's machine names as Go's GOARCH spells them, which is what the Node reports.
_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


@dataclass(frozen=True, kw_only=True)
class NodeFacts:
    hostname: str
    internal_ip: str
    machine_id: str
    boot_id: str
    system_uuid: str
    kernel_version: str
    os_image: str
    container_runtime_version: str  # "containerd://1.7.24"
    kubelet_version: str  # "v1.31.0"
    architecture: str  # GOARCH: amd64, arm64
    operating_system: str  # GOOS: linux
    cpu_count: int
    memory_bytes: int
    ephemeral_storage_bytes: int
    daemon_port: int = 10250


def _read_first(paths: Sequence[str]) -> str:
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text:
            return text
    return ""


def read_os_image(path: str) -> str:
    """PRETTY_NAME from os-release, "Linux" when there is none (cAdvisor's fallback)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return "Linux"
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PRETTY_NAME":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            return value or "Linux"
    return "Linux"


def goarch(machine: str) -> str:
    return _GOARCH.get(machine, machine)


def _existing_parent(path: str) -> str:
    current = Path(path)
    while not current.exists() and current != current.parent:
        current = current.parent
    return str(current)


def detect_internal_ip() -> str:
    """The first global IPv4 address of an interface that is up; "" when there is none."""
    stats = psutil.net_if_stats()
    for name, addresses in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        for address in addresses:
            if address.family != socket.AF_INET:
                continue
            ip = address.address
            if ip.startswith(("127.", "169.254.")):
                continue
            return ip
    return ""


def gather_node_facts(
    *,
    container_runtime_version: str,
    kubelet_version: str,
    hostname: str | None = None,
    internal_ip: str | None = None,
    daemon_port: int = 10250,
    root_dir: str = DEFAULT_ROOT_DIR,
    machine_id_paths: Sequence[str] = DEFAULT_MACHINE_ID_PATHS,
    boot_id_path: str = DEFAULT_BOOT_ID_PATH,
    os_release_path: str = DEFAULT_OS_RELEASE_PATH,
    product_uuid_path: str = DEFAULT_PRODUCT_UUID_PATH,
    uname: Callable[[], os.uname_result] = os.uname,
) -> NodeFacts:
    """Read the node's facts. `container_runtime_version` comes from CRI Version ("containerd://1.7.24").

    Blocking (file reads, psutil): call it from a thread if it ever matters.
    """
    info = uname()
    return NodeFacts(
        hostname=(hostname or info.nodename).lower(),
        internal_ip=internal_ip if internal_ip is not None else detect_internal_ip(),
        machine_id=_read_first(machine_id_paths),
        boot_id=_read_first([boot_id_path]),
        system_uuid=_read_first([product_uuid_path]),
        kernel_version=info.release,
        os_image=read_os_image(os_release_path),
        container_runtime_version=container_runtime_version,
        kubelet_version=kubelet_version,
        architecture=goarch(info.machine),
        operating_system=info.sysname.lower(),
        cpu_count=psutil.cpu_count(logical=True) or 1,
        memory_bytes=psutil.virtual_memory().total,
        ephemeral_storage_bytes=psutil.disk_usage(_existing_parent(root_dir)).total,
        daemon_port=daemon_port,
    )
