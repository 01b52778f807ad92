"""The prober: runs one probe of a container with the right handler and turns its outcome into a result and an event
(upstream pkg/kubelet/prober/prober.go).

- SUCCESS is success; WARNING is success plus a ProbeWarning event ("Readiness probe warning: ..."); FAILURE is a
  failure plus an Unhealthy event ("Liveness probe failed: <output>"); UNKNOWN is a failure without an event.
- A probe that could not run (`ProbeError`: a named port the container lacks, a runtime error) is tried up to three
  times; if it still errors, an Unhealthy event says "... probe errored and resulted in unknown state: ..." and the
  result is thrown away (None): the worker keeps its previous verdict, as upstream.

Network probes (httpGet, tcpSocket, grpc) go to the pod's first IP unless the probe names a host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from nodeagent.prober.execprobe import CommandRunner, probe_exec, static_command
from nodeagent.prober.grpcprobe import probe_grpc
from nodeagent.prober.httpprobe import HTTPProber, http_request
from nodeagent.prober.probe import USER_AGENT, Outcome, ProbeError, ProbeOutcome, resolve_container_port
from nodeagent.prober.results import Result
from nodeagent.prober.spec import ExecAction, GRPCAction, HTTPGetAction, ProbeSpec, ProbeType, TCPSocketAction
from nodeagent.prober.spec import field_path as container_field_path
from nodeagent.prober.tcpprobe import probe_tcp

log = logging.getLogger(__name__)

Pod = dict[str, Any]
EventType = Literal["Normal", "Warning"]
# (pod, type, reason, message, fieldPath): the runtime manager's event seam, shared with the prober.
EventSink = Callable[[Pod, EventType, str, str, str], None]

MAX_PROBE_RETRIES = 3
REASON_UNHEALTHY = "Unhealthy"
REASON_PROBE_WARNING = "ProbeWarning"


def _no_events(pod: Pod, type_: EventType, reason: str, message: str, field_path: str) -> None:
    del pod, type_, reason, message, field_path


@dataclass(frozen=True)
class ProbeTarget:
    """One running container instance to probe: what a worker is bound to for its whole life."""

    pod: Pod
    container: Mapping[str, Any]
    container_id: str
    pod_ips: tuple[str, ...] = ()
    started_at: float = 0.0  # wall-clock seconds, from CRI's startedAt

    @property
    def name(self) -> str:
        return str(self.container.get("name", ""))

    @property
    def pod_uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid", ""))

    @property
    def pod_ref(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    @property
    def pod_ip(self) -> str:
        return self.pod_ips[0] if self.pod_ips else ""


class ProbeRunner(Protocol):
    """What a worker calls: one probe, its verdict or None when it errored (the seam unit tests script)."""

    async def probe(self, kind: ProbeType, target: ProbeTarget, spec: ProbeSpec) -> Result | None: ...


class Prober:
    def __init__(
        self,
        runner: CommandRunner,
        *,
        events: EventSink = _no_events,
        http: HTTPProber | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self._runner = runner
        self._events = events
        self._http = http or HTTPProber()
        # kube-probe/<major>.<minor> of the emulated Kubernetes release, for httpGet and grpc probes.
        self._user_agent = user_agent

    async def aclose(self) -> None:
        await self._http.aclose()

    def _event(self, target: ProbeTarget, reason: str, message: str) -> None:
        self._events(target.pod, "Warning", reason, message, container_field_path(target.pod, target.name))

    async def probe(self, kind: ProbeType, target: ProbeTarget, spec: ProbeSpec) -> Result | None:
        error: ProbeError | None = None
        outcome = ProbeOutcome(Outcome.UNKNOWN)
        for _ in range(MAX_PROBE_RETRIES):
            try:
                outcome = await self.run(spec, target)
            except ProbeError as exc:
                error = exc
                continue
            error = None
            break
        if error is not None:
            log.info(
                "probe errored probe=%s pod=%s container=%s error=%s", kind.value, target.pod_ref, target.name, error
            )
            self._event(target, REASON_UNHEALTHY, f"{kind.title} probe errored and resulted in unknown state: {error}")
            return None
        if outcome.result is Outcome.SUCCESS:
            log.debug("probe succeeded probe=%s pod=%s container=%s", kind.value, target.pod_ref, target.name)
            return Result.SUCCESS
        if outcome.result is Outcome.WARNING:
            self._event(target, REASON_PROBE_WARNING, f"{kind.title} probe warning: {outcome.output}")
            log.info(
                "probe succeeded with a warning probe=%s pod=%s container=%s output=%r",
                kind.value,
                target.pod_ref,
                target.name,
                outcome.output,
            )
            return Result.SUCCESS
        if outcome.result is Outcome.FAILURE:
            log.info(
                "probe failed probe=%s pod=%s container=%s output=%r",
                kind.value,
                target.pod_ref,
                target.name,
                outcome.output,
            )
            self._event(target, REASON_UNHEALTHY, f"{kind.title} probe failed: {outcome.output}")
            return Result.FAILURE
        log.info("probe unknown probe=%s pod=%s container=%s", kind.value, target.pod_ref, target.name)
        return Result.FAILURE

    def _pod_ip(self, target: ProbeTarget) -> str:
        if not target.pod_ip:
            raise ProbeError(f"pod {target.pod_ref} has no IP to probe container {target.name}")
        return target.pod_ip

    async def run(self, spec: ProbeSpec, target: ProbeTarget) -> ProbeOutcome:
        """One attempt with the probe's handler; ProbeError when it cannot run."""
        handler = spec.handler
        timeout = spec.timeout_seconds
        if isinstance(handler, ExecAction):
            command = static_command(handler.command, target.container)
            return await probe_exec(self._runner, target.container_id, command, timeout)
        if isinstance(handler, HTTPGetAction):
            host_ip = target.pod_ip if handler.host else self._pod_ip(target)
            request = http_request(handler, target.container, host_ip, user_agent=self._user_agent)
            return await self._http.probe(request, timeout)
        if isinstance(handler, TCPSocketAction):
            port = resolve_container_port(handler.port, target.container)
            return await probe_tcp(handler.host or self._pod_ip(target), port, timeout)
        if isinstance(handler, GRPCAction):
            return await probe_grpc(
                self._pod_ip(target), handler.port, handler.service, timeout, user_agent=self._user_agent
            )
        raise ProbeError(f"missing probe handler for {target.pod_ref}:{target.name}")
