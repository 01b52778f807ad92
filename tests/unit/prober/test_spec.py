"""Probe parameters: upstream's defaults, the four handlers, and which containers are probed."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.prober.spec import (
    ExecAction,
    GRPCAction,
    HTTPGetAction,
    ProbeSpec,
    ProbeType,
    TCPSocketAction,
    field_path,
    parse_probe,
    probe_spec,
    probed_containers,
)

EXEC = {"exec": {"command": ["cat", "/tmp/ready"]}}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # Upstream's defaults: 1 s timeout, 10 s period, 1 success, 3 failures, no initial delay.
        (EXEC, ProbeSpec(ExecAction(("cat", "/tmp/ready")), 0, 1, 10, 1, 3, None)),
        # The apiserver defaults zeros; a pod from a file may carry them: they get the defaults too.
        (
            {**EXEC, "timeoutSeconds": 0, "periodSeconds": 0, "successThreshold": 0, "failureThreshold": 0},
            ProbeSpec(ExecAction(("cat", "/tmp/ready")), 0, 1, 10, 1, 3, None),
        ),
        (
            {
                **EXEC,
                "initialDelaySeconds": 5,
                "timeoutSeconds": 2,
                "periodSeconds": 3,
                "successThreshold": 2,
                "failureThreshold": 4,
                "terminationGracePeriodSeconds": 0,
            },
            ProbeSpec(ExecAction(("cat", "/tmp/ready")), 5, 2, 3, 2, 4, 0),
        ),
        (
            {
                "httpGet": {
                    "path": "/healthz",
                    "port": "http",
                    "host": "example.test",
                    "scheme": "HTTPS",
                    "httpHeaders": [{"name": "X-Probe", "value": "1"}],
                }
            },
            ProbeSpec(HTTPGetAction("http", "/healthz", "example.test", "HTTPS", (("X-Probe", "1"),))),
        ),
        ({"httpGet": {"port": 8080}}, ProbeSpec(HTTPGetAction(8080))),
        ({"tcpSocket": {"port": 5432}}, ProbeSpec(TCPSocketAction(5432))),
        ({"grpc": {"port": 5000, "service": "db"}}, ProbeSpec(GRPCAction(5000, "db"))),
        ({"grpc": {"port": 5000}}, ProbeSpec(GRPCAction(5000, ""))),
        ({"periodSeconds": 5}, ProbeSpec(None, period_seconds=5)),
    ],
    ids=["defaults", "zeros-defaulted", "all-set", "http-full", "http-port", "tcp", "grpc", "grpc-no-service", "none"],
)
def test_parse_probe(raw: dict[str, Any], expected: ProbeSpec) -> None:
    assert parse_probe(raw) == expected


def test_probe_type_names() -> None:
    assert [k.title for k in ProbeType] == ["Liveness", "Readiness", "Startup"]
    assert [k.field for k in ProbeType] == ["livenessProbe", "readinessProbe", "startupProbe"]
    assert probe_spec({"readinessProbe": EXEC}, ProbeType.READINESS) is not None
    assert probe_spec({"readinessProbe": EXEC}, ProbeType.LIVENESS) is None


def test_probed_containers_are_regular_ones_and_sidecars_with_probes() -> None:
    pod = {
        "spec": {
            "initContainers": [
                {"name": "init", "readinessProbe": EXEC},  # a plain init container is never probed
                {"name": "side", "restartPolicy": "Always", "startupProbe": EXEC},
                {"name": "side-bare", "restartPolicy": "Always"},
            ],
            "containers": [{"name": "app", "livenessProbe": EXEC}, {"name": "plain"}],
        }
    }
    assert [c["name"] for c in probed_containers(pod)] == ["app", "side"]
    assert field_path(pod, "app") == "spec.containers{app}"
    assert field_path(pod, "side") == "spec.initContainers{side}"
    assert field_path(pod, "missing") == ""
