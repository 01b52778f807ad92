"""Probe parameters: a container's v1.Probe read into a typed `ProbeSpec`, with upstream's defaults.

The apiserver defaults a probe's timing fields (pkg/apis/core/v1/defaults.go SetDefaults_Probe: timeoutSeconds 1,
periodSeconds 10, successThreshold 1, failureThreshold 3), but a pod from a file or a URL reaches the agent without
that defaulting, so the same defaults are applied here to a missing or non-positive value. initialDelaySeconds
defaults to 0; a probe-level terminationGracePeriodSeconds is kept only when set.

Exactly one handler is expected (exec, httpGet, tcpSocket or grpc); a probe with none keeps `handler=None`, which
the prober reports as an error, as upstream's "missing probe handler".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_SECONDS = 1
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_SUCCESS_THRESHOLD = 1
DEFAULT_FAILURE_THRESHOLD = 3


class ProbeType(enum.Enum):
    """The three kinds of probe. The value is the kind the syncLoop's ProbeResult carries."""

    LIVENESS = "liveness"
    READINESS = "readiness"
    STARTUP = "startup"

    @property
    def title(self) -> str:
        """The name upstream puts in events, logs and the probe_type metric label ("Liveness", ...)."""
        return self.value.capitalize()

    @property
    def field(self) -> str:
        """The container field that holds this probe."""
        return f"{self.value}Probe"


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]


@dataclass(frozen=True)
class HTTPGetAction:
    port: int | str
    path: str = ""
    host: str = ""
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TCPSocketAction:
    port: int | str
    host: str = ""


@dataclass(frozen=True)
class GRPCAction:
    port: int
    service: str = ""


Handler = ExecAction | HTTPGetAction | TCPSocketAction | GRPCAction


@dataclass(frozen=True)
class ProbeSpec:
    handler: Handler | None
    initial_delay_seconds: int = 0
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    period_seconds: int = DEFAULT_PERIOD_SECONDS
    success_threshold: int = DEFAULT_SUCCESS_THRESHOLD
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    termination_grace_period_seconds: int | None = None


def _positive(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = raw.get(key)
    try:
        number = int(value) if value is not None else 0
    except (TypeError, ValueError):
        return default
    return number if number > 0 else default


def _port(value: Any) -> int | str:
    return value if isinstance(value, int) else str(value if value is not None else "")


def parse_handler(raw: Mapping[str, Any]) -> Handler | None:
    """The probe's handler (the same shape serves lifecycle hooks upstream, but those have their own runner)."""
    if raw.get("exec") is not None:
        return ExecAction(tuple(str(c) for c in (raw["exec"] or {}).get("command") or ()))
    if raw.get("httpGet") is not None:
        http = raw["httpGet"] or {}
        headers = tuple((str(h.get("name", "")), str(h.get("value", ""))) for h in http.get("httpHeaders") or ())
        return HTTPGetAction(
            port=_port(http.get("port")),
            path=str(http.get("path") or ""),
            host=str(http.get("host") or ""),
            scheme=str(http.get("scheme") or "HTTP"),
            headers=headers,
        )
    if raw.get("tcpSocket") is not None:
        tcp = raw["tcpSocket"] or {}
        return TCPSocketAction(port=_port(tcp.get("port")), host=str(tcp.get("host") or ""))
    if raw.get("grpc") is not None:
        grpc = raw["grpc"] or {}
        return GRPCAction(port=int(grpc.get("port") or 0), service=str(grpc.get("service") or ""))
    return None


def parse_probe(raw: Mapping[str, Any]) -> ProbeSpec:
    grace = raw.get("terminationGracePeriodSeconds")
    return ProbeSpec(
        handler=parse_handler(raw),
        initial_delay_seconds=max(int(raw.get("initialDelaySeconds") or 0), 0),
        timeout_seconds=_positive(raw, "timeoutSeconds", DEFAULT_TIMEOUT_SECONDS),
        period_seconds=_positive(raw, "periodSeconds", DEFAULT_PERIOD_SECONDS),
        success_threshold=_positive(raw, "successThreshold", DEFAULT_SUCCESS_THRESHOLD),
        failure_threshold=_positive(raw, "failureThreshold", DEFAULT_FAILURE_THRESHOLD),
        termination_grace_period_seconds=None if grace is None else max(int(grace), 0),
    )


def probe_spec(container: Mapping[str, Any], kind: ProbeType) -> ProbeSpec | None:
    """The container's probe of this kind, or None when it has none."""
    raw = container.get(kind.field)
    if not isinstance(raw, Mapping):
        return None
    return parse_probe(raw)


def has_probe(container: Mapping[str, Any]) -> bool:
    return any(isinstance(container.get(kind.field), Mapping) for kind in ProbeType)


def is_restartable_init_container(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def probed_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Regular containers and sidecars (restartable init containers) that have at least one probe, as upstream."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    probed = [c for c in spec.get("containers") or () if has_probe(c)]
    probed += [c for c in spec.get("initContainers") or () if is_restartable_init_container(c) and has_probe(c)]
    return probed


def find_container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    spec: Mapping[str, Any] = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            if container.get("name") == name:
                out: Mapping[str, Any] = container
                return out
    return None


def field_path(pod: Mapping[str, Any], name: str) -> str:
    """The event's fieldPath for a container, as upstream's GenerateContainerRef: spec.containers{NAME}."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        if any(c.get("name") == name for c in spec.get(key) or ()):
            return f"spec.{key}{{{name}}}"
    return ""
