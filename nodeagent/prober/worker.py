"""A probe worker: probes one container instance with one probe, periodically, for as long as that instance runs
(upstream's container-bound worker, pkg/kubelet/prober/container_bound_worker.go).

A restarted container gets new workers: a worker never outlives the container ID it was started for, and results
are kept per container ID. The worker runs its probes one after the other, so one probe never runs twice at once.

Timing, all on the injected clock (unit tests advance it and never sleep):

- the first probe runs initialDelaySeconds after the container started (at once if that is past); a container the
  agent adopted after a restart waits a random part of a period more, so a restarted agent does not probe
  everything in the same instant;
- then a probe starts every periodSeconds (a probe slower than its period is followed at once by the next).

Thresholds, as upstream: a result is recorded only after successThreshold successes or failureThreshold failures
in a row. A probe that errored is thrown away. The startup worker ends once its verdict is in (on success the manager
starts the readiness and liveness workers); a liveness worker ends at a failure, since the container is about to be
killed and restarted.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from nodeagent.clock import Clock
from nodeagent.prober.metrics import ProbeLabels, ProberMetrics
from nodeagent.prober.prober import ProbeRunner, ProbeTarget
from nodeagent.prober.results import Result, ResultsManager
from nodeagent.prober.spec import ProbeSpec, ProbeType

log = logging.getLogger(__name__)


def uniform_jitter(upper: float) -> float:
    return random.uniform(0.0, upper)  # jitter, not cryptography


class ProbeWorker:
    def __init__(
        self,
        kind: ProbeType,
        target: ProbeTarget,
        spec: ProbeSpec,
        *,
        runner: ProbeRunner,
        results: ResultsManager,
        metrics: ProberMetrics,
        clock: Clock,
        adopted: bool = False,
        jitter: Callable[[float], float] = uniform_jitter,
        on_startup_succeeded: Callable[[ProbeWorker], None] | None = None,
    ) -> None:
        self.kind = kind
        self.target = target
        self.spec = spec
        self.adopted = adopted
        self._runner = runner
        self._results = results
        self._metrics = metrics
        self._clock = clock
        self._jitter = jitter
        self._on_startup_succeeded = on_startup_succeeded
        self.last_result: Result | None = None
        self.result_run = 0
        self.probes_run = 0
        meta = target.pod.get("metadata") or {}
        self.labels = ProbeLabels(
            kind, target.name, str(meta.get("name", "")), str(meta.get("namespace", "")), target.pod_uid
        )

    @property
    def container_id(self) -> str:
        return self.target.container_id

    def first_probe_delay(self) -> float:
        """Seconds until the first probe: what is left of initialDelaySeconds, plus jitter for an adopted container."""
        now = self._clock.wall().timestamp()
        delay = max(self.target.started_at + self.spec.initial_delay_seconds - now, 0.0)
        if self.adopted:
            delay += self._jitter(float(self.spec.period_seconds))
        return delay

    async def run(self) -> None:
        """Probe until a verdict ends the worker; the manager cancels the task to stop it sooner."""
        delay = self.first_probe_delay()
        if delay > 0:
            await self._clock.sleep(delay)
        while True:
            started = self._clock.monotonic()
            if not await self.do_probe():
                return
            wait = started + self.spec.period_seconds - self._clock.monotonic()
            if wait > 0:
                await self._clock.sleep(wait)

    async def do_probe(self) -> bool:
        """Probe once and record the result past its threshold; False when the worker is done."""
        started = self._clock.monotonic()
        self.probes_run += 1
        try:
            result = await self._runner.probe(self.kind, self.target, self.spec)
        except asyncio.CancelledError:
            raise
        except Exception:
            # As upstream's HandleCrash around doProbe: a bug in one probe does not end the worker.
            log.exception(
                "probe crashed probe=%s pod=%s container=%s", self.kind.value, self.target.pod_ref, self.target.name
            )
            return True
        if result is None:
            return True  # the probe errored: throw the result away
        self._metrics.observe(self.labels, result, self._clock.monotonic() - started)

        if result is self.last_result:
            self.result_run += 1
        else:
            self.last_result = result
            self.result_run = 1
        if (result is Result.FAILURE and self.result_run < self.spec.failure_threshold) or (
            result is Result.SUCCESS and self.result_run < self.spec.success_threshold
        ):
            return True  # below the threshold: the recorded result stays as it was

        self._results.set(self.container_id, result, self.target.pod)

        if self.kind is ProbeType.STARTUP:
            if result is Result.SUCCESS and self._on_startup_succeeded is not None:
                self._on_startup_succeeded(self)
            return False
        if self.kind is ProbeType.LIVENESS and result is Result.FAILURE:
            log.info(
                "liveness probe failed past its threshold, worker ends pod=%s container=%s id=%s",
                self.target.pod_ref,
                self.target.name,
                self.container_id[:12],
            )
            return False
        return True
