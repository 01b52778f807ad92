"""The Service environment variables a container gets (upstream kubelet_pods.go getServiceEnvVarMap and
pkg/kubelet/envvars FromServices).

Every pod sees the master service (`kubernetes` in `default`); with `enableServiceLinks` (the default) it also sees
every Service of its own namespace. Services without a cluster IP (headless, ExternalName) give nothing. For each:
`<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (the first port), `<NAME>_SERVICE_PORT_<PORTNAME>` for named ports, and
the Docker-link variables `<NAME>_PORT=tcp://ip:port` (the first port) and `<NAME>_PORT_<port>_<PROTO>[_PROTO|_PORT|
_ADDR]` for every port. Names are upper case with `-` as `_`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MASTER_SERVICES = frozenset({"kubernetes"})
DEFAULT_NAMESPACE = "default"


def _env_name(text: str) -> str:
    return text.replace("-", "_").upper()


def _ip_set(service: Mapping[str, Any]) -> bool:
    ip = str((service.get("spec") or {}).get("clusterIP") or "")
    return ip not in ("", "None")


def _host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def from_services(services: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Upstream envvars.FromServices, as a map."""
    out: dict[str, str] = {}
    for service in services:
        if not _ip_set(service):
            continue
        spec = service.get("spec") or {}
        ports = list(spec.get("ports") or [])
        if not ports:
            continue
        ip = str(spec["clusterIP"])
        prefix = _env_name(str((service.get("metadata") or {}).get("name", "")))
        out[f"{prefix}_SERVICE_HOST"] = ip
        out[f"{prefix}_SERVICE_PORT"] = str(int(ports[0].get("port", 0)))
        for port in ports:
            if port.get("name"):
                out[f"{prefix}_SERVICE_PORT_{_env_name(str(port['name']))}"] = str(int(port.get("port", 0)))
        for index, port in enumerate(ports):
            protocol = str(port.get("protocol") or "TCP")
            number = int(port.get("port", 0))
            url = f"{protocol.lower()}://{_host_port(ip, number)}"
            if index == 0:
                out[f"{prefix}_PORT"] = url
            port_prefix = f"{prefix}_PORT_{number}_{protocol.upper()}"
            out[port_prefix] = url
            out[f"{port_prefix}_PROTO"] = protocol.lower()
            out[f"{port_prefix}_PORT"] = str(number)
            out[f"{port_prefix}_ADDR"] = ip
    return out


def service_env(services: Iterable[Mapping[str, Any]], namespace: str, *, enable_service_links: bool) -> dict[str, str]:
    """The variables for a pod in `namespace` (upstream getServiceEnvVarMap)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for service in services:
        if not _ip_set(service):
            continue
        meta = service.get("metadata") or {}
        name, ns = str(meta.get("name", "")), str(meta.get("namespace", ""))
        if ns == DEFAULT_NAMESPACE and name in MASTER_SERVICES:
            chosen.setdefault(name, service)
        elif ns == namespace and enable_service_links:
            chosen[name] = service
    return from_services(chosen[k] for k in sorted(chosen))


def must_wait_for_services(*, static: bool, synced: bool) -> bool:
    """Whether a container's environment must wait for the first list of Services (CreateContainerConfigError
    "services have not yet been read at least once"). As upstream's makeEnvironmentVariables, static pods never wait:
    on a kubeadm control plane the apiserver that would serve that list is itself a static pod; they get the
    Services known so far (none before the first list)."""
    return not static and not synced
