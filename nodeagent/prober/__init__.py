"""The prober: liveness, readiness and startup probes (upstream pkg/kubelet/prober and pkg/probe).

spec.py        probe parameters with upstream's defaults, which containers are probed
probe.py       what the handlers share: outcomes, port resolution, upstream's message helpers
execprobe.py   exec through CRI ExecSync          httpprobe.py  httpGet against the pod IP
tcpprobe.py    tcpSocket                          grpcprobe.py  the gRPC health protocol
prober.py      one probe: handler, retries on error, Unhealthy / ProbeWarning events
results.py     results per container ID, changes reported once
worker.py      one probe of one container instance, on the injected clock
manager.py     workers started and stopped with containers; readiness, started, failed liveness/startup
metrics.py     prober_probe_total, prober_probe_duration_seconds
fake.py        FakeProbeManager for unit tests
"""

from nodeagent.prober.manager import (
    ContainerProbeStatus,
    FailedProbes,
    ProbeManager,
    ProberManager,
    ProbeStatusSink,
    probe_status,
)
from nodeagent.prober.metrics import ProberMetrics
from nodeagent.prober.prober import Prober, ProbeTarget
from nodeagent.prober.results import Result
from nodeagent.prober.spec import ProbeSpec, ProbeType, parse_probe, probe_spec

__all__ = [
    "ContainerProbeStatus",
    "FailedProbes",
    "ProbeManager",
    "ProbeSpec",
    "ProbeStatusSink",
    "ProbeTarget",
    "ProbeType",
    "Prober",
    "ProberManager",
    "ProberMetrics",
    "Result",
    "parse_probe",
    "probe_spec",
    "probe_status",
]
